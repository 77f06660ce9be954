"""Known failures of MPI-in-containers and NCCL networking, read from captured output.

Pure functions, stdlib only, Python 3.8+ (runs on managed nodes and in the controller's filter
plugin ``gpucluster_net``). ``classify(text)`` maps a failure output to a ``Diagnosis``
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

NCCL result codes (``-> 2`` in the call trace) follow ``ncclResult_t`` in nccl.h.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

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

_PREFIX = re.compile(r"^(\S+?):(\d+):(\d+) \[(\d+)\] ")
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
         "nranks": int | None, "hosts": [str],
         "warnings": [str], "error_code": int | None, "error_name": str | None}

    ``transport`` comes from ``Using network X``; without that line it is inferred (NET/IB
    devices -> IB, NET/Socket interfaces -> Socket). ``gdr`` is False when every HCA reports
    "GPU Direct RDMA Disabled", True when one is Enabled or a channel goes ``/GDRDMA``, None
    when the log does not say. A ``non-device net plugin`` line without a loaded plugin is
    NCCL's internal implementation (fixture E14).
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
        "nranks": None,
        "hosts": [],
        "warnings": [],
        "error_code": None,
        "error_name": None,
    }
    transports = []
    gdr_used = False

    def add(lst, item):
        if item not in lst:
            lst.append(item)

    for raw in str(log).splitlines():
        line = raw.rstrip()
        pm = _PREFIX.match(line)
        host = pm.group(1) if pm else None
        if host and "NCCL" in line:
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
            for _idx, dev, port, ll in re.findall(r"\[(\d+)\]([^:\s\[\]]+):(\d+)/(\w+)", main):
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
        if re.search(r"via NET/\S+/GDRDMA", line):
            gdr_used = True
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
    if out["gdr_by_hca"]:
        out["gdr"] = any(out["gdr_by_hca"].values()) or gdr_used
    elif gdr_used:
        out["gdr"] = True
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
    m = (
        re.search(r"host key is known for (\S+?)(?: and|\.|\s|$)", text)
        or re.search(r"Host key for (\S+?) has changed", text)
        or re.search(r"ssh: connect to host (\S+)", text)
    )
    host = m.group(1) if m else "<host> (the output does not name the worker)"
    changed = bool(re.search(r"has changed|REMOTE HOST IDENTIFICATION HAS CHANGED", text))
    what = "holds a different key for" if changed else "has no key for"
    return Diagnosis(
        kind="mpi_ssh_host_key",
        message=f"known_hosts missing for {host}: ssh refused the worker because known_hosts {what} it, so "
        "ORTE could not start its daemons",
        fix="before mpirun, write the worker's host key to known_hosts (ssh-keyscan -p <port> <host> "
        ">> ~/.ssh/known_hosts in the launcher container, or distribute the containers' host keys); "
        "keep StrictHostKeyChecking=yes - never StrictHostKeyChecking=no",
        evidence=ev,
    )


def _rule_memlock(text, ctx):
    ev = _lines(
        text,
        r"max locked memory \(ulimit -l\)|RLIMIT_MEMLOCK|ibv_create_cq\(\) failed: Cannot allocate memory"
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


def _rule_mpi_tcp(text, ctx):
    m = re.search(
        r"^\[([^\]]+)\]\[\[(\d+),(\d+)\],(\d+)\]\[btl_tcp_endpoint\.c:\d+:\w+\] connect\(\) to (\S+) "
        r"failed: (.+?)(?: \((\d+)\))?\s*$",
        text,
        re.M,
    )
    if m:
        host, job, step, rank, addr, err = m.group(1, 2, 3, 4, 5, 6)
        name, what = _which_interface(addr, ctx.get("interfaces"))
        ev = (m.group(0).strip(),)
        where = f"{host} (job [{job},{step}] rank {rank})"
        if name is not None and (what or name.startswith(_VIRTUAL_IFACE_PREFIXES) or name == "lo"):
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
        return Diagnosis(
            kind="mpi_tcp_connect_failed",
            message="Open MPI's TCP BTL on {} could not connect to {}{} ({})".format(
                where, addr, f" ({name})" if name else "", err
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
        pm = _PREFIX.match(line)
        if pm:
            devs = refused.setdefault(pm.group(1), [])
            if f"[{pm.group(4)}]" not in devs:
                devs.append(f"[{pm.group(4)}]")
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


_RULES = (
    _rule_ssh_wrong_sshd,
    _rule_host_key,
    _rule_memlock,
    _rule_mpi_tcp,
    _rule_roce_gid,
    _rule_nccl_bootstrap,
    _rule_gdr_disabled,
    _rule_socket_virtual,
)


def classify_all(text: str, interfaces=None) -> list:
    """Every known failure the output shows, most specific first (see classify())."""
    ctx = {"interfaces": interfaces}
    out = []
    for rule in _RULES:
        d = rule(str(text), ctx)
        if d is not None:
            out.append(d)
    return out


def classify(text: str, interfaces=None):
    """The known failure a captured output shows, as a Diagnosis, or None for an unknown one.

    ``text``: mpirun/ssh/UCX/NCCL output as captured; ``interfaces``: optional node
    interfaces (``[{"name", "ipv4": [cidr]}]``, e.g. nccl_env.parse_ifconfig()) to name the NIC
    that owns an address in the output. A healthy NCCL INFO log gives None.
    """
    found = classify_all(text, interfaces)
    return found[0] if found else None
