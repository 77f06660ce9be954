"""Shared test setup.

Plugins are importable the way Ansible imports them: ``plugins/module_utils`` is put on
``ansible.module_utils.__path__`` so ``from ansible.module_utils.gpucluster import x`` works in
tests exactly as in a module; ``plugins/modules`` and ``plugins/filter`` go on ``sys.path``.
Real captured outputs live in ``tests/fixtures`` (a copy of ``../shared/fixtures``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import ansible.module_utils
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

ansible.module_utils.__path__.append(str(ROOT / "plugins" / "module_utils"))
for sub in ("plugins/modules", "plugins/filter", "src"):
    p = str(ROOT / sub)
    if p not in sys.path:
        sys.path.insert(0, p)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def fixture_text(relpath: str) -> str:
    """Text of one fixture file, exactly as captured (tabs and trailing spaces kept)."""
    return (FIXTURES / relpath).read_text(encoding="utf-8", errors="surrogateescape")
