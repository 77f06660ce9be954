"""The runtime switch's report (roles/runtime, entry point ``report``), for real on this machine
(connection local): it judges the NCCL net plugin's placement from runtime_node_state's data
(plugin_in_place) against the plugin stage's decision (plugin_loaded), and a node whose plugin is
misplaced fails, saying where the library is in words."""

from __future__ import annotations

import sys

import pytest
import yaml

from tests.conftest import run_tool


def _report(tmp_path, target, in_place, aside, loaded):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    state = {"host": "node-x", "runtime": target, "recorded": target, "packages": {},
             "plugin_path": "/opt/p/libnccl-net.so", "plugin_aside_path": "/opt/p/libnccl-net.so.disabled",
             "plugin_in_place": in_place, "plugin_aside": aside, "plugin_loaded": loaded}
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "Report", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Note the state", "ansible.builtin.set_fact": {"runtime_node_state": state}},
        {"name": "Report", "ansible.builtin.include_role": {"name": "gpucluster.cluster.runtime",
                                                              "tasks_from": "report"},
         "vars": {"runtime_target": target}}]}]))
    r = run_tool("ansible-playbook", "-i", inv, book, home=tmp_path)
    return r.returncode, " ".join((r.stdout + r.stderr).split())


@pytest.mark.parametrize(("target", "in_place", "aside", "loaded"), [
    ("lightcc", True, False, True),    # LightCC loads it: in place
    ("lightcc", False, True, False),   # an unmanaged library stays aside
    ("horovod", False, True, False),   # horovod: aside
    ("horovod", False, False, False),  # no library at all
])
def test_a_plugin_where_the_plugin_stage_decided_passes(tmp_path, target, in_place, aside, loaded):
    rc, out = _report(tmp_path, target, in_place, aside, loaded)
    assert rc == 0, out
    assert "NCCL net plugin " + ("in place at /opt/p/libnccl-net.so" if in_place
                                 else "moved aside to /opt/p/libnccl-net.so.disabled" if aside
                                 else "absent (/opt/p/libnccl-net.so)") in out, out


@pytest.mark.parametrize(("target", "in_place", "aside", "loaded", "where", "would"), [
    ("horovod", True, False, False, "in place at /opt/p/libnccl-net.so", "load"),
    # in place as the contract says, but horovod must never load it
    ("horovod", True, False, True, "in place at /opt/p/libnccl-net.so", "load"),
    ("lightcc", False, True, True, "moved aside to /opt/p/libnccl-net.so.disabled", "not load"),
    ("lightcc", True, False, False, "in place at /opt/p/libnccl-net.so", "load"),
])
def test_a_misplaced_plugin_fails_naming_the_node_and_where_it_is(tmp_path, target, in_place, aside, loaded, where,
                                                                   would):
    rc, out = _report(tmp_path, target, in_place, aside, loaded)
    assert rc != 0, out
    said = (f"node-x runs {target}, but its NCCL net plugin is {where} while the plugin stage's contract "
            f"(ansible_local.gpucluster.net_plugin) says loaded={str(loaded).lower()}: NCCL would {would} it.")
    assert said in out, out
    assert f"re-run playbooks/runtime.yml -e runtime={target}" in out
