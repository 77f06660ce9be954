"""Role contracts: defaults and argument specs agree, production defaults stay production."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())


def _load(p: Path):
    return yaml.safe_load(p.read_text()) or {}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_and_argument_specs_agree(role):
    defaults = _load(role / "defaults" / "main.yml")
    entry_points = _load(role / "meta" / "argument_specs.yml")["argument_specs"]
    assert "main" in entry_points
    # main's options, and the settings (options with a default) of the other entry points: a role
    # with several splits its settings (k8s: labels and main); an entry point's own parameters
    # (docker's contribute: what a caller passes) have no default and are no setting.
    options = [(n, s) for n, s in (entry_points["main"].get("options") or {}).items()]
    options += [(n, s) for name, ep in entry_points.items() if name != "main"
                for n, s in (ep.get("options") or {}).items() if "default" in s]
    assert set(defaults) == {n for n, _ in options}, "every public variable is in both defaults/main.yml and a spec"
    for name, spec in options:
        # The role's prefix, or the cluster's for a cluster-wide setting one role owns
        # (reboot_point: gpucluster_allow_reboot, as inventories have always spelt it).
        assert name.startswith((role.name + "_", "gpucluster_")), f"{name} lacks the role prefix"
        assert spec.get("description"), f"{name} has no description"
        if "default" in spec:
            assert spec["default"] == defaults[name], f"{name}: spec default {spec['default']!r} != {defaults[name]!r}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_read_no_gathered_facts(role):
    """Ansible templates the whole argument spec in the role's validation task, which it tags
    ``always``: in a --tags run that gathered no facts (``site.yml --tags docker``) a spec that
    reads ansible_facts fails every play importing the role, even one whose tasks are all skipped."""
    text = (role / "meta" / "argument_specs.yml").read_text()
    for lineno, line in enumerate(text.splitlines(), 1):
        if "{{" in line and ("ansible_facts" in line or "ansible_default_ipv4" in line):
            pytest.fail(f"{role.name}/meta/argument_specs.yml line {lineno} templates a fact: {line.strip()}")


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_has_readme_meta_and_scenario(role):
    for f in ("README.md", "meta/main.yml", "meta/argument_specs.yml", "molecule/default/molecule.yml",
              "molecule/default/verify.yml", "tasks/main.yml"):
        assert (role / f).is_file(), f"{role.name}: {f} missing"


def test_training_container_production_defaults_are_the_vendor_manuals():
    d = _load(ROOT / "roles/training_image/defaults/main.yml")
    assert d["training_image_gpus"] == "all"
    assert d["training_image_shm_size"] == "32g"
    assert d["training_image_ulimit_memlock"] == -1
    assert d["training_image_ulimit_stack"] == 67108864
    assert d["training_image_network_mode"] == "host"
    assert d["training_image_privileged"] is True
    assert d["training_image_bind_sys"] is True
    assert d["training_image_bind_hugepages"] is True


def test_container_sshd_defaults_to_its_own_port():
    assert _load(ROOT / "roles/container_ssh/defaults/main.yml")["container_ssh_port"] == 2222


def test_site_imports_stages_in_order():
    assert [s["ansible.builtin.import_playbook"] for s in _load(ROOT / "site.yml")] == ["playbooks/site.yml"]
    site = _load(ROOT / "playbooks/site.yml")
    assert [s["ansible.builtin.import_playbook"] for s in site] == [
        "preflight.yml", "host_stack.yml", "network.yml", "docker.yml",
        "nvidia_container_toolkit.yml", "training.yml", "health.yml", "unlock.yml"]


def test_stages_checked_by_preflight_skip_their_own_copy_of_the_checks():
    """preflight runs each listed stage's assert.yml, then records the list (gpucluster_checked_stages);
    the stage skips its copy in that run as one include, and runs it where preflight did not (its tags,
    molecule). container_ssh runs its own again: its address check waits for this run's NICs."""
    checked = yaml.safe_load((ROOT / "roles/preflight/defaults/main.yml").read_text())["preflight_stage_checks"]
    stages = yaml.safe_load((ROOT / "roles/preflight/tasks/stages.yml").read_text())
    loop = "{{ preflight_stage_checks }}"
    record = [t for t in stages if "gpucluster_checked_stages" in t.get("ansible.builtin.set_fact", {})]
    assert record and record[0]["ansible.builtin.set_fact"]["gpucluster_checked_stages"] == (
        "{{ preflight_stage_checks + ['versions'] }}")
    assert stages.index(record[0]) > next(i for i, t in enumerate(stages) if t.get("loop") == loop)
    for stage in checked:
        tasks = yaml.safe_load((ROOT / "roles" / stage / "tasks/main.yml").read_text())
        asserts = [t for t in tasks if "assert.yml" in str(t.get("ansible.builtin.include_tasks", ""))
                   or t.get("ansible.builtin.import_tasks") == "assert.yml"]
        assert len(asserts) == 1, stage
        task = asserts[0]
        if stage == "container_ssh":
            assert task.get("ansible.builtin.import_tasks") == "assert.yml"
            continue
        include = task["ansible.builtin.include_tasks"]
        assert include["file"] == "assert.yml", stage
        assert "gpucluster_checked_stages" in task["when"] and "role_name not in" in task["when"], stage
        # The included checks keep the tags the import gave them (include_tasks tags only itself).
        assert include["apply"]["tags"] == task["tags"], stage


def test_the_version_checks_run_once_per_run():
    """Every role that depends on versions (for its defaults, the manifest) skips the dependency's
    checks, its argument-spec check included, once preflight recorded versions as checked; preflight
    itself depends on it as well, before it records anything, so a site.yml run checks once."""
    dependents = []
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        for dep in yaml.safe_load(meta.read_text()).get("dependencies") or []:
            if dep.get("role") == "versions":
                dependents.append(meta.parts[-3])
                assert dep["when"] == ("'versions' not in lookup('ansible.builtin.vars', "
                                       "'gpucluster_checked_stages', default=[])"), meta
    assert "preflight" in dependents and {"nvidia_driver", "gpudirect", "nvidia_container_toolkit"} <= set(dependents)
