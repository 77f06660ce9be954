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


def _register(task, name):
    return {**task, "register": name}


def _keep(tmp_path, name, expr):
    return {"name": f"Keep {name}", "ansible.builtin.copy": {
        "content": "{{ " + expr + " | to_json }}", "dest": str(tmp_path / name), "mode": "0644"}}


def test_a_later_publish_of_data_already_there_answers_without_the_node_and_a_new_run_reads_again(tmp_path):
    """The first publish of a run runs the module; a later one whose data this run's contract holds
    does not (on_node false). Data that differs still goes to the node, and the next run's first
    publish reads the node again, so a stage file changed on the node between runs is mended."""
    tasks = [
        _register(_publish(tmp_path, "runtime", {"runtime": "horovod"}), "first"),
        _register(_publish(tmp_path, "runtime", {"runtime": "horovod"}), "same"),
        _register(_publish(tmp_path, "nccl", {"data_interfaces": ["eth1"]}), "other"),
        _register(_publish(tmp_path, "nccl", {"data_interfaces": ["eth1"]}), "other_again"),
        _register(_publish(tmp_path, "nccl", {"data_interfaces": ["eth2"]}), "changed_data"),
        _keep(tmp_path, "flags.json", "[first.on_node, same.on_node, other.on_node, other_again.on_node, "
              "changed_data.on_node, same.changed, changed_data.changed, ansible_local.gpucluster]"),
    ]
    r, out = _run(tmp_path, tasks)
    assert r.returncode == 0, out
    flags = json.loads((tmp_path / "flags.json").read_text())
    assert flags == [True, False, True, False, True, False, True,
                     {"runtime": {"runtime": "horovod"}, "nccl": {"data_interfaces": ["eth2"]}}]
    assert json.loads((tmp_path / "contract.d" / "nccl.json").read_text()) == {"data_interfaces": ["eth2"]}

    # Someone edits the runtime's file on the node between runs: the next run's first publish
    # reads the node again and writes it back.
    (tmp_path / "contract.d" / "runtime.json").write_text('{"runtime": "lightcc"}\n')
    r, out = _run(tmp_path, [_register(_publish(tmp_path, "runtime", {"runtime": "horovod"}), "first"),
                             _keep(tmp_path, "again.json", "[first.on_node, first.changed]")])
    assert r.returncode == 0, out
    assert json.loads((tmp_path / "again.json").read_text()) == [True, True]
    assert json.loads((tmp_path / "contract.d" / "runtime.json").read_text()) == {"runtime": "horovod"}


def test_a_later_publish_at_other_paths_or_withdrawing_still_runs_the_module(tmp_path):
    other = {**_publish(tmp_path, "runtime", {"runtime": "horovod"})}
    other["gpucluster.cluster.contract"] = {**other["gpucluster.cluster.contract"], "path": str(tmp_path / "c2")}
    withdraw = _publish(tmp_path, "runtime", {})
    withdraw["gpucluster.cluster.contract"] = {**withdraw["gpucluster.cluster.contract"], "state": "absent"}
    r, out = _run(tmp_path, [
        _publish(tmp_path, "runtime", {"runtime": "horovod"}),
        _register(other, "other_path"),
        _register(_publish(tmp_path, "runtime", {"runtime": "horovod"}), "back"),
        _register(withdraw, "withdrawn"),
        _keep(tmp_path, "flags.json", "[other_path.on_node, back.on_node, withdrawn.on_node, withdrawn.changed]"),
    ])
    assert r.returncode == 0, out
    # back: the last read was at c2, so the first path is read again
    assert json.loads((tmp_path / "flags.json").read_text()) == [True, True, True, True]
    assert not (tmp_path / "contract.d" / "runtime.json").exists()


def test_a_later_publish_with_remove_facts_needs_the_node_only_where_such_a_file_is_there(tmp_path):
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "facts.d" / "gpucluster_nccl.fact").write_text('{"old": true}\n')

    def publish(register):
        task = _register(_publish(tmp_path, "nccl", {"data_interfaces": ["eth1"]}), register)
        task["gpucluster.cluster.contract"] = {**task["gpucluster.cluster.contract"],
                                               "remove_facts": ["gpucluster_nccl.fact"]}
        return task

    runtime = _publish(tmp_path, "runtime", {"runtime": "horovod"})
    r, out = _run(tmp_path, [runtime, publish("removes"), publish("again"),
                             _keep(tmp_path, "flags.json", "[removes.on_node, removes.changed, again.on_node]")])
    assert r.returncode == 0, out
    # the old fact file was there when runtime's publish listed the directory: nccl's first
    # publish runs the module and removes it; the same again needs no node
    assert json.loads((tmp_path / "flags.json").read_text()) == [True, True, False]
    assert not (tmp_path / "facts.d" / "gpucluster_nccl.fact").exists()

    # a new run: the first publish lists no old file, so nccl's is answered without the node
    r, out = _run(tmp_path, [runtime, publish("removes"), _keep(tmp_path, "next.json", "[removes.on_node]")])
    assert r.returncode == 0, out
    assert json.loads((tmp_path / "next.json").read_text()) == [False]
