"""gpucluster.cluster.gather (plugins/action/gather.py), run for real on this machine (connection
local, under the collection's strategy): several fact modules in one task, their facts merged in
order; the first that fails fails the task with its own message, its name first, and the rest do
not run; a bad ``modules`` is refused naming what it got; check mode gathers the same."""

from __future__ import annotations

import json
import sys

import yaml

from tests.conftest import run_tool


def _play(tmp_path, modules, *extra):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    out = tmp_path / "facts.json"
    book = tmp_path / "gather.yml"
    book.write_text(yaml.safe_dump([{"name": "Gather", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Gather several", "gpucluster.cluster.gather": {"modules": modules}, "register": "r"},
        {"name": "Write what came back", "check_mode": False, "ansible.builtin.copy": {
            "dest": str(out), "mode": "0600",
            "content": "{{ {'r': r, 'rdma': ansible_facts.gpucluster_rdma | default(none),"
                       " 'system': ansible_facts.system | default(none)} | to_json }}"}}]}]))
    r = run_tool("ansible-playbook", "-i", inv, *extra, book, home=tmp_path)
    return r, (json.loads(out.read_text()) if out.exists() else None)


def test_the_modules_facts_are_merged_in_one_task(tmp_path):
    r, got = _play(tmp_path, {"ansible.builtin.setup": {"gather_subset": ["min"]},
                              "gpucluster.cluster.rdma_facts": None})
    assert r.returncode == 0, r.stdout + r.stderr
    assert got["system"] == "Linux" and isinstance(got["rdma"]["hcas"], list)
    assert got["r"]["changed"] is False and not got["r"].get("failed")
    assert "Not passing" not in r.stderr and "gpucluster.cluster.rdma_facts" not in r.stderr, r.stderr


def test_check_mode_gathers_the_same(tmp_path):
    r, got = _play(tmp_path, {"gpucluster.cluster.rdma_facts": {}}, "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert isinstance(got["rdma"]["hcas"], list)


def test_the_first_failure_fails_the_task_with_its_own_message_and_the_rest_do_not_run(tmp_path):
    r, got = _play(tmp_path, {"ansible.builtin.setup": {"gather_subset": ["no-such-subset"]},
                              "gpucluster.cluster.rdma_facts": {}})
    assert r.returncode == 2 and got is None, r.stdout
    assert '"failed_module": "ansible.builtin.setup"' in r.stdout
    assert '"msg": "ansible.builtin.setup: ' in r.stdout and "no-such-subset" in r.stdout


def test_a_bad_modules_argument_is_refused_naming_it(tmp_path):
    r, _ = _play(tmp_path, ["ansible.builtin.setup"])
    assert r.returncode == 2
    assert "modules must be a mapping of fact module names to their arguments" in r.stdout
    assert "['ansible.builtin.setup']" in r.stdout
