"""Jinja filters of the multi-NIC component: interface facts, data-NIC choice, several NICs in one
subnet (ARP sysctls, policy routes), the multi_nic role's secondary-NIC plan and GPU-NIC map.

Thin wrappers over ``module_utils/multi_nic.py`` and ``module_utils/netstage.py``. Errors
(NetworkError, NetStageError, ParseError: all ValueError) become AnsibleFilterError with the
same message.

Examples::

    {{ ansible_facts | gpucluster.cluster.net_interfaces }}
    {{ ['ens1', 'ens2'] | gpucluster.cluster.net_arp_sysctls }}
    {{ multi_nic_interfaces | gpucluster.cluster.multi_nic_plan(ansible_facts, mtu, 100) }}
    {{ ansible_default_ipv4 | gpucluster.cluster.gpucluster_cidr }}      -> '172.18.0.0/16'
"""

from __future__ import annotations

import ipaddress
import re

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
    return next((facts[k] for k in keys if isinstance(facts.get(k), dict)), {})


def data_nic_facts(host_vars):
    """The facts of every data NIC the nccl_env stage published in a node's contract
    (``ansible_local.gpucluster.nccl.data_interfaces``), in that order, each with its ``device``
    name; ``{"device": name}`` for a NIC the facts lack. ``host_vars``: the node's ``hostvars``
    entry."""
    host_vars = host_vars or {}
    contract = (host_vars.get("ansible_local") or {}).get("gpucluster") or {}
    facts = host_vars.get("ansible_facts") or {}
    nics = (contract.get("nccl") or {}).get("data_interfaces") or []
    return [{**_nic_fact(facts, n), "device": str(n)} for n in nics]


def _data_nic(host_vars):
    """``(name, IPv4 fact)`` of a node's first data NIC: the first of the ``data_interfaces`` the
    nccl_env stage published in the node contract (``ansible_local.gpucluster.nccl``), with its
    address from the node's facts. ``('', {})`` without the contract, ``(name, {})`` without an
    IPv4 address (or facts)."""
    host_vars = host_vars or {}
    contract = (host_vars.get("ansible_local") or {}).get("gpucluster") or {}
    nics = (contract.get("nccl") or {}).get("data_interfaces") or []
    if not nics:
        return "", {}
    name = str(nics[0])
    fact = _nic_fact(host_vars.get("ansible_facts") or {}, name)
    ipv4 = fact.get("ipv4") or {}
    if not isinstance(ipv4, dict) or not ipv4.get("address") or not ipv4.get("netmask"):
        return name, {}
    return name, ipv4


def data_network(host_vars):
    """The network (IPv4 CIDR) of a node's first data NIC (:func:`_data_nic`); ``''`` where the
    contract or the address is missing (facts not gathered yet, a data NIC without IPv4): the
    caller refuses that, naming its setting (:func:`data_network_problem`). ``host_vars``: the
    node's ``hostvars`` entry. The MPI network of validate and the benchmark."""
    _, ipv4 = _data_nic(host_vars)
    return cidr(ipv4) if ipv4 else ""


def data_network_problem(network, hostvars, hosts, variable):
    """Why ``network`` (the value of ``variable``) cannot carry MPI between ``hosts``, ``''`` when
    it can: it must be an IPv4 network holding every node's first data NIC address. A /32 (a
    cloud VM's address without its subnet, as on GCP) holds one node only."""
    hostvars = hostvars or {}
    hosts = list(hosts or [])
    fix = (f"Fix: set {variable} to the network that holds every node's first data NIC address as a CIDR "
           f"(e.g. the VPC subnet, 10.0.0.0/24), or give the data NICs addresses in one network.")
    try:
        net = ipaddress.IPv4Network(str(network), strict=False)
        if "/" not in str(network):
            raise ValueError("no prefix")
    except ValueError:
        first = hosts[0] if hosts else "the first node"
        nic, _ = _data_nic(hostvars.get(first))
        why = (f"the network of {first}'s first data NIC ({nic}, the nccl_env stage's choice), which has no IPv4 "
               f"address there" if nic and not str(network) else
               f"{first} has no data NIC in its node contract yet (run site.yml first)" if not str(network) else
               "not an IPv4 network (a CIDR such as 10.0.0.0/24)")
        return f"{variable} is {str(network)!r}: {why}. {fix}"
    outside, none = [], []
    for host in hosts:
        nic, ipv4 = _data_nic(hostvars.get(host))
        if not ipv4:
            none.append(f"{host} ({nic or 'no data NIC in its contract'})")
        elif ipaddress.IPv4Address(str(ipv4["address"])) not in net:
            outside.append(f"{host} ({nic} {ipv4['address']})")
    if none:
        return (f"{variable} is {str(network)!r}, but these nodes' first data NIC has no IPv4 address: "
                f"{', '.join(none)}, so MPI has no data network to stay on. {fix}")
    if outside:
        return (f"{variable} is {str(network)!r}, which does not hold the data NIC address of "
                f"{', '.join(outside)}: MPI would not reach them on it. {fix}")
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
        out["gpucluster_data_network"] = data_network
        out["gpucluster_data_network_problem"] = data_network_problem
        out["gpucluster_data_nic_facts"] = data_nic_facts
        return out
