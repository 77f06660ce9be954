"""The benchmark filters: scaling plan, the mpirun of each step (gpucluster.launch), parsing the
GPU benchmark (real outputs in tests/fixtures/benchmark-output) and the CPU one, the NCCL bus
bandwidth check against the line rate from facts, and the report input."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.filter import benchmark as gb
from ansible_collections.gpucluster.cluster.plugins.module_utils import launch

from gpucluster import report
from tests.conftest import fixture_text

LIGHT_ENV = {"LIGHT_2D_ALLREDUCE": "0", "LIGHT_INTRA_SIZE": "8", "LIGHT_HIERARCHICAL_THRESHOLD": "1073741824",
             "LIGHT_TOPK_ALLREDUCE": "0", "LIGHT_TOPK_RATIO": "0.01", "LIGHT_TOPK_THRESHOLD": "1048576",
             "LIGHT_TOPK_FP16": "0"}
SPEC = {"name": "benchmark", "image": "registry:5000/train:1", "runtime": "lightcc", "profile_env": LIGHT_ENV,
        "command": ["python", "/opt/horovod/examples/pytorch/pytorch_synthetic_benchmark.py", "--model", "resnet50"],
        "env": {"PYTHONUNBUFFERED": "1"}, "network_interface": "192.0.2.0/24", "ssh_port": 2222}


# --- plan --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "expect"),
    [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])],
)
def test_default_node_counts_double_up_to_all(nodes, expect):
    assert gb.default_node_counts(nodes) == expect


def test_plan_on_8_gpu_nodes_is_1_gpu_1_node_then_nodes():
    plan = gb.benchmark_plan(["n1", "n2", "n3", "n4"], 8)
    assert [(s["name"], s["gpus"], s["nodes"], s["ranks_per_node"], s["hosts"]) for s in plan] == [
        ("1 GPU", 1, 1, 1, ["n1"]),
        ("1 node", 8, 1, 8, ["n1"]),
        ("2 nodes", 16, 2, 8, ["n1", "n2"]),
        ("4 nodes", 32, 4, 8, ["n1", "n2", "n3", "n4"]),
    ]


def test_plan_with_one_rank_per_node_runs_1_gpu_once():
    plan = gb.benchmark_plan(["node-1", "node-2", "node-3"], "1")
    assert [(s["name"], s["gpus"], s["hosts"]) for s in plan] == [
        ("1 GPU = 1 node", 1, ["node-1"]), ("2 nodes", 2, ["node-1", "node-2"]),
        ("3 nodes", 3, ["node-1", "node-2", "node-3"])]


def test_plan_with_chosen_counts_and_refusals():
    assert [s["gpus"] for s in gb.benchmark_plan(["a", "b", "c"], 2, [3, 1])] == [1, 2, 6]
    with pytest.raises(AnsibleFilterError, match=r"benchmark_node_counts \[4\] exceed the 3 nodes"):
        gb.benchmark_plan(["a", "b", "c"], 2, [4])
    with pytest.raises(AnsibleFilterError, match="positive integer"):
        gb.benchmark_plan(["a"], 0)
    with pytest.raises(AnsibleFilterError, match="no hosts"):
        gb.benchmark_plan([], 8)


# --- mpirun of each step -------------------------------------------------------------------------


def test_argv_is_launch_render_mpirun_with_the_profile_exported():
    step = gb.benchmark_plan(["n1", "n2"], 8)[2]
    argv = gb.benchmark_argv(step, SPEC)
    assert argv == launch.render_mpirun(gb.benchmark_job(step, SPEC))
    assert argv[:6] == ["mpirun", "--allow-run-as-root", "-np", "16", "-H", "n1:8,n2:8"]
    exports, forwarded = launch.mpirun_exports(argv)
    assert exports == {**LIGHT_ENV, "PYTHONUNBUFFERED": "1"}
    assert forwarded == ["PATH", "LD_LIBRARY_PATH"]
    assert argv[argv.index("btl_tcp_if_include") + 1] == "192.0.2.0/24"
    assert argv[argv.index("plm_rsh_args") + 1] == "-p 2222"
    assert argv[-4:] == SPEC["command"][-4:]


def test_one_gpu_step_shrinks_the_intra_size_to_a_divisor():
    step = gb.benchmark_plan(["n1"], 8)[0]
    exports, _ = launch.mpirun_exports(gb.benchmark_argv(step, SPEC))
    assert exports["LIGHT_INTRA_SIZE"] == "1"
    assert gb.benchmark_notes(step, LIGHT_ENV) == ["LIGHT_INTRA_SIZE 8 -> 1 for 1 rank(s) per node"]
    assert gb.benchmark_notes(gb.benchmark_plan(["n1"], 8)[1], LIGHT_ENV) == []


def test_nccl_variables_of_the_env_file_go_to_nccl_env_and_loopback_is_refused():
    spec = {**SPEC, "profile_env": {**LIGHT_ENV, "NCCL_DEBUG": "INFO"}, "nccl_env": {"NCCL_ALGO": "Ring"}}
    job = gb.benchmark_job(gb.benchmark_plan(["n1"], 1)[0], spec)
    assert job["nccl_env"] == {"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring"}
    with pytest.raises(AnsibleFilterError, match="loopback"):
        gb.benchmark_argv(gb.benchmark_plan(["n1"], 1)[0], {**SPEC, "network_interface": "lo"})


def test_horovod_profile_is_validated_too():
    step = gb.benchmark_plan(["n1"], 1)[0]
    with pytest.raises(AnsibleFilterError, match="LIGHT_TOPK_RATIO is read only by LightCC"):
        gb.benchmark_argv(step, {**SPEC, "runtime": "horovod"})


# --- results ---------------------------------------------------------------------------------------


def test_gpu_results_from_real_horovod_outputs():
    one = gb.benchmark_result(fixture_text("benchmark-output/E01_horovod_pytorch_synth_1gpu_gloo_prefix.txt"),
                              {"name": "1 GPU", "gpus": 1, "nodes": 1, "hosts": ["n1"]}, "horovod", "gpu")
    assert one["throughput"] == 124.7 and one["unit"] == "img/sec" and one["ci"] == 3.1 and one["model"] == "resnet50"
    eight = gb.benchmark_result(fixture_text("benchmark-output/E02_horovod_tf2_synth_8gpu_singlenode_horovodrun.txt"),
                                {"name": "1 node", "gpus": 8, "nodes": 1, "hosts": ["n1"]}, "horovod", "gpu")
    assert eight["throughput"] == 4800.1 and eight["gpus"] == 8
    rep = report.build_report([one, eight])
    assert rep["series"]["horovod"][1]["efficiency"] == pytest.approx(4800.1 / (8 * 124.7))


def test_gpu_result_with_the_wrong_gpu_count_or_no_result_line():
    text = fixture_text("benchmark-output/E02_horovod_tf2_synth_8gpu_singlenode_horovodrun.txt")
    with pytest.raises(AnsibleFilterError, match="reports 8 GPU"):
        gb.benchmark_result(text, {"name": "2 nodes", "gpus": 16, "nodes": 2, "hosts": ["a", "b"]}, "horovod")
    with pytest.raises(AnsibleFilterError, match="neither a Horovod synthetic benchmark"):
        gb.benchmark_result("Running warmup...\n", {"name": "x", "gpus": 1, "nodes": 1, "hosts": ["a"]}, "horovod")


def cpu_output(**change):
    data = {"benchmark": "cpu-data-parallel-mlp", "device": "cpu", "unit": "samples/sec", "ranks": 2,
            "hosts": ["node-1", "node-2"], "model": "mlp-256-512-512-10", "batch_size": 64, "total": 3000.5,
            "total_ci": 40.0, "per_rank": 1500.25, "loss_first": 3.2, "loss_last": 0.1, "params_in_sync": True}
    data.update(change)
    return "Model: mlp\nTotal samples/sec on 2 CPU rank(s): 3000.5 +-40.0\n" + json.dumps(data) + "\n"


STEP2 = {"name": "2 nodes", "gpus": 2, "nodes": 2, "ranks_per_node": 1, "hosts": ["node-1", "node-2"]}


def test_cpu_result():
    r = gb.benchmark_result(cpu_output(), STEP2, "lightcc", "cpu")
    assert r["throughput"] == 3000.5 and r["unit"] == "samples/sec" and r["gpus"] == 2 and r["runtime"] == "lightcc"
    assert r["loss_last"] < r["loss_first"]


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (cpu_output(ranks=1), "ran on 1 ranks, the step asked for 2"),
        (cpu_output(hosts=["node-1", "node-1"]), "no rank ran on node-2"),
        (cpu_output(params_in_sync=False), "parameters differ"),
        ("Running warmup...\n", "printed no JSON"),
        ('{"device": "gpu", "total": 1}\n', "not a CPU benchmark result"),
    ],
)
def test_cpu_result_refusals(text, expect):
    with pytest.raises(AnsibleFilterError, match=expect):
        gb.benchmark_result(text, STEP2, "lightcc", "cpu")


def test_a_rank_that_names_its_node_by_another_name_counts_for_that_node():
    """The ranks report socket.gethostname(); the step names inventory hosts (an address here)."""
    step = {**STEP2, "hosts": ["10.0.0.1", "10.0.0.2"]}
    text = cpu_output(hosts=["gpu-a", "gpu-b"])
    with pytest.raises(AnsibleFilterError, match="no rank ran on 10.0.0.1, 10.0.0.2"):
        gb.benchmark_result(text, step, "lightcc", "cpu")
    aliases = {"10.0.0.1": ["gpu-a", "gpu-a.example.com"], "10.0.0.2": ["gpu-b"]}
    assert gb.benchmark_result(text, step, "lightcc", "cpu", aliases)["ranks_hosts"] == ["gpu-a", "gpu-b"]
    # An alias of one node does not stand for another.
    with pytest.raises(AnsibleFilterError, match="no rank ran on 10.0.0.2"):
        gb.benchmark_result(cpu_output(hosts=["gpu-a", "gpu-a"]), step, "lightcc", "cpu", aliases)


def test_host_names_are_the_nodes_own_names_from_its_facts():
    facts = {"hostname": "gpu-a", "nodename": "gpu-a", "fqdn": "gpu-a.example.com", "domain": "example.com"}
    assert gb.host_names(facts) == ["gpu-a", "gpu-a.example.com"]
    assert gb.host_names({"hostname": "gpu-a", "fqdn": ""}) == ["gpu-a"]
    assert gb.host_names(None) == []


@pytest.mark.parametrize("reported", [["GPU-A", "gpu-b."], ["gpu-a.example.com.", "GPU-B"]])
def test_host_names_compare_as_dns_names(reported):
    """Case and a trailing dot do not make another host (a rank may report either spelling)."""
    step = {**STEP2, "hosts": ["10.0.0.1", "10.0.0.2"]}
    aliases = {"10.0.0.1": ["gpu-a", "gpu-a.example.com"], "10.0.0.2": ["gpu-b"]}
    assert gb.benchmark_result(cpu_output(hosts=reported), step, "lightcc", "cpu", aliases)["ranks_hosts"] == reported


@pytest.mark.parametrize("aliases", [
    {"10.0.0.1": ["localhost"], "10.0.0.2": ["localhost"]},
    {"10.0.0.1": ["node"], "10.0.0.2": ["Node."]},
    {"10.0.0.1": ["10.0.0.2"], "10.0.0.2": ["gpu-b"]},
])
def test_a_host_name_two_nodes_share_proves_neither(aliases):
    """Two nodes that report the same name: one node's ranks alone would pass for both."""
    step = {**STEP2, "hosts": ["10.0.0.1", "10.0.0.2"]}
    shared = sorted({a for v in aliases.values() for a in v} - {"gpu-b"})[0]
    with pytest.raises(AnsibleFilterError, match="shared by several nodes, so their ranks cannot be told apart") as err:
        gb.benchmark_result(cpu_output(hosts=[shared, shared]), step, "lightcc", "cpu", aliases)
    assert "no rank ran on 10.0.0.1, 10.0.0.2" in str(err.value) and "hostnamectl set-hostname" in str(err.value)


def test_a_shared_name_is_no_evidence_but_the_nodes_own_names_still_count():
    """Default installs share an FQDN (localhost.localdomain); ranks report their unique hostname."""
    step = {**STEP2, "hosts": ["10.0.0.1", "10.0.0.2"]}
    aliases = {"10.0.0.1": ["gpu-a", "localhost.localdomain"], "10.0.0.2": ["gpu-b", "localhost.localdomain"]}
    assert gb.benchmark_result(cpu_output(hosts=["gpu-a", "gpu-b"]), step, "lightcc", "cpu", aliases)["ranks_hosts"]
    # An alias given as one string is one name; None and blank names are none.
    assert gb.benchmark_result(cpu_output(hosts=["gpu-a", "gpu-b"]), step, "lightcc", "cpu",
                               {"10.0.0.1": "gpu-a", "10.0.0.2": ["gpu-b", None, " "]})
    with pytest.raises(AnsibleFilterError, match="no rank ran on 10.0.0.2"):
        gb.benchmark_result(cpu_output(hosts=["gpu-a", ""]), step, "lightcc", "cpu", {"10.0.0.1": "gpu-a",
                                                                                      "10.0.0.2": [" "]})


@pytest.mark.parametrize("field", [{"ranks": None}, {"ranks": "two"}, {"total": None}, {"total": "fast"}])
def test_a_result_with_unreadable_numbers_is_refused_not_a_crash(field):
    with pytest.raises(AnsibleFilterError, match="not a CPU benchmark result"):
        gb.benchmark_result(cpu_output(**field), STEP2, "lightcc", "cpu")


def test_results_of_a_loop_and_the_report_input():
    runs = [{"item": STEP2, "stdout": cpu_output(), "rc": 0}]
    results = gb.benchmark_results(runs, "lightcc", "cpu")
    data = gb.benchmark_report_input(results, "CPU benchmark", "CPU ranks")
    assert report.load_results(data)[1] == {"title": "CPU benchmark", "note": "CPU ranks"}
    with pytest.raises(AnsibleFilterError, match="no benchmark results"):
        gb.benchmark_report_input([], "t", "n")


def test_log_summary_says_which_step_failed_and_why():
    ok = gb.benchmark_log({"item": STEP2, "rc": 0, "stdout": "x", "stderr": ""}, "lightcc", 900)
    assert ok["summary"] == "2 nodes (2 rank(s) on node-1, node-2, lightcc): ok" and ok["output"] == "x"
    hung = gb.benchmark_log({"item": STEP2, "rc": 124, "stdout": "", "stderr": "e"}, "lightcc", 900)
    assert "killed after 900 s (benchmark_timeout_s)" in hung["summary"]
    dead = gb.benchmark_log({"item": STEP2, "rc": None, "msg": "No such container"}, "horovod")
    assert dead["output"] == "No such container" and dead["summary"].endswith("exited None")


# --- nccl-tests and the line rate ------------------------------------------------------------------


def test_line_rate_from_rdma_facts_per_gpu():
    rdma = {"hcas": [{"ports": [{"port": 1, "state": "ACTIVE", "active": True, "rate_gbps": 200, "netdev": "ib0"}]},
                     {"ports": [{"port": 1, "state": "DOWN", "active": False, "rate_gbps": 200, "netdev": "ib1"}]},
                     {"ports": [{"port": 1, "state": "ACTIVE", "active": True, "rate_gbps": 200, "netdev": "ib2"}]}]}
    rate = gb.benchmark_line_rate(rdma, {"device": "eth0", "speed": 25000}, 8)
    assert rate["gbit"] == 50.0
    assert rate["source"] == "2 active RDMA port(s) (ib0, ib2), 400 Gbit/s over 8 GPU(s)"


def test_line_rate_from_the_interface_speed_else_nothing():
    assert gb.benchmark_line_rate({}, {"device": "eth0", "speed": 100000}, 4)["gbit"] == 25.0
    assert gb.benchmark_line_rate(None, {"device": "eth0", "speed": -1}, 4)["gbit"] == 0.0


def test_line_rate_sums_the_data_nics_not_the_default_routes():
    """NCCL's sockets run over every data NIC the nccl_env stage chose (NCCL_SOCKET_IFNAME)."""
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_nic_facts
    node = {"ansible_local": {"gpucluster": {"nccl": {"data_interfaces": ["ens1f0", "ens1f1", "eth0.100"]}}},
            "ansible_facts": {"default_ipv4": {"interface": "eno1"}, "eno1": {"speed": 1000},
                              "ens1f0": {"speed": 100000}, "ens1f1": {"speed": 100000},
                              "eth0.100": {"speed": -1}}}
    nics = data_nic_facts(node)
    assert [n["device"] for n in nics] == ["ens1f0", "ens1f1", "eth0.100"]
    rate = gb.benchmark_line_rate({}, nics, 8)
    assert rate["gbit"] == 25.0
    assert rate["source"] == ("data NIC(s) ens1f0 at 100000 Mbit/s, ens1f1 at 100000 Mbit/s over 8 GPU(s); "
                              "no speed for eth0.100")
    none = gb.benchmark_line_rate({}, data_nic_facts({**node, "ansible_facts": {}}), 8)
    assert none == {"gbit": 0.0, "source": "no RDMA port and no speed in the facts of the data NIC(s) "
                                          "(ens1f0, ens1f1, eth0.100)"}
    assert gb.benchmark_line_rate({}, [], 8)["source"].endswith("(none)")


@pytest.mark.parametrize("rdma, nics, gbit", [
    # The same NIC listed twice counts once.
    ({}, [{"device": "eth1", "speed": 100000}, {"device": "eth1", "speed": 100000}], 12.5),
    # Unknown or nonsense speeds and rates count as none; no crash.
    ({"hcas": [None, {"ports": [None, {"active": True, "rate_gbps": "200 Gb/sec (4X HDR)"}]}]},
     ["eth1"], 0.0),
    ({"hcas": [{"ports": [{"active": True, "rate_gbps": -100}, {"active": True, "rate_gbps": 200}]}]}, [], 25.0),
    ({}, [{"device": "eth1", "speed": float("inf")}, {"device": "eth2", "speed": True}], 0.0),
])
def test_line_rate_counts_each_nic_once_and_only_real_rates(rdma, nics, gbit):
    assert gb.benchmark_line_rate(rdma, nics, 8)["gbit"] == gbit


def test_nccl_check_on_real_outputs():
    h100 = fixture_text("benchmark-output/E08_nccl_tests_allreduce_2node_16x_h100_gcp_a3mega.txt")
    ok = gb.benchmark_nccl_check(h100, 200, 0.8)
    assert ok["passed"] and ok["peak_busbw"] == 338.82 and ok["avg_busbw"] == 70.742 and ok["ranks"] == 16
    low = gb.benchmark_nccl_check(h100, 4000, 0.8)
    assert not low["passed"] and "too low" in low["message"]
    died = gb.benchmark_nccl_check(
        fixture_text("benchmark-output/E11_nccl_tests_allreduce_2node_errored_internal_error.txt"), 100, 0.8)
    assert not died["passed"] and "run failed" in died["message"]
    cut = gb.benchmark_nccl_check("# nThread 1 nGpus 1\n", 100, 0.8)
    assert not cut["passed"] and cut["peak_busbw"] is None
    with pytest.raises(AnsibleFilterError, match="fraction"):
        gb.benchmark_nccl_check(h100, 100, 1.5)


def test_filter_names():
    names = gb.FilterModule().filters()
    assert all(n.startswith(("gpucluster_benchmark_", "gpucluster_allreduce_")) for n in names)


def test_allreduce_filters_read_the_last_json_line():
    with pytest.raises(ValueError, match="no JSON result"):
        gb.allreduce_report("no json here\n")
