"""The node contract in a run, for real on this machine (connection local, under tmp_path): a
stage that publishes (gpucluster.cluster.contract) updates this run's ansible_local.gpucluster at
once - no fact gathering in between - and keeps the node's other local facts; a later run's
fact gathering reads the same from the node."""

from __future__ import annotations

import json
import sys

import yaml

from tests.conftest import run_tool


def _run(tmp_path, tasks):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "Contract", "hosts": "all", "gather_facts": False, "tasks": tasks}]))
    r = run_tool("ansible-playbook", "-i", inv, book, home=tmp_path)
    return r, r.stdout + r.stderr


def _gather(tmp_path):
    return {"name": "Gather the local facts", "ansible.builtin.setup": {
        "gather_subset": ["!all", "!min", "local"], "fact_path": str(tmp_path / "facts.d")}}


def _publish(tmp_path, stage, data):
    return {"name": f"Publish {stage}", "gpucluster.cluster.contract": {
        "stage": stage, "data": data, "path": str(tmp_path / "contract.d"), "facts_path": str(tmp_path / "facts.d")}}


def _show(tmp_path, name):
    return {"name": "Keep what this run sees", "ansible.builtin.copy": {
        "content": "{{ ansible_local | to_json }}", "dest": str(tmp_path / name), "mode": "0644"}}


def test_a_publish_updates_this_runs_ansible_local_and_keeps_the_other_local_facts(tmp_path):
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "facts.d" / "team.fact").write_text('{"owner": "ml-infra"}\n')
    r, out = _run(tmp_path, [
        _gather(tmp_path),
        _publish(tmp_path, "nccl", {"data_interfaces": ["eth1"]}),
        _publish(tmp_path, "ssh", {"port": 2222}),
        _show(tmp_path, "seen.json"),
    ])
    assert r.returncode == 0, out
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"team": {"owner": "ml-infra"},
                    "gpucluster": {"nccl": {"data_interfaces": ["eth1"]}, "ssh": {"port": 2222}}}

    # The next run gathers the same from the node (the fact script); the publish changes nothing
    # (the one change is the new copy of what the run sees).
    r, out = _run(tmp_path, [_gather(tmp_path), _publish(tmp_path, "ssh", {"port": 2222}),
                             _show(tmp_path, "next.json")])
    assert r.returncode == 0, out
    assert json.loads((tmp_path / "next.json").read_text()) == seen
    assert "changed=1 " in out, out


def test_a_node_without_local_facts_gathered_gets_the_contract_alone(tmp_path):
    r, out = _run(tmp_path, [_publish(tmp_path, "runtime", {"runtime": "horovod"}), _show(tmp_path, "seen.json")])
    assert r.returncode == 0, out
    assert json.loads((tmp_path / "seen.json").read_text()) == {"gpucluster": {"runtime": {"runtime": "horovod"}}}
