"""inventory/sample is an honest starting point for a real cluster.

One group_vars file per role the site runs (plus cluster.yml for the playbooks' own variables);
every variable in it is declared (a role's argument spec, or a cluster-wide variable the
playbooks read), passes that spec with Ansible's own validator, and is the role's default
unless it is the one required example (the image reference). The inventory parses, site.yml
passes --syntax-check against it, and preflight's real validation tasks accept it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventory" / "sample"
GROUP_VARS = SAMPLE / "group_vars" / "all"
BIN = ROOT / ".venv" / "bin"
GROUP = "gpu_nodes"

# Owned by the plan (preflight's gpucluster_plan and gpucluster_membership) and read by every
# stage, no role's setting: they live in cluster.yml (commented examples), with their types.
CLUSTER_SPEC = {
    "gpucluster_slots_per_node": {"type": "int"},
    "gpucluster_excluded_nodes": {"type": "list", "elements": "str"},
}
# Sample values that differ from the role default on purpose: the required image reference
# (the role's default is "", which preflight refuses), given as an example.
NOT_DEFAULT = {"training_image_ref"}


def _load(p: Path):
    return yaml.safe_load(p.read_text()) or {}


def _is_jinja(value) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _site_plays(playbook: Path) -> list[dict]:
    """Every play site.yml runs, following import_playbook (relative to the importing file)."""
    plays = []
    for entry in _load(playbook):
        imported = entry.get("ansible.builtin.import_playbook") or entry.get("import_playbook")
        if imported:
            plays += _site_plays(playbook.parent / imported)
        else:
            plays.append(entry)
    return plays


def _site_roles() -> list[str]:
    """Roles of site.yml's plays, in the order they run, each once."""
    roles = []
    for play in _site_plays(ROOT / "site.yml"):
        for r in play.get("roles", []):
            name = r if isinstance(r, str) else r.get("role") or r.get("name")
            if name not in roles:
                roles.append(name)
    return roles


def _specs() -> dict[str, dict]:
    """role -> the options of its main entry point (meta/argument_specs.yml)."""
    out = {}
    for spec in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        out[spec.parents[1].name] = _load(spec)["argument_specs"]["main"]["options"]
    return out


def _sample() -> dict[str, dict]:
    """file stem -> its variables, for every YAML file in group_vars/all."""
    files = sorted(GROUP_VARS.glob("*.yml")) + sorted(GROUP_VARS.glob("*.yaml"))
    return {f.stem: _load(f) for f in files}


SAMPLE_FILES = sorted(_sample())


def test_one_sample_file_per_site_role_plus_cluster():
    assert set(SAMPLE_FILES) == set(_site_roles()) | {"cluster"}


def test_no_variable_is_set_twice():
    seen = {}
    for stem, variables in _sample().items():
        for name in variables:
            assert name not in seen, f"{name} is set in both {seen.get(name)}.yml and {stem}.yml"
            seen[name] = stem


@pytest.mark.parametrize("stem", SAMPLE_FILES)
def test_every_variable_is_declared_where_it_belongs(stem):
    variables = _sample()[stem]
    if stem == "cluster":
        # Only examples: the plan's values come from the nodes and the inventory groups.
        assert all(f"# {name}: " in (GROUP_VARS / "cluster.yml").read_text() for name in CLUSTER_SPEC)
        assert variables == {}, f"cluster.yml sets {sorted(variables)}: the plan's values are examples only"
        return
    assert variables, f"{stem}.yml sets nothing"
    options = _specs()[stem]
    unknown = set(variables) - set(options)
    assert not unknown, f"{stem}.yml: {sorted(unknown)} are not in roles/{stem}/meta/argument_specs.yml"


def test_cluster_variables_are_read_by_the_playbooks_or_roles():
    text = "\n".join(p.read_text() for p in sorted((ROOT / "playbooks").rglob("*.yml")))
    text += "\n".join(p.read_text() for p in sorted((ROOT / "roles").glob("*/defaults/main.yml")))
    text += "\n".join(p.read_text() for p in sorted((ROOT / "roles").glob("preflight/tasks/*.yml")))
    for name in CLUSTER_SPEC:
        assert re.search(rf"\b{name}\b", text), f"{name} is read nowhere in playbooks/ or roles/*/defaults"


@pytest.mark.parametrize("stem", SAMPLE_FILES)
def test_values_pass_the_argument_spec(stem):
    """Ansible's own validator, as preflight's validate_argument_spec runs it; Jinja values are
    only known on the node, so they are left out."""
    spec = CLUSTER_SPEC if stem == "cluster" else _specs()[stem]
    provided = {k: v for k, v in _sample()[stem].items() if not _is_jinja(v)}
    result = ArgumentSpecValidator(spec).validate(provided)
    assert not result.error_messages, f"{stem}.yml: {result.error_messages}"


@pytest.mark.parametrize("stem", [s for s in SAMPLE_FILES if s != "cluster"])
def test_values_are_the_role_defaults(stem):
    defaults = _load(ROOT / "roles" / stem / "defaults" / "main.yml")
    for name, value in _sample()[stem].items():
        if name in NOT_DEFAULT:
            assert value != defaults[name] and not _is_jinja(value), f"{name}: the example should be a real value"
            continue
        assert value == defaults[name], f"{stem}.yml: {name}: {value!r} is not the role default {defaults[name]!r}"


def test_the_inventory_group_is_the_one_every_play_runs_on():
    hosts = _load(SAMPLE / "hosts.yml")
    assert hosts["all"]["children"][GROUP]["hosts"], f"hosts.yml lists no node in {GROUP}"
    for play in _site_plays(ROOT / "site.yml"):
        assert play["hosts"] == GROUP, f"play {play.get('name')!r} runs on {play['hosts']}"
    assert _load(ROOT / "roles/container_ssh/defaults/main.yml")["container_ssh_group"] == GROUP


def test_preflight_validates_every_site_role_with_a_spec_and_its_readme_says_so():
    specs = _specs()
    wanted = [r for r in _site_roles() if r != "preflight" and r in specs]
    default = _load(ROOT / "roles/preflight/defaults/main.yml")["preflight_validate_roles"]
    assert default == wanted, "preflight_validate_roles: every role site.yml runs, in its order"
    readme = (ROOT / "roles/preflight/README.md").read_text()
    row = re.search(r"^\| `preflight_validate_roles` \| `\[([^\]]*)\]` \|", readme, re.M)
    assert row, "roles/preflight/README.md has no preflight_validate_roles row"
    assert [r.strip() for r in row.group(1).split(",")] == default


def _run(tmp_path, *argv):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "NO_COLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                               "HOME": str(tmp_path)})


def test_the_inventory_parses_and_every_node_gets_every_sample_variable(tmp_path):
    r = _run(tmp_path, "ansible-inventory", "-i", str(SAMPLE / "hosts.yml"), "--list")
    assert r.returncode == 0, r.stdout + r.stderr
    inv = json.loads(r.stdout)
    nodes = inv[GROUP]["hosts"]
    assert nodes
    for node in nodes:
        hostvars = inv["_meta"]["hostvars"][node]
        for stem, variables in _sample().items():
            for name, value in variables.items():
                assert name in hostvars, f"{node}: {name} ({stem}.yml) did not reach the node"
                assert hostvars[name] == value, f"{node}: {name}: {hostvars[name]!r} != {value!r}"


def test_site_passes_syntax_check_with_the_sample_inventory(tmp_path):
    r = _run(tmp_path, "ansible-playbook", "-i", str(SAMPLE / "hosts.yml"), "site.yml", "--syntax-check")
    assert r.returncode == 0, r.stdout + r.stderr


PREFLIGHT_VALIDATION = """---
- name: Preflight's inventory validation alone (controller-side, no connection to the nodes)
  hosts: gpu_nodes
  gather_facts: false
  vars:
    gpucluster_plan: {gpus: 8, gpus_ready: 8, driver: ready, slots: 8, nics: [eth0], hcas: []}
  tasks:
    - name: Validate the inventory
      ansible.builtin.include_role:
        name: preflight
        tasks_from: assert.yml
"""


def test_preflight_accepts_the_sample_and_refuses_a_bad_value(tmp_path):
    playbook = tmp_path / "preflight_validation.yml"
    playbook.write_text(PREFLIGHT_VALIDATION)
    r = _run(tmp_path, "ansible-playbook", "-i", str(SAMPLE / "hosts.yml"), str(playbook))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "TASK [preflight : Check the inventory against each stage's argument spec]" in out, out
    # The same run with one value a role's spec refuses: the check is real.
    r = _run(tmp_path, "ansible-playbook", "-i", str(SAMPLE / "hosts.yml"), str(playbook),
             "-e", "runtime_profile_light_topk_fp16=2")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "runtime_profile_light_topk_fp16 must be one of: 0, 1, got: 2" in out
    assert "Fix: give runtime_profile_light_topk_fp16 one of 0, 1" in out


def test_preflight_checks_the_version_manifest_with_the_inventory_override(tmp_path):
    """The manifest (roles/versions) loads under preflight at role-defaults precedence: an inventory
    value of a manifest entry reaches the checks, which refuse a driver version of another branch and
    a known-bad toolkit release with its reason, naming the host."""
    playbook = tmp_path / "preflight_validation.yml"
    playbook.write_text(PREFLIGHT_VALIDATION)
    bad = {"versions_nvidia_driver_version": "550.54.15", "nvidia_container_toolkit_version": "1.17.7-1"}
    r = _run(tmp_path, "ansible-playbook", "-i", str(SAMPLE / "hosts.yml"), str(playbook), "-e", json.dumps(bad))
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert re.search(r"\b[\w.-]+: nvidia_driver_version: 550\.54\.15 is not of branch 535\. Fix: ", out), out
    assert "nvidia_container_toolkit_version: 1.17.7-1 is a known-bad release (CVE-2025-23266" in out


@pytest.mark.parametrize(("typo", "fix"), [
    ("hugepage_count", "did you mean hugepages_count"),
    ("traning_image_ref", "did you mean training_image_ref"),
    ("docker_daemon_option", "did you mean docker_daemon_options"),
])
def test_preflight_refuses_a_misspelt_setting_with_the_real_one(tmp_path, typo, fix):
    playbook = tmp_path / "preflight_validation.yml"
    playbook.write_text(PREFLIGHT_VALIDATION)
    r = _run(tmp_path, "ansible-playbook", "-i", str(SAMPLE / "hosts.yml"), str(playbook), "-e", json.dumps({typo: 4}))
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert f"{typo}: is not a gpucluster setting (value 4); {fix}" in out
    assert re.search(rf"\b[\w.-]+: {typo}: ", out), "the message names the host"
