"""One owner per setting: a playbook that needs a role's setting (the container's name, the
runtime record, the MPI hostfile, ...) imports that role's defaults (``tasks_from: defaults.yml``)
and keeps no ``default(<literal>)`` copy of it; the import gives the role's value at role-defaults
precedence, so the inventory and ``-e`` still win (run for real below)."""

from __future__ import annotations

import re

import yaml

from tests.conftest import ROOT, run_tool

#: Facts a stage sets while it runs (not settings): a playbook reads them with a default for a
#: stage that did not run (the reboot point: which stage asks for a reboot).
STAGE_OUTPUTS = {"rdma_reboot_reason", "rdma_reboot_required", "hugepages_reboot_required", "hugepages_reboot_reason"}


def _role_defaults() -> dict[str, str]:
    out = {}
    for path in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        for name in (yaml.safe_load(path.read_text()) or {}):
            out[name] = path.parts[-3]
    return out


def test_no_playbook_keeps_a_copy_of_a_role_default():
    defaults = _role_defaults()
    found = []
    for path in sorted((ROOT / "playbooks").rglob("*.yml")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for name in re.findall(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(", line):
                if name in defaults and name not in STAGE_OUTPUTS:
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {name} (owner: roles/{defaults[name]})")
    assert not found, "import the owner's defaults (tasks_from: defaults.yml) instead:\n" + "\n".join(found)


def test_every_defaults_entry_point_runs_nothing():
    for path in ROOT.glob("roles/*/tasks/defaults.yml"):
        assert yaml.safe_load(path.read_text()) == [], path


def test_the_import_gives_the_roles_value_and_the_inventory_wins(tmp_path):
    book = tmp_path / "settings.yml"
    book.write_text(yaml.safe_dump([{
        "name": "Settings", "hosts": "localhost", "gather_facts": False,
        "pre_tasks": [{"name": "Import", "ansible.builtin.import_role": {"name": "training_image",
                                                                          "tasks_from": "defaults.yml"}},
                      {"name": "Import", "ansible.builtin.import_role": {"name": "nccl_net_plugin",
                                                                          "tasks_from": "defaults.yml"}}],
        "tasks": [{"name": "Show", "ansible.builtin.debug": {
            "msg": "name={{ training_image_container_name }} "
                   "lib={{ nccl_net_plugin_dir }}/{{ __nccl_net_plugin_file }}"}}],
    }]))

    def run(*extra):
        r = run_tool("ansible-playbook", "-i", "localhost,", "-c", "local", book, *extra, home=tmp_path,
                     ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert "name=gpucluster-train lib=/opt/gpucluster/tools/nccl-net/libnccl-net.so" in run()
    out = run("-e", "training_image_container_name=mine", "-e", "nccl_net_plugin_name=harp")
    assert "name=mine lib=/opt/gpucluster/tools/nccl-net/libnccl-net-harp.so" in out
