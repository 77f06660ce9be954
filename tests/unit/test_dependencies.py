"""pyproject.toml holds ranges, requirements/constraints.txt the exact versions CI installs.

Every requirement of pyproject.toml (dependencies and every extra) is pinned exactly in the
constraints file at a version inside its range; the pins agree with the constraint files pip is
configured with on this machine (``pip config list``: global.constraint / PIP_CONSTRAINT), since
pip applies both; scripts/venv.sh installs with the file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"


def pins(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#")[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;=]+)", line)
        assert m, f"{path.name}:{n}: {raw!r} is not an exact pin name==version"
        name = canonicalize_name(m[1])
        assert name not in out, f"{path.name}:{n}: {name} pinned twice"
        out[name] = m[2]
    return out


def project_requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, lines in project["optional-dependencies"].items():
        reqs += [(f"[{extra}]", Requirement(r)) for r in lines]
    return reqs


def test_pyproject_has_ranges_not_pins():
    for where, req in project_requirements():
        assert req.specifier, f"pyproject.toml {where}: {req.name} has no version range"
        assert not any(s.operator in ("==", "===") for s in req.specifier), (
            f"pyproject.toml {where}: {req} is an exact pin; pins belong in requirements/constraints.txt")


@pytest.mark.parametrize("where,req", project_requirements(), ids=lambda v: str(v))
def test_each_requirement_is_pinned_inside_its_range(where, req):
    pinned = pins(CONSTRAINTS)
    name = canonicalize_name(req.name)
    assert name in pinned, f"{req.name} ({where}) has no pin in {CONSTRAINTS.relative_to(ROOT)}; run scripts/lock.sh"
    assert Version(pinned[name]) in req.specifier, (
        f"{req.name}=={pinned[name]} in constraints.txt is outside pyproject.toml's {where} range {req.specifier}")


def test_extras_users_ask_for():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {k: {canonicalize_name(Requirement(r).name) for r in v} for k, v in extras.items()}
    assert names["aws"] == {"boto3"}
    assert names["tencent"] == {"tencentcloud-sdk-python-common", "tencentcloud-sdk-python-vpc"}
    assert names["k8s"] == {"kubernetes"}
    assert "tencentcloud-sdk-python" not in pins(CONSTRAINTS), "the full Tencent Cloud SDK (~400 MB) is not needed"


def _pip_constraint_files() -> list[Path]:
    r = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    files = []
    for line in r.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".constraint"):
            files += [Path(v) for v in value.strip().strip("'\"").split()]
    files += [Path(v) for v in os.environ.get("PIP_CONSTRAINT", "").split()]
    return [f for f in files if f.is_file() and f.resolve() != CONSTRAINTS.resolve()]


def test_pins_agree_with_the_machines_pip_constraints():
    ours = pins(CONSTRAINTS)
    for path in _pip_constraint_files():
        for raw in path.read_text().splitlines():
            line = raw.split("#")[0].strip()
            if not line or line.startswith("-"):
                continue
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if name in ours:
                assert Version(ours[name]) in req.specifier, (
                    f"constraints.txt pins {name}=={ours[name]}, but pip's {path} says {line}")


def test_venv_script_installs_with_the_constraints():
    text = (ROOT / "scripts" / "venv.sh").read_text()
    assert "-c requirements/constraints.txt -e '.[test,aws,tencent,k8s]'" in text
