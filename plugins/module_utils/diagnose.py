"""Known failures of MPI-in-containers and NCCL networking, read from captured output.

Pure functions, stdlib only, Python 3.8+ (runs on managed nodes and in the controller's filter
plugin file ``plugins/filter/diagnose.py``). ``classify(text)`` maps a failure output to a ``Diagnosis``
(kind, message, fix) or None when it matches no known failure; ``nccl_transport_summary(log)``
reads what NCCL selected from an ``NCCL_DEBUG=INFO`` log; ``parse_ulimit_a`` /
``check_memlock`` check the locked-memory limit RDMA needs.

Kinds and sources (each case is a fixture under tests/fixtures):

- ``mpi_ssh_wrong_sshd``: ``orted: No such file or directory`` after ssh from a
  ``--network=host`` container: ssh reached the host's sshd on port 22, not the container's
  (horovod/horovod #301; Horovod docs/docker.rst runs the container sshd on port 12345 and
  passes ``-mca plm_rsh_args "-p 12345"``). Fixture C34.
- ``mpi_ssh_host_key``: ``Host key verification failed.``: known_hosts lacks the worker's key;
  the fix is to add it (ssh-keyscan), never ``StrictHostKeyChecking=no``
  (NVIDIA/cluster-readiness-engine #111, microsoft/VirtualClient #752). Fixture C35.
- ``rdma_memlock``: ``ibv_create_cq() failed: Cannot allocate memory`` / ``ulimit -l`` 64:
  RDMA pins memory, so the locked-memory limit must be unlimited (openucx/ucx #8229,
  open-mpi/ompi #6468). Fixture C36.
- ``mpi_tcp_wrong_interface``: Open MPI TCP BTL ``connect() to 172.17.0.1 failed`` or
  ``received unexpected process identifier``: MPI used docker0, whose address is the same on
  every host (horovod/horovod #310). Fixtures C30, E18.
- ``nccl_bootstrap_refused``: ``NCCL WARN Call to connect ... Connection refused`` while NCCL
  listed lo or an IPv6 link-local address (horovod/horovod #584). Fixture E17.
- ``nccl_gdr_disabled``: ``NET/IB : GPU Direct RDMA Disabled for HCA`` (NVIDIA/nccl #1537).
  Fixture E14.
- ``nccl_roce_gid``: ``ibv_modify_qp failed with error Connection timed out``: RoCE QP could
  not reach the peer, typically a link-local GID index (NVIDIA/nccl #769). Fixture C32.
- ``nccl_socket_virtual_interface``: NET/Socket picked virbr0/docker0/lo next to the real NIC
  (NVIDIA/nccl-tests #131). Fixture E12.

- ``mpi_not_enough_slots``: ``There are not enough slots available in the system to satisfy the N
  slots`` (help-orte-rmaps-base.txt, PRRTE help-prte-rmaps-base.txt): -np above the hostfile's slots.
- ``mpi_executable_not_found``: ``... was unable to launch the specified application as it could not
  access or execute an executable`` with ``Executable:``/``Node:`` (help-orterun.txt, PRRTE prun).
- ``mpi_daemon_lost``: ``ORTE|PRTE has lost communication with a remote daemon`` (help-errmgr-base.txt):
  the node named by ``Remote daemon: ... on node X`` died or its link broke.
- ``nccl_system_or_remote_error``: ``NCCL error in: <file>:<line>, unhandled system error|remote process
  exited or there was a network error, NCCL version X`` (PyTorch) or ``<op> failed: ...`` (Horovod):
  ncclSystemError 2 / ncclRemoteError 6 (ncclGetErrorString).
- ``torch_nccl_watchdog_timeout``: ``Watchdog caught collective operation timeout: WorkNCCL(...)``
  (ProcessGroupNCCL.cpp): the op, its timeout and the ranks that printed it.
- ``container_shm_exhausted``: ``unable to write to file </torch_...>``, DataLoader's bus error, NCCL's
  ``failed to extend /dev/shm/nccl-...``, ``Bus error (core dumped)``: /dev/shm too small.
- ``k8s_insufficient_device``: ``0/N nodes are available: M Insufficient nvidia.com/gpu`` (or
  ``rdma/...``) in a pod's FailedScheduling event (kube-scheduler's NodeResourcesFit).

NCCL result codes (``-> 2`` in the call trace) follow ``ncclResult_t`` in nccl.h.

``gpucluster diagnose`` (docs/diagnose.md): ``split_blocks(text)`` cuts a paste into the tool
outputs it holds and detects each one's kind from its grammar (or from the shell prompt's
command); ``diagnose_text(text)`` / ``diagnose_inputs([(name, text)])`` read every block with
the module that owns its kind (gpu, rdma, hugepages, bench, nccl_env, daemon_json, peermem,
nccl_net_plugin, container_toolkit, mpi_operator, cloud_errors, policy_routing, and the
classifier above) and return ``Finding`` rows (kind, state ok/warn/fail/unreadable, class,
cause, fix); ``exit_code(findings)`` is 0 healthy, 1 a problem found, 2 unreadable.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from ansible_collections.gpucluster.cluster.plugins.module_utils import (
    bench,
    cloud_errors,
    container_toolkit,
    daemon_json,
    gpu,
    hugepages,
    mpi_operator,
    multi_nic,
    nccl,
    nccl_net_plugin,
    peermem,
    policy_routing,
    rdma,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import strip_launcher_prefix

NCCL_RESULTS = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}

_VIRTUAL_IFACE_PREFIXES = ("docker", "virbr", "veth", "br-", "cni", "flannel", "cali")

# Addresses every host of a kind has, so a peer using them reaches the wrong machine.
_SHARED_NETWORKS = (
    (ipaddress.ip_network("172.17.0.0/16"), "docker0", "Docker's default bridge"),
    (ipaddress.ip_network("192.168.122.0/24"), "virbr0", "libvirt's default bridge"),
    (ipaddress.ip_network("127.0.0.0/8"), "lo", "loopback"),
)


@dataclass(frozen=True)
class Diagnosis:
    """What a failure output means: ``kind`` (stable id), ``message`` (what happened, with the
    hosts/addresses/values read from the output), ``fix`` (what to do), ``evidence`` (the
    lines that decided it)."""

    kind: str
    message: str
    fix: str
    evidence: tuple = field(default=())

    def as_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "fix": self.fix, "evidence": list(self.evidence)}


# --------------------------------------------------------------------------------------------
# ulimit / memlock
# --------------------------------------------------------------------------------------------

_ULIMIT_FLAGS = {
    "b": "sbsize",
    "c": "core",
    "d": "data",
    "e": "nice",
    "f": "fsize",
    "i": "sigpending",
    "k": "kqueues",
    "l": "memlock",
    "m": "rss",
    "n": "nofile",
    "p": "pipe",
    "q": "msgqueue",
    "r": "rtprio",
    "s": "stack",
    "t": "cpu",
    "u": "nproc",
    "v": "as",
    "x": "locks",
    "P": "npts",
    "T": "threads",
}
# dash / busybox print no option letters.
_ULIMIT_WORDS = (
    ("locked memory", "memlock"),
    ("nofiles", "nofile"),
    ("open files", "nofile"),
    ("stack", "stack"),
    ("coredump", "core"),
    ("vmemory", "as"),
)


def parse_ulimit_a(text: str) -> dict:
    """Limits from ``ulimit -a`` (bash, zsh or dash form) by resource name.

    Keys are the setrlimit names (``memlock``, ``nofile``, ``stack``, ``nproc`` ...); values are
    ints in the unit ulimit prints - KiB for memlock, stack, data, rss, as - or the string
    ``"unlimited"``. Raises ValueError when no limit line is found.
    """
    out = {}
    for line in str(text).splitlines():
        s = line.strip()
        # bash: "max locked memory       (kbytes, -l) 64"; zsh: "-l: locked-in-memory size (kbytes) 64"
        m = re.match(r"^.*?\((?:[^()]*,\s*)?-(\w)\)\s+(\S+)\s*$", s) or re.match(
            r"^-(\w):\s+.*?\s(\S+)\s*$", s
        )
        if m:
            key, value = _ULIMIT_FLAGS.get(m.group(1)), m.group(2)
        else:
            key = None
            value = None
            for word, name in _ULIMIT_WORDS:
                m3 = re.match(rf"^{re.escape(word)}\b.*?\s(\S+)\s*$", s)
                if m3:
                    key, value = name, m3.group(1)
                    break
        if not key:
            continue
        if value == "unlimited":
            out[key] = "unlimited"
        elif re.match(r"^-?\d+$", value):
            out[key] = int(value)
    if not out:
        raise ValueError("no limit lines found: pass the output of 'ulimit -a'")
    return out


def check_memlock(limits, rdma: bool = True, min_kib=None):
    """Diagnosis when the locked-memory limit is too low for RDMA, else None.

    ``limits``: parse_ulimit_a() result or raw ``ulimit -a`` text; ``rdma``: whether the job
    uses RDMA (InfiniBand/RoCE verbs, UCX); without RDMA no limit is required. Expected
    value: ``unlimited``; ``min_kib`` accepts an explicit value >= it (KiB) instead.
    """
    if isinstance(limits, str):
        limits = parse_ulimit_a(limits)
    if not rdma:
        return None
    if "memlock" not in limits:
        raise ValueError("no 'max locked memory' (-l) line in the limits")
    value = limits["memlock"]
    if value == "unlimited":
        return None
    if min_kib is not None and int(value) >= int(min_kib):
        return None
    return Diagnosis(
        kind="rdma_memlock",
        message=f"max locked memory is {int(value)} KiB, expected unlimited: RDMA verbs pin their queues "
        "and buffers, so ibv_create_cq/ibv_reg_mr fail with 'Cannot allocate memory'",
        fix=_MEMLOCK_FIX,
        evidence=(f"max locked memory (kbytes, -l) {int(value)}",),
    )


_MEMLOCK_FIX = (
    "raise the locked-memory limit to unlimited where the ranks run: docker run --ulimit "
    'memlock=-1:-1 (or "default-ulimits": {"memlock": {"Name": "memlock", "Hard": -1, '
    '"Soft": -1}} in daemon.json), LimitMEMLOCK=infinity in the dockerd and containerd units, '
    "'* - memlock unlimited' in /etc/security/limits.d for host runs; then re-check 'ulimit -l' "
    "inside the container, not only on the host"
)


# --------------------------------------------------------------------------------------------
# ssh options
# --------------------------------------------------------------------------------------------


def find_insecure_ssh_options(args) -> list:
    """Flag ssh options that switch host key checking off (``StrictHostKeyChecking=no``,
    ``UserKnownHostsFile=/dev/null``) in rendered mpirun/ssh arguments (string or list)."""
    text = " ".join(args) if isinstance(args, (list, tuple)) else str(args)
    findings = []
    if re.search(r"StrictHostKeyChecking\s*[= ]\s*[\"']?(no|off|accept-new)\b", text, re.I):
        findings.append(
            "StrictHostKeyChecking=no (or accept-new) trusts any host key: pre-populate known_hosts "
            "(ssh-keyscan -p <port> <host>) and keep StrictHostKeyChecking=yes"
        )
    if re.search(r"UserKnownHostsFile\s*[= ]\s*[\"']?/dev/null", text, re.I):
        findings.append("UserKnownHostsFile=/dev/null discards host keys: use a real known_hosts file")
    return findings


# --------------------------------------------------------------------------------------------
# NCCL INFO log summary
# --------------------------------------------------------------------------------------------

_ADDR_ITEM = re.compile(r"(?:\[\d+\])?([A-Za-z0-9_.\-]+):(\S+?)<\d+>")


def _addr_items(text: str) -> list:
    out = []
    for name, addr in _ADDR_ITEM.findall(text):
        out.append({"name": name, "address": addr.split("%", 1)[0]})
    return out


def nccl_transport_summary(log: str) -> dict:
    """What NCCL selected, read from an ``NCCL_DEBUG=INFO`` log (interleaved ranks are fine).

    Returns::

        {"nccl_version": "2.16.5+cuda11.8" | None,
         "transport": "IB" | "Socket" | <plugin network name> | None,
         "net_plugin": "internal" | <loaded plugin name> | None,
         "ibverbs_available": False | None,        # False: "Failed to open libibverbs"
         "ib_devices": [{"device": "mlx5_0", "port": 1, "link_layer": "RoCE"|"IB"}],
         "relaxed_ordering": bool,
         "socket_interfaces": [{"name": "eth0", "address": "192.0.2.10"}],
         "bootstrap": [{"host", "name", "address"}], "oob": [{"host", "name", "address"}],
         "gdr": True | False | None, "gdr_by_hca": {"mlx5_0": False},
         "gdr_by_gpu": {"ca000": False},
         "nranks": int | None, "hosts": [str],
         "warnings": [str], "error_code": int | None, "error_name": str | None}

    ``transport`` comes from ``Using network X``; without that line it is inferred (NET/IB
    devices -> IB, NET/Socket interfaces -> Socket). ``gdr`` says whether GPUDirect RDMA
    carried the traffic, from the strongest evidence the log has: the channels NCCL connected
    over the network (``[send] via NET/<net>/<dev>[/GDRDMA]``, any network name, "AWS
    Libfabric" included) when it printed them; else its per-GPU decisions (``GPU Direct RDMA
    Enabled|Disabled for GPU <busid> / HCA <n> (distance ...)``, ``gdr_by_gpu``); else the
    per-HCA capability (``GPU Direct RDMA Enabled|Disabled for HCA <n> '<dev>'``,
    ``gdr_by_hca``: the peer-memory module is there, not that a GPU used it); None when the
    log says none of these. A ``non-device net plugin`` line without a loaded plugin is NCCL's
    internal implementation (fixture E14). Lines may carry a launcher's prefix (Open MPI's
    ``--tag-output``, pdsh's ``host: ``); ``hosts`` are NCCL's own host names.
    """
    out = {
        "nccl_version": None,
        "transport": None,
        "net_plugin": None,
        "ibverbs_available": None,
        "ib_devices": [],
        "relaxed_ordering": False,
        "socket_interfaces": [],
        "bootstrap": [],
        "oob": [],
        "gdr": None,
        "gdr_by_hca": {},
        "gdr_by_gpu": {},
        "nranks": None,
        "hosts": [],
        "warnings": [],
        "error_code": None,
        "error_name": None,
    }
    transports = []
    net_channels = []  # per network channel line: GDRDMA or not

    def add(lst, item):
        if item not in lst:
            lst.append(item)

    for raw in str(log).splitlines():
        line = re.sub(r"[ \t]+", " ", strip_launcher_prefix(raw.strip()))  # a paste's lost indentation and tabs
        pm = nccl_net_plugin.nccl_line_prefix(line)
        host = pm.group("host") if pm else None
        if host:
            add(out["hosts"], host)
        m = re.search(r"NCCL version (\S+)", line)
        if m:
            out["nccl_version"] = m.group(1)
        m = re.search(r"Bootstrap ?: Using (.+)$", line)
        if m:
            for it in _addr_items(m.group(1)):
                add(out["bootstrap"], dict(host=host, **it))
        m = re.search(r"NET/Socket ?: Using (.+)$", line) or re.search(r"NET ?: Using interface (.+)$", line)
        if m:
            for it in _addr_items(m.group(1)):
                add(out["socket_interfaces"], it)
        m = re.search(r"NET/IB ?: Using (.+)$", line)
        if m:
            body = m.group(1)
            main, _, oob = body.partition("; OOB ")
            # [0]mlx5_0:1/IB ..., and from 2.20 merged NICs: [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}
            for _idx, dev, port, ll in re.findall(r"\[(\d+)\] ?([^:\s\[\]={},]+):(\d+)/(\w+)", main):
                add(out["ib_devices"], {"device": dev, "port": int(port), "link_layer": ll})
            if "[RO]" in main:
                out["relaxed_ordering"] = True
            for it in _addr_items(oob):
                add(out["oob"], dict(host=host, **it))
        if re.search(r"Failed to open libibverbs", line):
            out["ibverbs_available"] = False
        if re.search(r"NET/Plugin ?: ?No plugin found|using internal implementation", line):
            out["net_plugin"] = out["net_plugin"] or "internal"
        m = re.search(r"Loaded net plugin (.+?)(?: \(v\d+\))?\s*$", line)
        if m:
            out["net_plugin"] = m.group(1)
        if re.search(r"Using non-device net plugin version", line) and out["net_plugin"] is None:
            out["net_plugin"] = "internal"
        m = re.search(r"Using network (.+?)\s*$", line)
        if m and m.group(1) not in transports:
            transports.append(m.group(1))
        m = re.search(r"GPU Direct RDMA (Enabled|Disabled) for HCA \d+ '([^']+)'", line)
        if m:
            out["gdr_by_hca"][m.group(2)] = m.group(1) == "Enabled"
        m = re.search(r"GPU Direct RDMA (Enabled|Disabled) for GPU (\S+) / HCA \d+", line)
        if m:
            gpu = m.group(2)
            out["gdr_by_gpu"][gpu] = out["gdr_by_gpu"].get(gpu, False) or m.group(1) == "Enabled"
        # src/transport/net.cc: "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" (the
        # network's name may hold spaces; "/GDRDMA", "(PCI)", "/Shared" follow the device, and a
        # proxied connection prints "/<dev>(<proxyRank>)"); 2.4's "Ring %02d : %d -> %d [send] ..."
        m = re.search(r"via NET/(.+?)/\d+(?:\(\d+\))?(\S*)\s*$", line)
        if m:
            net_channels.append("/GDRDMA" in m.group(2))
        m = re.search(r"\bnranks (\d+)", line)
        if m:
            out["nranks"] = int(m.group(1))
        m = re.search(r"NCCL WARN (.*)$", line)
        if m:
            out["warnings"].append(m.group(1).strip())
        m = re.search(r"\S+\.(?:cc|cu|h):\d+ -> (\d+)", line)
        if m and out["error_code"] is None:
            out["error_code"] = int(m.group(1))
            out["error_name"] = NCCL_RESULTS.get(out["error_code"])

    if transports:
        out["transport"] = transports[0]
        if len(transports) > 1:
            out["transports"] = transports
    elif out["ib_devices"]:
        out["transport"] = "IB"
    elif out["socket_interfaces"] or re.search(r"NET/Socket ?: \d+ interfaces found", str(log)):
        out["transport"] = "Socket"
    if net_channels:
        out["gdr"] = any(net_channels)
    elif out["gdr_by_gpu"]:
        out["gdr"] = any(out["gdr_by_gpu"].values())
    elif out["gdr_by_hca"]:
        out["gdr"] = any(out["gdr_by_hca"].values())
    return out


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------


def _lines(text: str, pattern: str) -> tuple:
    rx = re.compile(pattern)
    return tuple(line.strip() for line in str(text).splitlines() if rx.search(line))


def _which_interface(address: str, interfaces=None):
    """(name, description) of the interface that owns ``address``, from facts or known defaults."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None, None
    for iface in interfaces or []:
        name = iface.get("name") or iface.get("device")
        for cidr in iface.get("ipv4") or []:
            try:
                if ipaddress.ip_interface(cidr).ip == ip:
                    return name, None
            except ValueError:
                continue
    for net, name, what in _SHARED_NETWORKS:
        if ip in net:
            return name, what
    return None, None


def _rule_ssh_wrong_sshd(text, ctx):
    ev = _lines(text, r"\borted: (No such file or directory|command not found)")
    if not ev:
        return None
    m = re.search(r"(\S*orted): (?:No such file or directory|command not found)", text)
    path = m.group(1) if m else "orted"
    peer = re.search(r"Permanently added '([^']+)'", text) or re.search(r"ssh: connect to host (\S+)", text)
    where = f" on {peer.group(1)}" if peer else ""
    return Diagnosis(
        kind="mpi_ssh_wrong_sshd",
        message=f"mpirun's ssh landed on a sshd{where} where {path} does not exist: with --network=host the "
        "container's sshd on port 22 loses to the host's own sshd, so orted is looked for on the "
        "host, not in the container (not a PATH problem)",
        fix="run the container sshd on its own port (Horovod docs: 12345) in every container, "
        'including the launcher\'s host; pass -mca plm_rsh_args "-p <port>" (or Port in '
        "~/.ssh/config); preflight 'ssh -p <port> <peer> command -v orted' before mpirun",
        evidence=ev,
    )


def _rule_host_key(text, ctx):
    ev = _lines(text, r"Host key verification failed")
    if not ev:
        return None
    # OpenSSH sshconnect.c: "No %s host key is known for %.200s and you have requested strict
    # checking."; a changed key: "%s host key for %.200s has changed ..." (the key type first, up to
    # OpenSSH 8.4) or "Host key for %.200s has changed ..." (8.5 on), after "Offending %s key in %s:%lu".
    m = (
        re.search(r"host key is known for (\S+?)(?: and|\.|\s|$)", text)
        or re.search(r"[Hh]ost key for (\S+?) has changed", text)
        or re.search(r"ssh: connect to host (\S+)", text)
    )
    host = m.group(1) if m else "<host> (the output does not name the worker)"
    changed = bool(re.search(r"has changed|REMOTE HOST IDENTIFICATION HAS CHANGED", text))
    if changed:
        stale = re.search(r"Offending (?:\w+ )?key in (\S+?:\d+)", text)
        at = f" ({stale.group(1)})" if stale else ""
        return Diagnosis(
            kind="mpi_ssh_host_key",
            message=f"known_hosts holds a stale key for {host}{at}: the worker presented a different host key "
            "(a re-created container generates new host keys unless they are distributed), so ssh refused it "
            "and ORTE could not start its daemons",
            fix=f"confirm the worker's new key is expected, then remove the stale entry (ssh-keygen -R {host} "
            "in the launcher container) and add the current one (ssh-keyscan -p <port> <host> >> "
            "~/.ssh/known_hosts), or distribute fixed host keys to the containers; keep "
            "StrictHostKeyChecking=yes - never StrictHostKeyChecking=no",
            evidence=ev,
        )
    return Diagnosis(
        kind="mpi_ssh_host_key",
        message=f"known_hosts missing for {host}: ssh refused the worker because known_hosts has no key for it, "
        "so ORTE could not start its daemons",
        fix="before mpirun, write the worker's host key to known_hosts (ssh-keyscan -p <port> <host> "
        ">> ~/.ssh/known_hosts in the launcher container, or distribute the containers' host keys); "
        "keep StrictHostKeyChecking=yes - never StrictHostKeyChecking=no",
        evidence=ev,
    )


def _rule_memlock(text, ctx):
    ev = _lines(
        text,
        # UCX >= 1.13 "ibv_create_cq() failed: ..."; 1.12 "ibv_create_cq(cqe=4096) failed: ..." (openucx/ucx #8229)
        r"max locked memory \(ulimit -l\)|RLIMIT_MEMLOCK|ibv_create_cq\([^)]*\) failed: Cannot allocate memory"
        r"|ibv_reg_mr.*Cannot allocate memory",
    )
    if not ev:
        return None
    cur = re.search(r"current: (\d+) kbytes", text)
    if cur:
        value = f"{cur.group(1)} KiB"
    else:
        b = re.search(r"RLIMIT_MEMLOCK is (\d+) bytes", text)
        value = f"{int(b.group(1)) // 1024} KiB" if b else "too low"
    dev = re.search(r"(\bmlx\d+_\w+|\bhfi\d+_\d+|\bbnxt_re\d+):\s*ibv_", text)
    on = f" on {dev.group(1)}" if dev else ""
    return Diagnosis(
        kind="rdma_memlock",
        message=f"RDMA could not pin memory{on}: max locked memory is {value}, expected unlimited "
        "(ibv_create_cq/ibv_reg_mr fail with 'Cannot allocate memory')",
        fix=_MEMLOCK_FIX,
        evidence=ev,
    )


def _tcp_connect_failures(text):
    """(where, address, error, evidence line) of each failed TCP BTL connect() in ``text``.

    Two grammars (opal/mca/btl/tcp/btl_tcp_endpoint.c): the BTL_ERROR line of Open MPI up to 4.0.2,
    ``[host][[job,step],rank][btl_tcp_endpoint.c:N:func] connect() to A failed: E (n)``, whose
    file is ``__FILE__`` as compiled (a VPATH build prints
    ``../../../../../opal/mca/btl/tcp/btl_tcp_endpoint.c``); and from 4.0.3 (open-mpi/ompi #7131)
    the ``client connect fail`` help of help-mpi-btl-tcp.txt: ``WARNING: Open MPI failed to TCP
    connect to a peer MPI process ...`` with ``Local host:``, ``PID:``, ``Message: connect() to
    A:port failed`` and ``Error: E (n)`` lines.
    """
    out = []
    for m in re.finditer(
        r"^\[([^\]]+)\]\[\[(\d+),(\d+)\],(\d+)\]\[(?:[^\]\s]*/)?btl_tcp_endpoint\.c:\d+:\w+\] "
        r"connect\(\) to (\S+) failed: (.+?)(?: \((\d+)\))?\s*$",
        text,
        re.M,
    ):
        host, job, step, rank, addr, err = m.group(1, 2, 3, 4, 5, 6)
        out.append((f"{host} (job [{job},{step}] rank {rank})", addr, err, m.group(0).strip()))
    for chunk in re.split(r"Open MPI failed to TCP connect to a peer MPI process", text)[1:]:
        msg = re.search(r"^Message: connect\(\) to (\S+) failed", chunk, re.M)
        if not msg:
            continue
        host = re.search(r"^Local host: (\S+)", chunk, re.M)
        pid = re.search(r"^PID: (\d+)", chunk, re.M)
        err = re.search(r"^Error: (.+?)(?: \((\d+)\))?\s*$", chunk, re.M)
        addr = re.sub(r":\d+$", "", msg.group(1)).strip("[]")  # "%s:%d": address, then the port
        where = (host.group(1) if host else "a rank") + (f" (pid {pid.group(1)})" if pid else "")
        out.append((where, addr, err.group(1) if err else "error not shown", msg.group(0).strip()))
    return out


def _rule_mpi_tcp(text, ctx):
    failures = _tcp_connect_failures(text)
    if failures:
        named = [(f, _which_interface(f[1], ctx.get("interfaces"))) for f in failures]
        shared = [(f, (n, w)) for f, (n, w) in named
                  if n is not None and (w or n.startswith(_VIRTUAL_IFACE_PREFIXES) or n == "lo")]
        (where, addr, err, _line), (name, what) = (shared or named)[0]
        ev = tuple(dict.fromkeys(f[3] for f in failures))
        if shared:
            return Diagnosis(
                kind="mpi_tcp_wrong_interface",
                message="Open MPI's TCP BTL on {} tried {} ({}{}), an address every host has: the MPI "
                "control/data plane picked {} instead of the data NIC and reached the wrong host ({})".format(
                    where, addr, name, ", " + what if what else "", name, err
                ),
                fix="pin Open MPI to the data NIC: -mca btl_tcp_if_include <data nic or CIDR> -mca "
                "oob_tcp_if_include <data nic> (or -mca btl_tcp_if_exclude lo,docker0), and "
                "NCCL_SOCKET_IFNAME==<data nic> (at least ^docker,lo)",
                evidence=ev,
            )
        more = f"; {len(failures) - 1} more failed connect(s) in the output" if len(failures) > 1 else ""
        return Diagnosis(
            kind="mpi_tcp_connect_failed",
            message="Open MPI's TCP BTL on {} could not connect to {}{} ({}){}".format(
                where, addr, f" ({name})" if name else "", err, more
            ),
            fix=f"check that {addr} is the peer's data NIC address and reachable (firewall, routes); pin "
            "-mca btl_tcp_if_include/oob_tcp_if_include to the data NIC",
            evidence=ev,
        )
    ev = _lines(text, r"received unexpected process identifier")
    if ev:
        return Diagnosis(
            kind="mpi_tcp_wrong_interface",
            message="Open MPI's TCP BTL reached a different process than it dialled: two hosts share an "
            "address on some interface (docker0 172.17.0.1 or virbr0 with host networking), so the "
            "connection landed on the wrong host",
            fix="pin Open MPI to the data NIC: -mca btl_tcp_if_include <data nic> -mca oob_tcp_if_include "
            "<data nic> (or btl_tcp_if_exclude lo,docker0), and NCCL_SOCKET_IFNAME==<data nic>",
            evidence=ev,
        )
    return None


def _rule_nccl_bootstrap(text, ctx):
    ev = _lines(text, r"NCCL WARN .*(Connection refused|connect.*refused)")
    if not ev:
        return None
    s = nccl_transport_summary(text)
    refused = {}
    for line in ev:
        pm = nccl_net_plugin.nccl_line_prefix(strip_launcher_prefix(line))
        if pm:
            devs = refused.setdefault(pm.group("host"), [])
            if f"[{pm.group('dev')}]" not in devs:
                devs.append(f"[{pm.group('dev')}]")
    where = ", ".join("{} devices {}".format(h, ", ".join(d)) for h, d in refused.items()) or "a node"
    bad = []
    good = []
    for it in s["socket_interfaces"] + [dict(name=b["name"], address=b["address"]) for b in s["bootstrap"]]:
        try:
            ip = ipaddress.ip_address(it["address"])
        except ValueError:
            continue
        label = "{}:{}".format(it["name"], it["address"])
        if ip.is_loopback:
            bad.append(label + " (loopback)")
        elif ip.is_link_local:
            bad.append(label + " (IPv6 link-local)" if ip.version == 6 else label + " (link-local)")
        elif it["name"].startswith(_VIRTUAL_IFACE_PREFIXES):
            bad.append(label + " (virtual bridge)")
        elif it["name"] not in good:
            good.append(it["name"])
    listed = "; NCCL listed {} among its interfaces".format(", ".join(bad)) if bad else ""
    code = ""
    if s["error_code"] is not None:
        code = "; NCCL returned {} ({})".format(s["error_code"], s["error_name"] or "unknown")
    nic = good[0] if good else "<data nic>"
    return Diagnosis(
        kind="nccl_bootstrap_refused",
        message=f"NCCL socket connect refused on {where} ({len(ev)} warnings){listed}, so ranks advertised "
        f"addresses their peers cannot reach{code}",
        fix=f"pin the interface: NCCL_SOCKET_IFNAME=={nic} (explicit include of the data NIC, same setting "
        "on every node, in /etc/nccl.conf and the container env); then check that peers can open TCP "
        "connections to each other on it (firewall, net.ipv4.ip_local_port_range)",
        evidence=ev,
    )


def _rule_roce_gid(text, ctx):
    ev = _lines(text, r"ibv_modify_qp failed with error (Connection timed out|Invalid argument)")
    if not ev:
        return None
    return Diagnosis(
        kind="nccl_roce_gid",
        message="a RoCE queue pair could not reach its peer (ibv_modify_qp timed out): typically "
        "NCCL_IB_GID_INDEX names a link-local RoCE v2 GID (fe80::) or a RoCE v1 entry, or the RoCE "
        "subnets are not routed to each other",
        fix="set NCCL_IB_GID_INDEX to the RoCE v2 GID that carries the netdev's IPv4 address (read "
        "'ibv_devinfo -v' or show_gids: the '::ffff:<ipv4>, RoCE v2' entry, often index 3), never the "
        "link-local v2 entry; use the same index on every node",
        evidence=ev,
    )


def _rule_gdr_disabled(text, ctx):
    ev = _lines(text, r"GPU Direct RDMA Disabled for HCA")
    if not ev:
        return None
    hcas = re.findall(r"GPU Direct RDMA Disabled for HCA (\d+) '([^']+)'", text)
    names = []
    for idx, name in hcas:
        label = f"HCA {idx} '{name}'"
        if label not in names:
            names.append(label)
    return Diagnosis(
        kind="nccl_gdr_disabled",
        message="GPUDirect RDMA is disabled for {}: NCCL stages every network transfer through host "
        "memory (lower bus bandwidth, more CPU)".format(", ".join(names)),
        fix="check the peer-memory path in the running kernel: nvidia_peermem loaded (lsmod; "
        "/sys/kernel/mm/memory_peers/nv_mem/version) or DMA-BUF (kernel >= 5.12 with the open GPU "
        "kernel modules); NCCL_NET_GDR_LEVEL not below the GPU-NIC distance in 'nvidia-smi topo -m'; "
        "PCIe ACS/IOMMU not forcing peer traffic through the root complex; in containers the host's "
        "module is what counts",
        evidence=ev,
    )


def _rule_socket_virtual(text, ctx):
    s = nccl_transport_summary(text)
    if s["transport"] != "Socket":
        return None
    bad = [
        i
        for i in s["socket_interfaces"]
        if i["name"].startswith(_VIRTUAL_IFACE_PREFIXES) or i["name"] == "lo"
    ]
    if not bad:
        return None
    good = [i["name"] for i in s["socket_interfaces"] if i not in bad]
    nic = good[0] if good else "<data nic>"
    why = "; libibverbs could not be opened, so no IB/RoCE" if s["ibverbs_available"] is False else ""
    return Diagnosis(
        kind="nccl_socket_virtual_interface",
        message="NCCL uses the socket transport over {}, including {}, whose address is the same on "
        "every host (or unreachable from peers){}".format(
            ", ".join("{}:{}".format(i["name"], i["address"]) for i in s["socket_interfaces"]),
            ", ".join(i["name"] for i in bad),
            why,
        ),
        fix=f"set NCCL_SOCKET_IFNAME=={nic} (explicit include of the data NIC) in /etc/nccl.conf and the "
        "container env; if the node has RDMA NICs, install rdma-core (libibverbs) in the image",
        evidence=_lines(text, r"NET/Socket ?: Using"),
    )


# Open MPI's help text wraps where its translator wrapped it ("satisfy the 16\nslots"), so these
# rules match across line ends with \s+.


def _rule_not_enough_slots(text, ctx):
    # Open MPI v3/v4 orte/mca/rmaps/base/help-orte-rmaps-base.txt [orte-rmaps-base:alloc-error] and
    # PRRTE (Open MPI 5) src/mca/rmaps/base/help-prte-rmaps-base.txt: "There are not enough slots
    # available in the system to satisfy the %d\nslots that were requested by the application:\n\n  %s"
    m = re.search(
        r"There are not enough slots available in the system to satisfy the\s+(\d+)\s+slots\s+that were "
        r"requested by the application:\s*\n\s*(\S[^\n]*)?",
        text,
    )
    if not m:
        return None
    n, app = m.group(1), (m.group(2) or "").strip()
    if app.startswith("Either request"):  # the application line was lost in the paste
        app = ""
    np_ = re.search(r"(?:mpirun|mpiexec|prterun|horovodrun)\b[^\n]*?\s-(?:np|n)\s+(\d+)", text)
    asked = f" (-np {np_.group(1)})" if np_ else ""
    return Diagnosis(
        kind="mpi_not_enough_slots",
        message=f"mpirun was asked for {n} processes{asked}{' of ' + app if app else ''} but its hosts offer "
        "fewer slots: the hostfile's slots=N (or --host host:N, or the scheduler's allocation) add up to less "
        f"than {n}, so no rank was started",
        fix=f"give every host its real slot count - slots=<GPUs per node> per line of the hostfile, or "
        f"--host h1:<gpus>,h2:<gpus> (horovodrun -H h1:<gpus>) - and keep -np <= their sum ({n} needs that "
        "many); under a scheduler check that mpirun read the allocation; --oversubscribe only knowingly "
        "(ranks then share cores and GPUs)",
        evidence=_lines(text, r"There are not enough slots available in the system"),
    )


def _rule_executable_not_found(text, ctx):
    # orte/tools/orterun/help-orterun.txt / PRRTE help-prun.txt [prun:executable-not-found]: "%s was unable
    # to launch the specified application as it could not access\nor execute an executable:\n\nExecutable:
    # %s\nNode: %s\n\nwhile attempting to start process rank %d." (Open MPI 1.3: "could not find an executable").
    m = re.search(
        r"(\S+) was unable to launch the specified application as it could\s+not\s+"
        r"(access\s+or\s+execute|find)\s+an\s+e\s*xecutable",
        text,
    )
    if not m:
        return None
    exe = re.search(r"^Executable: (.+?)\s*$", text, re.M)
    node = re.search(r"^Node: (\S+)", text, re.M)
    rank = re.search(r"while attempting to start process rank (\d+)", text)
    exe_s = exe.group(1) if exe else "<program>"
    node_s = node.group(1) if node else "<node>"
    where = f" on {node_s}" + (f" (rank {rank.group(1)})" if rank else "")
    if exe_s.startswith("-"):
        return Diagnosis(
            kind="mpi_executable_not_found",
            message=f"{m.group(1)} took '{exe_s}' for the program{where}: an option it does not know (misspelt, "
            "or written for another MPI) ended its own options",
            fix=f"check the spelling of {exe_s} against '{m.group(1)} --help' of this Open MPI version "
            "(e.g. --prefix, not -prefix=) and put the program after all mpirun options",
            evidence=_lines(text, r"was unable to launch the specified application|^Executable: |^Node: "),
        )
    return Diagnosis(
        kind="mpi_executable_not_found",
        message=f"{m.group(1)} could not {' '.join(m.group(2).split())} {exe_s}{where}: the program is not at "
        "that path where the rank runs (in that node's container, not the launcher's), not on the PATH "
        "orted starts it with, or not executable",
        fix=f"on {node_s}, in the container the ranks run in, check 'ls -l {exe_s}' and 'command -v {exe_s}': "
        "the program must be in the image or on a mount shared at the same path on every worker, executable "
        "(chmod +x, not on a noexec mount); give an absolute path or pass the PATH (mpirun -x PATH), or copy "
        "it with --preload-binary",
        evidence=_lines(text, r"was unable to launch the specified application|^Executable: |^Node: "),
    )


def _rule_daemon_lost(text, ctx):
    # Open MPI v4 orte/mca/errmgr/base/help-errmgr-base.txt [node-died] and PRRTE (Open MPI 5)
    # help-errmgr-base.txt: "ORTE|PRTE has lost communication with a remote daemon.\n\n  HNP daemon   : %s on
    # node %s\n  Remote daemon: %s on node %s"; Open MPI <= 3: "ORTE has lost communication with its daemon
    # located on node:\n\n  hostname:  %s".
    m = re.search(r"\b(ORTE|PRTE) has lost communication with (?:a remote daemon|its daemon)", text)
    if not m:
        return None
    remote = re.search(r"Remote daemon\s*:\s*(\S+) on node (\S+)", text) or re.search(
        r"located on node:\s*\n\s*hostname:\s*(\S+)", text
    )
    host = remote.group(remote.lastindex) if remote else None
    hnp = re.search(r"HNP daemon\s*:\s*\S+ on node (\S+)", text)
    from_ = f" (launcher daemon on {hnp.group(1)})" if hnp else ""
    who = f"the daemon on {host}" if host else "a remote daemon (the output does not name its node)"
    return Diagnosis(
        kind="mpi_daemon_lost",
        message=f"{m.group(1)} lost {who}{from_}: the node went away (crash, reboot, OOM kill of the daemon or "
        "its container/pod) or the launcher's TCP connection to it broke; every rank there was lost, so the "
        "job was ended",
        fix=f"on {host or 'that node'}: check it is up and why its daemon died - dmesg -T / journalctl -k for "
        "'Out of memory: Killed process' or a panic, the container's or pod's exit reason (OOMKilled, evicted); "
        "if the node is fine, check the launcher-to-node link on the interface the runtime uses (-mca "
        "oob_tcp_if_include <data nic>; Open MPI 5: --prtemca oob_tcp_if_include) and rerun with "
        "--debug-daemons",
        evidence=_lines(text, r"has lost communication with|Remote daemon\s*:|^hostname:"),
    )


# ncclGetErrorString() (src/init.cc): the strings PyTorch ("NCCL error in: <file>:<line>, <string>, NCCL
# version <v>"; "NCCL error: <string>, NCCL version <v>") and Horovod ("<op> failed: <string>") print.
_NCCL_ERROR_STRINGS = (
    (2, "unhandled system error"),
    (6, "remote process exited or there was a network error"),
)


def _rule_nccl_error(text, ctx):
    alts = "|".join(re.escape(s) for _, s in _NCCL_ERROR_STRINGS)
    m = re.search(
        rf"NCCL error(?: in: (\S+?))?:?,? ({alts})(?: \(run with NCCL_DEBUG=\w+ for details\))?,? NCCL version "
        rf"(\S+)",
        text,
    ) or re.search(rf"\b(nccl\w+) failed: ({alts})", text)
    if not m:
        return None
    code = next(c for c, s in _NCCL_ERROR_STRINGS if s == m.group(2))
    name = NCCL_RESULTS[code]
    version = f"NCCL {m.group(3)}" if m.lastindex >= 3 and m.group(3) else "NCCL"
    where = f" in {m.group(1).rsplit('/', 1)[-1]}" if m.group(1) else ""  # PyTorch's file:line, Horovod's op
    rank = re.search(r"\[Rank (\d+)\]|\[rank(\d+)\]:", text)
    on = f" on rank {rank.group(1) or rank.group(2)}" if rank else ""
    last = re.search(r"^Last error:\s*\n(.+)$", text, re.M)
    warns = nccl_transport_summary(text)["warnings"]
    said = ""
    if last:
        said = f"; NCCL's last error: {last.group(1).strip()}"
    elif warns:
        said = f"; first NCCL WARN: {warns[0]}"
    if code == 6:
        what = "a peer went away or the network between ranks failed (a rank crashed or was killed, a link or " \
               "switch port flapped, an IB/RoCE completion error)"
    else:
        what = "a system call or external library NCCL uses failed (socket connect/bind, /dev/shm, " \
               "ibverbs, or a peer closing its connection)"
    return Diagnosis(
        kind="nccl_system_or_remote_error",
        message=f"{version} returned {code} ({name}){on}{where}: {what}{said}",
        fix="rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET on every rank and classify that log (its "
        "NCCL WARN lines name the call that failed); check the ranks' interfaces (NCCL_SOCKET_IFNAME==<data "
        "nic> on every node) and the IB/RoCE ports (ibv_devinfo state PORT_ACTIVE, ibstat); for "
        "ncclRemoteError first look for the rank that died (its own log, dmesg OOM kills)",
        evidence=_lines(text, r"NCCL error|nccl\w+ failed: |^ncclSystemError|^ncclRemoteError|^Last error:"),
    )


def _rule_watchdog_timeout(text, ctx):
    # torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: "[Rank N] Watchdog caught collective operation
    # timeout: WorkNCCL(SeqNum=, OpType=, NumelIn=, NumelOut=, Timeout(ms)=) ran for N milliseconds before
    # timing out." (1.x: "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000)"; 2.4: "[PG ID 0 PG GUID 0 Rank 3]").
    m = re.search(
        r"Watchdog caught collective operation timeout:\s*WorkNCCL\(([^)]*\)?[^)]*)\)\s+ran for (\d+) "
        r"milliseconds before timing out",
        text,
    )
    if not m:
        return None
    fields = dict(re.findall(r"([\w()]+)=([^,]+)", m.group(1)))
    op = fields.get("OpType", "a collective").strip()
    timeout = fields.get("Timeout(ms)")
    seq = fields.get("SeqNum")
    rr = re.findall(r"(?:\bRank (\d+)\]|\[rank(\d+)\]:?)[^\n]*?Watchdog caught", text)
    ranks = list(dict.fromkeys(a or b for a, b in rr))
    on = f" on rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}" if ranks else ""
    limit = f" (timeout {int(timeout) // 1000} s)" if timeout and timeout.strip().isdigit() else ""
    return Diagnosis(
        kind="torch_nccl_watchdog_timeout",
        message=f"PyTorch's NCCL watchdog{on} gave up on {op}{f' #{seq}' if seq else ''} after {m.group(2)} ms"
        f"{limit}: some rank never joined that collective (hung, crashed, or stuck in other work/data "
        "loading) or the network stalled the transfer",
        fix="find the rank that did not reach the collective: the ranks that did NOT print this line, their "
        "logs and py-spy dump; TORCH_NCCL_DESYNC_DEBUG=1 (TORCH_NCCL_TRACE_BUFFER_SIZE for the flight "
        "recorder) names it; if all ranks were in it, rerun with NCCL_DEBUG=INFO and check the links "
        "(nccl-tests between the nodes); raise the timeout (init_process_group(timeout=...)) only for known "
        "long steps",
        evidence=_lines(text, r"Watchdog caught collective operation timeout"),
    )


def _rule_shm_exhausted(text, ctx):
    ev = _lines(
        text,
        # PyTorch (torch/lib/libshm, THAllocator): "unable to write to file </torch_...>: No space left on
        # device (28)"; DataLoader: "ERROR: Unexpected bus error encountered in worker. This might be caused by
        # insufficient shared memory (shm)." / "DataLoader worker (pid N) is killed by signal: Bus error.";
        # NCCL src/misc/shmutils.cc: "Error: failed to extend %s to %ld bytes" (the path is mkstemp's
        # /dev/shm/nccl-<6 random characters>) and "Error while creating shared memory segment"; the
        # shell's "Bus error (core dumped)"; Open MPI's "exited on signal 7 (Bus error)".
        r"unable to write to file </torch_|insufficient shared memory \(shm\)|is killed by signal: Bus error"
        r"|failed to extend /dev/shm/|Error while creating shared memory segment|Bus error \(core dumped\)"
        r"|exited on signal 7 \(Bus error\)|shm_open.*(?:No space left on device|Cannot allocate memory)"
        r"|posix_fallocate failed ?: No space left on device",
    )
    if not ev:
        return None
    nccl = re.search(r"failed to extend (/dev/shm/\S+) to (\d+) bytes", text)
    node = re.search(r"on node (\S+) exited on signal 7", text)
    if nccl:
        what = f"NCCL could not grow {nccl.group(1)} to {nccl.group(2)} bytes"
    elif re.search(r"unable to write to file </torch_|insufficient shared memory|killed by signal: Bus error", text):
        what = "PyTorch could not place shared tensors (DataLoader workers, torch.multiprocessing) in /dev/shm"
    else:
        what = "a process died of SIGBUS" + (f" on {node.group(1)}" if node else "") + \
               ", which in a container is almost always a full /dev/shm"
    return Diagnosis(
        kind="container_shm_exhausted",
        message=f"{what}: /dev/shm is too small (Docker's default is 64 MB)",
        fix="give the container a larger /dev/shm: this collection's training_image role runs it with "
        "--shm-size from training_image_shm_size (default 32g; check 'df -h /dev/shm' inside the container), "
        "or use --ipc=host for a container started by hand; in Kubernetes mount an emptyDir with medium: "
        "Memory (sizeLimit) at /dev/shm",
        evidence=ev,
    )


# kube-scheduler's FitError: "0/N nodes are available: <count> <reason>, ... ." (from 1.26 followed by
# "preemption: 0/N nodes are available: ..."); NodeResourcesFit's reason is "Insufficient <resource>".
_DEVICE_RESOURCE = (
    r"(?:nvidia\.com/[\w.-]+|amd\.com/gpu|rdma/[\w.-]+|openshift\.io/[\w.-]+"
    r"|[\w.-]+\.com/[\w.-]*(?:rdma|sriov|gpu)[\w.-]*)"
)


def _rule_k8s_insufficient_device(text, ctx):
    m = None
    for m in re.finditer(r"(\d+)/(\d+) nodes are available: (.+?)(?:\s+preemption:|$)", text, re.M):
        if re.search(rf"\d+ Insufficient {_DEVICE_RESOURCE}", m.group(3)):
            break
    else:
        return None
    total, reasons = m.group(2), m.group(3).rstrip(". ")
    short = re.findall(rf"(\d+) Insufficient ({_DEVICE_RESOURCE})", reasons)
    others = [r.strip() for r in re.split(r",\s*(?=\d+ )", reasons) if not re.match(r"\d+ Insufficient", r.strip())]
    pod = re.search(r"pod/(\S+)", text) or re.search(r"^Name:\s+(\S+)", text, re.M)
    who = f"pod {pod.group(1)}" if pod else "the pod"
    lacking = ", ".join(f"{n} without enough free {res}" for n, res in short)
    rest = f" (the others: {'; '.join(others)})" if others else ""
    rdma_ = any(res.startswith("rdma/") or "rdma" in res or "sriov" in res for _, res in short)
    gpu_ = any("gpu" in res or res.startswith("nvidia.com/") for _, res in short)
    fix = []
    if gpu_:
        fix.append("check that the GPU nodes advertise GPUs: kubectl describe node <gpu node> must show "
                   "nvidia.com/gpu under Allocatable (device plugin / GPU operator pods Running on it, "
                   "'kubectl -n gpu-operator get pods'); GPUs held by other pods show under Allocated resources")
    if rdma_:
        fix.append("check the RDMA device plugin (k8s-rdma-shared-dev-plugin or SR-IOV) runs on those nodes and "
                   "advertises exactly the resource name the pod requests")
    fix.append("make the MPIJob fit: workers x per-worker limit <= free devices, one worker per node with "
               "nvidia.com/gpu = GPUs per node, enough GPU nodes for the replicas (a launcher needs no GPU)")
    return Diagnosis(
        kind="k8s_insufficient_device",
        message=f"the scheduler could not place {who}: none of the {total} nodes fits - {lacking}{rest}",
        fix="; ".join(fix),
        evidence=_lines(text, r"nodes are available:"),
    )


_RULES = (
    _rule_ssh_wrong_sshd,
    _rule_host_key,
    _rule_memlock,
    _rule_mpi_tcp,
    _rule_roce_gid,
    _rule_nccl_bootstrap,
    _rule_not_enough_slots,
    _rule_executable_not_found,
    _rule_shm_exhausted,
    _rule_k8s_insufficient_device,
    _rule_socket_virtual,
    _rule_nccl_error,
    _rule_watchdog_timeout,
    _rule_daemon_lost,
    _rule_gdr_disabled,
)


def classify_all(text: str, interfaces=None) -> list:
    """Every known failure the output shows, most specific first (see classify())."""
    ctx = {"interfaces": interfaces}
    # Open MPI's --tag-output "[1,0]<stderr>:" (and the other launcher prefixes) hide a rank's own line.
    text = "\n".join(re.sub(r"[ \t]+", " ", strip_launcher_prefix(ln.strip())) for ln in str(text).splitlines())
    out = []
    for rule in _RULES:
        d = rule(str(text), ctx)
        if d is not None:
            out.append(d)
    return out


def classify(text: str, interfaces=None):
    """The known failure a captured output shows, as a Diagnosis, or None for an unknown one.

    ``text``: mpirun/ssh/UCX/NCCL output as captured; ``interfaces``: optional node
    interfaces (``[{"name", "ipv4": [cidr]}]``, e.g. multi_nic.parse_ifconfig()) to name the NIC
    that owns an address in the output. A healthy NCCL INFO log gives None.
    """
    found = classify_all(text, interfaces)
    return found[0] if found else None


# --------------------------------------------------------------------------------------------
# gpucluster diagnose: kind detection on a paste of several outputs, one finding per block
# --------------------------------------------------------------------------------------------
#
# A paste is split into blocks, each read by the reader that owns its kind. Shell prompts
# (``host:~$ ip -4 rule``, ``(container) $ nvidia-smi -L``, ``cmd: ...``) end a block and hint
# the next one's kind from the command; without prompts every line is matched against the
# signature lines of each kind's grammar, and a line with another kind's signature starts a new
# block. Lines without a signature (JSON/YAML bodies, blank lines, banners) stay with the block
# they are in; unsigned lines before the first block join it. Adjacent blocks of one kind merge.

OK, WARN, FAIL, UNREADABLE = "ok", "warn", "fail", "unreadable"

_NCCL_LINE = r"^[^\s:]+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|WARN)|^NCCL (?:INFO|WARN) |^NCCL version \d"
_SIGNATURES = (
    ("nccl-tests", r"^#\s*(?:nccl-tests|Using devices|Rank\s+\d+ Group|size\s+count\s+type|Avg bus bandwidth|"
                   r"Out of bounds values|out-of-place\s+in-place|\(B\)\s+\(elements\)|nThread \d+ nGpus)"),
    ("nccl-log", _NCCL_LINE),
    ("container-toolkit", r"unknown or invalid runtime name|nvidia-container-cli:|unresolvable\s*CDI|"
                          r"could not select device driver|Failed to initialize NVML: Unknown Error|"
                          r"nvidia-container-runtime[\w-]*\"?: (?:no such file|executable file not found)"),
    ("nvidia-smi-topo", r"^GPU0(?:\s+(?:GPU1|NIC0|mlx\S+|CPU Affinity|X))|^Legend:$|^X\s+= Self$|"
                        r"^GPU\d+\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)\s|^NIC Legend:$"),
    ("nvidia-smi-list", r"^GPU \d+: .+\(UUID: GPU-"),
    ("nvidia-smi-query", r"--query-gpu=|gpu=[\w.,]+ --format=csv"),
    ("peer-memory", r"nv_peer_mem|nvidia[-_]peer-?mem|ib_register_peer_memory_client|DKMS make\.log for nv_peer"),
    ("benchmark", r"Img/sec per|Total img/sec on |total images/sec:"),
    ("nccl-conf", r"^(?:echo\s+['\"]?)?NCCL_[A-Z0-9_]+\s*=\s*\S"),
    ("gid-table", r"^GID\[\s*\d+\]:"),
    ("nvidia-smi", r"NVIDIA-SMI \d|^\+-{5,}[-+]*\+$|^\|={5,}|NVIDIA-SMI has failed|couldn't communicate with the "
                   r"NVIDIA driver|Failed to initialize NVML: (?!Unknown Error)|^No devices were found$|"
                   r"Unable to determine the device handle"),
    ("docker-info", r"^(?:Runtimes|Default Runtime|Server Version|Storage Driver|Cgroup Driver|Cgroup Version):"),
    ("daemon-json", r"^\{$|^\"[\w.-]+\"\s*:|unable to configure the Docker daemon with file|"
                    r"the following directives are specified both as a flag and in the configuration file"),
    ("cloud-eni", r"AttachmentLimitExceeded|An error occurred \([\w.]+\) when calling|^status code: \d+, request id:|"
                  r"TencentCloudSDKException|Resource handler returned message|Failed to attach eni|Created a new eni|"
                  r"IP pool stats:|Discovered device number|Exceeded instance eni attachment limit|"
                  r"\"Error\"\s*:\s*\{\s*\"Code\""),
    ("mpi-operator", r"^NAME\s+AGE\s+STATE$|^NAME\s+READY\s+STATUS\s|tasks in gang unschedulable|^status:$|"
                     r"^conditions:$|-(?:launcher|worker-\d+)\s+\d+/\d+\s|FailedScheduling|"
                     r"\d+/\d+ nodes are available:"),
    ("mpi", r"ssh: Could not resolve hostname|ORTE was unable to reliably start|ORTE does not know how to route|"
            r"orted: (?:No such file|command not found)|Host key verification failed|btl_tcp_endpoint|"
            r"received unexpected process identifier|ibv_create_cq\([^)]*\) failed|ssh: connect to host|"
            r"Open MPI failed to TCP connect to a peer|"
            r"Permission denied \(publickey|There are not enough slots available in the system|"
            r"unable to launch the specified application as it could|(?:ORTE|PRTE) has lost communication with"),
    ("training-log", r"NCCL error(?: in)?:|nccl\w+ failed: (?:unhandled system error|remote process exited)|"
                     r"Watchdog caught collective operation timeout|unable to write to file </torch_|"
                     r"insufficient shared memory \(shm\)|is killed by signal: Bus error|Bus error \(core dumped\)"),
    ("hugepages-k8s", r"^hugepages-\d+\w+:\s|^(?:Capacity|Allocatable):$"),
    ("meminfo", r"^(?:MemTotal|MemFree|HugePages_Total|HugePages_Free|HugePages_Rsvd|Hugepagesize|Hugetlb):\s"),
    ("ibstatus", r"^Infiniband device '\S+' port \d+ status:$"),
    ("ibstat", r"^CA '\S+'$|^CA type:|^Number of ports: \d"),
    ("ibv_devinfo", r"^hca_id:\s|^No IB devices found$"),
    ("ibv_devices", r"^device\s+node GUID$|^-{6}\s+-{10,}$"),
    ("ibdev2netdev", r"^\S+ port \d+ ==> \S+ \((?:Up|Down)\)$"),
    ("ulimit", r"max locked memory|^-l: locked-in-memory"),
    ("ifconfig", r"^[\w.-]+: flags=\d+<|^inet \S+\s+netmask |^[\w.-]+\s+Link encap:|^inet addr:"),
    ("policy-routing", r"^\d+:\s+(?:not\s+)?from\s+\S+|^\d+: [\w.@-]+: <[A-Z_,]*>|^link/\w+ [0-9a-f:]{17}|"
                       r"^inet6? [0-9a-f.:]+/\d+|^(?:default|[0-9.]+(?:/\d+)?|[0-9a-f:]+/\d+) (?:via|dev) \S+"),
)
_SIG = tuple((kind, re.compile(rx)) for kind, rx in _SIGNATURES)
_COMMANDS = (
    (r"^ip\b|^sudo ip\b", "policy-routing"), (r"--query-gpu=", "nvidia-smi-query"),
    (r"nvidia-smi\s+-L\b", "nvidia-smi-list"),
    (r"nvidia-smi\s+topo\b", "nvidia-smi-topo"), (r"^(?:sudo )?nvidia-smi\b", "nvidia-smi"),
    (r"docker info\b", "docker-info"), (r"daemon\.json", "daemon-json"), (r"^(?:sudo )?ibstatus\b", "ibstatus"),
    (r"^(?:sudo )?ibstat\b", "ibstat"), (r"ibv_devinfo\b", "ibv_devinfo"), (r"ibv_devices\b", "ibv_devices"),
    (r"ibdev2netdev\b", "ibdev2netdev"), (r"/proc/meminfo", "meminfo"), (r"kubectl describe node", "hugepages-k8s"),
    (r"kubectl (?:get|describe) (?:mpijob|pods?|podgroup)", "mpi-operator"), (r"ulimit\b", "ulimit"),
    (r"ifconfig\b", "ifconfig"),
)
_PROMPT_LINE = re.compile(r"^(?:\([\w-]+\)\s*)?(?:[\w.<>@~:/\[\]-]*[$#]|cmd:)\s+(?P<cmd>(?:sudo\s+)?"
                          r"(?:ip|nvidia-smi|docker|ibstat|ibstatus|ibv_devinfo|ibv_devices|ibdev2netdev|cat|grep|"
                          r"kubectl|ulimit|mpirun|mpiexec|show_gids|rdma|dmesg|journalctl|systemctl|hostnamectl|"
                          r"lspci|ifconfig|lsmod|modprobe|nvidia-ctk|nvidia-container-cli|horovodrun|torchrun|"
                          r"all_reduce_perf|\./build/\w+|uname|ethtool)\b.*)$")


@dataclass(frozen=True)
class Block:
    """One output inside a paste: its ``kind``, 1-based ``first``/``last`` line and its text."""

    kind: str
    first: int
    last: int
    text: str
    command: str | None = None


@dataclass(frozen=True)
class Finding:
    """What one block says: ``kind``, ``state`` (ok/warn/fail/unreadable), ``cls`` (the reader's
    class), ``cause``, ``fix``, where it is (``source``, ``lines``) and the reader's ``reading``."""

    kind: str
    state: str
    cls: str
    cause: str
    fix: str | None = None
    source: str | None = None
    lines: tuple = ()
    reading: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "state": self.state, "class": self.cls, "cause": self.cause, "fix": self.fix,
                "source": self.source, "lines": list(self.lines), "reading": self.reading}


def _line_kind(line):
    s = re.sub(r"[ \t]+", " ", line.strip())  # a paste's tabs match the signatures' spaces
    if not s:
        return None
    for kind, rx in _SIG:
        if rx.search(s):
            return kind
    return None


def _command_kind(cmd):
    cmd = re.sub(r"\s+", " ", cmd.strip())
    for rx, kind in _COMMANDS:
        if re.search(rx, cmd):
            return kind
    return None


def split_blocks(text) -> list:
    """The outputs in a paste, in order, each with the kind its grammar (or command) shows.

    Unsigned lines between blocks stay with the block before them; a segment whose lines match no
    kind is a block of kind ``unknown``.
    """
    lines = str(text).splitlines()
    blocks = []
    cur = None  # [kind, first, last, [lines], command]
    pending = []  # (lineno, line) before the first signed line of a segment
    hint = None
    command = None

    def close():
        nonlocal cur
        if cur is not None:
            blocks.append(cur)
        cur = None

    def flush_pending_unknown():
        nonlocal pending
        body = [ln for _, ln in pending]
        if any(ln.strip() for ln in body):
            first = next(n for n, ln in pending if ln.strip())
            last = max(n for n, ln in pending if ln.strip())
            blocks.append(["unknown", first, last, [ln for n, ln in pending if first <= n <= last], command])
        pending = []

    for lineno, line in enumerate(lines, 1):
        s = line.strip()
        pm = _PROMPT_LINE.match(s)
        if pm:
            close()
            flush_pending_unknown()
            command = pm.group("cmd")
            hint = _command_kind(command)
            continue
        kind = _line_kind(line)
        if kind is None and hint is not None and cur is None and s:
            kind = hint
        if kind is None:
            if cur is None:
                pending.append((lineno, line))
            else:
                cur[3].append(line)
                if s:
                    cur[2] = lineno
            continue
        if cur is not None and cur[0] == kind:
            cur[3].append(line)
            cur[2] = lineno
            continue
        close()
        lead = [(n, ln) for n, ln in pending]
        pending = []
        first = next((n for n, ln in lead if ln.strip()), lineno)
        cur = [kind, first, lineno, [ln for n, ln in lead if n >= first] + [line], command]
    close()
    flush_pending_unknown()
    if any(b[0] == "nccl-tests" for b in blocks):  # nccl-tests prints NCCL INFO lines inside its table
        for b in blocks:
            if b[0] == "nccl-log":
                b[0] = "nccl-tests"
    merged = []
    for kind, first, last, body, cmd in blocks:
        if kind == "policy-routing" and cmd and not body[0].lstrip().startswith("$ "):
            body = ["$ " + cmd] + body  # iproute2 readers need the command (family, table)
        if merged and merged[-1].kind == kind and kind != "unknown":
            prev = merged[-1]
            merged[-1] = Block(kind, prev.first, last, prev.text + "\n" + "\n".join(body), prev.command or cmd)
        else:
            merged.append(Block(kind, first, last, "\n".join(body), cmd))
    return merged


def _from(kind, reading, cls, **extra):
    state = {"ok": OK, "warn": WARN, "fail": FAIL}[reading["severity"]]
    return dict(kind=kind, state=state, cls=reading["class"] if cls is None else cls, cause=reading["cause"],
                fix=reading.get("fix"), reading=reading, **extra)


def _read_nccl(block):
    out = []
    if nccl_net_plugin.has_plugin_lines(block.text):
        st = nccl_net_plugin.read_net_plugin(block.text)
        out.append(_from("nccl-net-plugin", st.as_dict(), None))
    d = classify(block.text)
    s = nccl_transport_summary(block.text)
    if d is not None:
        out.append(dict(kind="nccl-log", state=FAIL, cls=d.kind, cause=d.message, fix=d.fix, reading=d.as_dict()))
        return out
    where = f"NCCL {s['nccl_version']}" if s["nccl_version"] else "NCCL"
    if s["warnings"] or s["error_code"] not in (None, 0):
        counts = {}
        for w in s["warnings"]:
            counts[w] = counts.get(w, 0) + 1
        first = ", ".join(f"{n}x {w!r}" for w, n in list(counts.items())[:3])
        code = f"; NCCL returned {s['error_code']} ({s['error_name']})" if s["error_code"] else ""
        out.append(dict(kind="nccl-log", state=FAIL, cls="NCCL_WARN", reading=s,
                        cause=f"{where}: {len(s['warnings'])} NCCL WARN line(s): {first}{code}; the log does not "
                              "show the root cause (these are not net-plugin errors)",
                        fix="read the lines before the first WARN; rerun with NCCL_DEBUG=INFO "
                            "NCCL_DEBUG_SUBSYS=INIT,NET on every rank"))
        return out
    if not out or s["transport"]:
        out.append(dict(kind="nccl-log", state=OK, cls="NCCL_INIT", reading=s,
                        cause=f"{where}: transport {s['transport'] or 'not in the log'}"
                              + (f", GPUDirect RDMA {'on' if s['gdr'] else 'off'}" if s["gdr"] is not None else "")))
    return out


def _read_nccl_tests(text):
    k = "nccl-tests"
    r = bench.parse_nccl_tests(text)
    if r.ok:
        bw, size, _ = r.peak_busbw()
        return [dict(kind=k, state=OK, cls="NCCL_TESTS_OK", cause=f"{len(r.rows)} sizes, peak busbw {bw} GB/s "
                     f"at {size} B", reading={"peak_busbw": bw, "rows": len(r.rows)})]
    return [dict(kind=k, state=FAIL, cls="NCCL_TESTS_FAILED", cause=r.reason,
                 fix="read the NCCL WARN lines of the failing rank (NCCL_DEBUG=INFO)", reading={"rows": len(r.rows)})]


def _read_block(block):
    """Findings (as dicts without ``source``/``lines``) for one block; ValueError when unreadable."""
    k, text = block.kind, block.text
    if k == "nccl-log":
        return _read_nccl(block)
    if k == "nccl-tests":
        extra = _read_nccl(block) if re.search(_NCCL_LINE, text, re.M) else []
        extra = [f for f in extra if f["state"] != OK or f["kind"] == "nccl-net-plugin"]
        try:
            tests = _read_nccl_tests(text)
        except ValueError as exc:
            tests = [dict(kind=k, state=UNREADABLE, cls="UNREADABLE", cause=str(exc),
                          fix="paste the complete nccl-tests output", reading={})]
        return tests + extra
    if k == "nvidia-smi-query":
        lines = text.splitlines()
        if block.command and "--query-gpu=" in block.command:
            lines = [block.command] + lines
        head = next(i for i, ln in enumerate(lines) if re.search(r"(?:--query-)?gpu=[\w.,]+", ln))
        fields = re.search(r"(?:--query-)?gpu=([\w.,]+)", lines[head]).group(1).split(",")
        rows = gpu.parse_query_gpu_csv("\n".join(lines[head + 1:]), fields)
        return [dict(kind=k, state=OK, cls="QUERY_GPU", cause=f"{len(rows)} GPU row(s), {len(fields)} fields",
                     reading={"fields": fields, "rows": rows})]
    if k == "peer-memory":
        r = peermem.classify_peermem_error(text)
        if r["class"] == "UNKNOWN":
            raise ValueError("peer-memory output: no known nv_peer_mem/nvidia_peermem failure in it")
        return [dict(kind=k, state=FAIL, cls=r["class"], cause=r["message"], fix=None, reading=r)]
    if k == "benchmark":
        r = bench.parse_throughput(text)
        return [dict(kind=k, state=OK, cls="THROUGHPUT", reading={"total": r.total, "gpus": r.gpus, "unit": r.unit},
                     cause=f"{r.tool}: {r.total} {r.unit} total" + (f" on {r.gpus} GPU(s)" if r.gpus else ""))]
    if k == "nccl-conf":
        conf = []
        for ln in text.splitlines():
            m = re.match(r"^\s*(?:echo\s+)?['\"]?(NCCL_\w+\s*=\s*[^'\"\s>]*)['\"]?(?:\s*>>?\s*\S+)?\s*$", ln)
            if m:
                conf.append(m.group(1))
        settings = nccl.parse_nccl_conf("\n".join(conf))
        problems = nccl.lint_nccl_conf("\n".join(conf))
        if problems:
            return [dict(kind=k, state=FAIL, cls="NCCL_CONF_PROBLEM", cause="; ".join(problems),
                         fix="write the data NIC explicitly: NCCL_SOCKET_IFNAME==<nic>",
                         reading={"problems": problems, "settings": settings})]
        return [dict(kind=k, state=OK, cls="NCCL_CONF_OK", cause="nothing to object to",
                     reading={"settings": settings})]
    if k == "gid-table":
        gids = rdma.parse_gid_table(text)
        return [dict(kind=k, state=OK, cls="GID_TABLE", cause=f"{len(gids)} GID entries; RoCE v2 IPv4 index "
                     f"{rdma.pick_roce_gid_index(gids)}", reading={"gids": gids})]
    if k == "nvidia-smi":
        rc = 0 if re.search(r"NVIDIA-SMI \d|Driver Version: ", text) and "Failed" not in text else 1
        st = gpu.driver_state(rc, text)
        state = OK if st["class"] == "READY" else FAIL
        ver = re.search(r"Driver Version: (\S+)", text)
        cause = st["reason"] or ("driver ready" + (f" ({ver.group(1)})" if ver else ""))
        return [dict(kind=k, state=state, cls=st["class"], cause=cause, fix=st["hint"], reading=st)]
    if k == "nvidia-smi-topo":
        try:
            t = gpu.parse_topo_matrix(text)
        except ValueError:
            p2p = gpu.parse_topo_p2p(text)
            return [dict(kind=k, state=OK, cls="TOPOLOGY_P2P", cause="GPU peer-to-peer status matrix",
                         reading={"p2p": p2p})]
        return [dict(kind=k, state=OK, cls="TOPOLOGY", cause=f"{t['gpu_count']} GPUs in the topology matrix",
                     reading={"gpu_count": t["gpu_count"]})]
    if k == "nvidia-smi-list":
        gpus = container_toolkit.parse_nvidia_smi_list(text)
        models = sorted({g["name"] for g in gpus})
        if len(models) > 1:
            return [dict(kind=k, state=WARN, cls="MIXED_GPU_MODELS", reading={"gpus": gpus},
                         cause=f"{len(gpus)} GPUs of {len(models)} models ({', '.join(models)}) on one node",
                         fix="use one GPU model per training node, or pin jobs to one model (CUDA_VISIBLE_DEVICES)")]
        return [dict(kind=k, state=OK, cls="GPUS_LISTED", cause=f"{len(gpus)} x {models[0]}", reading={"gpus": gpus})]
    if k == "container-toolkit":
        return [_from(k, container_toolkit.read_toolkit_error(text), None)]
    if k == "docker-info":
        info = container_toolkit.parse_docker_info_runtimes(text)
        return [dict(kind=k, state=OK, cls="DOCKER_RUNTIMES", reading=info,
                     cause=f"runtimes {', '.join(info['runtimes'])}; default {info['default_runtime']}")]
    if k == "daemon-json":
        try:
            cfg = daemon_json.load(text)
        except daemon_json.DaemonJsonError as exc:
            return [dict(kind=k, state=FAIL, cls="DAEMON_JSON_INVALID", cause=str(exc),
                         fix="fix the file as the message says, then systemctl restart docker", reading={})]
        rts = sorted(cfg.get("runtimes") or {})
        return [dict(kind=k, state=OK, cls="DAEMON_JSON", reading={"config": cfg},
                     cause=f"valid JSON; runtimes {', '.join(rts) or 'none'}; default-runtime "
                           f"{cfg.get('default-runtime', 'not set')}")]
    if k == "cloud-eni":
        return [_from(k, cloud_errors.read_cloud_error(text), None)]
    if k == "mpi-operator":
        d = classify(text)  # a pod's scheduling events (FailedScheduling) read by the classifier
        extra = [dict(kind=k, state=FAIL, cls=d.kind, cause=d.message, fix=d.fix, reading=d.as_dict())] if d else []
        try:
            return [_from(k, mpi_operator.read_job_status(text), None)] + extra
        except ValueError:
            if extra:
                return extra
            raise
    if k == "training-log":
        d = classify(text)
        if d is None:
            raise ValueError("training log: no known failure line in it")
        return [dict(kind=k, state=FAIL, cls=d.kind, cause=d.message, fix=d.fix, reading=d.as_dict())]
    if k == "mpi":
        try:
            launcher = mpi_operator.read_launcher_log(text)
        except ValueError:
            launcher = None
        if launcher and launcher["class"] in ("WORKER_DNS_NOT_RESOLVABLE", "WORKER_SSHD_REFUSED"):
            return [_from("mpi-operator", launcher, None)]
        d = classify(text)
        if d is not None:
            return [dict(kind=k, state=FAIL, cls=d.kind, cause=d.message, fix=d.fix, reading=d.as_dict())]
        if launcher:
            return [_from(k, launcher, None)]
        raise ValueError("MPI output: no known failure line in it")
    if k == "hugepages-k8s":
        cap = hugepages.parse_kubelet_capacity(text, "Capacity")
        pages = {n: v for n, v in cap.items() if n.startswith("hugepages-")}
        if not pages:
            raise ValueError("kubectl describe node: no hugepages-* line under Capacity:")
        return [dict(kind=k, state=OK, cls="KUBELET_HUGEPAGES", reading={"capacity": cap},
                     cause="kubelet capacity " + ", ".join(f"{n}={v} B" for n, v in sorted(pages.items())))]
    if k == "meminfo":
        mi = hugepages.parse_meminfo(text)
        return [dict(kind=k, state=OK, cls="MEMINFO_HUGEPAGES", reading=mi,
                     cause=f"HugePages_Total {mi['total']} x {mi['page_size_kb']} kB, free {mi['free']}")]
    if k in ("ibstatus", "ibv_devinfo", "ibdev2netdev", "ibstat", "ibv_devices"):
        fn = getattr(rdma, {"ibstatus": "parse_ibstatus", "ibv_devinfo": "parse_ibv_devinfo",
                          "ibdev2netdev": "parse_ibdev2netdev", "ibstat": "parse_ibstat",
                          "ibv_devices": "parse_ibv_devices"}[k], None)
        if fn is None:
            return [dict(kind=k, state=WARN, cls="NO_READER", cause=f"{k} output recognised, but rdma.py has no reader "
                         "for it yet", fix="paste 'ibv_devinfo' or 'ibstatus' instead", reading={})]
        recs = fn(text)
        if k == "ibv_devinfo":
            problems = rdma.rdma_problems(recs)
        elif k == "ibstatus":
            problems = [f"{p['hca']} port {p['port']}: state {p['state']}" for p in recs if p.get("state") != "ACTIVE"]
        else:
            problems = []
        n = len(recs)
        if problems:
            return [dict(kind=k, state=FAIL, cls="RDMA_PORT_PROBLEM", cause="; ".join(problems),
                         fix="check cabling and the subnet manager (IB) or the switch port (RoCE); ports must "
                             "be ACTIVE",
                         reading={"records": recs})]
        return [dict(kind=k, state=OK, cls="RDMA_OK", cause=f"{n} record(s), all ACTIVE" if k != "ibdev2netdev"
                     else f"{n} HCA port(s) mapped to netdevs", reading={"records": recs})]
    if k == "ulimit":
        limits = parse_ulimit_a(text)
        d = check_memlock(limits)
        if d is None:
            return [dict(kind=k, state=OK, cls="MEMLOCK_OK", cause="max locked memory unlimited", reading=limits)]
        return [dict(kind=k, state=WARN, cls=d.kind, cause=d.message + " (a problem when the job uses RDMA)",
                     fix=d.fix, reading=limits)]
    if k == "ifconfig":
        ifs = multi_nic.parse_ifconfig(text)
        return [dict(kind=k, state=OK, cls="INTERFACES", cause="interfaces " + ", ".join(i["name"] for i in ifs),
                     reading={"interfaces": ifs})]
    if k == "policy-routing":
        session = policy_routing.read_session(text)
        if not session["rules"]:
            return [dict(kind=k, state=OK, cls="NO_RULES_SHOWN", reading=session,
                         cause="addresses/routes only; paste 'ip rule' too to check policy routing")]
        return [_from(k, policy_routing.check_policy_routing(session), None, )]
    raise ValueError("no known tool output in this block")


def _cross_checks(findings):
    """Findings that need two outputs of one paste: daemon.json vs ``docker info``, host GPUs vs
    a container's NVML error, ``/proc/meminfo`` vs kubelet capacity."""
    by = {}
    for f in findings:
        by.setdefault(f.cls, []).append(f)
    extra = []
    cfg = next((f.reading["config"] for f in by.get("DAEMON_JSON", [])), None)
    info = next((f.reading for f in by.get("DOCKER_RUNTIMES", [])), None)
    wanted = next((f.reading.get("runtime") for f in by.get("RUNTIME_NOT_REGISTERED", [])), None)
    if cfg is not None and info is not None:
        r = container_toolkit.runtime_registration(cfg, info, wanted)
        extra.append(Finding(kind="container-toolkit", state={"ok": OK, "fail": FAIL}[r["severity"]], cls=r["class"],
                             cause=r["cause"], fix=r["fix"], source="(daemon.json + docker info)", reading=r))
    lost = by.get("CONTAINER_LOST_GPU_ACCESS")
    listed = by.get("GPUS_LISTED", []) + by.get("MIXED_GPU_MODELS", [])
    if lost and listed:
        n = len(listed[0].reading["gpus"])
        extra.append(Finding(kind="container-toolkit", state=FAIL, cls="CONTAINER_LOST_GPU_ACCESS",
                             cause=f"the host lists {n} GPU(s) but the container's NVML cannot open them: the "
                                   "container lost its device access, the driver is fine",
                             fix=lost[0].fix, source="(host nvidia-smi -L + container)", reading={"host_gpus": n}))
    settings = {}
    for f in by.get("NCCL_CONF_OK", []) + by.get("NCCL_CONF_PROBLEM", []):
        settings.update(f.reading.get("settings") or {})
    wanted_plugin = settings.get("NCCL_NET_PLUGIN")
    if wanted_plugin:
        for f in findings:
            if f.kind == "nccl-net-plugin" and f.cls in ("FOUND_BUT_INCOMPATIBLE", "PLUGIN_NOT_FOUND",
                                                         "INTERNAL_NETWORK", "PLUGIN_LOAD_ERROR") and f.state != FAIL:
                extra.append(Finding(kind="nccl-net-plugin", state=FAIL, cls=f.cls,
                                     cause=f"NCCL_NET_PLUGIN={wanted_plugin} is set, but: {f.cause}",
                                     fix=f.fix or f"install the plugin NCCL_NET_PLUGIN={wanted_plugin} names and put "
                                                  "its directory on LD_LIBRARY_PATH",
                                     source="(NCCL settings + NCCL log)", reading={"expected": wanted_plugin}))
    mi = next((f.reading for f in by.get("MEMINFO_HUGEPAGES", [])), None)
    cap = next((f.reading["capacity"] for f in by.get("KUBELET_HUGEPAGES", [])), None)
    if mi and cap and mi.get("total") and mi.get("page_size"):
        name = hugepages.kubelet_resource_name(mi["page_size"])
        have = mi["total"] * mi["page_size"]
        if cap.get(name, 0) != have:
            extra.append(Finding(kind="hugepages-k8s", state=FAIL, cls="KUBELET_HUGEPAGES_STALE",
                                 cause=f"the node has {mi['total']} x {mi['page_size_kb']} kB pages ({have} B) but "
                                       f"kubelet reports {name}={cap.get(name, 0)} B: kubelet reads hugepages at start",
                                 fix="allocate the pages at boot (or before kubelet starts), then restart kubelet and "
                                     "check the node's capacity", source="(meminfo + kubectl describe node)",
                                 reading={"meminfo_bytes": have, "kubelet_bytes": cap.get(name, 0)}))
    return extra


def diagnose_text(text, source=None) -> list:
    """Findings for every output in ``text`` (a paste of one or several tool outputs)."""
    out = []
    for block in split_blocks(text):
        lines = (block.first, block.last)
        if block.kind == "unknown":
            continue
        try:
            found = _read_block(block)
        except ValueError as exc:  # ParseError and the other readers' errors are ValueErrors
            found = [dict(kind=block.kind, state=UNREADABLE, cls="UNREADABLE", cause=str(exc),
                          fix="paste the complete output of the command", reading={})]
        for f in found:
            out.append(Finding(source=source, lines=lines, **f))
    return out


def diagnose_inputs(inputs) -> dict:
    """``inputs``: ``[(name, text)]``. Returns ``{"findings": [Finding], "exit_code": int,
    "recognised": bool, "unrecognised": [{"source", "lines"}]}`` (the stretches of text no
    reader claimed, e.g. ``hostnamectl`` output pasted along); see :func:`exit_code`."""
    findings = []
    unrecognised = []
    for name, text in inputs:
        findings.extend(diagnose_text(text, source=name))
        unrecognised.extend({"source": name, "lines": [b.first, b.last]}
                            for b in split_blocks(text) if b.kind == "unknown")
    findings.extend(_cross_checks(findings))
    return {"findings": findings, "exit_code": exit_code(findings), "recognised": bool(findings),
            "unrecognised": unrecognised}


def exit_code(findings) -> int:
    """1 when a finding is ``fail`` (a problem found), else 2 when nothing was recognised or a
    block was unreadable, else 0 (healthy; ``warn`` findings do not fail)."""
    states = {f.state for f in findings}
    if FAIL in states:
        return 1
    if not findings or UNREADABLE in states:
        return 2
    return 0
