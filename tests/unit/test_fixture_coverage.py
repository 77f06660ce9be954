"""Every real captured case is a test of its expected reading, and tests/fixtures is the
project's shared set as handed out.

A case is ``<kind>/<ID>_<name>.md`` (the expected reading) with its ``.txt`` captures. A unit
test covers a case when it names the case's file (``<ID>_<name>``) or its ID as a fixture path
(``"<kind>/<ID>_...``); a case no test names is a reading nobody checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

SHARED = ROOT.parent / "shared" / "fixtures"
CASES = sorted(FIXTURES.glob("*/*.md"))
TEST_TEXT = "\n".join(p.read_text(errors="replace") for p in (ROOT / "tests" / "unit").rglob("*.py")
                      if p.name != "test_fixture_coverage.py")


def _case_id(md: Path) -> str:
    return md.name.split("_", 1)[0]


@pytest.mark.parametrize("md", CASES, ids=lambda p: f"{p.parent.name}/{_case_id(p)}")
def test_case_is_read_by_a_test(md):
    stem = md.stem
    kind = md.parent.name
    case = _case_id(md)
    named = stem in TEST_TEXT or re.search(rf"{re.escape(kind)}/{re.escape(case)}_", TEST_TEXT)
    assert named, f"no unit test reads {kind}/{md.name}: its expected reading is unchecked"


@pytest.mark.skipif(not SHARED.is_dir(), reason="no ../shared/fixtures beside this checkout")
def test_fixtures_are_the_shared_set():
    shared = {p.relative_to(SHARED): p for p in SHARED.rglob("*") if p.is_file()}
    ours = {p.relative_to(FIXTURES): p for p in FIXTURES.rglob("*") if p.is_file()}
    missing = sorted(str(k) for k in shared if k not in ours)
    assert not missing, f"tests/fixtures lacks {missing}: copy them from ../shared/fixtures"
    differ = sorted(str(k) for k in shared if k in ours and shared[k].read_bytes() != ours[k].read_bytes())
    assert not differ, f"tests/fixtures differs from ../shared/fixtures in {differ}: refresh the copy"
