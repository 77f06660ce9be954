"""Job spec -> mpirun and MPIJob: hosts, slots, -x list, quoting, one environment, CRD schema."""

from __future__ import annotations

import copy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpucluster.cluster.plugins.module_utils.launch import (
    DEFAULT_HOSTFILE,
    DEFAULT_SHM_SIZE,
    DEFAULT_TOOLS_DIR,
    JOB_SPEC_SCHEMA,
    PASSTHROUGH_VARS,
    JobSpec,
    JobSpecError,
    K8sSpec,
    RunPolicySpec,
    VolcanoSpec,
    interface_problem,
    job_env,
    min_member,
    mpijob_env,
    mpirun_exports,
    parse_job_spec,
    profile_forwarded,
    render_k8s_documents,
    render_mpijob,
    render_mpirun,
    render_mpirun_command,
    render_podgroup,
)

from gpucluster.cli import main
from gpucluster.mpijob import (
    MPIJobSchemaError,
    check_mpijob,
    load_job_spec,
    mpijob_schema,
    to_yaml,
    validate_mpijob,
)
from tests.conftest import ROOT, fixture_text

EXAMPLES = sorted((ROOT / "examples" / "jobs").glob("*.yml"))

BASE = {
    "name": "resnet50",
    "image": "registry.example:5000/train:1",
    "command": ["python", "bench.py", "--model", "resnet50"],
    "nodes": ["gpu-node-1", "gpu-node-2"],
    "gpus_per_node": 8,
    "runtime": "lightcc",
    "profile": {"LIGHT_TOPK_ALLREDUCE": 1},
    "nccl_env": {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "mlx5"},
    "env": {"PYTHONUNBUFFERED": "1"},
    "network_interface": "eth0",
}


def spec(**changes):
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def value_after(argv, flag, name=None):
    """The value following ``flag`` (and ``name`` for ``--mca name value``)."""
    for i, arg in enumerate(argv):
        if arg == flag and (name is None or argv[i + 1] == name):
            return argv[i + 2] if name else argv[i + 1]
    raise AssertionError(f"{flag} {name or ''} not in {argv}")


def container(manifest, role):
    return manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def env_of(c):
    return {item["name"]: item["value"] for item in c["env"]}


# ---------------------------------------------------------------- job spec validation


LIGHT_NAMES = [
    "LIGHT_2D_ALLREDUCE", "LIGHT_INTRA_SIZE", "LIGHT_HIERARCHICAL_THRESHOLD", "LIGHT_TOPK_ALLREDUCE",
    "LIGHT_TOPK_RATIO", "LIGHT_TOPK_THRESHOLD", "LIGHT_TOPK_FP16",
]


def test_job_env_is_what_the_spec_sets_profile_then_nccl_then_extra():
    env = job_env(spec(profile={"light_topk_ratio": 0.05, "LIGHT_TOPK_ALLREDUCE": 1}))
    assert list(env) == ["LIGHT_TOPK_ALLREDUCE", "LIGHT_TOPK_RATIO", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME",
                         "PYTHONUNBUFFERED"]
    assert env["LIGHT_TOPK_ALLREDUCE"] == "1" and env["LIGHT_TOPK_RATIO"] == "0.05"


def test_mpijob_env_fills_the_profile_with_the_vendor_defaults():
    env = mpijob_env(spec())
    assert list(env) == LIGHT_NAMES + ["NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "PYTHONUNBUFFERED"]
    assert env["LIGHT_TOPK_ALLREDUCE"] == "1"
    assert env["LIGHT_INTRA_SIZE"] == "8" and env["LIGHT_TOPK_RATIO"] == "0.01"


def test_mpirun_does_not_override_the_nodes_tuned_profile_with_defaults():
    """The node's /etc/gpucluster/runtime.env (runtime_profile role, from the inventory) is in the
    training container's environment; mpirun must forward it, not replace it with vendor defaults."""
    argv = render_mpirun(spec(profile={"LIGHT_TOPK_ALLREDUCE": 1}))
    valued, forwarded = mpirun_exports(argv)
    assert "LIGHT_TOPK_RATIO=0.01" not in argv and "LIGHT_INTRA_SIZE=8" not in argv
    assert {k for k in valued if k.startswith("LIGHT_")} == {"LIGHT_TOPK_ALLREDUCE"}
    assert forwarded == list(PASSTHROUGH_VARS) + [n for n in LIGHT_NAMES if n != "LIGHT_TOPK_ALLREDUCE"]
    assert profile_forwarded(spec(profile={"LIGHT_TOPK_ALLREDUCE": 1})) == forwarded[2:]
    # A spec that sets every variable forwards none; Horovod knobs of a LightCC profile only when set.
    everything = {name: 0 for name in ("LIGHT_2D_ALLREDUCE", "LIGHT_TOPK_ALLREDUCE", "LIGHT_TOPK_FP16")}
    everything |= {"LIGHT_INTRA_SIZE": 8, "LIGHT_HIERARCHICAL_THRESHOLD": 1, "LIGHT_TOPK_RATIO": 0.5,
                   "LIGHT_TOPK_THRESHOLD": 1}
    assert profile_forwarded(spec(profile=everything)) == []
    assert "HOROVOD_CYCLE_TIME" not in mpirun_exports(render_mpirun(spec()))[1]


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(nodes=None, node=["gpu-node-1"]))
    text = str(info.value)
    assert "node: unknown field; did you mean nodes?" in text
    assert "give nodes: [host, ...] (needed for mpirun) or node_count: N" in text
    with pytest.raises(JobSpecError, match="k8s.memroy: unknown field; did you mean k8s.memory?"):
        parse_job_spec(spec(k8s={"memroy": "1Gi"}))


def test_spec_reports_every_problem_with_field_names():
    bad = spec(name="ResNet_50", gpus_per_node=0, ssh_port=70000, command=[], typo_field=1)
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(bad)
    text = str(info.value)
    for needle in ("name='ResNet_50'", "DNS-1035", "gpus_per_node=0", "ssh_port=70000", "command must be",
                   "typo_field: unknown field"):
        assert needle in text


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"node_count": 3}, "node_count=3 but nodes lists 2 hosts"),
        ({"nodes": None}, "give nodes"),
        ({"nodes": ["a", "a"]}, "a listed twice"),
        ({"env": {"LIGHT_TOPK_RATIO": "0.1"}}, "set it under profile"),
        ({"env": {"NCCL_DEBUG": "INFO"}}, "put NCCL variables under nccl_env"),
        ({"env": {"FLAG": True}}, "YAML boolean: quote it"),
        ({"nccl_env": {"OMPI_MCA_x": "1"}}, "only NCCL_* variables"),
        ({"profile": {"LIGHT_TOPK_RATIO": 3}}, "LIGHT_TOPK_RATIO=3"),
        ({"runtime": "mxnet"}, "runtime='mxnet'"),
        ({"k8s": {"hugepages_1gi": 4}}, "set k8s.memory"),
        ({"k8s": {"api_version": "v3"}}, "k8s.api_version='v3'"),
        ({"k8s": {"volcano": {"podgroup": True}}}, "needs k8s.volcano.enabled"),
        ({"k8s": {"run_policy": {"clean_pod_policy": "Sometimes"}}}, "clean_pod_policy='Sometimes'"),
        ({"k8s": {"memory": "lots"}}, "Kubernetes quantity"),
        ({"k8s": {"host_network": True}}, "k8s.network_interface is not set"),
    ],
)
def test_spec_errors(changes, needle):
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(**changes))
    assert needle in str(info.value)


# ---------------------------------------------------------------- the JSON Schema pass


def test_the_schema_is_valid_draft_2020_12_and_covers_every_spec_field():
    """One owner of the field list: the schema. The dataclasses the spec parses into have the
    same fields (JobSpec's derived ones aside), so a field added to one is added to the other."""
    import dataclasses

    import jsonschema

    jsonschema.Draft202012Validator.check_schema(JOB_SPEC_SCHEMA)
    props = JOB_SPEC_SCHEMA["properties"]
    # JobSpec.profile_set comes from profile, JobSpec.runtime is profile.runtime.
    job_fields = {f.name for f in dataclasses.fields(JobSpec)} - {"profile_set"}
    assert job_fields | {"runtime"} == set(props)
    k8s = props["k8s"]["properties"]
    assert {f.name for f in dataclasses.fields(K8sSpec)} == set(k8s)
    assert {f.name for f in dataclasses.fields(VolcanoSpec)} == set(k8s["volcano"]["properties"])
    assert {f.name for f in dataclasses.fields(RunPolicySpec)} == set(k8s["run_policy"]["properties"])


@pytest.mark.parametrize(("changes", "line"), [
    ({"nodez": ["a"]}, "nodez: unknown field; did you mean nodes? allowed: command, env, gpus_per_node, hostfile, "
                       "image, k8s, name, nccl_env, network_interface, node_count, nodes, profile, runtime, ssh_port"),
    ({"k8s": {"namespce": "x"}}, "k8s.namespce: unknown field; did you mean k8s.namespace?"),
    ({"k8s": {"volcano": {"enabld": True}}}, "k8s.volcano.enabld: unknown field; did you mean k8s.volcano.enabled?"),
    ({"k8s": {"run_policy": {"backof_limit": 1}}},
     "k8s.run_policy.backof_limit: unknown field; did you mean k8s.run_policy.backoff_limit?"),
])
def test_unknown_fields_at_every_level_get_a_did_you_mean(changes, line):
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(**changes))
    assert any(p.startswith(line) for p in info.value.problems), info.value.problems


@pytest.mark.parametrize(("changes", "line"), [
    ({"gpus_per_node": 8.0}, "gpus_per_node=8.0 must be an integer >= 1 (GPUs of each node, one MPI rank each)"),
    ({"gpus_per_node": True}, "gpus_per_node=True must be an integer >= 1 (GPUs of each node, one MPI rank each)"),
    ({"ssh_port": "22"}, "ssh_port='22' must be a TCP port (1-65535): the sshd of the training containers"),
    ({"nodes": "gpu-node-1"}, "nodes='gpu-node-1' must be a non-empty list of host names, e.g. [gpu-node-1, "
                              "gpu-node-2]"),
    ({"nodes": ["ok", "bad host"]}, "nodes[1]='bad host' must be a host name (letters, digits, '.', '-', '_')"),
    ({"image": "has space"}, "image='has space' must be an image reference, e.g. registry:5000/train:latest"),
    ({"runtime": "mxnet"}, "runtime='mxnet' must be one of lightcc, horovod"),
    ({"env": {"1BAD": "x"}}, "env.1BAD: not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)"),
    ({"env": {"MULTI": "a\nb"}}, "env.MULTI='a\\nb' must be a single-line string or a number"),
    ({"env": ["A=1"]}, "env must be a mapping NAME: value of environment variables"),
    ({"nccl_env": {"NCCL_IB_DISABLE": False}},
     "nccl_env.NCCL_IB_DISABLE=False is a YAML boolean: quote it (e.g. '1' or 'true') so the value is exact"),
    ({"command": "   "},
     "command='   ' must be a non-empty list of arguments (or one string), e.g. [python, train.py]"),
    ({"name": None, "image": None}, "name is missing: give a DNS-1035 label"),
    ({"k8s": "yes"}, "k8s='yes' must be a mapping of MPIJob options"),
    ({"k8s": {"memory": True}}, "k8s.memory=True must be a Kubernetes quantity, e.g. 512Gi"),
    ({"k8s": {"namespace": "Bad_NS"}}, "k8s.namespace='Bad_NS' must be a DNS-1123 label, e.g. default"),
    ({"k8s": {"tools_dir": "rel"}}, "k8s.tools_dir='rel' must be an absolute host path, e.g. /opt/gpucluster/tools"),
    ({"k8s": {"run_policy": {"active_deadline_seconds": 0}}},
     "k8s.run_policy.active_deadline_seconds=0 must be an integer >= 1 (seconds)"),
    ({"k8s": {"volcano": {"enabled": "yes"}}}, "k8s.volcano.enabled='yes' must be true or false"),
])
def test_schema_errors_name_the_field_the_value_and_the_fix(changes, line):
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(**changes))
    assert any(p.startswith(line) for p in info.value.problems), info.value.problems


def test_each_missing_field_is_reported_once():
    with pytest.raises(JobSpecError) as info:
        parse_job_spec({})
    missing = [p.split()[0] for p in info.value.problems if " is missing: " in p]
    assert missing == ["name", "image", "command"]
    assert len(info.value.problems) == len(set(info.value.problems)) == 4  # and "give nodes ..."


def test_a_null_field_is_a_field_left_out():
    """``k8s:`` with nothing under it, or a filter passing network_interface=None."""
    job = parse_job_spec(spec(k8s=None, network_interface=None, profile=None) | {"k8s": None, "hostfile": None})
    assert job.k8s.api_version == "v2beta1" and job.network_interface is None and job.hostfile is None


def test_checks_after_the_schema_skip_fields_the_schema_refused():
    """A wrong type is reported once, by the schema, not again by the semantic checks."""
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(network_interface=5, gpus_per_node="8", k8s={"shm_size": "lots", "memory": "1Gi"}))
    problems = info.value.problems
    assert len(problems) == 3, problems
    assert [p.split("=")[0] for p in problems] == ["gpus_per_node", "network_interface", "k8s.shm_size"]


def test_importing_launch_needs_no_jsonschema():
    """Modules never import launch.py, but a managed node without jsonschema may still load it."""
    code = ("import sys; sys.modules['jsonschema'] = None\n"
            "from ansible_collections.gpucluster.cluster.plugins.module_utils import launch, launch_schema\n"
            "assert launch.JOB_SPEC_SCHEMA is launch_schema.JOB_SPEC_SCHEMA\n"
            "try:\n    launch.parse_job_spec({})\nexcept ImportError:\n    print('lazy')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "collections"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout == "lazy\n"


# ---------------------------------------------------------------- network interface refusal


REFUSED = ["lo", "docker0", "docker_gwbridge", "veth1a2b3c", "virbr0", "br-0123456789ab"]


@pytest.mark.parametrize("iface", REFUSED)
def test_refuses_loopback_docker_veth_libvirt_interfaces(iface):
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(network_interface=iface))
    text = str(info.value)
    assert f"network_interface={iface!r}" in text
    assert "routable NIC" in text


def test_refuses_the_docker0_of_the_e18_failure():
    """nccl-logs/E18: btl_tcp connected to 172.17.0.1, docker0's address on every host."""
    assert "connect() to 172.17.0.1 failed" in fixture_text(
        "nccl-logs/E18_mpirun_btl_tcp_connect_docker0_refused.1-mpirun-error-line.txt"
    )
    ifconfig = fixture_text("nccl-logs/E18_mpirun_btl_tcp_connect_docker0_refused.2-ifconfig-docker0.txt")
    iface = ifconfig.splitlines()[1].split()[0]
    assert iface == "docker0"
    assert "172.17.0.1" in interface_problem(iface)


@pytest.mark.parametrize("iface", ["eth0", "ens1f0np0", "bond0", "ib0", "192.0.2.0/24", "eth0,eth1"])
def test_accepts_routable_interfaces_and_cidrs(iface):
    assert interface_problem(iface) is None
    argv = render_mpirun(spec(network_interface=iface))
    assert value_after(argv, "--mca", "btl_tcp_if_include") == iface
    assert value_after(argv, "--mca", "oob_tcp_if_include") == iface


def test_bad_interface_in_a_list_is_refused():
    assert "docker0" in interface_problem("eth0,docker0")
    assert "neither an interface name nor a CIDR" in interface_problem("10.0.0.0/99")


@pytest.mark.parametrize("value", ["virbr0", "lo", "=docker0", "eth0,virbr0"])
def test_nccl_socket_ifname_may_not_select_refused_interfaces(value):
    """nccl-logs/E12 (NCCL picked virbr0) and E17 (lo)."""
    with pytest.raises(JobSpecError, match="NCCL_SOCKET_IFNAME"):
        parse_job_spec(spec(nccl_env={"NCCL_SOCKET_IFNAME": value}))


def c29_value():
    line = fixture_text("nccl-network/C29_nccl_socket_ifname_exclude_docker0_selects_lo.1-nccl-conf-line-"
                        "written-by-the-image.txt")
    return line.strip().split("NCCL_SOCKET_IFNAME=", 1)[1].split()[0]


@pytest.mark.parametrize("value", ["C29", "^docker0,lo", "^docker,lo", "^=docker0", "d", "l", "veth",
                                   "br-0123456789ab"])
def test_nccl_socket_ifname_exclusion_lists_and_never_interfaces_are_refused(value):
    """Fixture nccl-network/C29: ^docker0 lets NCCL pick lo. A job names the data NIC."""
    value = c29_value() if value == "C29" else value
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(nccl_env={"NCCL_SOCKET_IFNAME": value}))
    text = str(info.value)
    assert f"nccl_env.NCCL_SOCKET_IFNAME={value!r}" in text
    assert "'=eth0'" in text  # the fix
    if value.startswith("^"):
        assert "exclusion list" in text


def test_c29_finding_comes_from_the_nccl_env_module_utils():
    assert c29_value() == "^docker0"
    with pytest.raises(JobSpecError, match="may pick lo"):
        parse_job_spec(spec(nccl_env={"NCCL_SOCKET_IFNAME": c29_value()}))


@pytest.mark.parametrize("value", ["=eth0", "=eth0,eth1", "eth0", "ens1f0np0", "=bond0"])
def test_nccl_socket_ifname_exact_lists_and_names_are_fine(value):
    job = parse_job_spec(spec(nccl_env={"NCCL_SOCKET_IFNAME": value}))
    assert job.nccl_env["NCCL_SOCKET_IFNAME"] == value


# ---------------------------------------------------------------- mpirun


def test_mpirun_hosts_slots_np_and_options():
    argv = render_mpirun(spec())
    assert argv[:4] == ["mpirun", "--allow-run-as-root", "-np", "16"]
    assert value_after(argv, "-H") == "gpu-node-1:8,gpu-node-2:8"
    assert "--hostfile" not in argv
    joined = " ".join(argv)
    assert "-bind-to none -map-by slot" in joined
    assert "--mca pml ob1 --mca btl ^openib" in joined
    assert value_after(argv, "--mca", "plm_rsh_args") == "-p 2222"
    assert argv[-4:] == ["python", "bench.py", "--model", "resnet50"]


def test_mpirun_exports_what_the_spec_sets_with_its_value():
    argv = render_mpirun(spec())
    valued, forwarded = mpirun_exports(argv)
    assert valued == job_env(spec())
    assert forwarded == ["PATH", "LD_LIBRARY_PATH"] + profile_forwarded(spec())
    assert "-x" in argv and "LIGHT_TOPK_ALLREDUCE=1" in argv and "NCCL_SOCKET_IFNAME==eth0" in argv


def test_mpirun_hostfile_and_other_ssh_port():
    argv = render_mpirun(spec(nodes=None, node_count=4, hostfile=DEFAULT_HOSTFILE, ssh_port=22022,
                              gpus_per_node=4))
    assert value_after(argv, "--hostfile") == "/etc/gpucluster/mpi/hostfile"
    assert "-H" not in argv
    assert value_after(argv, "-np") == "16"
    assert value_after(argv, "--mca", "plm_rsh_args") == "-p 22022"


def test_mpirun_never_disables_host_key_checking():
    for data in [spec(), *(yaml.safe_load(p.read_text()) for p in EXAMPLES)]:
        assert "StrictHostKeyChecking" not in render_mpirun_command(data)
        assert "StrictHostKeyChecking" not in to_yaml(render_k8s_documents(data))


def test_mpirun_command_string_is_shell_quoted():
    data = spec(env={"GREETING": "hello world", "COST": "$HOME;rm -rf /"},
                command="python train.py --note 'two words'")
    line = render_mpirun_command(data)
    assert "-x 'GREETING=hello world'" in line
    assert "-x 'COST=$HOME;rm -rf /'" in line
    assert "--mca plm_rsh_args '-p 2222'" in line
    assert shlex.split(line) == render_mpirun(data)
    assert render_mpirun(data)[-4:] == ["python", "train.py", "--note", "two words"]


def test_user_path_replaces_the_passthrough():
    valued, forwarded = mpirun_exports(render_mpirun(spec(env={"PATH": "/opt/conda/bin:/usr/bin"})))
    assert forwarded == ["LD_LIBRARY_PATH"] + profile_forwarded(spec())
    assert valued["PATH"] == "/opt/conda/bin:/usr/bin"


@pytest.mark.parametrize(("changes", "needle"), [
    ({"network_interface": None}, "mpirun needs network_interface"),
    ({"nodes": None, "node_count": 2}, "mpirun needs the host names"),
])
def test_mpirun_needs_hosts_and_interface(changes, needle):
    data = spec(**changes)
    parse_job_spec(data)  # the spec itself is valid (enough for an MPIJob)
    with pytest.raises(JobSpecError, match=needle):
        render_mpirun(data)


# ---------------------------------------------------------------- one environment, two launchers


@pytest.mark.parametrize("runtime,profile", [("lightcc", {"LIGHT_TOPK_ALLREDUCE": 1}),
                                             ("horovod", {"HOROVOD_CYCLE_TIME": 3.5})])
@pytest.mark.parametrize("api_version", ["v2beta1", "v1"])
def test_mpirun_and_mpijob_carry_the_same_environment(runtime, profile, api_version):
    """Both launchers give the ranks the same variables. What may differ, and why:

    - values of the runtime variables the spec does not set (``profile_forwarded``): mpirun
      forwards the node's tuned value from /etc/gpucluster/runtime.env (``-x NAME``), the pods
      have no such file and carry the vendor default; every variable the spec sets has the
      same value in both;
    - ``btl_tcp_if_include`` / ``oob_tcp_if_include``: ``network_interface`` (a NIC of the
      node) for mpirun, ``k8s.network_interface`` (the pod's own interface) for the MPIJob;
    - ``plm_rsh_args`` with v1, whose operator starts ranks with kubectl exec, not ssh.
    Everything else of the mpirun command line is identical."""
    data = spec(runtime=runtime, profile=profile, network_interface="ens1f0np0",
                k8s={"api_version": api_version})
    argv = render_mpirun(data)
    valued, forwarded = mpirun_exports(argv)
    manifest = render_mpijob(data)
    launcher, worker = container(manifest, "Launcher"), container(manifest, "Worker")
    pod_env = env_of(launcher)
    assert env_of(worker) == pod_env == mpijob_env(data)
    assert valued == job_env(data)
    may_differ = profile_forwarded(data)
    assert may_differ and set(may_differ).isdisjoint(valued)
    assert {k: v for k, v in pod_env.items() if k not in may_differ} == valued  # set: same values
    assert forwarded == list(PASSTHROUGH_VARS) + may_differ  # unset: the node's values, by name
    # The same names reach the ranks.
    assert set(valued) | set(forwarded) == set(PASSTHROUGH_VARS) | set(pod_env)
    launcher_argv = launcher["command"] + launcher["args"]
    launcher_valued, launcher_forwarded = mpirun_exports(launcher_argv)
    assert launcher_valued == {}  # values come from the container env ...
    assert launcher_forwarded == list(PASSTHROUGH_VARS) + list(pod_env)  # ... and -x forwards each by name
    # The interface is allowed to differ: the node's NIC for mpirun, the pod's for the MPIJob.
    assert value_after(argv, "--mca", "btl_tcp_if_include") == "ens1f0np0"
    assert value_after(launcher_argv, "--mca", "btl_tcp_if_include") == "eth0"

    def options(a, *, drop_rsh):
        """The mpirun argv without -H/--hostfile, -x, the interface values (and plm_rsh_args)."""
        out, i = [], 0
        while i < len(a):
            if a[i] in ("-x", "-H", "--hostfile"):
                i += 2
                continue
            if a[i] == "--mca" and a[i + 1] in ("btl_tcp_if_include", "oob_tcp_if_include") + (
                    ("plm_rsh_args",) if drop_rsh else ()):
                i += 3
                continue
            out.append(a[i])
            i += 1
        return out

    v1 = api_version == "v1"
    assert options(argv, drop_rsh=v1) == options(launcher_argv, drop_rsh=v1)


# ---------------------------------------------------------------- MPIJob


def test_mpijob_structure():
    data = spec(k8s={"namespace": "training", "hugepages_1gi": 16, "memory": "512Gi",
                     "run_policy": {"backoff_limit": 0, "ttl_seconds_after_finished": 3600}})
    m = render_mpijob(data)
    assert m["apiVersion"] == "kubeflow.org/v2beta1"
    assert m["kind"] == "MPIJob"
    assert m["metadata"]["name"] == "resnet50"
    assert m["metadata"]["namespace"] == "training"
    assert m["spec"]["slotsPerWorker"] == 8
    assert m["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 0,
                                      "ttlSecondsAfterFinished": 3600}
    replicas = m["spec"]["mpiReplicaSpecs"]
    assert replicas["Launcher"]["replicas"] == 1
    assert replicas["Worker"]["replicas"] == 2
    launcher, worker = container(m, "Launcher"), container(m, "Worker")
    assert launcher["command"] == ["mpirun"]
    assert "-np" in launcher["args"] and launcher["args"][launcher["args"].index("-np") + 1] == "16"
    assert "-H" not in launcher["args"]  # the operator writes the hostfile
    assert worker["command"] == ["/usr/sbin/sshd"] and worker["args"] == ["-De", "-p", "2222"]
    assert worker["securityContext"] == {"privileged": True}
    res = worker["resources"]
    assert res["limits"] == {"nvidia.com/gpu": 8, "memory": "512Gi", "hugepages-1Gi": "16Gi"}
    assert res["requests"]["hugepages-1Gi"] == res["limits"]["hugepages-1Gi"]
    assert res["requests"]["memory"] == res["limits"]["memory"]
    pod = replicas["Worker"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"sys": "/sys", "hugepages": "/dev/hugepages", "tools": "/opt/gpucluster/tools"}
    mounts = {v["name"]: v["mountPath"] for v in worker["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "sys": "/sys", "hugepages": "/dev/hugepages",
                      "tools": "/opt/gpucluster/tools"}
    assert "schedulerName" not in pod


def _shm(manifest, role):
    pod = manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
    volumes = [v for v in pod["volumes"] if v["name"] == "dshm"]
    mounts = [m for m in container(manifest, role)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    return volumes, mounts


@pytest.mark.parametrize("api_version", ["v2beta1", "v1"])
def test_mpijob_pods_get_a_dev_shm_like_the_docker_path(api_version):
    """Docker runs the container with --shm-size=32g (training_image_shm_size); Kubernetes gives a
    pod 64 MiB of /dev/shm, too little for NCCL, unless an emptyDir medium Memory is mounted."""
    docker_default = yaml.safe_load((ROOT / "roles/training_image/defaults/main.yml").read_text())
    assert docker_default["training_image_shm_size"] == "32g" and DEFAULT_SHM_SIZE == "32Gi"
    m = render_mpijob(spec(k8s={"api_version": api_version}))
    for role in ("Launcher", "Worker"):
        volumes, mounts = _shm(m, role)
        assert volumes == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
        assert mounts == [{"name": "dshm", "mountPath": "/dev/shm"}]
    m = render_mpijob(spec(k8s={"shm_size": "8Gi", "memory": "64Gi"}))
    assert _shm(m, "Worker")[0][0]["emptyDir"]["sizeLimit"] == "8Gi"
    assert validate_mpijob(m).ok


@pytest.mark.parametrize(("k8s", "needle"), [
    ({"shm_size": "lots"}, "k8s.shm_size='lots' must be a positive Kubernetes quantity"),
    ({"shm_size": 0}, "k8s.shm_size=0 must be a positive"),
    ({"shm_size": "0Gi"}, "k8s.shm_size='0Gi' must be a positive"),
    ({"shm_size": "32Gi", "memory": "16Gi"}, "count against the worker's memory limit"),
])
def test_shm_size_is_a_quantity_below_the_memory_limit(k8s, needle):
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(k8s=k8s))
    assert needle in str(info.value)


def test_tools_dir_default_is_where_the_roles_install_the_tools():
    defaults = yaml.safe_load((ROOT / "roles/training_image/defaults/main.yml").read_text())
    assert DEFAULT_TOOLS_DIR == defaults["training_image_tools_dir"] == "/opt/gpucluster/tools"
    plugin = yaml.safe_load((ROOT / "roles/nccl_net_plugin/defaults/main.yml").read_text())
    assert plugin["nccl_net_plugin_dir"].startswith(DEFAULT_TOOLS_DIR + "/")
    for path in EXAMPLES:
        tools = (yaml.safe_load(path.read_text()).get("k8s") or {}).get("tools_dir", DEFAULT_TOOLS_DIR)
        assert tools == DEFAULT_TOOLS_DIR, path.name
    assert parse_job_spec(spec()).k8s.tools_dir == DEFAULT_TOOLS_DIR


def test_hostfile_is_the_one_container_ssh_writes():
    ssh = yaml.safe_load((ROOT / "roles/container_ssh/defaults/main.yml").read_text())
    assert DEFAULT_HOSTFILE == ssh["container_ssh_hostfile"] == "/etc/gpucluster/mpi/hostfile"
    from ansible_collections.gpucluster.cluster.plugins.module_utils import launch as launch_module

    assert DEFAULT_HOSTFILE in launch_module.__doc__ and "/etc/mpi/hostfile" not in launch_module.__doc__
    for path in EXAMPLES:
        hostfile = yaml.safe_load(path.read_text()).get("hostfile")
        assert hostfile in (None, DEFAULT_HOSTFILE), path.name


def test_mpijob_without_hugepages_or_memory_sets_only_the_gpu_limit():
    worker = container(render_mpijob(spec()), "Worker")
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 8}}


def test_mpijob_node_count_only():
    m = render_mpijob(spec(nodes=None, node_count=5, network_interface=None))
    assert m["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 5
    args = container(m, "Launcher")["args"]
    assert args[args.index("-np") + 1] == "40"
    assert value_after(args, "--mca", "btl_tcp_if_include") == "eth0"  # the pod's interface


def test_mpijob_host_network_uses_the_named_interface():
    m = render_mpijob(spec(k8s={"host_network": True, "network_interface": "ens1f0np0"}))
    pod = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert value_after(container(m, "Launcher")["args"], "--mca", "oob_tcp_if_include") == "ens1f0np0"


def test_volcano_gang_scheduling_min_member_is_workers_plus_launcher():
    data = spec(nodes=["n1", "n2", "n3"],
                k8s={"volcano": {"enabled": True, "queue": "research", "priority_class": "high"}})
    m = render_mpijob(data)
    assert min_member(data) == 4
    assert m["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4, "queue": "research",
                                                           "priorityClass": "high"}
    for role in ("Launcher", "Worker"):
        template = m["spec"]["mpiReplicaSpecs"][role]["template"]
        assert template["spec"]["schedulerName"] == "volcano"
        assert template["spec"]["priorityClassName"] == "high"
        # mpi-operator --gang-scheduling=volcano annotates the pods with its own PodGroup.
        assert "annotations" not in template["metadata"]
    docs = render_k8s_documents(data)
    assert [d["kind"] for d in docs] == ["MPIJob"]  # the operator makes the PodGroup
    assert validate_mpijob(m).ok


def test_volcano_podgroup_for_an_operator_without_gang_scheduling():
    data = spec(k8s={"volcano": {"enabled": True, "podgroup": True}})
    docs = render_k8s_documents(data)
    assert [d["kind"] for d in docs] == ["PodGroup", "MPIJob"]
    pg = docs[0]
    assert pg["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert pg["spec"] == {"minMember": 3, "queue": "default"}
    for role in ("Launcher", "Worker"):
        meta = docs[1]["spec"]["mpiReplicaSpecs"][role]["template"]["metadata"]
        assert meta["annotations"] == {"scheduling.k8s.io/group-name": "resnet50"}
    with pytest.raises(JobSpecError, match="volcano.enabled"):
        render_podgroup(spec())


def test_v1_manifest_has_no_v2_only_fields_and_no_sshd():
    m = render_mpijob(spec(k8s={"api_version": "v1"}))
    assert m["apiVersion"] == "kubeflow.org/v1"
    assert "sshAuthMountPath" not in m["spec"] and "mpiImplementation" not in m["spec"]
    assert "command" not in container(m, "Worker")
    assert "plm_rsh_args" not in container(m, "Launcher")["args"]


def test_yaml_output_round_trips_without_anchors():
    docs = render_k8s_documents(spec(k8s={"volcano": {"enabled": True, "podgroup": True}}))
    text = to_yaml(docs)
    assert "&id" not in text and "*id" not in text
    assert list(yaml.safe_load_all(text)) == docs


# ---------------------------------------------------------------- CRD schema


def test_schema_is_the_pinned_v2beta1_openapi_schema():
    schema = mpijob_schema()
    assert schema["properties"]["spec"]["properties"]["slotsPerWorker"]["type"] == "integer"
    assert "mpiReplicaSpecs" in schema["properties"]["spec"]["required"]


@pytest.mark.parametrize("k8s", [
    {},
    {"hugepages_1gi": 16, "memory": "512Gi"},
    {"volcano": {"enabled": True, "queue": "q", "priority_class": "high"},
     "run_policy": {"backoff_limit": 0, "ttl_seconds_after_finished": 60, "active_deadline_seconds": 600}},
    {"host_network": True, "network_interface": "ens1f0np0", "ssh_auth_mount_path": "/home/mpi/.ssh"},
])
def test_rendered_manifests_pass_the_crd_schema(k8s):
    result = validate_mpijob(render_mpijob(spec(k8s=k8s)))
    assert result.checked and result.ok and result.errors == ()


def test_broken_manifest_fails_the_crd_schema():
    m = render_mpijob(spec())
    m["spec"]["slotsPerWorker"] = "8"
    m["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "two"
    result = check_mpijob(m)
    assert result.checked and not result.ok
    assert any(e.startswith("spec.slotsPerWorker: '8' is not of type 'integer'") for e in result.errors)
    assert any(e.startswith("spec.mpiReplicaSpecs.Worker.replicas:") for e in result.errors)
    with pytest.raises(MPIJobSchemaError, match="slotsPerWorker"):
        validate_mpijob(m)


def test_schema_check_reports_fields_the_api_server_would_drop():
    m = render_mpijob(spec())
    m["spec"]["slotPerWorker"] = 8  # typo: pruned silently by a real API server
    result = check_mpijob(m)
    assert "spec.slotPerWorker: unknown field; the API server would drop it silently" in result.errors


def test_schema_check_missing_replica_specs_and_enum():
    m = render_mpijob(spec())
    del m["spec"]["mpiReplicaSpecs"]
    m["spec"]["mpiImplementation"] = "MVAPICH"
    errors = check_mpijob(m).errors
    assert any("'mpiReplicaSpecs' is a required property" in e for e in errors)
    assert any(e.startswith("spec.mpiImplementation:") for e in errors)


def test_v1_is_not_schema_checked_and_says_why():
    result = validate_mpijob(render_mpijob(spec(k8s={"api_version": "v1"})))
    assert result.checked is False and result.ok
    assert "only kubeflow.org/v2beta1" in result.note


def test_wrong_kind_or_group_fails():
    m = render_mpijob(spec())
    assert check_mpijob({**m, "kind": "Job"}).errors
    assert check_mpijob({**m, "apiVersion": "kubeflow.org/v2"}).errors


# ---------------------------------------------------------------- examples and CLI


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_render_and_validate(path):
    job = load_job_spec(path)
    render_mpirun(job)
    result = validate_mpijob(render_mpijob(job))
    assert result.ok


def test_examples_exist():
    assert len(EXAMPLES) >= 2


def test_load_job_spec_errors(tmp_path):
    with pytest.raises(JobSpecError, match="cannot read"):
        load_job_spec(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(JobSpecError, match="not valid YAML") as info:
        load_job_spec(bad)
    assert f'in "{bad}", line' in str(info.value) and "<unicode string>" not in str(info.value)
    bad.write_text("")
    with pytest.raises(JobSpecError, match="the job spec is empty"):
        load_job_spec(bad)
    bad.write_text("- a list\n")
    with pytest.raises(JobSpecError, match="must be a YAML mapping"):
        load_job_spec(bad)


def write_spec(tmp_path: Path, data) -> Path:
    path = tmp_path / "job.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_launch_mpirun(tmp_path, capsys):
    assert main(["launch", str(write_spec(tmp_path, spec())), "--mpirun"]) == 0
    out = capsys.readouterr().out
    assert shlex.split(out) == render_mpirun(spec())


def test_cli_launch_mpijob_to_file(tmp_path):
    out = tmp_path / "job.yaml"
    data = spec(k8s={"volcano": {"enabled": True}})
    assert main(["launch", str(write_spec(tmp_path, data)), "--mpijob", "--output", str(out)]) == 0
    assert list(yaml.safe_load_all(out.read_text())) == [render_mpijob(data)]


def test_cli_launch_env_file(tmp_path, capsys):
    assert main(["launch", str(write_spec(tmp_path, spec())), "--env-file"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines == [f"{k}={v}" for k, v in job_env(spec()).items()]


def test_cli_launch_v1_warns(tmp_path, capsys):
    path = write_spec(tmp_path, spec(k8s={"api_version": "v1"}))
    assert main(["launch", str(path), "--mpijob"]) == 0
    captured = capsys.readouterr()
    assert "kubeflow.org/v1" in captured.out
    assert "not schema-checked" in " ".join(captured.err.split())


def test_cli_launch_output_needs_an_existing_directory(tmp_path, capsys):
    out = tmp_path / "nonexistent" / "dir" / "x.env"
    assert main(["launch", str(write_spec(tmp_path, spec())), "--env-file", "-o", str(out)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"directory {out.parent} does not exist" in err
    assert not (tmp_path / "nonexistent").exists()


def test_cli_launch_names_the_file_of_malformed_yaml(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: [unclosed\n")
    assert main(["launch", str(bad), "--mpirun"]) == 1
    err = "".join(capsys.readouterr().err.split())  # Rich wraps long lines, paths included
    assert f'in"{bad}",line1' in err
    assert "<unicodestring>" not in err


def test_cli_launch_says_an_empty_file_is_empty(tmp_path, capsys):
    empty = tmp_path / "empty.yml"
    empty.write_text("# nothing yet\n")
    assert main(["launch", str(empty), "--mpijob"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the job spec is empty" in err and "must be a YAML mapping" not in err


def test_cli_launch_prints_brackets_and_suggests_nodes(tmp_path, capsys):
    data = spec(nodes=None)
    data["node"] = ["gpu-node-1"]
    assert main(["launch", str(write_spec(tmp_path, data)), "--mpirun"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "did you mean nodes?" in err
    assert "give nodes: [host, ...] (needed for mpirun)" in err  # not eaten as Rich markup
    assert "nodes:  (" not in err


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("mode", ["--mpirun", "--mpijob", "--env-file"])
def test_cli_launch_every_example(path, mode, capsys):
    assert main(["launch", str(path), mode]) == 0
    out = capsys.readouterr().out
    if mode == "--mpijob":
        docs = list(yaml.safe_load_all(out))
        assert docs == render_k8s_documents(load_job_spec(path))
        assert check_mpijob(docs[-1]).ok


def test_cli_launch_bad_spec_exits_1_with_the_reason(tmp_path, capsys):
    path = write_spec(tmp_path, spec(network_interface="docker0"))
    assert main(["launch", str(path), "--mpirun"]) == 1
    assert "docker0" in " ".join(capsys.readouterr().err.split())
