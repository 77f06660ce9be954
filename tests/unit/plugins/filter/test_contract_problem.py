"""``gpucluster_contract_problem``: validate, the benchmark and the runtime switch refuse a node
whose contract lacks a stage they read (or a key an older gpucluster did not publish), with one
message shape naming the host, the missing stage, the stage that publishes it and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpucluster.cluster.plugins.filter.plan import FilterModule, contract_problem

ROOT = Path(__file__).resolve().parents[4]
NEEDS = {"training": {"role": "training_image", "keys": ["container", "bin_dir"]}, "ssh": "container_ssh",
         "nccl": "nccl_env"}
FULL = {"training": {"container": "gpucluster-train", "bin_dir": "/opt/gpucluster/bin"}, "ssh": {"port": 2222},
        "nccl": {"data_interfaces": ["eth0"]}}


def test_a_node_with_every_stage_is_ready():
    assert contract_problem(FULL, NEEDS, "node-1", "validate") == ""
    assert contract_problem({**FULL, "extra": {}}, NEEDS, "node-1", "validate") == ""


@pytest.mark.parametrize("contract, missing, role", [
    ({}, "training, ssh, nccl", "training_image, container_ssh, nccl_env"),
    (None, "training, ssh, nccl", "training_image, container_ssh, nccl_env"),
    ({k: v for k, v in FULL.items() if k != "ssh"}, "ssh", "container_ssh"),
    ({**FULL, "nccl": "not a stage"}, "nccl", "nccl_env"),
])
def test_a_missing_stage_is_named_with_its_publisher_and_the_fix(contract, missing, role):
    msg = contract_problem(contract, NEEDS, "node-2", "the benchmark")
    assert msg == (f"node-2: the node contract (ansible_local.gpucluster) has no {missing} (published by the {role} "
                   f"stage): this node is not converged. Fix: run site.yml on it first, then the benchmark.")


def test_a_stage_published_by_an_older_gpucluster_is_named_with_its_missing_keys():
    old = {**FULL, "training": {"container": "gpucluster-train"}}
    msg = contract_problem(old, NEEDS, "node-3", "the switch")
    assert msg.startswith("node-3: the node contract (ansible_local.gpucluster) lacks training (bin_dir; the "
                          "training_image stage): it was published by an older gpucluster.")
    assert msg.endswith("Fix: run site.yml on it first, then the switch.")


@pytest.mark.parametrize("role", ["validate", "benchmark", "runtime"])
def test_every_reader_names_stages_the_contract_has(role):
    """Each reader's needs name stages a role publishes (``gpucluster.cluster.contract: stage: ...``)."""
    needs = next(v for k, v in yaml.safe_load((ROOT / f"roles/{role}/vars/main.yml").read_text()).items()
                 if k.endswith("_needs"))
    for stage, need in needs.items():
        publisher = need["role"] if isinstance(need, dict) else need
        tasks = "".join(p.read_text() for p in (ROOT / "roles" / publisher / "tasks").glob("*.yml"))
        assert f"stage: {stage}\n" in tasks, (role, stage, publisher)
        for key in (need.get("keys") if isinstance(need, dict) else []):
            assert f"      {key}:" in tasks, (role, stage, key)


def test_the_filter_is_registered():
    assert FilterModule().filters()["gpucluster_contract_problem"] is contract_problem


def test_needs_written_loosely_are_read_as_meant():
    # One key as a string; a need without a role names the stage; one role missing twice is named once.
    assert contract_problem({"nccl": {}}, {"nccl": {"role": "nccl_env", "keys": "data_interfaces"}}, "n", "x") == (
        "n: the node contract (ansible_local.gpucluster) lacks nccl (data_interfaces; the nccl_env stage): it was "
        "published by an older gpucluster. Fix: run site.yml on it first, then x.")
    msg = contract_problem({}, {"ssh": None, "a": "training", "b": "training"}, "n", "x")
    assert "has no ssh, a, b (published by the ssh, training stage)" in msg
