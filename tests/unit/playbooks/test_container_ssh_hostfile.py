"""The containers' Open MPI hostfile (roles/container_ssh/templates/hostfile.j2), rendered by
ansible-playbook for real on two hosts of different GPU counts: every member's line carries that
member's own slots (its plan's, or its container_ssh_slots where the inventory sets one), so
every node's hostfile is the same file - before, each node wrote its own slots for every member."""

from __future__ import annotations

import sys

import yaml

from tests.conftest import ROOT, run_tool

TEMPLATE = ROOT / "roles" / "container_ssh" / "templates" / "hostfile.j2"


def test_each_member_gets_its_own_slots_and_every_node_the_same_hostfile(tmp_path):
    inv = tmp_path / "hosts.yml"
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
             for name in ("node-a", "node-b", "node-c")}
    hosts["node-c"]["container_ssh_slots"] = 2  # set in the inventory: wins over the plan
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "Hostfile", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Plan", "ansible.builtin.set_fact": {
            "gpucluster_plan": {"slots": "{{ {'node-a': 8, 'node-b': 4, 'node-c': 1}[inventory_hostname] }}"}}},
        {"name": "Render", "vars": {
            "__container_ssh_peers": ["node-a", "node-b", "node-c"],
            "container_ssh_slots": "{{ hostvars[inventory_hostname].container_ssh_slots"
                                   " | default(gpucluster_plan.slots) }}"},
         "ansible.builtin.copy": {"dest": str(tmp_path) + "/{{ inventory_hostname }}", "mode": "0644",
                                  "content": "{{ lookup('ansible.builtin.template', '" + str(TEMPLATE) + "') }}"}},
    ]}]))
    r = run_tool("ansible-playbook", "-i", inv, book, home=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    files = {n: [line for line in (tmp_path / n).read_text().splitlines() if not line.startswith("#")]
             for n in ("node-a", "node-b", "node-c")}
    assert files["node-a"] == ["node-a slots=8", "node-b slots=4", "node-c slots=2"]
    assert files["node-a"] == files["node-b"] == files["node-c"]
