"""Jinja filters of the multi-NIC component: interface facts, data-NIC choice, several NICs in one
subnet (ARP sysctls, policy routes), the multi_nic role's secondary-NIC plan and GPU-NIC map.

Thin wrappers over ``module_utils/multi_nic.py`` and ``module_utils/netstage.py``. Errors
(NetworkError, NetStageError, ParseError: all ValueError) become AnsibleFilterError with the
same message.

Examples::

    {{ ansible_facts | gpucluster.cluster.net_interfaces }}
    {{ ['ens1', 'ens2'] | gpucluster.cluster.net_arp_sysctls }}
    {{ multi_nic_interfaces | gpucluster.cluster.multi_nic_plan(ansible_facts, mtu, 100) }}
    {{ ansible_facts.default_ipv4 | gpucluster.cluster.gpucluster_cidr }} -> '172.18.0.0/16'
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from ansible_collections.gpucluster.cluster.plugins.module_utils import multi_nic, netstage
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


def net_interfaces(facts):
    """``ansible_facts | net_interfaces`` -> normalized interface list."""
    return multi_nic.interfaces_from_ansible_facts(facts)


def net_arp_sysctls(interfaces, arp_ignore=1, arp_announce=2, rp_filter=2):
    """``['ens1', 'ens2'] | net_arp_sysctls`` -> {sysctl name: value}."""
    return multi_nic.arp_sysctls(interfaces, arp_ignore, arp_announce, rp_filter)


def multi_nic_resolve(specs, facts, mtu=0):
    """``multi_nic_interfaces | multi_nic_resolve(ansible_facts, mtu)`` -> resolved NICs."""
    return netstage.resolve_secondary_nics(specs, facts, int(mtu or 0))


def multi_nic_plan(specs, facts, mtu=0, table_base=100):
    """``multi_nic_interfaces | multi_nic_plan(ansible_facts, mtu, 100)`` -> NICs with tables and probes."""
    return netstage.secondary_nic_plan(specs, facts, int(mtu or 0), int(table_base))


def multi_nic_gpu_map(nics, gpu_facts=None, rdma_facts=None, numa_nodes=None, gpu_count=0):
    """``nics | multi_nic_gpu_map(gpucluster_gpu, gpucluster_rdma, numa, count)`` -> GPU-NIC map."""
    if isinstance(numa_nodes, str):
        numa_nodes = netstage.parse_numa_nodes(numa_nodes)
    return netstage.gpu_netdev_map(nics, gpu_facts, rdma_facts, numa_nodes, int(gpu_count or 0))


def cidr(ipv4_fact):
    """Network of an Ansible ``default_ipv4``-style fact as CIDR, e.g. '172.18.0.0/16'."""
    return str(ipaddress.ip_network(f"{ipv4_fact['address']}/{ipv4_fact['netmask']}", strict=False))


def _nic_fact(facts, name):
    """A NIC's fact as Ansible keys it: its name with '-' and ':' made '_' (a VLAN's '.' stays:
    eth0.100); the name as is and the all-'_' spelling are tried too. ``{}`` when absent."""
    name = str(name)
    keys = (name, name.replace("-", "_").replace(":", "_"), re.sub(r"[-.:]", "_", name))
    return next((facts[k] for k in keys if isinstance(facts.get(k), Mapping)), {})


def _mapping(value):
    """``value`` when it is a mapping (``hostvars`` and ``hostvars[host]`` are Mappings, not
    dicts), else ``{}`` (a node contract Ansible could not parse is a string: "error loading
    facts as JSON or ini ...")."""
    return value if isinstance(value, Mapping) else {}


def _data_nic_names(host_vars):
    """The data NICs the nccl_env stage published in a node's contract, in order (``[]`` without
    a contract), and whether the node has a contract at all."""
    local = _mapping(_mapping(host_vars).get("ansible_local"))
    contract = _mapping(local.get("gpucluster"))
    nics = _mapping(contract.get("nccl")).get("data_interfaces") or []
    return ([str(n) for n in nics] if isinstance(nics, list) else [str(nics)]), bool(contract)


def data_nic_facts(host_vars):
    """The facts of every data NIC the nccl_env stage published in a node's contract
    (``ansible_local.gpucluster.nccl.data_interfaces``), in that order, each once, with its
    ``device`` name; ``{"device": name}`` for a NIC the facts lack. ``host_vars``: the node's
    ``hostvars`` entry."""
    facts = _mapping(_mapping(host_vars).get("ansible_facts"))
    names, _ = _data_nic_names(host_vars)
    return [{**_nic_fact(facts, n), "device": n} for n in dict.fromkeys(names)]


def _ipv4(fact):
    """``(address, network)`` of an Ansible interface fact's ``ipv4``; ``None`` without a valid one."""
    ipv4 = _mapping(_mapping(fact).get("ipv4"))
    try:
        address = ipaddress.IPv4Address(str(ipv4.get("address")))
        network = ipaddress.IPv4Network(f"{address}/{ipv4.get('netmask')}", strict=False)
    except ValueError:
        return None
    return address, network


def _data_nic(host_vars):
    """``(name, (address, network) or None, has contract)`` of a node's first data NIC: the
    first of the ``data_interfaces`` the nccl_env stage published in the node contract, with its
    address from the node's facts. ``name`` is ``''`` without a data NIC."""
    names, has_contract = _data_nic_names(host_vars)
    if not names:
        return "", None, has_contract
    return names[0], _ipv4(_nic_fact(_mapping(_mapping(host_vars).get("ansible_facts")), names[0])), has_contract


def _default_mpi_network(hostvars, hosts):
    """The default MPI network and what it is read from, in one read: ``(first host, its first
    data NIC's name, that NIC's network or '', whether the host has a contract)``. The one place
    the default is decided: the network of the first host's first data NIC (:func:`_data_nic`)."""
    first = hosts[0] if hosts else "the first node"
    nic, got, has_contract = _data_nic(_mapping(hostvars).get(first)) if hosts else ("", None, False)
    return first, nic, (str(got[1]) if got else ""), has_contract


def mpi_network(setting, hostvars, hosts):
    """The network MPI is pinned to (validate, the benchmark): ``setting`` (validate_mpi_network,
    benchmark_mpi_network) where set, else the network of the first host's first data NIC
    (:func:`_default_mpi_network`; ``''`` where unknown, which :func:`data_network_problem` refuses)."""
    text = "" if setting is None else str(setting).strip()
    if text:
        return text
    hosts = [hosts] if isinstance(hosts, str) else [str(h) for h in hosts or []]
    return _default_mpi_network(hostvars, hosts)[2]


_CIDR = re.compile(r"\A\d{1,3}(\.\d{1,3}){3}/\d{1,2}\Z")


def data_network_problem(setting, hostvars, hosts, variable):
    """Why the MPI network that ``setting`` (the value of ``variable``) gives (:func:`mpi_network`:
    unset means the first node's first data NIC's network) cannot carry MPI between ``hosts``,
    ``''`` when it can: an IPv4 network written ``a.b.c.d/N`` (Open MPI's btl_tcp_if_include reads
    N as a number: a netmask after the '/' would be misread) that holds every node's first data
    NIC address, those addresses all different, and not 0.0.0.0/0 (which holds every NIC). A /32
    (a cloud VM's address without its subnet, as on GCP) holds one node only."""
    hostvars = _mapping(hostvars)
    hosts = [hosts] if isinstance(hosts, str) else [str(h) for h in hosts or []]
    text = "" if setting is None else str(setting).strip()
    fix = (f"Fix: set {variable} to the network that holds every node's first data NIC address as a CIDR "
           f"(e.g. the VPC subnet, 10.0.0.0/24), or give the data NICs addresses in one network.")
    if text:
        shown = repr(str(setting))
    else:
        first, nic, text, has_contract = _default_mpi_network(hostvars, hosts)
        if not has_contract or not nic:
            return (f"{variable} is unset: {first} has no data NIC in its node contract yet, so the default (its "
                    f"first data NIC's network) is unknown. Fix: run site.yml on {first} first, or set {variable}.")
        if not text:
            return (f"{variable} is unset: the network of {first}'s first data NIC ({nic}, the nccl_env stage's "
                    f"choice), which has no IPv4 address there. {fix}")
        shown = f"unset, so it is {first}'s first data NIC's network ({text}, {nic})"
    try:
        if not _CIDR.match(text):
            raise ValueError("not a.b.c.d/N")
        net = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        return f"{variable} is {shown}: not an IPv4 network written a.b.c.d/N (e.g. 10.0.0.0/24). {fix}"
    if net.prefixlen == 0:
        return (f"{variable} is {shown}: it holds every address, so MPI would not be kept on the data NICs (any NIC, "
                f"lo and docker0 included, matches). {fix}")
    outside, none, uncontracted, seen = [], [], [], {}
    for host in hosts:
        nic, got, has_contract = _data_nic(hostvars.get(host))
        if not has_contract or not nic:
            uncontracted.append(host)
        elif not got:
            none.append(f"{host} ({nic})")
        elif got[0] not in net:
            outside.append(f"{host} ({nic} {got[0]})")
        else:
            seen.setdefault(got[0], []).append(host)
    if uncontracted:
        return (f"{', '.join(uncontracted)}: no data NIC in the node contract (the nccl_env stage has not run there), "
                f"so whether {variable} ({shown}) reaches it is unknown. Fix: run site.yml on "
                f"{', '.join(uncontracted)} first.")
    if none:
        return (f"{variable} is {shown}, but these nodes' first data NIC has no IPv4 address: "
                f"{', '.join(none)}, so MPI has no data network to stay on. {fix}")
    if outside:
        return (f"{variable} is {shown}, which does not hold the data NIC address of "
                f"{', '.join(outside)}: MPI would not reach them on it. {fix}")
    shared = [f"{a} ({', '.join(h)})" for a, h in seen.items() if len(h) > 1]
    if shared:
        return (f"{variable} is {shown}, but nodes share a data NIC address: {'; '.join(shared)}: MPI cannot tell "
                f"them apart. Fix: give every node's data NIC its own address (rerun site.yml after fixing the NICs).")
    return ""


class FilterModule:
    """Multi-NIC filters."""

    def filters(self):
        table = {
            "net_interfaces": net_interfaces,
            "net_interfaces_sorted": netstage.sorted_interfaces,
            "net_parse_ifconfig": multi_nic.parse_ifconfig,
            "net_same_subnet_groups": multi_nic.same_subnet_groups,
            "net_arp_sysctls": net_arp_sysctls,
            "net_policy_routes": multi_nic.policy_routes,
            "multi_nic_resolve": multi_nic_resolve,
            "multi_nic_plan": multi_nic_plan,
            "multi_nic_probes": netstage.probe_destinations,
            "multi_nic_numa_nodes": netstage.parse_numa_nodes,
            "multi_nic_gpu_map": multi_nic_gpu_map,
            "cloud_eni_multi_nic": netstage.eni_interfaces,
        }
        out = {name: value_errors(func, named=True) for name, func in table.items()}
        out["gpucluster_cidr"] = cidr
        out["gpucluster_mpi_network"] = mpi_network
        out["gpucluster_data_network_problem"] = data_network_problem
        out["gpucluster_data_nic_facts"] = data_nic_facts
        return out
