"""The collection's filters as a whole: one file per component, unique names, and every
``gpucluster.cluster.<name>`` the roles and playbooks use exists (a typo fails here, not on a
node at run time).

Ansible loads every file under ``plugins/filter`` and merges their ``filters()`` maps; a name
defined in two files resolves to whichever loads last, so names must be unique across files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.plugins.filter.filters import filter_modules

ROOT = Path(__file__).resolve().parents[4]
YAML_DIRS = ("roles", "playbooks")
FQCN = re.compile(r"gpucluster\.cluster\.([A-Za-z_][A-Za-z0-9_]*)")
# A filter applied in Jinja: "| name" or "| gpucluster.cluster.name" (optionally followed by "(").
PIPE = re.compile(r"\|\s*((?:gpucluster\.cluster\.)?)([A-Za-z_][A-Za-z0-9_]*)\b")

FILES = {
    "benchmark", "diagnose", "gpudirect", "health", "hugepages", "inventory", "k8s", "multi_nic", "nccl",
    "nvidia_driver", "plan", "rdma", "runtime", "docker_engine", "container_toolkit", "versions", "dpkg",
}


def _sources():
    for top in YAML_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".yml", ".yaml", ".j2") and path.is_file() and "molecule" not in path.parts:
                yield path, path.read_text(encoding="utf-8")
    for extra in ("site.yml",):
        path = ROOT / extra
        if path.is_file():
            yield path, path.read_text(encoding="utf-8")


def _other_content():
    """Modules, lookups, roles and playbooks: what a non-filter FQCN may name."""
    names = {p.stem for kind in ("modules", "lookup") for p in (ROOT / "plugins" / kind).glob("*.py")
             if p.stem != "__init__"}
    names |= {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    names |= {p.stem for p in (ROOT / "playbooks").glob("*.yml")}
    return names


def duplicate_names(tables: dict) -> dict:
    """``{filter name: [files]}`` for every name defined by more than one file."""
    seen: dict = {}
    for stem, table in tables.items():
        for name in table:
            seen.setdefault(name, []).append(stem)
    return {name: files for name, files in seen.items() if len(files) > 1}


def unknown_uses(text: str, filters: set, other: set) -> list:
    """``[(lineno, problem)]`` for a YAML/Jinja text: an FQCN that names nothing of the collection,
    a ``| gpucluster.cluster.x`` that is not a filter, or one of our filters used without its FQCN."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in FQCN.finditer(line):
            if m.group(1) not in filters and m.group(1) not in other:
                found.append((lineno, f"gpucluster.cluster.{m.group(1)} is no filter, module, lookup, role "
                                      "or playbook"))
        for m in PIPE.finditer(line):
            fq, name = m.groups()
            if fq and name not in filters:
                found.append((lineno, f"| gpucluster.cluster.{name} is not a filter"))
            elif not fq and name in filters:
                found.append((lineno, f"| {name}: call the collection's filter by its FQCN gpucluster.cluster.{name}"))
    return found


def test_one_filter_file_per_component():
    assert set(filter_modules()) <= FILES | {"gpu"}  # plugins/filter/gpu.py belongs to the GPU component
    assert set(filter_modules()) >= FILES


def test_filter_names_are_unique_across_files():
    assert duplicate_names(filter_modules()) == {}


def test_duplicate_detector_can_fail():
    assert duplicate_names({"a": {"x": 1, "y": 1}, "b": {"x": 2}}) == {"x": ["a", "b"]}


def test_every_fqcn_used_in_roles_and_playbooks_exists():
    filters = {name for table in filter_modules().values() for name in table}
    other = _other_content()
    problems = []
    count = 0
    for path, text in _sources():
        count += len(FQCN.findall(text))
        problems += [f"{path.relative_to(ROOT)}:{n}: {why}" for n, why in unknown_uses(text, filters, other)]
    assert count > 50, "the scan found almost no FQCN uses: wrong root?"
    assert problems == []


@pytest.mark.parametrize(("text", "problem"), [
    ("x: '{{ facts | gpucluster.cluster.nccl_evn }}'", "nccl_evn is no filter"),
    ("x: '{{ facts | gpucluster.cluster.rdma_facts }}'", "| gpucluster.cluster.rdma_facts is not a filter"),
    ("x: '{{ text | nccl_conf }}'", "call the collection's filter by its FQCN"),
    ("- gpucluster.cluster.gpu_factz:", "gpu_factz is no filter"),
])
def test_scanner_catches_typos(text, problem):
    filters = {name for table in filter_modules().values() for name in table}
    found = unknown_uses(text, filters, _other_content())
    assert found and problem in found[0][1]


def test_scanner_accepts_real_uses():
    filters = {name for table in filter_modules().values() for name in table}
    text = "- gpucluster.cluster.rdma_facts:\n  x: '{{ t | gpucluster.cluster.nccl_conf | trim }}'\n"
    assert unknown_uses(text, filters, _other_content()) == []
