"""``gpucluster plan`` and playbooks/plan.yml, run for real on this machine (connection local):
the node's plan and its stages' values come back as JSON, a refusal names host, variable and
fix, and nothing on the node changes (no lock is taken)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_tool


def _inventory(tmp_path, **host):
    inv = tmp_path / "hosts.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            # this machine: no GPU, no GRUB to regenerate, a CPU rank per node
            "preflight_require_gpu": False, "hugepages_bootloader_update": False, "hugepages_count": 2,
            "training_image_ref": "registry.example.com:5000/team/train:1.0",
            "preflight_lock_path": str(tmp_path / "run.lock"), **host}
    host = {k: v for k, v in host.items() if v is not None}
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-x": host}}}}}))
    return inv


def _cli(tmp_path, inv, *args):
    return run_tool("gpucluster", "plan", "-i", inv, *args, home=tmp_path, cwd=tmp_path, timeout=300)


def _plan_book(tmp_path, inv, out, **extra_vars):
    """playbooks/plan.yml as gpucluster plan runs it, its JSON written to ``out``."""
    return run_tool("ansible-playbook", "-i", inv, "playbooks/plan.yml",
                    "-e", json.dumps({"plan_out": str(out), **extra_vars}), home=tmp_path, timeout=300)


def test_the_plan_of_a_gpu_less_node_comes_back_as_json_and_changes_nothing(tmp_path):
    inv = _inventory(tmp_path, gpucluster_slots_per_node=2, runtime_profile_runtime="horovod")
    r = _cli(tmp_path, inv, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    plans = json.loads(r.stdout)
    assert list(plans) == ["node-x"]
    p = plans["node-x"]
    assert p["gpus"] == 0 and p["gpus_ready"] == 0 and p["slots"] == 2
    assert p["nics"] and "lo" not in p["nics"] and all(not n.startswith(("docker", "veth")) for n in p["nics"])
    # the stages' own read-only checks: the runtime this node would run and its pool
    assert p["runtime"] == "horovod"
    assert p["hugepages"]["count"] == 2
    # the training container the training stage would run: the inventory's image, the vendor's
    # flags, the role's mounts, the runtime profile as the last layer of its environment
    c = p["container"]
    assert c["image"] == "registry.example.com:5000/team/train:1.0" and c["container"] == "gpucluster-train"
    assert c["network_mode"] == "host" and c["privileged"] is True and c["shm_size"] == "32g"
    assert "memlock:-1:-1" in c["ulimits"] and "/opt/gpucluster/bin:/opt/gpucluster/bin:ro" in c["volumes"]
    assert c["env"] == {k: v for k, v in c["env"].items() if k.startswith("HOROVOD_")} and c["env"], c["env"]
    # The plan says where each layer of that environment comes from: no NCCL layer before any converge.
    assert c["env_layers"][0] == "NCCL: none yet (this run's network stage adds it to the node contract)"
    assert c["env_layers"][1] == "training_image_env: none"
    assert c["env_layers"][2].startswith("runtime profile: HOROVOD_"), c["env_layers"]
    # no stage ran on this machine: an empty node contract (ansible_local.gpucluster)
    assert p["contract"] == {}
    assert not (tmp_path / "run.lock").exists(), "plan took the run lock"


def test_the_table_names_every_key(tmp_path):
    r = _cli(tmp_path, _inventory(tmp_path, gpucluster_slots_per_node=1))
    assert r.returncode == 0, r.stdout + r.stderr
    for key in ("gpus", "slots", "nics", "hugepages", "runtime", "runtime_env", "LIGHT_INTRA_SIZE=1", "container",
                "image=registry.example.com:5000/team/train:1.0", "shm_size=32g", "env LIGHT_INTRA_SIZE=1", "contract",
                "env_layers 1=NCCL: none yet", "env_layers 2=training_image_env: none"):
        assert key in r.stdout, (key, r.stdout)


def test_the_plan_says_an_nccl_layer_is_the_inventorys(tmp_path):
    inv = _inventory(tmp_path, gpucluster_slots_per_node=1, training_image_nccl_env={"NCCL_DEBUG": "INFO"})
    r = _cli(tmp_path, inv, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    c = json.loads(r.stdout)["node-x"]["container"]
    assert c["env"]["NCCL_DEBUG"] == "INFO"
    assert c["env_layers"][0] == "NCCL: training_image_nccl_env as the inventory sets it: NCCL_DEBUG"


def test_the_plan_says_an_nccl_layer_is_the_contracts(tmp_path):
    """After a converge the NCCL layer is the node contract's (its nccl stage's container_env, given
    here as the fact ansible_local would read, through playbooks/plan.yml as gpucluster plan runs it)."""
    inv = _inventory(tmp_path, gpucluster_slots_per_node=1)
    out = tmp_path / "plan.json"
    contract = {"gpucluster": {"nccl": {"container_env": {"NCCL_SOCKET_IFNAME": "eth1"}}}}
    r = _plan_book(tmp_path, inv, out, ansible_local=contract)
    assert r.returncode == 0, r.stdout + r.stderr
    c = json.loads(out.read_text())["node-x"]["container"]
    assert c["env"]["NCCL_SOCKET_IFNAME"] == "eth1"
    assert c["env_layers"][0].startswith("NCCL: the node contract as the last converge left it"), c["env_layers"]
    # The inventory's own NCCL layer is the inventory's, even with a contract there.
    inv = _inventory(tmp_path, gpucluster_slots_per_node=1, training_image_nccl_env={"NCCL_DEBUG": "INFO"})
    r = _plan_book(tmp_path, inv, out, ansible_local=contract)
    assert r.returncode == 0, r.stdout + r.stderr
    c = json.loads(out.read_text())["node-x"]["container"]
    assert "NCCL_SOCKET_IFNAME" not in c["env"], c["env"]
    assert c["env_layers"][0] == "NCCL: training_image_nccl_env as the inventory sets it: NCCL_DEBUG"


def test_a_node_without_gpus_and_without_ranks_is_refused_naming_the_fix(tmp_path):
    r = _cli(tmp_path, _inventory(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "node-x: gpucluster_slots_per_node: is not set and the node has no GPU" in out
    assert "Fix: set gpucluster_slots_per_node: <ranks per node>" in out
    assert "the plan was refused" in out


def test_a_bad_setting_is_refused_as_site_yml_would(tmp_path):
    r = _cli(tmp_path, _inventory(tmp_path, gpucluster_slots_per_node=1, container_ssh_port=70000))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "node-x: container_ssh_port: 70000 is out of range" in out


@pytest.mark.parametrize(("setting", "expect"), [
    # the stages' settings against the node (module_utils/stage_settings.py)
    ({"nccl_env_extra": {"NCCL_SOCKET_IFNAME": "^docker0"}}, "node-x: nccl_env_extra: NCCL_SOCKET_IFNAME=^docker0"),
    ({"multi_nic_interfaces": [{"mac": "02:00:00:00:00:99"}]}, "no interface with MAC 02:00:00:00:00:99"),
    # a stage's own read-only checks, run by preflight (preflight_stage_checks: docker, nccl_net_plugin)
    ({"docker_daemon_options": {"insecure-registries": ["svn://r.example.com"]}},
     "node-x: daemon.json: 'insecure-registries' entry \"svn://r.example.com\" should not contain '://'"),
    ({"nccl_net_plugin_enabled": True, "nccl_net_plugin_url": "http://r.example.com/libnccl-net.so",
      "nccl_net_plugin_sha256": "abc"}, "nccl_net_plugin_sha256 (64 hex digits; got abc)"),
    ({"nccl_net_plugin_enabled": True, "nccl_net_plugin_src": "/nonexistent/libnccl-net.so",
      "nccl_net_plugin_sha256": "0" * 64},
     "nccl_net_plugin_src /nonexistent/libnccl-net.so is missing on the controller"),
    ({"docker_daemon_options": {"storage-driver": "overlay"}},
     "node-x: daemon.json: 'storage-driver' is \"overlay\", deprecated since Docker 18.09"),
    # the training container's settings part (roles/training_image/tasks/settings.yml)
    ({"training_image_extra_volumes": ["/data:/sys:ro"]},
     "node-x: training_image_extra_volumes: /sys is mounted twice (/sys:/sys, /data:/sys:ro)"),
    # one setting against another's spec default (container_ssh_dir, unset)
    ({"training_image_ssh_dir": "/srv/ssh"},
     "node-x: training_image_ssh_dir: '/srv/ssh' is not the directory the container_ssh stage sets up "
     "('/etc/gpucluster/ssh', container_ssh_dir's default)"),
])
def test_a_stage_setting_is_refused_before_any_stage(tmp_path, setting, expect):
    r = _cli(tmp_path, _inventory(tmp_path, gpucluster_slots_per_node=1, **setting))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert expect in out, out[-4000:]
    assert "Fix:" in out


def test_a_relative_inventory_is_the_callers_and_an_empty_one_is_refused(tmp_path):
    _inventory(tmp_path, gpucluster_slots_per_node=1)
    r = _cli(tmp_path, Path("hosts.yml"), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(json.loads(r.stdout)) == ["node-x"]
    (tmp_path / "empty.yml").write_text(yaml.safe_dump({"all": {"children": {"login": {"hosts": {"node-y": {}}}}}}))
    r = _cli(tmp_path, Path("empty.yml"))
    assert r.returncode == 1 and "the inventory has no node in gpu_nodes" in r.stderr, r.stdout + r.stderr


def test_launch_takes_what_the_spec_leaves_out_from_the_nodes(tmp_path):
    inv = _inventory(tmp_path, gpucluster_slots_per_node=2, runtime_profile_runtime="horovod")
    spec = tmp_path / "job.yml"
    spec.write_text(yaml.safe_dump({"name": "cpu-job", "image": "registry.example:5000/train:1",
                                    "command": ["python3", "train.py"], "network_interface": "eth0",
                                    "nccl_env": {"NCCL_SOCKET_IFNAME": "=eth0"}}))
    r = run_tool("gpucluster", "launch", spec, "--mpirun", "-i", inv, home=tmp_path, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    line = r.stdout.strip()
    assert " -np 2 " in line and "-H node-x:2" in line, line  # nodes and ranks from the plan
    assert "HOROVOD_" in line and "LIGHT_" not in line, line  # the node's runtime
    # this machine never ran the nccl_env stage: a spec without nccl_env is refused, naming the fix
    spec.write_text(yaml.safe_dump({"name": "cpu-job", "image": "registry.example:5000/train:1",
                                    "command": ["python3", "train.py"], "network_interface": "eth0"}))
    r = run_tool("gpucluster", "launch", spec, "--mpirun", "-i", inv, home=tmp_path, cwd=tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "node-x has no NCCL settings yet (the nccl_env stage has not run there)" in r.stderr
