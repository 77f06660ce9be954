"""The run lock's description of this run (plugins/lookup/controller_run.py): ansible-playbook's
pid from a task worker or from ansible-playbook itself, and a pid's start time or `gone` (the
process functions themselves are tested in plugin_utils/test_controller_process.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleLookupError
from ansible_collections.gpucluster.cluster.plugins.lookup import controller_run

from tests.conftest import ansible_env


def test_the_lookup_refuses_what_is_not_a_pid():
    with pytest.raises(AnsibleLookupError, match="'abc' is not a pid"):
        controller_run.LookupModule().run(["abc"])
    assert controller_run.LookupModule().run([os.getpid(), 0]) == [controller_run.process_start(os.getpid()), "gone"]


def test_without_playbook_arguments_the_run_records_the_default_playbook(monkeypatch):
    """Outside ansible-playbook (no playbook arguments) the run records default_playbook (lock.yml
    passes its play's name, in the one templating that makes the run id); arguments win."""
    monkeypatch.setattr(controller_run, "playbooks", lambda: [])
    run = controller_run.describe_run(default_playbook="Preflight")
    assert run["playbook"] == "Preflight" and run["pid"] == os.getpid() and len(run["id"]) == 36
    assert controller_run.describe_run()["playbook"] == ""
    monkeypatch.setattr(controller_run, "playbooks", lambda: ["site.yml", "more.yml"])
    assert controller_run.describe_run(default_playbook="Preflight")["playbook"] == "site.yml more.yml"


def test_a_run_describes_ansible_playbook_from_a_worker(tmp_path):
    """Templated in a task worker, the pid is ansible-playbook's (the worker's parent), and so are
    the start time; the playbook is the one it was given (the inventory is not one)."""
    out = tmp_path / "run.json"
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    book = tmp_path / "describe.yml"
    book.write_text(yaml.safe_dump([{"hosts": "node-x", "gather_facts": False, "tasks": [
        {"name": "Describe", "ansible.builtin.copy": {
            "dest": str(out), "mode": "0600",
            "content": "{{ lookup('gpucluster.cluster.controller_run', default_playbook='the play')"
                       " | combine({'worker': lookup('ansible.builtin.pipe', 'echo $PPID') | int}) | to_json }}"}}]}]))
    playbook_cli = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    proc = subprocess.Popen([playbook_cli, "-i", str(inv), str(book)],
                            env=ansible_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stdout, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout
    run = yaml.safe_load(out.read_text())
    assert run["pid"] == proc.pid != run["worker"]
    assert run["pid_start"].isdigit() and run["playbook"] == str(book)
    assert run["controller"] == os.uname().nodename and run["user"] and len(run["id"]) == 36
