"""Shared test setup.

Plugins are imported by their collection name, as Ansible imports them
(``ansible_collections.gpucluster.cluster.plugins.<kind>.<name>``): pytest puts ``collections/``
on the import path (``pythonpath`` in pyproject.toml), where
``ansible_collections/gpucluster/cluster`` links back to the checkout.
Real captured outputs live in ``tests/fixtures`` (a copy of ``../shared/fixtures``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"



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
