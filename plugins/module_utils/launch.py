"""One job spec, two launchers: an ``mpirun`` command line and a Kubeflow MPIJob.

A job spec is a YAML mapping (see ``examples/jobs/*.yml``)::

    name: resnet50-lightcc            # DNS-1035 label: the MPIJob / pod name prefix
    image: registry:5000/train:latest
    command: [python, /opt/bench/pytorch_synthetic_benchmark.py, --model, resnet50]
                                      # or one string, split like a shell would (shlex)
    nodes: [gpu-node-1, gpu-node-2]   # host names for mpirun; or node_count: 2
    gpus_per_node: 8                  # slots per node = ranks per node
    runtime: lightcc                  # lightcc | horovod  (gpucluster.runtime)
    profile: {LIGHT_TOPK_ALLREDUCE: 1}  # runtime variables this job sets, validated
    nccl_env: {NCCL_SOCKET_IFNAME: =eth0, NCCL_IB_HCA: mlx5}  # NCCL_* only, e.g. from facts
    env: {PYTHONUNBUFFERED: "1"}      # any other variable
    network_interface: eth0           # mpirun only: Open MPI's TCP (btl and oob), NIC name(s) or CIDR
    ssh_port: 2222                    # sshd of the training containers (default 2222)
    hostfile: /etc/gpucluster/mpi/hostfile  # optional: --hostfile instead of -H (the file the
                                      # container_ssh role writes, container_ssh_hostfile)
    k8s:                              # MPIJob options, all optional
      api_version: v2beta1            # or v1
      namespace: default
      hugepages_1gi: 16               # 1 GiB pages per worker pod (limits == requests)
      memory: 512Gi                   # memory per worker pod (limits == requests), /dev/shm included
      shm_size: 32Gi                  # /dev/shm of each pod: emptyDir medium Memory (default 32Gi)
      tools_dir: /opt/gpucluster/tools  # host path of the NCCL net plugin / tools, mounted as is
      host_network: false
      network_interface: eth0         # MPIJob only: MPI TCP interface inside the pods (default eth0)
      ssh_auth_mount_path: /root/.ssh # v2beta1 only
      volcano: {enabled: true, queue: default, priority_class: high, podgroup: false}
      run_policy: {clean_pod_policy: Running, backoff_limit: 0, ttl_seconds_after_finished: 3600,
                   active_deadline_seconds: 86400}

**Validation.** :func:`parse_job_spec` checks the spec against the JSON Schema
:data:`~.launch_schema.JOB_SPEC_SCHEMA` (``plugins/module_utils/launch_schema.py``: fields, types,
ranges, patterns, defaults; unknown fields get a did-you-mean hint) with ``jsonschema``, imported
inside the function (the controller has it; a managed node importing this module needs it not),
then runs what a schema cannot express (below: interfaces, NCCL_SOCKET_IFNAME, quantities, the
runtime profile).

**The environment.** :func:`job_env` is what the job itself sets: the runtime variables the
spec's ``profile`` names (not the others), then ``nccl_env``, then ``env``. ``mpirun`` exports
each with ``-x NAME=value`` and forwards every other variable of the runtime profile by name
(``-x NAME``, :func:`profile_forwarded`): the training container already has the node's tuned
profile in its environment (``/etc/gpucluster/runtime.env``, written by the runtime_profile role
from the inventory), and ``-x`` without a value passes the launching container's value on to
every rank, so a job spec never overrides the node's tuning with vendor defaults. Pods have no
such env file: the MPIJob carries :func:`mpijob_env`, the spec's profile *filled with the
vendor defaults* (plus ``nccl_env`` and ``env``), in the launcher's and the workers' container
``env``, and its launcher's ``mpirun`` forwards each by name. So both launchers give the ranks
the same variable names, with the same values wherever the spec sets them; where it does not,
``mpirun`` passes on the node's value and the MPIJob the vendor default (set the value under
``profile`` to pin it for both).

**The MPI interface differs on purpose.** ``--mpirun`` pins Open MPI's TCP (``btl_tcp_if_include``
/ ``oob_tcp_if_include``) to ``network_interface``, a NIC of the node (the containers use the
host network); ``--mpijob`` pins it to ``k8s.network_interface`` (default ``eth0``), the
interface *inside the pods*, which has its own name unless ``k8s.host_network`` is true. The
``nccl_env`` values (``NCCL_SOCKET_IFNAME`` included) are the same for both, so a pod network
whose interface is not named like the node's NIC needs ``k8s.host_network: true`` or an
``NCCL_SOCKET_IFNAME`` that matches both.

Sources: Horovod ``docs/mpi.rst`` (``-bind-to none -map-by slot``, ``-x LD_LIBRARY_PATH -x
PATH``, ``-mca pml ob1 -mca btl ^openib``); Open MPI ``btl_tcp_if_include`` /
``oob_tcp_if_include`` / ``plm_rsh_args``; mpi-operator v0.8.2 CRD and
``examples/v2beta1`` (workers run ``/usr/sbin/sshd -De``); mpi-operator ``--gang-scheduling=volcano``
(``pkg/controller/podgroup.go``: the operator creates a PodGroup named after the MPIJob with
``minMember`` = ``runPolicy.schedulingPolicy.minAvailable``, ``queue`` and ``priorityClassName``
from it, sets ``schedulerName: volcano`` and the ``scheduling.k8s.io/group-name`` annotation on
the pods; ``scheduleTimeoutSeconds`` is not passed to a Volcano PodGroup); Volcano PodGroup
``scheduling.volcano.sh/v1beta1``; NCCL_SOCKET_IFNAME checks of
``plugins/module_utils/nccl.py`` (fixture nccl-network/C29).
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpucluster.cluster.plugins.module_utils import nccl
from ansible_collections.gpucluster.cluster.plugins.module_utils.launch_schema import (
    API_VERSIONS,
    DEFAULT_SHM_SIZE,
    DEFAULT_SSH_PORT,
    DEFAULT_TOOLS_DIR,
    JOB_SPEC_SCHEMA,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.runtime import (
    DEFAULT_GPUS_PER_NODE,
    HOROVOD_VARIABLES,
    INTRA,
    LIGHTCC_VARIABLES,
    ProfileError,
    RuntimeProfile,
    build_profile,
    format_value,
)

#: The MPI hostfile the container_ssh role writes (``container_ssh_hostfile``) in the directory
#: the training container mounts (``/etc/gpucluster/mpi``).
DEFAULT_HOSTFILE = "/etc/gpucluster/mpi/hostfile"
DEFAULT_POD_INTERFACE = "eth0"
#: Variables mpirun forwards from the launcher's own environment (Horovod docs/mpi.rst), so
#: that ranks started over ssh find the image's binaries and libraries.
PASSTHROUGH_VARS = ("PATH", "LD_LIBRARY_PATH")

_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")  # Linux IFNAMSIZ is 16 incl. NUL
# Interfaces MPI must never use: the loopback, Docker's bridges and veth pairs, libvirt's
# bridge. docker0 carries 172.17.0.1 on every Docker host (fixture nccl-logs/E18), virbr0
# 192.168.122.1 on every libvirt host (E12); lo reaches only the local node (E17).
_REFUSED_IF = (
    (re.compile(r"^lo$"), "the loopback interface; it reaches only the local node"),
    (re.compile(r"^docker"), "a Docker bridge; every Docker host has the same 172.17.0.1 on docker0"),
    (re.compile(r"^br-[0-9a-f]{12}$"), "a Docker user-defined network bridge"),
    (re.compile(r"^veth"), "one end of a container veth pair"),
    (re.compile(r"^virbr"), "a libvirt bridge; every libvirt host has the same 192.168.122.1"),
)


class JobSpecError(ValueError):
    """The job spec is wrong; the message lists each field, what is wrong and the fix."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid job spec:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class VolcanoSpec:
    """Volcano gang scheduling: all ``workers + 1`` pods (launcher included) start together."""

    enabled: bool = False
    queue: str = "default"
    priority_class: str | None = None
    #: Also emit a PodGroup and annotate the pods with it; only for an mpi-operator started
    #: without ``--gang-scheduling=volcano`` (otherwise the operator creates the PodGroup).
    podgroup: bool = False


@dataclass(frozen=True)
class RunPolicySpec:
    """MPIJob ``spec.runPolicy`` (seconds, counts)."""

    clean_pod_policy: str = "Running"
    backoff_limit: int | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None


@dataclass(frozen=True)
class K8sSpec:
    """MPIJob options. Quantities are Kubernetes strings (``"512Gi"``)."""

    api_version: str = "v2beta1"
    namespace: str = "default"
    hugepages_1gi: int = 0
    memory: str | None = None
    shm_size: str = DEFAULT_SHM_SIZE
    tools_dir: str = DEFAULT_TOOLS_DIR
    host_network: bool = False
    network_interface: str | None = None
    ssh_auth_mount_path: str = "/root/.ssh"
    volcano: VolcanoSpec = field(default_factory=VolcanoSpec)
    run_policy: RunPolicySpec = field(default_factory=RunPolicySpec)


@dataclass(frozen=True)
class JobSpec:
    """A validated job spec (see the module docstring for the YAML form)."""

    name: str
    image: str
    command: tuple[str, ...]
    node_count: int
    gpus_per_node: int
    profile: RuntimeProfile
    nodes: tuple[str, ...] = ()
    #: The runtime variables the spec's ``profile`` sets (the rest of ``profile`` are defaults).
    profile_set: tuple[str, ...] = ()
    nccl_env: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    network_interface: str | None = None
    ssh_port: int = DEFAULT_SSH_PORT
    hostfile: str | None = None
    k8s: K8sSpec = field(default_factory=K8sSpec)

    @property
    def runtime(self) -> str:
        return self.profile.runtime

    @property
    def np(self) -> int:
        """Total ranks: one per GPU, ``node_count x gpus_per_node``."""
        return self.node_count * self.gpus_per_node


# --------------------------------------------------------------------------------------------
# Parsing and validation: the JSON Schema (launch_schema.py), then what a schema cannot say
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _validator():
    """A draft 2020-12 validator of :data:`JOB_SPEC_SCHEMA` whose types follow YAML/Python:
    an integer is an ``int`` (not ``8.0``, not a bool), an array any sequence but a string, an
    object any mapping (Ansible's types included). jsonschema is imported here, not at module
    level: only the controller (CLI, filters) parses job specs, never a managed node."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine_many({
        "integer": lambda _c, v: isinstance(v, int) and not isinstance(v, bool),
        "array": lambda _c, v: isinstance(v, Sequence) and not isinstance(v, str | bytes),
        "object": lambda _c, v: isinstance(v, Mapping),
    })
    return jsonschema.validators.extend(base, type_checker=checker)(JOB_SPEC_SCHEMA)


def _drop_nulls(data: Any, schema: Mapping[str, Any]) -> Any:
    """``data`` without null fields in the schema's fixed-field objects (top level, k8s,
    k8s.volcano, k8s.run_policy): ``k8s:`` with nothing under it, or a filter passing
    ``network_interface: None``, means the field is left out. Values of free maps (env) stay."""
    props = schema.get("properties")
    if not isinstance(data, Mapping) or props is None:
        return data
    return {key: _drop_nulls(value, props.get(key, {})) for key, value in data.items() if value is not None}


def _where(path: Sequence[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _described(error) -> Mapping[str, Any]:
    """The deepest subschema on the error's schema path that says what the value must be
    (``description``) or what to do (``errorMessage``)."""
    node: Any = JOB_SPEC_SCHEMA
    found: Mapping[str, Any] = JOB_SPEC_SCHEMA
    for part in error.schema_path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
        if isinstance(node, Mapping) and ("description" in node or "errorMessage" in node):
            found = node
    return found


def _schema_message(error) -> list[str]:
    """One schema error as the lines of a :class:`JobSpecError`: the field, the value, the fix."""
    path = list(error.absolute_path)
    where = _where(path)
    value = error.instance
    if error.validator == "additionalProperties" and error.validator_value is False:
        allowed = sorted(error.schema.get("properties", {}))
        prefix = f"{where}." if where else ""
        lines = []
        for key in value:
            if key in allowed:
                continue
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {prefix}{close[0]}? " if close else ""
            lines.append(f"{prefix}{key}: unknown field; {hint}allowed: {', '.join(allowed)}")
        return lines
    if "errorMessage" in error.schema:
        return [error.schema["errorMessage"]]
    if error.validator == "required":
        prefix = f"{where}." if where else ""
        lines = []
        for key in error.validator_value:
            if key not in value:
                prop = error.schema.get("properties", {}).get(key, {})
                lines.append(f"{prefix}{key} is missing: give {prop.get('description', 'it')}")
        return lines
    if error.validator == "uniqueItems":
        dupes = sorted({str(item) for item in value if list(value).count(item) > 1})
        return [f"{where}: {', '.join(dupes)} listed twice; give each once"]
    node = _described(error)
    if "propertyNames" in error.schema_path:
        return [f"{where}.{value}: not {node['description']}"]
    if "errorMessage" in node:
        return [node["errorMessage"]]
    if not where:
        return [f"the job spec must be {node.get('description')}"]
    free_text = "string" in (node.get("type") or ()) and "pattern" not in node
    if isinstance(value, bool) and error.validator == "type" and free_text:
        return [f"{where}={value!r} is a YAML boolean: quote it (e.g. '1' or 'true') so the value is exact"]
    shown = f"{where}={value!r}" if value is None or isinstance(value, str | int | float) else where
    return [f"{shown} must be {node.get('description', 'valid: ' + error.message)}"]


def schema_problems(data: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The job spec's :data:`JOB_SPEC_SCHEMA` errors as messages, and the paths they are at."""
    problems: list[str] = []
    paths: list[tuple[Any, ...]] = []
    for error in _validator().iter_errors(data):
        # One error per missing required field, each naming them all: keep each line once.
        problems += [line for line in _schema_message(error) if line not in problems]
        paths.append(tuple(error.absolute_path))
    return problems, paths


_QUANTITY_FACTORS = {
    "": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}


def _quantity_bytes(text: str) -> float | None:
    """A plain ``<number><suffix>`` Kubernetes quantity in bytes; None for other forms (``1e3``, ``m``)."""
    match = re.fullmatch(r"\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", text)
    if not match:
        return None
    return float(match.group(1)) * _QUANTITY_FACTORS[match.group(2) or ""]


def interface_problem(value: str, where: str = "network_interface") -> str | None:
    """Why ``value`` cannot be MPI's TCP interface, or None when it can.

    ``value`` is one interface name, a CIDR (Open MPI accepts both in ``*_if_include``) or a
    comma-separated list of them. Loopback, Docker, veth and libvirt interfaces are refused.
    """
    if not isinstance(value, str) or not value.strip():
        return f"{where} must be the NIC name (or CIDR) MPI's TCP traffic uses, e.g. eth0"
    for item in (part.strip() for part in value.split(",")):
        if "/" in item:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                return f"{where}: {item!r} is neither an interface name nor a CIDR"
            continue
        if not _IFNAME.match(item):
            return f"{where}: {item!r} is not a valid interface name (1-15 characters, no spaces)"
        for pattern, why in _REFUSED_IF:
            if pattern.search(item):
                return (
                    f"{where}={item!r} is {why}, so MPI ranks on other nodes cannot reach it "
                    "(connect() refused or a hang). Set it to the node's routable NIC from the "
                    "network facts (e.g. eth0, ens1f0np0) or its subnet (e.g. 192.0.2.0/24)"
                )
    return None


#: Interfaces an NCCL_SOCKET_IFNAME value must not be able to select (sample names of the
#: never-use families: loopback, Docker bridges, veth pairs, libvirt bridges).
_NCCL_NEVER_SAMPLES = ("lo", "docker0", "docker_gwbridge", "veth0", "virbr0")


def _nccl_ifname_problem(value: str) -> str | None:
    """Why ``nccl_env.NCCL_SOCKET_IFNAME=value`` is refused, or None.

    A job spec must name the data NIC(s): an exclusion list (``^docker0``) lets NCCL choose
    among whatever else the node has, ``lo`` included (fixture nccl-network/C29), and an
    include that matches lo, docker*, veth* or virbr* (``lo``, ``=docker0``, the prefix ``d``)
    would bootstrap over an interface peers cannot reach (nccl-logs/E12, E17). The semantics
    are those of ``nccl.py`` (:func:`parse_ifname_spec`, :func:`ifname_matches`,
    :func:`check_socket_ifname`).
    """
    where = f"nccl_env.NCCL_SOCKET_IFNAME={value!r}"
    fix = ("give the data NIC(s) by exact name, e.g. NCCL_SOCKET_IFNAME: '=eth0' (or '=eth0,eth1'), "
           "or name prefixes such as eth0; take the names from the network facts")
    parsed = nccl.parse_ifname_spec(value)
    findings = nccl.check_socket_ifname(value)
    if parsed["exclude"]:
        detail = f" ({'; '.join(findings)})" if findings else ""
        return (f"{where} is an exclusion list: NCCL then picks any other interface, lo included "
                f"(fixture nccl-network/C29: ^docker0 lets NCCL pick lo){detail}; {fix}")
    selected = [name for name in _NCCL_NEVER_SAMPLES if nccl.ifname_matches(value, name)]
    for name, _port in parsed["items"]:
        if interface_problem(name) is not None:
            selected.append(name)
    if findings or selected:
        detail = "; ".join(findings) or f"it matches {', '.join(dict.fromkeys(selected))}"
        return (f"{where} could select an interface that never carries NCCL traffic ({detail}); "
                f"NCCL would bootstrap over it (fixtures nccl-logs/E12, E17); {fix}")
    return None


def _env_text(value: str | int | float) -> str:
    return format_value(value) if isinstance(value, int | float) else value


def parse_job_spec(data: Mapping[str, Any]) -> JobSpec:
    """Validate a job spec mapping and return a :class:`JobSpec`.

    First :data:`JOB_SPEC_SCHEMA` (types, ranges, patterns, unknown fields with a did-you-mean
    hint, the rules between two k8s fields), then what a schema cannot express: the runtime
    profile (:func:`build_profile`), ``NCCL_SOCKET_IFNAME`` and MPI interface semantics, the
    ``/dev/shm`` size against the memory limit, and the rules between ``nodes``,
    ``node_count``, ``nccl_env``, ``env`` and the profile. Every problem found is reported at
    once in one :class:`JobSpecError` whose lines name the field, the value and the fix.
    """
    data = _drop_nulls(data, JOB_SPEC_SCHEMA)
    problems, flagged = schema_problems(data)
    if not isinstance(data, Mapping):
        raise JobSpecError(problems)

    def ok(*path: str) -> bool:
        """True when the schema found nothing wrong at ``path`` or below it."""
        return not any(where[: len(path)] == path for where in flagged)

    raw_command = data.get("command")
    command: tuple[str, ...] = ()
    if isinstance(raw_command, str) and ok("command"):
        try:
            command = tuple(shlex.split(raw_command))
        except ValueError as exc:
            problems.append(f"command: cannot split {raw_command!r} like a shell ({exc}); give a list")
    elif ok("command"):
        command = tuple(str(a) for a in raw_command or ())

    nodes = tuple(data.get("nodes") or ()) if ok("nodes") else ()
    node_count = data.get("node_count", len(nodes))
    if nodes and "node_count" in data and ok("node_count") and node_count != len(nodes):
        problems.append(f"node_count={node_count} but nodes lists {len(nodes)} hosts: drop node_count or fix it")

    gpus = data.get("gpus_per_node", DEFAULT_GPUS_PER_NODE)
    overrides = data.get("profile") or {}
    profile: RuntimeProfile | None = None
    profile_set: tuple[str, ...] = ()
    if ok("gpus_per_node") and ok("runtime") and ok("profile"):
        try:
            profile = build_profile(data.get("runtime", "lightcc"), overrides, gpus_per_node=gpus)
            # build_profile's spelling rule: names are case-insensitive, surrounding blanks ignored.
            given = {str(key).strip().upper() for key in overrides}
            profile_set = tuple(name for name in profile.values if name in given)
        except ProfileError as exc:
            problems.extend(f"profile: {p}" if not p.startswith("runtime=") else p for p in exc.problems)

    nccl_vars = {k: _env_text(v) for k, v in (data.get("nccl_env") or {}).items()} if ok("nccl_env") else {}
    if "NCCL_SOCKET_IFNAME" in nccl_vars:
        problem = _nccl_ifname_problem(nccl_vars["NCCL_SOCKET_IFNAME"])
        if problem:
            problems.append(problem)
    env = {k: _env_text(v) for k, v in (data.get("env") or {}).items()} if ok("env") else {}
    profile_names = set(profile.values) if profile else set()
    for key in env:
        if key in nccl_vars:
            problems.append(f"env.{key} is also in nccl_env: set it once")
        if key in profile_names or key.startswith("LIGHT_"):
            problems.append(f"env.{key} is a runtime profile variable: set it under profile so it is validated")
        if key.startswith("NCCL_") and key not in nccl_vars:
            problems.append(f"env.{key}: put NCCL variables under nccl_env (checked and merged with facts there)")

    iface = data.get("network_interface")
    if iface is not None and ok("network_interface"):
        problem = interface_problem(iface)
        if problem:
            problems.append(problem)

    _check_k8s(data.get("k8s") or {}, problems, ok)
    if problems:
        raise JobSpecError(problems)
    assert profile is not None
    return JobSpec(
        name=data["name"],
        image=data["image"],
        command=command,
        node_count=node_count,
        gpus_per_node=gpus,
        profile=profile,
        nodes=tuple(str(h) for h in nodes),
        profile_set=profile_set,
        nccl_env=nccl_vars,
        env=env,
        network_interface=iface,
        ssh_port=data.get("ssh_port", DEFAULT_SSH_PORT),
        hostfile=data.get("hostfile"),
        k8s=_k8s_spec(data.get("k8s") or {}),
    )


def spec_from_contract(data: Mapping[str, Any], views: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The job spec ``data`` with what it leaves out taken from the nodes.

    ``views``: ``{host: view}`` in inventory order, each what ``gpucluster plan`` reports for a
    node: ``slots`` (the plan's ranks per node), ``runtime`` (the one the runtime_profile stage
    settled) and ``contract`` (the node contract, ``ansible_local.gpucluster``: ``nccl`` the nccl_env
    stage's, ``ssh`` the container_ssh stage's).
    A key the spec sets wins; ``nccl_env`` is merged per variable. Defaults taken:

    - ``nodes``: every host, when the spec gives neither ``nodes`` nor ``node_count``;
    - ``gpus_per_node``: the nodes' ranks per node; ``runtime``: the nodes' runtime;
    - ``nccl_env``: the ``NCCL_*`` variables of the training container's environment;
    - ``network_interface`` (Open MPI's TCP): the data NICs the nccl_env stage chose;
    - ``ssh_port``: the training containers' sshd port the container_ssh stage published
      (``contract.ssh.port``), where every node has published it;
    - the NCCL net plugin, where every node's nccl_net_plugin stage has published
      (``contract.net_plugin``): a library NCCL loads adds its ``NCCL_*`` variables to
      ``nccl_env``; a library set aside (the runtime switch to horovod) drops ``NCCL_NET_PLUGIN``,
      so the job never names a plugin the nodes do not load;
    - ``profile``: the runtime variables the runtime_profile stage tuned on the nodes
      (``contract.runtime.env``), where every node published them for the job's runtime. So the
      MPIJob carries the nodes' tuned values (not the vendor defaults) and ``mpirun`` sets the same
      values. ``LIGHT_INTRA_SIZE`` only when the spec leaves ``gpus_per_node`` to the nodes (it
      divides the ranks per node).

    A value the nodes do not agree on, or a node whose NCCL stage has not run, is refused
    (:class:`JobSpecError`, naming the nodes and the fix) unless the spec sets it itself.
    """
    if not isinstance(data, Mapping):
        raise JobSpecError(["the job spec is not a YAML mapping; start from examples/jobs/resnet50-lightcc.yml"])
    if not views:
        raise JobSpecError(["--inventory: the inventory has no node in gpu_nodes; give the cluster's inventory"])
    out = dict(data)
    problems: list[str] = []

    def common(key: str, what: str, read) -> Any:
        values = {host: read(view) for host, view in views.items()}
        distinct = sorted({json.dumps(v, sort_keys=True) for v in values.values()})
        if len(distinct) == 1:
            return next(iter(values.values()))
        shown = ", ".join(f"{h}: {v}" for h, v in values.items())
        problems.append(f"{key}: the nodes differ in {what} ({shown}); set {key} in the job spec")
        return None

    if "nodes" not in data and "node_count" not in data:
        out["nodes"] = list(views)
    if "gpus_per_node" not in data:
        slots = common("gpus_per_node", "ranks per node (gpucluster_plan.slots)", lambda v: v.get("slots"))
        if slots is not None:
            out["gpus_per_node"] = slots
    if "runtime" not in data:
        runtime = common("runtime", "their runtime (switch with playbooks/runtime.yml)", lambda v: v.get("runtime"))
        if runtime is not None:
            out["runtime"] = runtime
    given = data.get("nccl_env") or {}
    if isinstance(given, Mapping):
        contracts = {h: (v.get("contract") or {}).get("nccl") for h, v in views.items()}
        missing = [h for h, c in contracts.items() if not c]
        if missing and not given:
            problems.append(f"nccl_env: {', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no NCCL "
                            "settings yet (the nccl_env stage has not run there): run site.yml on the cluster "
                            "first, or set nccl_env in the job spec")
        merged: dict[str, str] = {}
        if not missing:
            envs = {h: {k: str(val) for k, val in (c.get("container_env") or {}).items() if k.startswith("NCCL_")}
                    for h, c in contracts.items()}
            plugins = {h: (v.get("contract") or {}).get("net_plugin") for h, v in views.items()}
            if all(plugins.values()):
                for h, plugin in plugins.items():
                    if plugin.get("loaded"):
                        envs[h].update({k: str(val) for k, val in (plugin.get("env") or {}).items()
                                        if k.startswith("NCCL_")})
                    else:
                        envs[h].pop("NCCL_NET_PLUGIN", None)
            for name in sorted({k for env in envs.values() for k in env} - set(given)):
                values = {h: env.get(name) for h, env in envs.items()}
                if len(set(values.values())) == 1:
                    merged[name] = next(iter(values.values()))
                else:
                    shown = ", ".join(f"{h}: {v if v is not None else 'unset'}" for h, v in values.items())
                    problems.append(f"nccl_env.{name}: the nodes differ ({shown}); one job needs one value: set "
                                    f"nccl_env.{name} in the job spec (or give the nodes the same NIC names)")
        out["nccl_env"] = {**merged, **given}
        if "network_interface" not in data and not missing:
            nics = common("network_interface", "their data NICs (the nccl_env stage's data_interfaces)",
                          lambda v: list(v["contract"]["nccl"].get("data_interfaces") or ()))
            if nics:
                out["network_interface"] = ",".join(nics)
    _profile_from_contract(data, out, views, problems)
    if "ssh_port" not in data:
        ssh = {h: ((v.get("contract") or {}).get("ssh") or {}).get("port") for h, v in views.items()}
        if all(port is not None for port in ssh.values()):
            port = common("ssh_port", "their training containers' sshd port (container_ssh_port)",
                          lambda v: v["contract"]["ssh"]["port"])
            if port is not None:
                out["ssh_port"] = port
    if problems:
        raise JobSpecError(problems)
    return out


def _profile_from_contract(data: Mapping[str, Any], out: dict[str, Any],
                           views: Mapping[str, Mapping[str, Any]], problems: list[str]) -> None:
    """``out["profile"]``: the spec's runtime profile, filled with the variables every node's
    runtime_profile stage published (``contract.runtime``) for the job's runtime."""
    given = data.get("profile") or {}
    runtime = out.get("runtime", "lightcc")
    published = {h: (v.get("contract") or {}).get("runtime") or {} for h, v in views.items()}
    if not isinstance(given, Mapping) or not all(p.get("runtime") == runtime and isinstance(p.get("env"), Mapping)
                                                 for p in published.values()):
        return
    variables = (LIGHTCC_VARIABLES if runtime == "lightcc" else ()) + HOROVOD_VARIABLES
    taken = {str(k).strip().upper() for k in given}
    names = [v.name for v in variables if v.name not in taken and (v.kind != INTRA or "gpus_per_node" not in data)]
    filled: dict[str, str] = {}
    for name in names:
        values = {h: p["env"].get(name) for h, p in published.items()}
        if len({json.dumps(val) for val in values.values()}) == 1:
            if next(iter(values.values())) is not None:
                filled[name] = str(next(iter(values.values())))
        else:
            shown = ", ".join(f"{h}: {val if val is not None else 'unset'}" for h, val in values.items())
            problems.append(f"profile.{name}: the nodes' runtime profiles differ ({shown}); one job needs one value: "
                            f"set profile.{name} in the job spec (or give the nodes one runtime_profile)")
    if filled:
        out["profile"] = {**filled, **given}


def _quantities(data: Mapping[str, Any]) -> tuple[str | None, str]:
    """``k8s.memory`` and ``k8s.shm_size`` as Kubernetes quantity strings (YAML may give ints)."""
    memory = data.get("memory")
    return (None if memory is None else str(memory)), str(data.get("shm_size", DEFAULT_SHM_SIZE))


def _check_k8s(data: Any, problems: list[str], ok) -> None:
    """The k8s checks after the schema: quantities compared, the pod interface refused."""
    if not isinstance(data, Mapping):
        return
    memory, shm_size = _quantities(data)
    if ok("k8s", "shm_size") and _quantity_bytes(shm_size) == 0:
        problems.append(
            f"k8s.shm_size={shm_size!r} must be a positive Kubernetes quantity, e.g. {DEFAULT_SHM_SIZE} "
            "(the pods' /dev/shm; the Docker path runs with --shm-size=32g)"
        )
    elif memory is not None and ok("k8s", "shm_size") and ok("k8s", "memory"):
        shm_bytes, mem_bytes = _quantity_bytes(shm_size), _quantity_bytes(memory)
        if shm_bytes is not None and mem_bytes is not None and shm_bytes >= mem_bytes:
            problems.append(
                f"k8s.shm_size={shm_size} is not below k8s.memory={memory}: /dev/shm is a memory-backed "
                "emptyDir whose pages count against the worker's memory limit, so raise k8s.memory "
                "(shm plus what the training process needs) or lower k8s.shm_size"
            )
    pod_iface = data.get("network_interface")
    if pod_iface is not None and ok("k8s", "network_interface"):
        problem = interface_problem(pod_iface, "k8s.network_interface")
        if problem:
            problems.append(problem)


def _k8s_spec(data: Mapping[str, Any]) -> K8sSpec:
    """The :class:`K8sSpec` of a k8s mapping that passed every check."""
    memory, shm_size = _quantities(data)
    return K8sSpec(
        api_version=data.get("api_version", "v2beta1"),
        namespace=data.get("namespace", "default"),
        hugepages_1gi=data.get("hugepages_1gi", 0),
        memory=memory,
        shm_size=shm_size,
        tools_dir=data.get("tools_dir", DEFAULT_TOOLS_DIR),
        host_network=data.get("host_network", False),
        network_interface=data.get("network_interface"),
        ssh_auth_mount_path=data.get("ssh_auth_mount_path", "/root/.ssh"),
        volcano=VolcanoSpec(**(data.get("volcano") or {})),
        run_policy=RunPolicySpec(**(data.get("run_policy") or {})),
    )


def _spec(spec: JobSpec | Mapping[str, Any]) -> JobSpec:
    return spec if isinstance(spec, JobSpec) else parse_job_spec(spec)


# --------------------------------------------------------------------------------------------
# The one environment both launchers carry
# --------------------------------------------------------------------------------------------


def job_env(spec: JobSpec | Mapping[str, Any]) -> dict[str, str]:
    """What the job itself sets, ``{NAME: "value"}``: the runtime variables the spec's
    ``profile`` names (documented order; not the defaults of the others), then ``nccl_env`` and
    ``env`` (each sorted by name). ``mpirun`` exports exactly these with ``-x NAME=value``; the
    ``--env-file`` output is this."""
    job = _spec(spec)
    profile = job.profile.env()
    env = {name: profile[name] for name in profile if name in job.profile_set}
    env.update(sorted(job.nccl_env.items()))
    env.update(sorted(job.env.items()))
    return env


def profile_forwarded(spec: JobSpec | Mapping[str, Any]) -> list[str]:
    """Runtime profile variables the spec leaves to the node, in documented order: ``mpirun``
    forwards each by name (``-x NAME``), passing on the launching container's value, i.e. the
    node's tuned ``/etc/gpucluster/runtime.env`` (runtime_profile role)."""
    job = _spec(spec)
    return [name for name in job.profile.values if name not in job.profile_set]


def mpijob_env(spec: JobSpec | Mapping[str, Any]) -> dict[str, str]:
    """The MPIJob containers' environment: the spec's runtime profile *filled with the vendor
    defaults* (pods have no node env file to take the tuned values from), then ``nccl_env`` and
    ``env``. Equal to :func:`job_env` on every variable the job sets; the others are
    :func:`profile_forwarded`, at their defaults."""
    job = _spec(spec)
    env = dict(job.profile.env())
    env.update(sorted(job.nccl_env.items()))
    env.update(sorted(job.env.items()))
    return env


def _passthrough(job: JobSpec) -> list[str]:
    return [name for name in PASSTHROUGH_VARS if name not in job.env]


def _mpirun_head(job: JobSpec) -> list[str]:
    return ["mpirun", "--allow-run-as-root", "-np", str(job.np)]


def _mpirun_tail(job: JobSpec, *, interface: str, ssh_port: int | None) -> list[str]:
    """Mapping, binding, transport and interface options (Horovod docs/mpi.rst)."""
    argv = ["-bind-to", "none", "-map-by", "slot", "--mca", "pml", "ob1", "--mca", "btl", "^openib"]
    if ssh_port is not None:
        argv += ["--mca", "plm_rsh_args", f"-p {ssh_port}"]
    argv += ["--mca", "btl_tcp_if_include", interface, "--mca", "oob_tcp_if_include", interface]
    return argv


def render_mpirun(spec: JobSpec | Mapping[str, Any]) -> list[str]:
    """The ``mpirun`` argv that starts the job from the first node's training container.

    ``mpirun --allow-run-as-root -np N (-H h1:slots,... | --hostfile F) -x PATH
    -x LD_LIBRARY_PATH -x NAME=value ... -bind-to none -map-by slot --mca pml ob1 --mca btl
    ^openib --mca plm_rsh_args "-p PORT" --mca btl_tcp_if_include IF --mca oob_tcp_if_include
    IF command...``: ``-x NAME=value`` for each variable of :func:`job_env` (what the spec
    sets), ``-x NAME`` for the rest of the runtime profile (:func:`profile_forwarded`: the
    container's value from the node's runtime.env). ``IF`` is ``network_interface``, a NIC of the
    node, where the MPIJob uses ``k8s.network_interface`` (the pods' own interface). Host keys
    are expected in known_hosts; no StrictHostKeyChecking override is ever emitted. Needs
    ``nodes`` (or ``hostfile``, e.g. ``/etc/gpucluster/mpi/hostfile``) and ``network_interface``.
    """
    job = _spec(spec)
    problems = []
    if not job.nodes and not job.hostfile:
        problems.append("mpirun needs the host names: give nodes: [host, ...] or hostfile: PATH")
    if job.network_interface is None:
        problems.append(
            "mpirun needs network_interface: the routable NIC (from the network facts) for Open MPI's "
            "TCP traffic; without it Open MPI tries every interface, docker0 included (fixture E18)"
        )
    if problems:
        raise JobSpecError(problems)
    assert job.network_interface is not None
    argv = _mpirun_head(job)
    if job.hostfile:
        argv += ["--hostfile", job.hostfile]
    else:
        argv += ["-H", ",".join(f"{host}:{job.gpus_per_node}" for host in job.nodes)]
    for name in _passthrough(job) + profile_forwarded(job):
        argv += ["-x", name]
    for name, value in job_env(job).items():
        argv += ["-x", f"{name}={value}"]
    argv += _mpirun_tail(job, interface=job.network_interface, ssh_port=job.ssh_port)
    return argv + list(job.command)


def render_mpirun_command(spec: JobSpec | Mapping[str, Any]) -> str:
    """:func:`render_mpirun` as one POSIX-shell-quoted line (``shlex.join``)."""
    return shlex.join(render_mpirun(spec))


def mpirun_exports(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Read back the ``-x`` options of an mpirun argv: ``({NAME: value}, [forwarded names])``."""
    valued: dict[str, str] = {}
    forwarded: list[str] = []
    for flag, arg in zip(argv, argv[1:], strict=False):
        if flag != "-x":
            continue
        name, sep, value = arg.partition("=")
        if sep:
            valued[name] = value
        else:
            forwarded.append(name)
    return valued, forwarded


# --------------------------------------------------------------------------------------------
# MPIJob
# --------------------------------------------------------------------------------------------


def _pod_interface(job: JobSpec) -> str:
    return job.k8s.network_interface or DEFAULT_POD_INTERFACE


def _launcher_argv(job: JobSpec) -> list[str]:
    """The launcher's mpirun: the operator provides the hostfile; env values come from the
    container env (:func:`mpijob_env`), so ``-x NAME`` forwards them to the ranks. Open MPI's
    TCP interface is ``k8s.network_interface`` (default eth0), the pods' own."""
    argv = _mpirun_head(job)
    for name in _passthrough(job):
        argv += ["-x", name]
    for name in mpijob_env(job):
        argv += ["-x", name]
    # v1 (training-operator) starts ranks through kubectl exec, not ssh.
    ssh_port = job.ssh_port if job.k8s.api_version == "v2beta1" else None
    argv += _mpirun_tail(job, interface=_pod_interface(job), ssh_port=ssh_port)
    return argv + list(job.command)


def _labels(job: JobSpec, role: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": job.name, "app.kubernetes.io/component": role,
            "app.kubernetes.io/managed-by": "gpucluster"}


def _pod_spec(job: JobSpec, container: dict[str, Any], *, worker: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container]}
    if job.k8s.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if job.k8s.volcano.enabled:
        spec["schedulerName"] = "volcano"
        if job.k8s.volcano.priority_class:
            spec["priorityClassName"] = job.k8s.volcano.priority_class
    # /dev/shm: Kubernetes gives 64 MiB, NCCL's shared-memory transport needs more (the Docker
    # path runs --shm-size=32g). A memory-medium emptyDir counts against the memory limit.
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": job.k8s.shm_size}}]
    if worker:
        volumes += [
            {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
            {"name": "hugepages", "hostPath": {"path": "/dev/hugepages", "type": "Directory"}},
            {"name": "tools", "hostPath": {"path": job.k8s.tools_dir, "type": "Directory"}},
        ]
    spec["volumes"] = volumes
    return spec


def _template(job: JobSpec, role: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": _labels(job, role)}
    if job.k8s.volcano.podgroup:
        metadata["annotations"] = {"scheduling.k8s.io/group-name": job.name}
    return {"metadata": metadata, "spec": pod_spec}


def _worker_resources(job: JobSpec) -> dict[str, Any]:
    limits: dict[str, Any] = {"nvidia.com/gpu": job.gpus_per_node}
    requests: dict[str, Any] = {}
    if job.k8s.memory:
        limits["memory"] = requests["memory"] = job.k8s.memory
    if job.k8s.hugepages_1gi:
        # Kubernetes requires hugepages requests == limits.
        limits["hugepages-1Gi"] = requests["hugepages-1Gi"] = f"{job.k8s.hugepages_1gi}Gi"
    out: dict[str, Any] = {"limits": limits}
    if requests:
        out["requests"] = requests
    return out


def render_mpijob(spec: JobSpec | Mapping[str, Any]) -> dict[str, Any]:
    """The Kubeflow MPIJob manifest (a dict ready for ``yaml.safe_dump``).

    ``spec.slotsPerWorker`` = GPUs per node; Launcher (1 replica, runs :func:`_launcher_argv`)
    and Worker (``node_count`` replicas, ``sshd -De -p PORT``; privileged; limits
    ``nvidia.com/gpu``, ``memory`` and ``hugepages-1Gi`` with requests equal to limits;
    hostPath mounts ``/sys``, ``/dev/hugepages`` and the tools dir at the same paths). Both
    pods mount an emptyDir ``medium: Memory`` of ``sizeLimit`` ``k8s.shm_size`` at ``/dev/shm``
    (it counts against ``k8s.memory``). Both containers carry :func:`mpijob_env`.
    ``runPolicy`` from ``k8s.run_policy``; with Volcano, ``schedulerName: volcano``,
    ``priorityClassName`` and ``runPolicy.schedulingPolicy`` (``minAvailable`` = workers + 1,
    ``queue``, ``priorityClass``), from which mpi-operator started with
    ``--gang-scheduling=volcano`` (``playbooks/k8s.yml`` with ``k8s_volcano=true``) makes the
    job's PodGroup.
    """
    job = _spec(spec)
    k8s = job.k8s
    env = [{"name": name, "value": value} for name, value in mpijob_env(job).items()]
    shm_mount = {"name": "dshm", "mountPath": "/dev/shm"}
    launcher_argv = _launcher_argv(job)
    launcher = {
        "name": "launcher",
        "image": job.image,
        "command": launcher_argv[:1],
        "args": launcher_argv[1:],
        "env": env,
        "volumeMounts": [dict(shm_mount)],
    }
    worker: dict[str, Any] = {"name": "worker", "image": job.image}
    if k8s.api_version == "v2beta1":
        # mpi-operator v2 reaches workers over ssh (examples/v2beta1: /usr/sbin/sshd -De).
        worker["command"] = ["/usr/sbin/sshd"]
        worker["args"] = ["-De", "-p", str(job.ssh_port)]
    worker |= {
        "env": [dict(item) for item in env],
        "securityContext": {"privileged": True},
        "resources": _worker_resources(job),
        "volumeMounts": [
            dict(shm_mount),
            {"name": "sys", "mountPath": "/sys"},
            {"name": "hugepages", "mountPath": "/dev/hugepages"},
            {"name": "tools", "mountPath": k8s.tools_dir},
        ],
    }
    run_policy: dict[str, Any] = {"cleanPodPolicy": k8s.run_policy.clean_pod_policy}
    for key, value in (
        ("backoffLimit", k8s.run_policy.backoff_limit),
        ("ttlSecondsAfterFinished", k8s.run_policy.ttl_seconds_after_finished),
        ("activeDeadlineSeconds", k8s.run_policy.active_deadline_seconds),
    ):
        if value is not None:
            run_policy[key] = value
    if k8s.volcano.enabled:
        scheduling: dict[str, Any] = {"minAvailable": min_member(job), "queue": k8s.volcano.queue}
        if k8s.volcano.priority_class:
            scheduling["priorityClass"] = k8s.volcano.priority_class
        run_policy["schedulingPolicy"] = scheduling

    mpijob_spec: dict[str, Any] = {"slotsPerWorker": job.gpus_per_node, "runPolicy": run_policy}
    if k8s.api_version == "v2beta1":
        mpijob_spec["mpiImplementation"] = "OpenMPI"
        mpijob_spec["sshAuthMountPath"] = k8s.ssh_auth_mount_path
    mpijob_spec["mpiReplicaSpecs"] = {
        "Launcher": {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": _template(job, "launcher", _pod_spec(job, launcher, worker=False)),
        },
        "Worker": {
            "replicas": job.node_count,
            "restartPolicy": "Never",
            "template": _template(job, "worker", _pod_spec(job, worker, worker=True)),
        },
    }
    return {
        "apiVersion": API_VERSIONS[k8s.api_version],
        "kind": "MPIJob",
        "metadata": {"name": job.name, "namespace": k8s.namespace, "labels": _labels(job, "mpijob")},
        "spec": mpijob_spec,
    }


def min_member(spec: JobSpec | Mapping[str, Any]) -> int:
    """Pods a gang must start together: every worker plus the launcher (``node_count + 1``)."""
    return _spec(spec).node_count + 1


def render_podgroup(spec: JobSpec | Mapping[str, Any]) -> dict[str, Any]:
    """A Volcano PodGroup (``scheduling.volcano.sh/v1beta1``) for the job: ``minMember`` =
    workers + 1, ``queue``, ``priorityClassName``. Only for an mpi-operator started without
    ``--gang-scheduling=volcano`` (``k8s.volcano.podgroup: true``): with the flag the operator
    creates a PodGroup of the same name itself and refuses one it does not own."""
    job = _spec(spec)
    if not job.k8s.volcano.enabled:
        raise JobSpecError(["a PodGroup needs k8s.volcano.enabled: true"])
    pg_spec: dict[str, Any] = {"minMember": min_member(job), "queue": job.k8s.volcano.queue}
    if job.k8s.volcano.priority_class:
        pg_spec["priorityClassName"] = job.k8s.volcano.priority_class
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": job.name, "namespace": job.k8s.namespace, "labels": _labels(job, "podgroup")},
        "spec": pg_spec,
    }


def render_k8s_documents(spec: JobSpec | Mapping[str, Any]) -> list[dict[str, Any]]:
    """What ``kubectl apply`` needs: ``[PodGroup, MPIJob]`` with ``volcano.podgroup``, else ``[MPIJob]``."""
    job = _spec(spec)
    docs = [render_mpijob(job)]
    if job.k8s.volcano.podgroup:
        docs.insert(0, render_podgroup(job))
    return docs
