"""NCCL and Open MPI network settings from node facts (pure functions, stdlib only).

Runs on managed nodes (Python 3.8+) and on the controller (filter plugin ``gpucluster_net``).

Input shapes
============

**Interface** - any of these three dict shapes (normalize_interface() turns each into the
normalized one):

1. normalized: ``{"name": "enp159s0", "state": "up"|"down"|"unknown", "ipv4": ["198.18.160.6/20"],
   "ipv6": ["fe80::1/64"], "type": "ether"|"loopback"|"bridge"|"bonding"|..., "master": None|"bond0",
   "mtu": 1500}`` (only ``name`` is required; ``ipv4`` entries are CIDR strings);
2. Ansible setup facts ``ansible_<iface>`` (``ansible.builtin.setup``, Linux):
   ``{"device": "eth0", "active": True, "type": "ether", "mtu": 1500, "ipv4": {"address":
   "10.0.0.5", "netmask": "255.255.255.0", "prefix": "24", ...}, "ipv4_secondaries": [...],
   "ipv6": [{"address": ..., "prefix": "64", "scope": "link"}], "interfaces": [...] (bridges),
   "slaves": [...] (bonds)}``; interfaces_from_ansible_facts() walks ``ansible_facts.interfaces``;
3. ``ip -j addr`` entries: ``{"ifname", "operstate", "link_type", "master", "addr_info":
   [{"family": "inet", "local": ..., "prefixlen": ...}]}``.

**RDMA port** - ``{"device": "mlx5_0", "port": 1, "state": "ACTIVE" (any text containing
ACTIVE counts: "PORT_ACTIVE (4)", "4: ACTIVE"), "link_layer": "InfiniBand"|"Ethernet",
"netdev": "enp27s0f0np0" or None, "roce_v2_gid_index": 3 or None, "gids": [parse_gid_table()
entries] or None}``.

Sources
=======

- NCCL environment variables, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html:
  ``NCCL_SOCKET_IFNAME`` is a comma list of interface-name prefixes; ``^`` in front excludes,
  ``=`` in front matches exact names (``=eth0,eth1``: only eth0 and eth1; ``^=docker0``: all but
  docker0); without a setting NCCL tries ``^docker,lo``, then docker, then lo (so ``^docker0``
  alone lets it pick ``lo``: fixture C29). ``NCCL_IB_HCA`` has the same syntax with optional
  ``:port`` (``=mlx5_0:1,mlx5_1:1``). ``NCCL_IB_GID_INDEX``: the GID index used in RoCE mode
  (find it with ``show_gids`` / ``ibv_devinfo -v``; default -1 = auto from NCCL 2.21, 0 before).
  ``NCCL_NET_GDR_LEVEL``: the longest GPU-NIC path where GPUDirect RDMA is used, one of LOC
  (never), PIX, PXB, PHB, SYS. ``NCCL_NET_PLUGIN``: plugin name, NCCL loads
  ``libnccl-net-<name>.so``. ``NCCL_SOCKET_NTHREADS`` (1-16) x ``NCCL_NSOCKS_PERTHREAD`` must not
  exceed 64. ``/etc/nccl.conf`` holds ``KEY=VALUE`` lines, read as-is (no quote stripping).
- Open MPI TCP: ``btl_tcp_if_include`` / ``oob_tcp_if_include`` take interface names or CIDR
  networks; include and exclude lists are mutually exclusive (Open MPI FAQ "tcp"). Host-network
  containers see every host's docker0 as 172.17.0.1, so the TCP BTL must be pinned to the data
  NIC (fixture C30, horovod/horovod #310).
- Several NICs in one subnet (ARP flux): ``arp_ignore``, ``arp_announce``, ``rp_filter`` in
  Linux ``Documentation/networking/ip-sysctl.rst`` (the kernel applies max(all, <iface>) for
  all three); NVIDIA/nccl #1348, #1109, #1269 (fixture C31).
- RoCE v2 GID choice: the IPv4-mapped RoCE v2 entry, never the link-local one (NVIDIA/nccl #769,
  fixture C32). GID types per Linux ``Documentation/ABI/testing/sysfs-class-infiniband``.
"""

from __future__ import annotations

import ipaddress
import re

NEVER_PREFIXES = ("docker", "veth", "virbr")
"""Interfaces that never carry NCCL/MPI traffic, whatever the user asks (prefix match; plus lo)."""

VIRTUAL_PREFIXES = (
    "br-",
    "cni",
    "flannel",
    "cali",
    "tunl",
    "vxlan",
    "kube-",
    "cilium",
    "weave",
    "lxcbr",
    "lxdbr",
)
"""Container/overlay plumbing left out of automatic selection (may be named explicitly)."""

GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
NCCL_DEFAULT_SOCKET_IFNAME = "^docker,lo"


class NcclEnvError(ValueError):
    """Facts from which no sound NCCL/MPI network setting can be rendered; says what to fix."""


# --------------------------------------------------------------------------------------------
# Interfaces
# --------------------------------------------------------------------------------------------


def _cidr(address, prefix=None, netmask=None) -> str:
    if prefix not in (None, ""):
        return f"{address}/{prefix}"
    if netmask:
        return str(ipaddress.ip_interface(f"{address}/{netmask}"))
    return f"{address}/32"


def normalize_interface(fact, name=None) -> dict:
    """One interface in the normalized shape (see module docstring) from any accepted shape."""
    if not isinstance(fact, dict):
        raise NcclEnvError(f"interface facts must be dicts, got {fact!r}")
    if "addr_info" in fact or "ifname" in fact:  # ip -j addr
        ipv4 = [
            "{}/{}".format(a["local"], a["prefixlen"])
            for a in fact.get("addr_info", [])
            if a.get("family") == "inet"
        ]
        ipv6 = [
            "{}/{}".format(a["local"], a["prefixlen"])
            for a in fact.get("addr_info", [])
            if a.get("family") == "inet6"
        ]
        return {
            "name": fact.get("ifname") or name,
            "state": str(fact.get("operstate", "unknown")).lower(),
            "ipv4": ipv4,
            "ipv6": ipv6,
            "type": fact.get("link_type") or "ether",
            "master": fact.get("master"),
            "mtu": fact.get("mtu"),
        }
    if "device" in fact or "active" in fact:  # ansible_<iface>
        v4 = fact.get("ipv4")
        ipv4 = []
        for entry in ([v4] if isinstance(v4, dict) else (v4 or [])) + list(
            fact.get("ipv4_secondaries") or []
        ):
            if isinstance(entry, dict) and entry.get("address"):
                ipv4.append(_cidr(entry["address"], entry.get("prefix"), entry.get("netmask")))
            elif isinstance(entry, str):
                ipv4.append(entry if "/" in entry else entry + "/32")
        ipv6 = [
            _cidr(e["address"], e.get("prefix"))
            for e in (fact.get("ipv6") or [])
            if isinstance(e, dict) and e.get("address")
        ]
        active = fact.get("active")
        return {
            "name": fact.get("device") or name,
            "state": "up" if active else ("down" if active is False else "unknown"),
            "ipv4": ipv4,
            "ipv6": ipv6,
            "type": fact.get("type") or "ether",
            "master": fact.get("master"),
            "mtu": fact.get("mtu"),
        }
    ipv4 = fact.get("ipv4") or []
    if isinstance(ipv4, str):
        ipv4 = [ipv4]
    return {
        "name": fact.get("name") or name,
        "state": str(fact.get("state") or "unknown").lower(),
        "ipv4": [a if "/" in a else a + "/32" for a in ipv4],
        "ipv6": list(fact.get("ipv6") or []),
        "type": fact.get("type") or "ether",
        "master": fact.get("master"),
        "mtu": fact.get("mtu"),
    }


def interfaces_from_ansible_facts(facts: dict) -> list:
    """Normalized interfaces from ``ansible_facts`` (or hostvars with ``ansible_`` keys).

    Looks up each name of ``interfaces`` under ``<name>``, ``ansible_<name>`` and the ``-`` ->
    ``_`` form Ansible uses for fact keys (``br-1a2b`` -> ``ansible_br_1a2b``). Members of
    bridges (``interfaces``) and bonds (``slaves``) get ``master`` set.
    """
    names = facts.get("interfaces") or facts.get("ansible_interfaces") or []
    out = []
    masters = {}
    for name in names:
        fact = None
        for key in (name, name.replace("-", "_"), "ansible_" + name, "ansible_" + name.replace("-", "_")):
            if isinstance(facts.get(key), dict):
                fact = facts[key]
                break
        if fact is None:
            out.append(
                {
                    "name": name,
                    "state": "unknown",
                    "ipv4": [],
                    "ipv6": [],
                    "type": "unknown",
                    "master": None,
                    "mtu": None,
                }
            )
            continue
        norm = normalize_interface(fact, name)
        norm["name"] = name
        out.append(norm)
        for member in list(fact.get("interfaces") or []) + list(fact.get("slaves") or []):
            masters[member] = name
    for iface in out:
        if iface["name"] in masters and not iface.get("master"):
            iface["master"] = masters[iface["name"]]
    return out


_IFCONFIG_OLD = re.compile(r"^(\S+?)\s+Link encap:(.*?)(?:\s+HWaddr\s+(\S+))?\s*$")
_IFCONFIG_NEW = re.compile(r"^(\S+?):\s+flags=\d+<([^>]*)>(?:.*\bmtu\s+(\d+))?")


def parse_ifconfig(text: str) -> list:
    """Normalized interfaces from ``ifconfig`` output, old (``Link encap:``) or new (``flags=``) form.

    A block without a flags line (truncated paste) gets state ``unknown``. Lines before the
    first interface (a prompt, the command) are ignored. Raises NcclEnvError when no interface
    is found.
    """
    out = []
    cur = None
    for line in str(text).splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            m = _IFCONFIG_OLD.match(line)
            if m:
                cur = {
                    "name": m.group(1),
                    "state": "unknown",
                    "ipv4": [],
                    "ipv6": [],
                    "type": "loopback" if "Loopback" in m.group(2) else "ether",
                    "master": None,
                    "mtu": None,
                }
                out.append(cur)
                continue
            m = _IFCONFIG_NEW.match(line)
            if m:
                flags = m.group(2).split(",")
                cur = {
                    "name": m.group(1),
                    "state": "up" if "UP" in flags else "down",
                    "ipv4": [],
                    "ipv6": [],
                    "type": "loopback" if "LOOPBACK" in flags else "ether",
                    "master": None,
                    "mtu": int(m.group(3)) if m.group(3) else None,
                }
                out.append(cur)
                continue
            cur = None
            continue
        if cur is None:
            continue
        s = line.strip()
        m = re.match(r"inet addr:(\S+).*?Mask:(\S+)", s) or re.match(r"inet (\S+)\s+netmask (\S+)", s)
        if m:
            cur["ipv4"].append(str(ipaddress.ip_interface(f"{m.group(1)}/{m.group(2)}")))
            continue
        m = re.match(r"inet6 addr:\s*(\S+)", s) or re.match(r"inet6 (\S+)\s+prefixlen (\d+)", s)
        if m:
            cur["ipv6"].append(m.group(1) if m.lastindex == 1 else f"{m.group(1)}/{m.group(2)}")
            continue
        words = s.split()
        if "MTU:" in s or (words and words[0] in ("UP", "BROADCAST", "LOOPBACK", "MULTICAST")):
            cur["state"] = "up" if "UP" in words else "down"
            if "LOOPBACK" in words:
                cur["type"] = "loopback"
            m = re.search(r"MTU:(\d+)", s)
            if m:
                cur["mtu"] = int(m.group(1))
    if not out:
        raise NcclEnvError("no interface found in the ifconfig text")
    return out


def _is_up(iface: dict) -> bool:
    return iface.get("state") in ("up", "unknown")


def _usable_ipv4(iface: dict) -> list:
    out = []
    for cidr in iface.get("ipv4") or []:
        try:
            itf = ipaddress.ip_interface(cidr)
        except ValueError:
            continue
        if itf.version == 4 and not itf.ip.is_link_local and not itf.ip.is_loopback:
            out.append(itf)
    return out


def _has_ipv4(iface: dict) -> bool:
    for cidr in iface.get("ipv4") or []:
        try:
            if ipaddress.ip_interface(cidr).version == 4:
                return True
        except ValueError:
            continue
    return False


def _never(name: str) -> bool:
    return name == "lo" or name.startswith(NEVER_PREFIXES)


def exclusion_reason(iface: dict, explicit: bool = False):
    """Why an interface must not carry NCCL/MPI traffic, or None when it may.

    ``explicit``: the user named it (then bridges and overlay interfaces other than the never
    list are allowed). The never list - lo, docker*, veth*, virbr*, down interfaces, no IPv4 -
    applies always.
    """
    name = iface.get("name") or ""
    if iface.get("type") == "loopback" or name == "lo" or name.startswith("lo:"):
        return "loopback: peers cannot reach 127.0.0.1"
    if name.startswith("docker"):
        return "Docker bridge: every host has the same address (172.17.0.1 by default)"
    if name.startswith("veth"):
        return "veth: one end of a container link, not a host NIC"
    if name.startswith("virbr"):
        return "libvirt bridge: every host has the same address (192.168.122.1 by default)"
    if not _is_up(iface):
        return "interface is %s" % (iface.get("state") or "down")
    if iface.get("master"):
        return "member of {}: use {} instead".format(iface["master"], iface["master"])
    if not _usable_ipv4(iface):
        return "no routable IPv4 address (loopback/link-local only or none)"
    if not explicit:
        if name.startswith(VIRTUAL_PREFIXES):
            return "container/overlay network interface"
        if iface.get("type") == "bridge":
            return "bridge: name it in data_interfaces if it carries the data network"
    return None


def usable_interfaces(interfaces, data_interfaces=None):
    """Choose the data NICs: ``(selected, excluded)``.

    ``interfaces``: list in any accepted shape; ``data_interfaces``: optional list of names to
    use (e.g. from the GPU-NIC map), checked against the never list. Without it every
    interface that passes exclusion_reason() is used, in fact order. ``selected`` is a list of
    normalized dicts, ``excluded`` a ``{name: reason}`` dict. Raises NcclEnvError when nothing
    is usable or a named interface is missing or forbidden.
    """
    norm = [normalize_interface(i) for i in (interfaces or [])]
    by_name = {i["name"]: i for i in norm}
    excluded = {}
    selected = []
    if data_interfaces:
        if isinstance(data_interfaces, str):
            data_interfaces = [n for n in re.split(r"[,\s]+", data_interfaces) if n]
        for name in data_interfaces:
            if name not in by_name:
                raise NcclEnvError(
                    "data interface {!r} is not on this node (interfaces: {}); fix data_interfaces or "
                    "the GPU-NIC map".format(name, ", ".join(sorted(by_name)) or "none")
                )
            reason = exclusion_reason(by_name[name], explicit=True)
            if reason:
                raise NcclEnvError(f"data interface {name!r} cannot be used: {reason}")
            selected.append(by_name[name])
        for i in norm:
            if i["name"] not in data_interfaces:
                excluded[i["name"]] = "not in data_interfaces"
        return selected, excluded
    for i in norm:
        reason = exclusion_reason(i)
        if reason:
            excluded[i["name"]] = reason
        else:
            selected.append(i)
    if not selected:
        detail = "; ".join("{}: {}".format(*kv) for kv in excluded.items()) or "no interfaces in the facts"
        raise NcclEnvError(
            f"no usable data interface for NCCL/MPI ({detail}). Bring the data NIC up with an IPv4 "
            "address, or name it in data_interfaces"
        )
    return selected, excluded


# --------------------------------------------------------------------------------------------
# NCCL_SOCKET_IFNAME semantics
# --------------------------------------------------------------------------------------------


def parse_ifname_spec(spec: str) -> dict:
    """Split an ``NCCL_SOCKET_IFNAME``/``NCCL_IB_HCA`` value: ``{"exclude", "exact", "items"}``.

    ``items`` is a list of ``(name_or_prefix, port_or_None)``.
    """
    s = str(spec).strip()
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    items = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, port = part.partition(":")
        items.append((name, int(port) if port.isdigit() else None))
    return {"exclude": exclude, "exact": exact, "items": items}


def ifname_matches(spec: str, name: str) -> bool:
    """Whether NCCL would accept interface ``name`` under ``NCCL_SOCKET_IFNAME=spec``."""
    p = parse_ifname_spec(spec)
    hit = any((name == item if p["exact"] else name.startswith(item)) for item, _ in p["items"])
    return not hit if p["exclude"] else hit


def simulate_socket_ifname(spec, interfaces) -> list:
    """Names NCCL's socket code would use, in fact order (up, with an IPv4 address, matching).

    ``spec`` None reproduces NCCL's default chain ``^docker,lo`` -> ``docker`` -> ``lo``.
    An approximation of NCCL's ``findInterfaces`` for IPv4 (the case the fixtures show).
    """
    norm = [normalize_interface(i) for i in interfaces]
    with_addr = [i for i in norm if _is_up(i) and _has_ipv4(i)]

    def pick(s):
        return [i["name"] for i in with_addr if ifname_matches(s, i["name"])]

    if spec is not None:
        return pick(spec)
    for s in (NCCL_DEFAULT_SOCKET_IFNAME, "docker", "lo"):
        found = pick(s)
        if found:
            return found
    return []


def check_socket_ifname(value: str, interfaces=None) -> list:
    """Problems with an ``NCCL_SOCKET_IFNAME`` value (empty list: none found).

    Flags an exclude list that does not exclude ``lo`` (C29: ``^docker0`` lets NCCL pick lo),
    one that leaves other docker bridges eligible, and an include naming a never-use interface.
    With ``interfaces`` it also simulates the selection and flags what would be picked wrongly.
    """
    findings = []
    p = parse_ifname_spec(value)
    names = [n for n, _ in p["items"]]
    if not names:
        findings.append(f"NCCL_SOCKET_IFNAME={value} names no interface")
        return findings
    if p["exclude"]:
        if ifname_matches(value, "lo"):
            findings.append(
                "NCCL_SOCKET_IFNAME={} excludes only {}, so NCCL may pick lo (127.0.0.1, unreachable "
                "from peers); set an explicit include of the data NIC (=<nic>) or at least ^docker,lo".format(
                    value, ",".join(names)
                )
            )
        eligible = [n for n in ("docker0", "docker_gwbridge") if ifname_matches(value, n)]
        if eligible:
            findings.append(
                "NCCL_SOCKET_IFNAME={} leaves Docker bridges eligible ({}); use the prefix 'docker' "
                "without '=' or an explicit include".format(value, ", ".join(eligible))
            )
    else:
        for n in names:
            if n.startswith(NEVER_PREFIXES) or n == "lo" or (not p["exact"] and "lo".startswith(n)):
                findings.append(f"NCCL_SOCKET_IFNAME={value} includes {n}, which never carries NCCL traffic")
    if interfaces is not None:
        picked = simulate_socket_ifname(value, interfaces)
        if not picked:
            findings.append(f"NCCL_SOCKET_IFNAME={value} matches no up interface with an IPv4 address")
        for i in [normalize_interface(x) for x in interfaces]:
            if i["name"] in picked:
                reason = exclusion_reason(i, explicit=True)
                if reason:
                    findings.append("NCCL would use {}: {}".format(i["name"], reason))
    return findings


def parse_nccl_conf(text: str) -> dict:
    """``KEY=VALUE`` lines of an nccl.conf as NCCL reads them (split at the first ``=``).

    Lines without ``=`` and ``#`` comments are skipped; the value is kept verbatim. The FIRST
    line that sets a key wins, as in NCCL: src/misc/param.cc ``setEnvFile`` calls
    ``setenv(name, value, 0)``, which never overwrites a variable already set.
    """
    out = {}
    for line in str(text).splitlines():
        s = line.strip()
        if not s or s.startswith("#") or "=" not in s:
            continue
        key, _, value = s.partition("=")
        out.setdefault(key.strip(), value)
    return out


NCCL_CONF_BEGIN = ("# BEGIN gpucluster nccl_env managed block (first, so NCCL takes these values; "
                   "edits inside are overwritten)")
NCCL_CONF_END = "# END gpucluster nccl_env managed block"
NCCL_CONF_OVERRIDDEN = "# gpucluster: overridden by the managed block above, kept for reference: "
_LEGACY_HEADER = "# Managed by Ansible (gpucluster)"


def merge_nccl_conf(existing, env) -> dict:
    """New ``/etc/nccl.conf`` text: gpucluster's managed block first, the user's lines kept after it.

    ``existing``: the file's text ('' when absent); ``env``: ``{NAME: value}`` (or the
    render_nccl_env() result). NCCL takes the first line that sets a variable (see
    parse_nccl_conf), so the block comes first and wins; a user line outside it that sets a key
    the block manages would be dead and misleading, so it is commented out
    (``NCCL_CONF_OVERRIDDEN`` + the line) and listed in ``overridden``. Every other line (comments,
    NCCL_DEBUG, NCCL_IB_TIMEOUT, ...) is kept as it is, in its order. A file written by an
    earlier gpucluster version (its ``# Managed by Ansible (gpucluster)`` header) was all
    gpucluster's: it is replaced. Returns ``{"text", "overridden" (list of lines),
    "user_lines" (list)}``; rerunning on its own output returns the same text.
    """
    body = render_nccl_conf(env).splitlines()[1:]
    managed = {line.partition("=")[0] for line in body}
    lines = str(existing or "").splitlines()
    if lines and lines[0].startswith(_LEGACY_HEADER):
        lines = []
    user, inside = [], False
    for line in lines:
        if line.startswith(NCCL_CONF_BEGIN.split(" (")[0]):
            inside = True
            continue
        if inside:
            inside = not line.startswith(NCCL_CONF_END)
            continue
        user.append(line)
    overridden, kept = [], []
    for line in user:
        s = line.strip()
        key = s.partition("=")[0].strip()
        if s and not s.startswith("#") and "=" in s and key in managed:
            overridden.append(line)
            kept.append(NCCL_CONF_OVERRIDDEN + line)
        else:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    text = "\n".join([NCCL_CONF_BEGIN] + body + [NCCL_CONF_END] + kept) + "\n"
    return {"text": text, "overridden": overridden, "user_lines": kept}


def lint_nccl_conf(text: str, interfaces=None) -> list:
    """Findings for an existing ``/etc/nccl.conf`` (see check_socket_ifname()); empty = clean."""
    findings = []
    conf = parse_nccl_conf(text)
    for key, value in conf.items():
        if value[:1] in ("'", '"'):
            findings.append(f"{key}={value}: NCCL does not strip quotes; write the bare value")
    if "NCCL_SOCKET_IFNAME" in conf:
        findings.extend(check_socket_ifname(conf["NCCL_SOCKET_IFNAME"].strip("'\""), interfaces))
    return findings


# --------------------------------------------------------------------------------------------
# RDMA: HCAs and GID index
# --------------------------------------------------------------------------------------------

_GID_DEVINFO = re.compile(r"GID\[\s*(\d+)\]:\s*([0-9A-Fa-f:.]+)(?:,\s*(RoCE v[12]|IB))?")
_GID_SHOWGIDS = re.compile(
    r"^(\S+)\s+(\d+)\s+(\d+)\s+([0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){7})\s+(?:(\d+\.\d+\.\d+\.\d+)\s+)?(v[12])\s*(\S+)?\s*$"
)


def _gid_entry(index, gid, gid_type, device=None, port=None, netdev=None) -> dict:
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        addr = None
    mapped = addr.ipv4_mapped if addr is not None else None
    return {
        "index": int(index),
        "gid": gid,
        "type": gid_type,
        "ipv4": str(mapped) if mapped else None,
        "link_local": bool(addr is not None and addr.is_link_local),
        "device": device,
        "port": port,
        "netdev": netdev,
    }


def parse_gid_table(text: str) -> list:
    """GID entries from ``ibv_devinfo -v`` (``GID[  3]: ::ffff:192.0.2.6, RoCE v2``) or ``show_gids``.

    Returns ``[{"index", "gid", "type" ("RoCE v1"|"RoCE v2"|"IB"|None), "ipv4" (the
    IPv4-mapped address or None), "link_local", "device", "port", "netdev"}]``; device/port come
    from ``hca_id:``/``port:`` lines when present. Raises NcclEnvError when no entry is found.
    """
    out = []
    device = None
    port = None
    for line in str(text).splitlines():
        s = line.strip()
        m = re.match(r"hca_id:\s*(\S+)", s)
        if m:
            device, port = m.group(1), None
            continue
        m = re.match(r"port:\s*(\d+)$", s)
        if m:
            port = int(m.group(1))
            continue
        m = _GID_DEVINFO.search(s)
        if m:
            out.append(_gid_entry(m.group(1), m.group(2), m.group(3), device, port))
            continue
        m = _GID_SHOWGIDS.match(s)
        if m:
            out.append(
                _gid_entry(
                    m.group(3), m.group(4), "RoCE " + m.group(6), m.group(1), int(m.group(2)), m.group(7)
                )
            )
    if not out:
        raise NcclEnvError("no GID entries found: pass 'ibv_devinfo -v -d <hca>' or 'show_gids' output")
    return out


def select_roce_v2_gid_index(gids, ipv4=None):
    """Index of the RoCE v2 GID carrying an IPv4 address (lowest such index), or None.

    ``gids``: parse_gid_table() entries; ``ipv4``: optional address or list of addresses (or
    CIDRs) of the HCA's netdev - then only a GID mapping one of them is chosen. Link-local
    RoCE v2 GIDs (``fe80::``) are never chosen: they time out across subnets (C32: index 1
    fails, index 3 works).
    """
    wanted = None
    if ipv4:
        items = [ipv4] if isinstance(ipv4, str) else list(ipv4)
        wanted = {str(ipaddress.ip_interface(a).ip) for a in items}
    best = None
    for g in gids:
        if g.get("type") != "RoCE v2" or not g.get("ipv4") or g.get("link_local"):
            continue
        if wanted is not None and g["ipv4"] not in wanted:
            continue
        if best is None or g["index"] < best:
            best = g["index"]
    return best


def _natural_key(text: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def _port_key(port: dict) -> str:
    return "{}:{}".format(port["device"], port["port"])


def normalize_rdma_port(port: dict) -> dict:
    """An RDMA port dict (module docstring shape) with ``port`` as int and ``active`` added."""
    out = dict(port)
    out["device"] = str(port.get("device") or port.get("hca") or "")
    out["port"] = int(port.get("port") or 1)
    out["active"] = "ACTIVE" in str(port.get("state", "")).upper()
    ll = str(port.get("link_layer") or "").lower()
    out["link_layer"] = (
        "InfiniBand" if ll.startswith("inf") or ll == "ib" else ("Ethernet" if ll.startswith("eth") else None)
    )
    return out


def select_hcas(rdma_ports, interfaces=None, hcas=None):
    """Choose the HCA ports for ``NCCL_IB_HCA``: ``(chosen, excluded)``.

    Only ACTIVE ports. When both link layers are present the InfiniBand ports are the
    training fabric and the Ethernet ones (front-end NICs) are left out (fixture C05). A RoCE
    port whose netdev is known and down is left out. ``hcas``: explicit ``["mlx5_0:1", ...]``
    or ``["mlx5_bond_0"]`` (port 1). Returns normalized port dicts (natural order) and
    ``{"mlx5_2:1": reason}``.
    """
    ports = [normalize_rdma_port(p) for p in (rdma_ports or [])]
    ports.sort(key=lambda p: (_natural_key(p["device"]), p["port"]))
    up_netdevs = None
    if interfaces is not None:
        up_netdevs = {}
        for i in interfaces:
            n = normalize_interface(i)
            up_netdevs[n["name"]] = _is_up(n)
    excluded = {}
    if hcas:
        if isinstance(hcas, str):
            hcas = [h for h in re.split(r"[,\s]+", hcas.lstrip("=")) if h]
        want = []
        for h in hcas:
            dev, _, port = str(h).partition(":")
            want.append((dev, int(port) if port else 1))
        chosen = []
        for dev, port in want:
            match = [p for p in ports if p["device"] == dev and p["port"] == port]
            if not match:
                raise NcclEnvError(f"HCA {dev}:{port} is not on this node")
            if not match[0]["active"]:
                raise NcclEnvError(
                    "HCA {}:{} is not ACTIVE (state {})".format(dev, port, match[0].get("state"))
                )
            chosen.append(match[0])
        return chosen, excluded
    active = []
    for p in ports:
        key = _port_key(p)
        if not p["active"]:
            excluded[key] = "port state %s, not ACTIVE" % (p.get("state") or "unknown")
        elif p["link_layer"] is None:
            excluded[key] = "unknown link layer {!r}".format(p.get("link_layer"))
        elif (
            p["link_layer"] == "Ethernet"
            and up_netdevs is not None
            and p.get("netdev") in up_netdevs
            and not up_netdevs[p["netdev"]]
        ):
            excluded[key] = "RoCE netdev {} is down".format(p["netdev"])
        else:
            active.append(p)
    if any(p["link_layer"] == "InfiniBand" for p in active):
        for p in active:
            if p["link_layer"] == "Ethernet":
                excluded[_port_key(p)] = "Ethernet port next to an InfiniBand fabric"
        active = [p for p in active if p["link_layer"] == "InfiniBand"]
    return active, excluded


def roce_gid_index(ports, interfaces=None) -> int:
    """The one ``NCCL_IB_GID_INDEX`` for RoCE ports (Ethernet link layer).

    Per port: ``roce_v2_gid_index`` when given, else select_roce_v2_gid_index() over
    ``gids`` restricted to the netdev's IPv4 addresses when the interfaces are known. The value
    is global in NCCL, so all ports must agree. Raises NcclEnvError otherwise.
    """
    addrs = {}
    for i in interfaces or []:
        n = normalize_interface(i)
        addrs[n["name"]] = n.get("ipv4") or []
    found = {}
    for p in ports:
        key = _port_key(p)
        idx = p.get("roce_v2_gid_index")
        if idx is None and p.get("gids"):
            idx = select_roce_v2_gid_index(p["gids"], addrs.get(p.get("netdev")) or None)
        if idx is None:
            raise NcclEnvError(
                "no RoCE v2 GID with an IPv4 address on {} (netdev {}): GID entries come from the "
                "netdev's IP addresses, so give {} an IPv4 address (link-local RoCE v2 GIDs fail across "
                "subnets)".format(key, p.get("netdev") or "unknown", p.get("netdev") or "the netdev")
            )
        found[key] = int(idx)
    values = sorted(set(found.values()))
    if len(values) > 1:
        raise NcclEnvError(
            "RoCE v2 GID index differs between HCAs ({}) but NCCL_IB_GID_INDEX is one value: make the "
            "GID tables agree (same address layout on every netdev) or leave NCCL_IB_GID_INDEX unset on "
            "NCCL >= 2.21".format(", ".join(f"{k}={v}" for k, v in sorted(found.items())))
        )
    return values[0]


# --------------------------------------------------------------------------------------------
# Several NICs in one subnet
# --------------------------------------------------------------------------------------------


def same_subnet_groups(interfaces) -> list:
    """Groups (sorted name lists, >= 2 members) of interfaces with an IPv4 address in one network."""
    nets = {}
    for i in interfaces:
        n = normalize_interface(i)
        for itf in _usable_ipv4(n):
            nets.setdefault(str(itf.network), [])
            if n["name"] not in nets[str(itf.network)]:
                nets[str(itf.network)].append(n["name"])
    return [sorted(v, key=_natural_key) for _, v in sorted(nets.items()) if len(v) > 1]


def _sysctl_name(iface: str) -> str:
    # sysctl(8) and ansible.posix.sysctl use '/' for a '.' inside one path element (VLAN eth0.100).
    return iface.replace(".", "/")


def arp_sysctls(interfaces, arp_ignore: int = 1, arp_announce: int = 2, rp_filter: int = 2) -> dict:
    """Per-NIC sysctls for several NICs in one subnet: ``{"net.ipv4.conf.<if>.<key>": "value"}``.

    ``interfaces``: names or interface dicts. Defaults: ``arp_ignore=1`` (answer ARP only for
    addresses on the receiving NIC; 2 also checks the sender's subnet, as NCCL #1269 suggests),
    ``arp_announce=2`` (use the best local address of the outgoing NIC), ``rp_filter=2`` (loose;
    0 turns the check off; strict 1 drops replies that arrive on a sibling NIC). Source:
    Linux ip-sysctl.rst; the kernel applies max(conf/all, conf/<if>) for each of the three.
    """
    if int(arp_ignore) not in (1, 2):
        raise NcclEnvError(f"arp_ignore must be 1 or 2 for several NICs in one subnet, got {arp_ignore!r}")
    if int(arp_announce) != 2:
        raise NcclEnvError(f"arp_announce must be 2 for several NICs in one subnet, got {arp_announce!r}")
    if int(rp_filter) not in (0, 2):
        raise NcclEnvError("rp_filter must be 2 (loose) or 0 (off); strict 1 drops multi-NIC replies")
    out = {}
    for i in interfaces:
        name = i if isinstance(i, str) else normalize_interface(i)["name"]
        if _never(name):
            raise NcclEnvError(
                f"{name} is not a data NIC (lo, docker*, veth*, virbr*): no ARP sysctls for it"
            )
        base = f"net.ipv4.conf.{_sysctl_name(name)}."
        out[base + "arp_ignore"] = str(int(arp_ignore))
        out[base + "arp_announce"] = str(int(arp_announce))
        out[base + "rp_filter"] = str(int(rp_filter))
    return out


def policy_routes(interfaces, table_base: int = 100) -> list:
    """Per-NIC source routing so each address answers through its own NIC.

    Returns ``[{"interface", "address", "network", "table", "rule", "route"}]`` where ``rule``
    and ``route`` are iproute2 arguments (``ip rule add <rule>``, ``ip route add <route>``):
    ``from 198.18.1.1 table 101`` / ``198.18.1.0/24 dev ens1 src 198.18.1.1 table 101``. Tables
    are ``table_base + 1..N`` in the given order. Source: NVIDIA/nccl #1348 (fixture C31).
    """
    out = []
    for n, i in enumerate(interfaces, start=1):
        iface = normalize_interface(i)
        if _never(iface["name"]):
            raise NcclEnvError(
                "{} is not a data NIC (lo, docker*, veth*, virbr*): no policy route".format(iface["name"])
            )
        addrs = _usable_ipv4(iface)
        if not addrs:
            raise NcclEnvError("interface {} has no IPv4 address to route from".format(iface["name"]))
        itf = addrs[0]
        table = int(table_base) + n
        out.append(
            {
                "interface": iface["name"],
                "address": str(itf.ip),
                "network": str(itf.network),
                "table": table,
                "rule": f"from {itf.ip} table {table}",
                "route": "{} dev {} src {} table {}".format(itf.network, iface["name"], itf.ip, table),
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def render_nccl_env(
    interfaces,
    rdma_ports=None,
    data_interfaces=None,
    hcas=None,
    gdr_level=None,
    gpudirect_rdma=None,
    net_plugin=None,
    socket_nthreads=None,
    nsocks_perthread=None,
    mca_use_cidr: bool = False,
) -> dict:
    """NCCL environment and Open MPI MCA settings for one node.

    Arguments: ``interfaces`` and ``rdma_ports`` in the module docstring shapes;
    ``data_interfaces``: names to use (default: every usable interface); ``hcas``: explicit
    HCA list (default: select_hcas()); ``gdr_level``: LOC/PIX/PXB/PHB/SYS; ``gpudirect_rdma``:
    False renders ``NCCL_NET_GDR_LEVEL=LOC`` when no level is given (peer memory missing);
    ``net_plugin``: NCCL_NET_PLUGIN name; ``socket_nthreads``/``nsocks_perthread``: socket
    transport threads (1-16, product <= 64); ``mca_use_cidr``: Open MPI lists as networks
    (``198.18.160.0/20``) instead of names, for nodes whose NIC names differ.

    Returns ``{"env": {NAME: str}, "mca": {param: str}, "data_interfaces": [names],
    "excluded_interfaces": {name: reason}, "hcas": ["mlx5_0:1"], "excluded_hcas": {..},
    "same_subnet": [[names]], "warnings": [str]}``. Raises NcclEnvError with the fix when no
    usable interface exists or a value is invalid.
    """
    selected, excluded = usable_interfaces(interfaces, data_interfaces)
    names = [i["name"] for i in selected]
    env = {"NCCL_SOCKET_IFNAME": "=" + ",".join(names)}
    warnings = []

    chosen, excluded_hcas = select_hcas(rdma_ports, interfaces, hcas) if (rdma_ports or hcas) else ([], {})
    if chosen:
        env["NCCL_IB_HCA"] = "=" + ",".join(_port_key(p) for p in chosen)
        roce = [p for p in chosen if p["link_layer"] == "Ethernet"]
        if roce:
            env["NCCL_IB_GID_INDEX"] = str(roce_gid_index(roce, interfaces))
    elif rdma_ports:
        warnings.append(
            "no ACTIVE RDMA port ({}): NCCL will use the socket transport".format(
                ", ".join("{}: {}".format(*kv) for kv in excluded_hcas.items())
            )
        )

    if gdr_level is not None:
        level = str(gdr_level).upper()
        if level not in GDR_LEVELS:
            raise NcclEnvError(
                "NCCL_NET_GDR_LEVEL must be one of {}, got {!r}".format(", ".join(GDR_LEVELS), gdr_level)
            )
        env["NCCL_NET_GDR_LEVEL"] = level
    elif gpudirect_rdma is False and chosen:
        env["NCCL_NET_GDR_LEVEL"] = "LOC"
        warnings.append(
            "GPUDirect RDMA unavailable (no peer memory): NCCL_NET_GDR_LEVEL=LOC stages through host memory"
        )

    if net_plugin:
        if not re.match(r"^[A-Za-z0-9._/+-]+$", str(net_plugin)):
            raise NcclEnvError(f"NCCL_NET_PLUGIN must be a plugin name or library path, got {net_plugin!r}")
        env["NCCL_NET_PLUGIN"] = str(net_plugin)

    if socket_nthreads is not None or nsocks_perthread is not None:
        nt = int(socket_nthreads if socket_nthreads is not None else 1)
        ns = int(nsocks_perthread if nsocks_perthread is not None else 1)
        if not 1 <= nt <= 16:
            raise NcclEnvError(f"NCCL_SOCKET_NTHREADS must be 1-16, got {nt}")
        if ns < 1:
            raise NcclEnvError(f"NCCL_NSOCKS_PERTHREAD must be >= 1, got {ns}")
        if nt * ns > 64:
            raise NcclEnvError(
                f"NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = {nt} x {ns} = {nt * ns} exceeds NCCL's "
                "limit of 64"
            )
        if socket_nthreads is not None:
            env["NCCL_SOCKET_NTHREADS"] = str(nt)
        if nsocks_perthread is not None:
            env["NCCL_NSOCKS_PERTHREAD"] = str(ns)

    if mca_use_cidr:
        nets = []
        for i in selected:
            for itf in _usable_ipv4(i)[:1]:
                if str(itf.network) not in nets:
                    nets.append(str(itf.network))
        mca_value = ",".join(nets)
    else:
        mca_value = ",".join(names)
    mca = {"btl_tcp_if_include": mca_value, "oob_tcp_if_include": mca_value}

    groups = same_subnet_groups(selected)
    for g in groups:
        warnings.append(
            "{} share one IPv4 subnet: without per-NIC policy routing and arp_ignore/arp_announce/"
            "rp_filter (arp_sysctls(), policy_routes()) replies leave through one NIC (ARP flux); "
            "or give each rail its own subnet".format(", ".join(g))
        )
    return {
        "env": env,
        "mca": mca,
        "data_interfaces": names,
        "excluded_interfaces": excluded,
        "hcas": [_port_key(p) for p in chosen],
        "excluded_hcas": excluded_hcas,
        "same_subnet": groups,
        "warnings": warnings,
    }


def render_nccl_conf(env) -> str:
    """``/etc/nccl.conf`` text: a comment line, then sorted ``KEY=VALUE`` lines, final newline.

    ``env``: a ``{NAME: value}`` dict or the render_nccl_env() result. Values are written bare
    (NCCL does not strip quotes); a value with a newline or a key that is not an environment
    name raises NcclEnvError.
    """
    if isinstance(env, dict) and isinstance(env.get("env"), dict):
        env = env["env"]
    lines = ["# Managed by Ansible (gpucluster): NCCL settings for this node; edits are overwritten"]
    for key in sorted(env):
        value = env[key]
        if not re.match(r"^[A-Z_][A-Z0-9_]*$", str(key)):
            raise NcclEnvError(f"not an environment variable name: {key!r}")
        text = str(value)
        if "\n" in text or "\r" in text:
            raise NcclEnvError(f"value of {key} contains a line break")
        lines.append(f"{key}={text}")
    return "\n".join(lines) + "\n"


def mca_env(mca: dict) -> dict:
    """Open MPI MCA settings as environment: ``{"OMPI_MCA_btl_tcp_if_include": "enp159s0", ...}``."""
    if isinstance(mca, dict) and isinstance(mca.get("mca"), dict):
        mca = mca["mca"]
    return {f"OMPI_MCA_{k}": str(v) for k, v in sorted(mca.items())}


def mpirun_args(rendered: dict) -> list:
    """``mpirun`` arguments for a render_nccl_env() result: ``-mca`` pairs then ``-x NAME=value``."""
    args = []
    for k, v in sorted(rendered.get("mca", {}).items()):
        args.extend(["-mca", k, str(v)])
    for k, v in sorted(rendered.get("env", {}).items()):
        args.extend(["-x", f"{k}={v}"])
    return args
