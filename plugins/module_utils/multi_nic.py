"""Data NICs of a node: interface facts, which NICs may carry NCCL/MPI traffic, several NICs in
one subnet (ARP sysctls, per-NIC policy routing). Pure functions, stdlib only.

Runs on managed nodes (Python 3.8+) and on the controller (filter plugin ``multi_nic``). The NCCL
settings built on these choices are in ``nccl.py``; the secondary-NIC planning of the multi_nic
role (MAC matching, probes, GPU-NIC map) in ``netstage.py``.

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

Sources
=======

- ``ifconfig`` (net-tools): the old form ``eth0      Link encap:Ethernet  HWaddr ...`` /
  ``inet addr:10.0.0.5  Bcast:... Mask:255.255.255.0`` / ``UP BROADCAST RUNNING ... MTU:1500``
  (net-tools 1.60) and the new form ``eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500``
  / ``inet 10.0.0.5  netmask 255.255.255.0`` (net-tools >= 2.10).
- Open MPI TCP: ``btl_tcp_if_include`` / ``oob_tcp_if_include`` take interface names or CIDR
  networks. Host-network containers see every host's docker0 as 172.17.0.1, so the TCP BTL must
  be pinned to the data NIC (fixture C30, horovod/horovod #310).
- Several NICs in one subnet (ARP flux): ``arp_ignore``, ``arp_announce``, ``rp_filter`` in
  Linux ``Documentation/networking/ip-sysctl.rst`` (the kernel applies max(all, <iface>) for
  all three); NVIDIA/nccl #1348, #1109, #1269 (fixture C31).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError, natural_key

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


class NetworkError(ValueError):
    """Facts from which no sound data-NIC choice can be made; the message says what to fix."""


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
        raise NetworkError(f"interface facts must be dicts, got {fact!r}")
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
_OLD_ENCAP_TYPES = {"Local Loopback": "loopback", "InfiniBand": "infiniband"}
# lib/ib.c pr_ib() writes this to stderr each time it formats an IPoIB address; with 2>&1 it
# lands at column 0 inside the block (after the inet lines in the net-tools >= 2.10 form).
_IFCONFIG_IB_WARNING = "Infiniband hardware address can be incorrect!"
_IFCONFIG_NEW = re.compile(r"^(\S+?):\s+flags=\d+<([^>]*)>(?:.*\bmtu\s+(\d+))?")


def parse_ifconfig(text: str) -> list:
    """Normalized interfaces from ``ifconfig`` output, old (``Link encap:``) or new (``flags=``) form.

    A block without a flags line (truncated paste) gets state ``unknown``. Lines before the
    first interface (a prompt, the command) are ignored. Raises ParseError when no interface
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
                    "type": _OLD_ENCAP_TYPES.get(m.group(2).strip(), "ether"),
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
            if line.startswith(_IFCONFIG_IB_WARNING):
                continue  # net-tools' stderr note inside an IPoIB block (lib/ib.c pr_ib), not a new block
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
        if re.match(r"infiniband \S+.*\(InfiniBand\)$", s):  # net-tools >= 2.10 hardware line
            cur["type"] = "infiniband"
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
        raise ParseError("ifconfig: no interface found in the text (expected '<name>: flags=...' or "
                         "'<name>  Link encap:...' lines)")
    return out


def is_up(iface: dict) -> bool:
    """Up, or of unknown state (a truncated paste): not known to be down."""
    return iface.get("state") in ("up", "unknown")


def usable_ipv4(iface: dict) -> list:
    """The routable IPv4 ``ip_interface`` objects of an interface (no loopback, no link-local)."""
    out = []
    for cidr in iface.get("ipv4") or []:
        try:
            itf = ipaddress.ip_interface(cidr)
        except ValueError:
            continue
        if itf.version == 4 and not itf.ip.is_link_local and not itf.ip.is_loopback:
            out.append(itf)
    return out


def has_ipv4(iface: dict) -> bool:
    """Any IPv4 address at all (NCCL's socket code takes what has one)."""
    for cidr in iface.get("ipv4") or []:
        try:
            if ipaddress.ip_interface(cidr).version == 4:
                return True
        except ValueError:
            continue
    return False


def never_used(name: str) -> bool:
    """lo, docker*, veth*, virbr*: never a data NIC, whatever the user asks."""
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
    if not is_up(iface):
        return "interface is %s" % (iface.get("state") or "down")
    if iface.get("master"):
        return "member of {}: use {} instead".format(iface["master"], iface["master"])
    if not usable_ipv4(iface):
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
    normalized dicts, ``excluded`` a ``{name: reason}`` dict. Raises NetworkError when nothing
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
                raise NetworkError(
                    "data interface {!r} is not on this node (interfaces: {}); fix data_interfaces or "
                    "the GPU-NIC map".format(name, ", ".join(sorted(by_name)) or "none")
                )
            reason = exclusion_reason(by_name[name], explicit=True)
            if reason:
                raise NetworkError(f"data interface {name!r} cannot be used: {reason}")
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
        raise NetworkError(
            f"no usable data interface for NCCL/MPI ({detail}). Bring the data NIC up with an IPv4 "
            "address, or name it in data_interfaces"
        )
    return selected, excluded



# --------------------------------------------------------------------------------------------
# Several NICs in one subnet
# --------------------------------------------------------------------------------------------




def same_subnet_groups(interfaces) -> list:
    """Groups (sorted name lists, >= 2 members) of interfaces with an IPv4 address in one network."""
    nets = {}
    for i in interfaces:
        n = normalize_interface(i)
        for itf in usable_ipv4(n):
            nets.setdefault(str(itf.network), [])
            if n["name"] not in nets[str(itf.network)]:
                nets[str(itf.network)].append(n["name"])
    return [sorted(v, key=natural_key) for _, v in sorted(nets.items()) if len(v) > 1]


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
        raise NetworkError(f"arp_ignore must be 1 or 2 for several NICs in one subnet, got {arp_ignore!r}")
    if int(arp_announce) != 2:
        raise NetworkError(f"arp_announce must be 2 for several NICs in one subnet, got {arp_announce!r}")
    if int(rp_filter) not in (0, 2):
        raise NetworkError("rp_filter must be 2 (loose) or 0 (off); strict 1 drops multi-NIC replies")
    out = {}
    for i in interfaces:
        name = i if isinstance(i, str) else normalize_interface(i)["name"]
        if never_used(name):
            raise NetworkError(
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
        if never_used(iface["name"]):
            raise NetworkError(
                "{} is not a data NIC (lo, docker*, veth*, virbr*): no policy route".format(iface["name"])
            )
        addrs = usable_ipv4(iface)
        if not addrs:
            raise NetworkError("interface {} has no IPv4 address to route from".format(iface["name"]))
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
