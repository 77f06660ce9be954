"""The per-node plan (module_utils/plan.py): GPUs, ranks per node, NICs, HCAs, and its refusals.

The GPU inputs come from the real gpu_facts reader answering from captured outputs (the
fake-node harness of test_gpu_facts), so the plan is tested on what nodes really report.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.filter.plan import node_plan as node_plan_filter
from ansible_collections.gpucluster.cluster.plugins.module_utils import plan
from ansible_collections.gpucluster.cluster.plugins.modules import gpu_facts

from tests.unit.plugins.modules.test_gpu_facts import (
    LSPCI_8GPU,
    LSPCI_NO_GPU,
    QUERY_8GPU,
    FakeModule,
    _bins,
    _c09,
    _files,
)

INTERFACES = ["lo", "eth0", "docker0", "veth1a2b3c", "br-0123456789ab", "virbr0", "ens1f0", "ens1f1", "ib0"]


def _facts_no_gpu():
    return gpu_facts.collect(FakeModule(_bins("lspci"), {"/usr/bin/lspci -Dnn": (0, LSPCI_NO_GPU, "")}),
                             read=_files({}))


def _facts_c09_not_loaded():
    proc, smi = _c09()
    module = FakeModule(
        _bins("lspci", "nvidia-smi", "dpkg-query"),
        {"/usr/bin/lspci": (0, LSPCI_8GPU, ""),
         "/usr/bin/dpkg-query": (1, "ii \tnvidia-smi\t525.85.12-1\n", ""),
         "/usr/bin/nvidia-smi --query-gpu": (18, smi + "\n", "")})
    return gpu_facts.collect(module, read=_files({gpu_facts.PROC_VERSION: proc}))


def _facts_8_ready():
    module = FakeModule(
        _bins("lspci", "nvidia-smi"),
        {"/usr/bin/lspci": (0, LSPCI_8GPU, ""),
         "/usr/bin/nvidia-smi --query-gpu": (0, QUERY_8GPU, ""),
         "/usr/bin/nvidia-smi topo": (1, "", "topology not available\n")},
        params={"topology": False, "kernel_log": False})
    return gpu_facts.collect(module, read=_files({gpu_facts.PROC_VERSION: "NVRM version: NVIDIA UNIX x86_64 "
                                                                           "Kernel Module  525.105.17\n"}))


RDMA = {"hcas": [{"name": "mlx5_1", "ports": []}, {"name": "mlx5_0", "ports": []}]}


def test_eight_gpus_without_a_loaded_driver_plan_eight_ranks():
    p, errors = plan.node_plan("node-1", _facts_c09_not_loaded(), RDMA, INTERFACES)
    assert errors == []
    # The PCI count, known before any driver: what the hugepages rule and one ENI per GPU need.
    assert p["gpus"] == 8 and p["gpus_ready"] == 0 and p["driver"] == "installed-not-loaded"
    assert p["slots"] == 8
    assert p["nics"] == ["ens1f0", "ens1f1", "eth0", "ib0"]
    assert p["hcas"] == ["mlx5_0", "mlx5_1"]
    assert tuple(p) == plan.KEYS


def test_a_ready_node_counts_its_working_gpus():
    p, errors = plan.node_plan("node-1", _facts_8_ready(), {}, ["eth0"])
    assert errors == [] and p["gpus"] == 8 and p["gpus_ready"] == 8 and p["driver"] == "ready"


@pytest.mark.parametrize("given, slots", [(4, 4), ("4", 4), (" 2 ", 2), (8, 8)])
def test_slots_per_node_wins_over_the_gpu_count(given, slots):
    p, errors = plan.node_plan("node-1", _facts_c09_not_loaded(), {}, ["eth0"], given)
    assert errors == [] and p["slots"] == slots and p["gpus"] == 8


@pytest.mark.parametrize("unset", [None, "", "__gpucluster_unset__"])
def test_a_node_without_gpus_must_say_its_ranks(unset):
    p, errors = plan.node_plan("cpu-3", _facts_no_gpu(), {}, ["eth0"], unset)
    assert p["gpus"] == 0 and p["slots"] == 0
    (msg,) = errors
    assert msg.startswith("cpu-3: gpucluster_slots_per_node: is not set and the node has no GPU")
    assert "Fix: set gpucluster_slots_per_node: <ranks per node>" in msg


def test_a_node_without_gpus_runs_the_ranks_it_is_given():
    p, errors = plan.node_plan("cpu-3", _facts_no_gpu(), {}, ["eth0"], 1)
    assert errors == [] and p["slots"] == 1 and p["driver"] == "absent"


@pytest.mark.parametrize("bad", [0, -2, "four", "2.5", True, [4]])
def test_bad_slots_are_refused_naming_the_value_and_the_gpu_count(bad):
    _p, errors = plan.node_plan("node-2", _facts_c09_not_loaded(), {}, ["eth0"], bad)
    (msg,) = errors
    assert msg.startswith(f"node-2: gpucluster_slots_per_node: {bad!r} is not a whole number")
    assert "(8 found here)" in msg


def test_a_bad_value_on_a_node_without_gpus_names_the_fix_that_works_there():
    (msg,) = plan.node_plan("cpu-3", _facts_no_gpu(), {}, ["eth0"], "0")[1]
    assert msg.startswith("cpu-3: gpucluster_slots_per_node: '0' is not a whole number of ranks per node")
    assert "Fix: set it to the ranks per node, at least 1 (this node has no GPU" in msg


def test_no_facts_at_all_plan_nothing_and_say_why():
    p, errors = plan.node_plan("node-1", None, None, None)
    assert p == {"gpus": 0, "gpus_ready": 0, "driver": "unknown", "slots": 0, "nics": [], "hcas": []}
    assert len(errors) == 1


def test_nics_leave_out_what_is_not_a_nic():
    assert plan.nics(INTERFACES) == ["ens1f0", "ens1f1", "eth0", "ib0"]
    # A NIC whose name only contains a bridge's prefix is still a NIC.
    assert plan.nics(["enp1s0", "mybr-0", "eth-lo"]) == ["enp1s0", "eth-lo", "mybr-0"]


def test_the_filter_returns_the_plan_and_the_errors():
    out = node_plan_filter(_facts_no_gpu(), "cpu-3", {}, ["lo", "eth0"], None)
    assert out["plan"]["nics"] == ["eth0"] and len(out["errors"]) == 1
