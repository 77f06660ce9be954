"""A role's entry point is validated against its argument spec only when ``tasks_from`` names it
as the spec does (``tasks_from: labels``): Ansible looks the spec up by the name as given, so
``tasks_from: labels.yml`` runs the same tasks with no validation at all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPECS = {p.parents[1].name: set((yaml.safe_load(p.read_text()) or {}).get("argument_specs") or {})
         for p in ROOT.glob("roles/*/meta/argument_specs.yml")}
FILES = sorted([*ROOT.glob("playbooks/**/*.yml"), *ROOT.glob("roles/*/tasks/*.yml"),
                *ROOT.glob("roles/*/molecule/*/*.yml")])


def _includes(text):
    """(role, tasks_from) of every include_role/import_role with a literal tasks_from."""
    for m in re.finditer(r"name:\s*(?:gpucluster\.cluster\.)?(\w+)\s*\n\s*tasks_from:\s*(\S+)", text):
        yield m.group(1), m.group(2).strip("'\"")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_entry_point_is_named_as_its_spec_names_it(path):
    text = path.read_text()
    for role, tasks_from in _includes(text):
        stem = tasks_from.removesuffix(".yml")
        if stem != tasks_from and stem in SPECS.get(role, set()):
            pytest.fail(f"{path.relative_to(ROOT)}: tasks_from: {tasks_from} skips the {role} role's argument spec "
                        f"for entry point {stem!r}; write tasks_from: {stem}")


def test_the_scan_finds_the_entry_points():
    found = {(r, t) for p in FILES for r, t in _includes(p.read_text())}
    assert ("k8s", "labels") in found and ("benchmark", "report") in found and ("docker", "contribute") in found
