"""Every real case of the network/RDMA/hugepages kinds is read by a test (issue 12).

A case is ``tests/fixtures/<kind>/<ID>_<name>.md`` with its input files; a test that reads
its expected reading names the case (``<ID>_<name>``) or its ID constant. This fails when a new
case is added to one of these kinds without a test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

KINDS = ("rdma", "hugepages", "nccl-logs", "nccl-network", "peer-memory")
TESTS = Path(__file__).resolve().parents[2]


def _test_sources():
    return "\n".join(p.read_text(encoding="utf-8") for p in TESTS.rglob("test_*.py"))


@pytest.mark.parametrize("kind", KINDS)
def test_every_case_of_the_kind_is_read_by_a_test(kind):
    sources = _test_sources()
    cases = sorted(p.stem for p in (FIXTURES / kind).glob("*.md"))
    assert cases, f"no cases under {kind}"
    missing = [c for c in cases if c not in sources and not re.search(rf"\b{c.split('_')[0]}\b.*=.*{kind}/", sources)]
    assert missing == []
