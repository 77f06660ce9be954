"""``gpucluster launch --inventory``: what a job spec leaves out comes from the nodes' plan and
the stages' contract (launch.spec_from_contract), and disagreement is refused naming the nodes."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.launch import (
    JobSpecError,
    mpijob_env,
    parse_job_spec,
    profile_forwarded,
    render_mpirun,
    spec_from_contract,
)

SPEC = {"name": "resnet50", "image": "registry.example:5000/train:1", "command": ["python", "train.py"]}


def _view(slots=8, runtime="lightcc", nccl=True, ifname="=ens1f0", nics=("ens1f0",), **env):
    container_env = {"NCCL_SOCKET_IFNAME": ifname, "NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_IB_GID_INDEX": "3",
                     "NCCL_NET_PLUGIN": "harp", "LIGHT_INTRA_SIZE": str(slots), **env}
    contract = {"nccl": {"container_env": container_env, "data_interfaces": list(nics), "hcas": ["mlx5_0"]}
                if nccl else None}
    return {"gpus": 8, "slots": slots, "runtime": runtime, "contract": contract}


def _views(*views):
    return {f"node-{i + 1}": v for i, v in enumerate(views)}


def test_a_spec_without_nodes_ranks_runtime_or_nccl_takes_them_from_the_nodes():
    data = spec_from_contract(SPEC, _views(_view(), _view()))
    assert data["nodes"] == ["node-1", "node-2"]
    assert data["gpus_per_node"] == 8 and data["runtime"] == "lightcc"
    # NCCL_* only: the runtime profile's variables are the node's env file's, not the job's
    assert data["nccl_env"] == {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "=mlx5_0,mlx5_1",
                                "NCCL_NET_PLUGIN": "harp", "NCCL_SOCKET_IFNAME": "=ens1f0"}
    assert data["network_interface"] == "ens1f0"
    job = parse_job_spec(data)
    argv = render_mpirun(job)
    assert "node-1:8,node-2:8" in argv and job.np == 16
    assert "NCCL_SOCKET_IFNAME==ens1f0" in argv
    assert "btl_tcp_if_include" in argv and argv[argv.index("btl_tcp_if_include") + 1] == "ens1f0"


def test_what_the_spec_sets_wins_and_nccl_env_merges_per_variable():
    spec = {**SPEC, "nodes": ["node-2"], "gpus_per_node": 4, "runtime": "horovod",
            "nccl_env": {"NCCL_IB_GID_INDEX": "1"}}
    data = spec_from_contract(spec, _views(_view(), _view()))
    assert data["nodes"] == ["node-2"] and data["gpus_per_node"] == 4 and data["runtime"] == "horovod"
    assert data["nccl_env"]["NCCL_IB_GID_INDEX"] == "1" and data["nccl_env"]["NCCL_SOCKET_IFNAME"] == "=ens1f0"


def test_a_node_count_spec_gets_no_node_list():
    data = spec_from_contract({**SPEC, "node_count": 2}, _views(_view(), _view(), _view()))
    assert "nodes" not in data and parse_job_spec(data).node_count == 2


def test_nodes_that_differ_are_refused_naming_each_value_and_the_fix():
    with pytest.raises(JobSpecError) as exc:
        spec_from_contract(SPEC, _views(_view(slots=8), _view(slots=4, runtime="horovod", ifname="=eth1")))
    text = str(exc.value)
    assert "gpus_per_node: the nodes differ in ranks per node (gpucluster_plan.slots) (node-1: 8, node-2: 4)" in text
    assert "set gpus_per_node in the job spec" in text
    assert "runtime: the nodes differ in their runtime" in text and "node-2: horovod" in text
    assert "nccl_env.NCCL_SOCKET_IFNAME: the nodes differ (node-1: =ens1f0, node-2: =eth1)" in text


def test_a_variable_only_some_nodes_have_is_a_difference():
    with pytest.raises(JobSpecError, match="nccl_env.NCCL_DEBUG: the nodes differ \\(node-1: INFO, node-2: unset\\)"):
        spec_from_contract(SPEC, _views(_view(NCCL_DEBUG="INFO"), _view()))


def test_the_spec_settles_a_difference_itself():
    data = spec_from_contract({**SPEC, "nccl_env": {"NCCL_SOCKET_IFNAME": "=eth1"}, "gpus_per_node": 4},
                              _views(_view(slots=8), _view(slots=4, ifname="=eth2")))
    assert data["nccl_env"]["NCCL_SOCKET_IFNAME"] == "=eth1" and data["gpus_per_node"] == 4


def test_a_node_without_the_nccl_stage_needs_nccl_env_in_the_spec():
    with pytest.raises(JobSpecError, match="node-2 has no NCCL settings yet .* run site.yml"):
        spec_from_contract(SPEC, _views(_view(), _view(nccl=False)))
    data = spec_from_contract({**SPEC, "nccl_env": {"NCCL_SOCKET_IFNAME": "=eth0"}}, _views(_view(), _view(nccl=False)))
    assert data["nccl_env"] == {"NCCL_SOCKET_IFNAME": "=eth0"}


def test_no_nodes_or_no_mapping_is_refused():
    with pytest.raises(JobSpecError, match="no node in gpu_nodes"):
        spec_from_contract(SPEC, {})
    with pytest.raises(JobSpecError, match="not a YAML mapping"):
        spec_from_contract(["a"], _views(_view()))


def test_data_nics_that_differ_need_network_interface_in_the_spec():
    with pytest.raises(JobSpecError, match="network_interface: the nodes differ in their data NICs"):
        spec_from_contract(SPEC, _views(_view(), _view(nics=("ens2f0",))))
    data = spec_from_contract({**SPEC, "network_interface": "10.0.0.0/16"}, _views(_view(), _view(nics=("ens2f0",))))
    assert data["network_interface"] == "10.0.0.0/16"


def _with_ssh(view, port):
    return {**view, "contract": {**view["contract"], "ssh": {"port": port, "hostfile": "/etc/gpucluster/mpi/hostfile"}}}


def test_the_sshd_port_comes_from_the_container_ssh_stage():
    data = spec_from_contract(SPEC, _views(_with_ssh(_view(), 2022), _with_ssh(_view(), 2022)))
    assert data["ssh_port"] == 2022
    argv = render_mpirun(parse_job_spec(data))
    assert "-p 2022" in " ".join(argv)
    # The spec's own port wins; nodes that have not published one leave the spec's default.
    assert spec_from_contract({**SPEC, "ssh_port": 2200}, _views(_with_ssh(_view(), 2022)))["ssh_port"] == 2200
    assert "ssh_port" not in spec_from_contract(SPEC, _views(_with_ssh(_view(), 2022), _view()))


def test_sshd_ports_that_differ_are_refused():
    with pytest.raises(JobSpecError) as exc:
        spec_from_contract(SPEC, _views(_with_ssh(_view(), 2022), _with_ssh(_view(), 2222)))
    assert "ssh_port: the nodes differ in their training containers' sshd port (container_ssh_port) " \
           "(node-1: 2022, node-2: 2222); set ssh_port in the job spec" in str(exc.value)


def _with(view, stage, data):
    return {**view, "contract": {**view["contract"], stage: data}}


TUNED = {"LIGHT_2D_ALLREDUCE": "1", "LIGHT_INTRA_SIZE": "4", "LIGHT_HIERARCHICAL_THRESHOLD": "1073741824",
         "LIGHT_TOPK_ALLREDUCE": "1", "LIGHT_TOPK_RATIO": "0.05", "LIGHT_TOPK_THRESHOLD": "1048576",
         "LIGHT_TOPK_FP16": "0"}


def _tuned(view, runtime="lightcc", **env):
    return _with(view, "runtime", {"runtime": runtime, "env": {**TUNED, **env},
                                   "env_file": "/etc/gpucluster/runtime.env"})


def test_the_runtime_profile_comes_from_the_nodes_tuning_so_both_launchers_agree():
    data = spec_from_contract({**SPEC, "profile": {"light_topk_ratio": 0.1}}, _views(_tuned(_view()), _tuned(_view())))
    # The spec's own value wins (any spelling); the rest is the nodes' tuning, LIGHT_INTRA_SIZE included.
    assert data["profile"] == {**{k: v for k, v in TUNED.items() if k != "LIGHT_TOPK_RATIO"}, "light_topk_ratio": 0.1}
    job = parse_job_spec(data)
    assert job.profile.values["LIGHT_TOPK_RATIO"] == 0.1 and job.profile.values["LIGHT_2D_ALLREDUCE"] == 1
    assert job.profile.values["LIGHT_INTRA_SIZE"] == 4 and job.profile.values["LIGHT_TOPK_ALLREDUCE"] == 1
    # The MPIJob (no node env file in a pod) carries the nodes' tuned values, not the vendor defaults
    # (LIGHT_2D_ALLREDUCE 0, LIGHT_TOPK_ALLREDUCE 0), and mpirun sets the same ones.
    env = mpijob_env(job)
    assert env["LIGHT_2D_ALLREDUCE"] == "1" and env["LIGHT_TOPK_ALLREDUCE"] == "1" and env["LIGHT_INTRA_SIZE"] == "4"
    argv = render_mpirun(job)
    assert "LIGHT_2D_ALLREDUCE=1" in argv and "LIGHT_TOPK_RATIO=0.1" in argv
    assert profile_forwarded(job) == []
    # Without the runtime stage's contract the spec's profile stays as given (mpirun forwards the rest).
    assert spec_from_contract(SPEC, _views(_view(), _view())).get("profile") is None


def test_ranks_per_node_set_by_the_spec_leave_light_intra_size_to_it():
    data = spec_from_contract({**SPEC, "gpus_per_node": 6}, _views(_tuned(_view()), _tuned(_view())))
    assert "LIGHT_INTRA_SIZE" not in data["profile"]
    assert parse_job_spec(data).profile.values["LIGHT_INTRA_SIZE"] == 6


def test_nodes_tuned_apart_are_refused_unless_the_spec_sets_the_variable():
    views = _views(_tuned(_view()), _tuned(_view(), LIGHT_TOPK_RATIO="0.2"))
    with pytest.raises(JobSpecError) as exc:
        spec_from_contract(SPEC, views)
    assert "profile.LIGHT_TOPK_RATIO: the nodes' runtime profiles differ (node-1: 0.05, node-2: 0.2); one job " \
           "needs one value: set profile.LIGHT_TOPK_RATIO in the job spec" in str(exc.value)
    data = spec_from_contract({**SPEC, "profile": {"LIGHT_TOPK_RATIO": 0.1}}, views)
    assert parse_job_spec(data).profile.values["LIGHT_TOPK_RATIO"] == 0.1


def test_nodes_on_another_runtime_than_the_job_give_it_no_profile():
    data = spec_from_contract({**SPEC, "runtime": "horovod"}, _views(_tuned(_view()), _tuned(_view())))
    assert "profile" not in data and parse_job_spec(data).runtime == "horovod"
    horovod = {"runtime": "horovod", "env": {"HOROVOD_FUSION_THRESHOLD": "67108864"}}
    data = spec_from_contract(SPEC, _views(_with(_view(runtime="horovod"), "runtime", horovod),
                                           _with(_view(runtime="horovod"), "runtime", horovod)))
    assert data["runtime"] == "horovod" and data["profile"] == {"HOROVOD_FUSION_THRESHOLD": "67108864"}
    assert parse_job_spec(data).profile.values["HOROVOD_FUSION_THRESHOLD"] == 67108864


def _plugin(view, loaded, env=None):
    return _with(view, "net_plugin", {"loaded": loaded, "library": "/opt/gpucluster/tools/nccl-net/libnccl-net.so",
                                      "aside": "/opt/gpucluster/tools/nccl-net/disabled/libnccl-net.so",
                                      "env": env or {}})


def test_the_net_plugin_the_nodes_load_is_the_jobs_and_one_set_aside_is_not():
    lib = {"NCCL_NET_PLUGIN": "/opt/gpucluster/tools/nccl-net/libnccl-net.so"}
    loaded = spec_from_contract(SPEC, _views(_plugin(_view(), True, lib), _plugin(_view(), True, lib)))
    assert loaded["nccl_env"]["NCCL_NET_PLUGIN"] == lib["NCCL_NET_PLUGIN"]
    # The runtime switch to horovod set the library aside: the nccl stage's env still names the
    # plugin (harp, in _view), the job must not.
    aside = spec_from_contract(SPEC, _views(_plugin(_view(), False), _plugin(_view(), False)))
    assert "NCCL_NET_PLUGIN" not in aside["nccl_env"] and aside["nccl_env"]["NCCL_SOCKET_IFNAME"] == "=ens1f0"
    # One node loads it, one does not: one job cannot have both.
    with pytest.raises(JobSpecError, match="nccl_env.NCCL_NET_PLUGIN: the nodes differ"):
        spec_from_contract(SPEC, _views(_plugin(_view(), True, lib), _plugin(_view(), False)))
    # A node that has not published the plugin stage: the nccl stage's env as it is.
    assert spec_from_contract(SPEC, _views(_plugin(_view(), False), _view()))["nccl_env"]["NCCL_NET_PLUGIN"] == "harp"
