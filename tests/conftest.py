"""Shared test setup.

Plugins are imported by their collection name, as Ansible imports them
(``ansible_collections.gpucluster.cluster.plugins.<kind>.<name>``): pytest puts ``collections/``
on the import path (``pythonpath`` in pyproject.toml), where
``ansible_collections/gpucluster/cluster`` links back to the checkout.
Real captured outputs live in ``tests/fixtures`` (a copy of ``../shared/fixtures``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# This virtual environment's tools (ansible-playbook, gpucluster).
BIN = Path(sys.executable).parent


def ansible_env(home, **extra) -> dict[str, str]:
    """The environment a test runs this venv's ansible-playbook or gpucluster in: the checkout's
    ansible.cfg, the venv's tools first on PATH, the test's own HOME, no colour in the output."""
    return {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "NO_COLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            "HOME": str(home), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), **extra}


def run_tool(tool, *args, home, cwd=ROOT, timeout=120, **env) -> subprocess.CompletedProcess:
    """``tool`` (ansible-playbook, gpucluster) from this venv with ``args``, in ansible_env(home),
    its output captured as text."""
    return subprocess.run([str(BIN / tool), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=ansible_env(home, **env))


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
