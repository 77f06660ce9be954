"""``execution-environment.yml`` (the AWX image, ansible-builder v3) stays in step with the content.

- collections: exactly the ones called by FQCN in roles/ (molecule scenarios excluded), playbooks/,
  site.yml, the role templates, ansible.cfg and the imports of plugins/**/*.py (ansible.builtin and
  gpucluster.cluster itself aside), each with a version range the release CI tests with (the
  ``ansible`` package's copy) satisfies;
- python: every third-party module plugins/**/*.py imports is provided by a listed package (or one
  it pulls in), and every listed package is either such a provider or named by the requirements of
  a listed collection (what ansible-builder would add for it anyway); ranges equal pyproject.toml's;
- ansible_core: the range of pyproject.toml.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata as md
import importlib.util
import json
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
OWN = {"ansible.builtin", "gpucluster.cluster"}
FQCN = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\.[a-z_][a-z0-9_]*")


@cache
def installed_collections() -> dict[str, Path]:
    """'ns.name' -> directory of every collection importable here (the ansible package's copies)."""
    found: dict[str, Path] = {}
    spec = importlib.util.find_spec("ansible_collections")
    for base in spec.submodule_search_locations:
        for manifest in Path(base).glob("*/*/MANIFEST.json"):
            found.setdefault(f"{manifest.parent.parent.name}.{manifest.parent.name}", manifest.parent)
    return found


def _strings(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def fqcn_collections(text: str) -> set[str]:
    """Collections (installed ones only: 'ansible_facts.gpucluster_gpu.driver' is no FQCN) named in ``text``."""
    known = installed_collections()
    return {f"{m[1]}.{m[2]}" for m in FQCN.finditer(text) if f"{m[1]}.{m[2]}" in known}


def plugin_files() -> list[Path]:
    return sorted(p for p in (ROOT / "plugins").rglob("*.py") if "__pycache__" not in p.parts)


def plugin_imports() -> dict[str, set[str]]:
    """Absolute imports of plugins/**/*.py (functions included): module -> files importing it."""
    out: dict[str, set[str]] = {}
    for path in plugin_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                out.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return out


def used_collections() -> dict[str, set[str]]:
    """Collection -> files that call it by FQCN."""
    used: dict[str, set[str]] = {}

    def add(colls, where):
        for c in colls - OWN:
            used.setdefault(c, set()).add(where)

    yaml_files = [ROOT / "site.yml", *(ROOT / "playbooks").rglob("*.yml")]
    yaml_files += [p for p in (ROOT / "roles").rglob("*.yml") if "molecule" not in p.relative_to(ROOT).parts]
    for path in yaml_files:
        for doc in yaml.safe_load_all(path.read_text()):  # comments are not uses
            add(set().union(*(fqcn_collections(s) for s in _strings(doc))), str(path.relative_to(ROOT)))
    for path in (ROOT / "roles").glob("*/templates/**/*.j2"):
        add(fqcn_collections(path.read_text()), str(path.relative_to(ROOT)))
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    for section in cfg.sections():
        for value in cfg[section].values():
            add(fqcn_collections(value), "ansible.cfg")
    for module, files in plugin_imports().items():
        parts = module.split(".")
        if parts[0] == "ansible_collections" and len(parts) >= 3:
            for f in files:
                add({f"{parts[1]}.{parts[2]}"}, f)
    return used


def third_party_imports() -> dict[str, set[str]]:
    return {
        m: files for m, files in plugin_imports().items()
        if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in ("ansible", "ansible_collections")
    }


@cache
def _file_owners() -> dict[str, frozenset[str]]:
    """Installed file (a module's .py) -> distributions that install it."""
    owners: dict[str, set[str]] = {}
    for d in md.distributions():
        name = canonicalize_name(d.metadata["Name"])
        for f in d.files or []:
            if f.suffix == ".py":
                owners.setdefault(str(f), set()).add(name)
    return {k: frozenset(v) for k, v in owners.items()}


def providers(module: str) -> frozenset[str]:
    """Installed distributions whose files hold ``module`` (a package or a .py)."""
    path = module.replace(".", "/")
    owners = _file_owners()
    return owners.get(f"{path}/__init__.py", frozenset()) | owners.get(f"{path}.py", frozenset())


def closure(names: set[str]) -> set[str]:
    """``names`` and everything they require (installed metadata, extras left out)."""
    seen, todo = set(), [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in map(Requirement, reqs):
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(r.name))
    return seen


def collection_python_requirements(path: Path) -> set[str]:
    """What ansible-builder installs for a collection: meta/execution-environment.yml's python file,
    else requirements.txt at its root."""
    req_file = path / "requirements.txt"
    ee = path / "meta" / "execution-environment.yml"
    if ee.exists():
        python = (yaml.safe_load(ee.read_text()).get("dependencies") or {}).get("python")
        if isinstance(python, str):
            req_file = path / python
    if not req_file.exists():
        return set()
    lines = (line.split("#")[0].strip() for line in req_file.read_text().splitlines())
    return {canonicalize_name(Requirement(line).name) for line in lines if line}


def ee_python() -> dict[str, Requirement]:
    reqs = [Requirement(line) for line in EE["dependencies"]["python"]]
    return {canonicalize_name(r.name): r for r in reqs}


def pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra, extra_lines in project["optional-dependencies"].items():
        if extra != "test":
            lines += extra_lines
    return {canonicalize_name(Requirement(line).name): Requirement(line) for line in lines}


def test_ansible_builder_v3_layout():
    assert EE["version"] == 3
    assert EE["images"]["base_image"]["name"]
    assert set(EE["dependencies"]) <= {"ansible_core", "ansible_runner", "galaxy", "python", "system",
                                       "python_interpreter", "exclude"}


def test_schema_of_ansible_builder():
    ee_schema = pytest.importorskip("ansible_builder.ee_schema")
    ee_schema.validate_schema(EE)  # raises DefinitionError on a wrong key or type


def test_the_scans_find_what_is_there():
    used = used_collections()
    # known uses, so that a scan that finds nothing cannot pass the tests below
    assert "roles/container_ssh/tasks/keys.yml" in used["community.crypto"]
    assert "ansible.cfg" in used["ansible.posix"]  # callbacks_enabled = ansible.posix.profile_tasks
    assert any(m.startswith("tencentcloud.vpc") for m in third_party_imports())


def test_collections_are_the_ones_the_content_uses():
    listed = {c["name"] for c in EE["dependencies"]["galaxy"]["collections"]}
    used = used_collections()
    missing = {c: sorted(used[c]) for c in set(used) - listed}
    assert not missing, f"execution-environment.yml lacks collections used by FQCN in: {missing}"
    assert not listed - set(used), f"execution-environment.yml lists collections nothing uses: {listed - set(used)}"


@pytest.mark.parametrize("entry", EE["dependencies"]["galaxy"]["collections"], ids=lambda c: c["name"])
def test_collection_range_admits_the_tested_release(entry):
    path = installed_collections()[entry["name"]]
    tested = json.loads((path / "MANIFEST.json").read_text())["collection_info"]["version"]
    assert Version(tested) in SpecifierSet(entry["version"]), (
        f"{entry['name']} {tested} (the one CI tests, from the ansible package) is outside {entry['version']!r}")


def test_python_packages_cover_what_plugins_import():
    # The image installs ansible-core (dependencies.ansible_core), so what it requires (jinja2,
    # PyYAML, cryptography, ...) is there for the plugins too.
    core = Requirement(EE["dependencies"]["ansible_core"]["package_pip"])
    have = closure(set(ee_python()) | {core.name})
    missing = {}
    for module, files in third_party_imports().items():
        found = providers(module)
        assert found, f"{module} (imported by {sorted(files)}) is not installed here; install the test venv"
        if not found & have:
            missing[module] = (sorted(found), sorted(files))
    assert not missing, f"execution-environment.yml python lacks the providers of {missing}"


def test_python_packages_are_all_used():
    used_by_plugins = set().union(*(providers(m) for m in third_party_imports()))
    colls = installed_collections()
    listed_collections = [c["name"] for c in EE["dependencies"]["galaxy"]["collections"]]
    used_by_collections = set().union(*(collection_python_requirements(colls[c]) for c in listed_collections))
    unused = set(ee_python()) - used_by_plugins - used_by_collections
    assert not unused, f"execution-environment.yml python lists packages nothing imports or needs: {unused}"


def test_python_ranges_are_pyproject_ranges():
    pyproject = pyproject_requirements()
    for name, req in ee_python().items():
        assert name in pyproject, f"{name}: in execution-environment.yml but not in pyproject.toml"
        assert req.specifier == pyproject[name].specifier, (
            f"{name}: execution-environment.yml says {req.specifier}, pyproject.toml {pyproject[name].specifier}")
    core = Requirement(EE["dependencies"]["ansible_core"]["package_pip"])
    assert canonicalize_name(core.name) == "ansible-core"
    assert core.specifier == pyproject["ansible-core"].specifier
