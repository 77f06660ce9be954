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


def cut_text(text, fraction=0.5):
    """``text`` cut inside a line near ``fraction`` of its length (a cut exactly at a line or
    block boundary is a shorter but well-formed output, which no parser can tell apart)."""
    pos = int(len(text) * fraction)
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", start)
    while end >= 0 and not text[start:end].strip():  # a blank line: take the next one
        start, end = end + 1, text.find("\n", end + 1)
    end = len(text) if end < 0 else end
    return text[: start + max(1, (end - start) // 3)]
