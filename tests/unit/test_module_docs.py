"""Every module of the collection documents itself the way ``ansible-doc`` and AWX read it.

``ansible-doc --json gpucluster.cluster.<module>`` is run on every ``plugins/modules/*.py`` with the
checkout's ansible.cfg (cwd = repository root, where ``collections/`` resolves the collection), so a
DOCUMENTATION that does not parse, a missing EXAMPLES/RETURN or a missing ``attributes`` entry fails
here. The attributes must also say what the code does: check mode support iff the module is built
with ``supports_check_mode=True``; diff support iff it returns a diff (reads ``module._diff``).
"""

from __future__ import annotations

import ast
import json

import pytest
import yaml

from tests.conftest import ROOT, run_tool

MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
SUPPORT = {"full", "partial", "none"}


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> dict[str, dict]:
    r = run_tool("ansible-doc", "--json", *(f"gpucluster.cluster.{m}" for m in MODULES),
                 home=tmp_path_factory.mktemp("home"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "[ERROR]" not in r.stderr and "[WARNING]" not in r.stderr, r.stderr
    return json.loads(r.stdout)


def _code_facts(module: str) -> tuple[bool, bool]:
    """(supports_check_mode=True passed to AnsibleModule, module._diff read) from the source. A
    module file with no code (the documentation of an action plugin, plugins/action/<module>.py)
    answers from the action: ``_supports_check_mode = True`` set on it, ``_diff`` read."""
    source = (ROOT / "plugins" / "modules" / f"{module}.py").read_text()
    action = ROOT / "plugins" / "action" / f"{module}.py"
    if "AnsibleModule" not in source and action.exists():
        tree = ast.parse(action.read_text())
        check = any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value is True
                    and any(getattr(t, "id", None) == "_supports_check_mode" for t in n.targets)
                    for n in ast.walk(tree))
        return check, any(isinstance(n, ast.Attribute) and n.attr == "_diff" for n in ast.walk(tree))
    tree = ast.parse(source)
    check = any(
        isinstance(n, ast.keyword) and n.arg == "supports_check_mode"
        and isinstance(n.value, ast.Constant) and n.value.value is True
        for n in ast.walk(tree)
    )
    diff = any(isinstance(n, ast.Attribute) and n.attr == "_diff" for n in ast.walk(tree))
    return check, diff


def test_there_are_modules():
    assert {"gpu_facts", "rdma_facts", "cloud_eni", "docker_daemon_json"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_module_documents_attributes_examples_and_return(docs, module):
    entry = docs.get(f"gpucluster.cluster.{module}")
    assert entry is not None, f"ansible-doc did not document gpucluster.cluster.{module}: {sorted(docs)}"
    doc = entry["doc"]
    assert doc["module"] == module
    attrs = doc.get("attributes") or {}
    for name in ("check_mode", "diff_mode", "platform"):
        assert name in attrs, f"{module}: DOCUMENTATION has no attributes.{name}"
        assert attrs[name].get("description"), f"{module}: attributes.{name} has no description (fragment?)"
    assert attrs["check_mode"]["support"] in SUPPORT and attrs["diff_mode"]["support"] in SUPPORT
    assert attrs["platform"].get("platforms"), f"{module}: attributes.platform names no platforms"

    check, diff = _code_facts(module)
    assert (attrs["check_mode"]["support"] != "none") == check, (
        f"{module}: attributes.check_mode.support is {attrs['check_mode']['support']!r} but the code "
        f"{'passes' if check else 'does not pass'} supports_check_mode=True")
    assert (attrs["diff_mode"]["support"] != "none") == diff, (
        f"{module}: attributes.diff_mode.support is {attrs['diff_mode']['support']!r} but the code "
        f"{'reads' if diff else 'never reads'} module._diff")
    if "ansible_facts" in (entry.get("return") or {}):
        assert attrs.get("facts", {}).get("support") == "full", f"{module} returns ansible_facts: add attributes.facts"

    # EXAMPLES: a YAML list of tasks, each calling this module by its FQCN or another module.
    examples = yaml.safe_load(entry["examples"])
    assert isinstance(examples, list) and examples, f"{module}: EXAMPLES is not a list of tasks"
    called = [k for task in examples for k in task if k.startswith("gpucluster.cluster.") or k == module]
    assert called and all(k == f"gpucluster.cluster.{module}" for k in called), (
        f"{module}: EXAMPLES must call the module by its FQCN gpucluster.cluster.{module}, got {called}")
    assert entry.get("return"), f"{module}: no RETURN"
