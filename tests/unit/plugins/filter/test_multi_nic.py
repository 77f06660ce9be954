"""plugins/filter/multi_nic.py: secondary-NIC plan, probes, GPU-NIC map, ENI, error mapping."""

from __future__ import annotations

import jinja2
import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.plugins.filter.filters import all_filters

FILTERS = all_filters()
GiB = 1024**3

FACTS = {
    "interfaces": ["eth0", "eth1"],
    "default_ipv4": {"interface": "eth0"},
    "eth0": {"device": "eth0", "active": True, "macaddress": "52:54:00:00:00:01",
             "ipv4": {"address": "172.31.0.5", "prefix": "20"}},
    "eth1": {"device": "eth1", "active": True, "macaddress": "52:54:00:00:00:02"},
}


def test_errors_become_ansible_filter_errors():
    with pytest.raises(AnsibleFilterError, match="multi_nic_resolve: .*holds the node's default route"):
        FILTERS["multi_nic_resolve"]([{"name": "eth0"}], FACTS)


def test_template_chain_resolve_map_probes():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    tpl = env.from_string(
        "{% set nics = specs | multi_nic_resolve(facts, '9000') %}"
        "{{ nics[0].name }} {{ nics[0].mtu }} {{ (nics[0] | multi_nic_probes).peer }} "
        "{{ (nics | multi_nic_gpu_map({'topology': none}, none, numa, '2')) | map(attribute='nic') | join(',') }}"
    )
    out = tpl.render(specs=[{"mac": "52:54:00:00:00:02", "address": "10.0.64.13/20"}], facts=FACTS,
                     numa="/sys/class/net/eth1/device/numa_node:-1\n")
    assert out == "eth1 9000 10.0.79.254 eth1,eth1"


def test_cloud_eni_filter():
    out = FILTERS["cloud_eni_multi_nic"]([{"mac": "52:54:00:00:00:02", "private_ip": "10.0.64.13"}], "10.0.64.0/20")
    assert out == [{"mac": "52:54:00:00:00:02", "address": "10.0.64.13/20", "gateway": "10.0.64.1"}]
    with pytest.raises(AnsibleFilterError, match="cloud_eni_subnet_cidr"):
        FILTERS["cloud_eni_multi_nic"]([], "nonsense")


def test_multi_nic_plan_adds_tables_rules_and_probes():
    plan = FILTERS["multi_nic_plan"]([{"name": "eth1", "address": "10.0.64.13/20", "gateway": "10.0.64.1"}], FACTS,
                                     0, "200")
    assert plan[0]["table"] == 201 and plan[0]["rule"] == "from 10.0.64.13 table 201"
    assert plan[0]["route"] == "10.0.64.0/20 dev eth1 src 10.0.64.13 table 201"
    assert plan[0]["probes"] == {"peer": "10.0.79.254", "remote": "192.0.2.1"}
    assert plan[0]["probe_list"] == ["10.0.79.254", "192.0.2.1"]


# --- the data network (validate's and the benchmark's MPI network) ----------------------------------

def _node(nics, facts):
    return {"ansible_local": {"gpucluster": {"nccl": {"data_interfaces": nics}}}, "ansible_facts": facts}


def data_network(host_vars):
    """The default MPI network of a one-node cluster whose node has ``host_vars``."""
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import mpi_network
    return mpi_network("", {"n": host_vars}, ["n"])


def test_the_data_network_is_the_first_data_nics_not_the_default_routes():
    facts = {"default_ipv4": {"address": "192.168.1.5", "netmask": "255.255.255.0", "interface": "eno1"},
             "ens1f0": {"ipv4": {"address": "10.20.0.7", "netmask": "255.255.0.0"}},
             "bond0_100": {"ipv4": {"address": "10.30.0.7", "netmask": "255.255.255.0"}}}
    assert data_network(_node(["ens1f0", "bond0.100"], facts)) == "10.20.0.0/16"
    # A name with '.' or '-' is looked up as Ansible keys its fact: '-' and ':' become '_', a VLAN's
    # '.' stays (eth0.100); the all-'_' spelling is accepted too (bond0.100 -> bond0_100).
    assert data_network(_node(["bond0.100"], facts)) == "10.30.0.0/24"
    vlan = {"eth0.100": {"ipv4": {"address": "10.3.0.4", "netmask": "255.255.255.0"}},
            "br_data": {"ipv4": {"address": "10.4.0.4", "netmask": "255.255.0.0"}},
            "eth0_1": {"ipv4": {"address": "10.6.0.4", "netmask": "255.255.255.0"}}}
    assert data_network(_node(["eth0.100"], vlan)) == "10.3.0.0/24"
    assert data_network(_node(["br-data"], vlan)) == "10.4.0.0/16"
    assert data_network(_node(["eth0:1"], vlan)) == "10.6.0.0/24"


@pytest.mark.parametrize("node", [
    {},                                                        # nothing gathered
    {"ansible_local": {}, "ansible_facts": {}},                # no contract
    _node([], {}),                                             # no data NIC
    _node(["ib0"], {"ib0": {"ipv4": {}}}),                     # a data NIC without IPv4
    _node(["eth9"], {"eth0": {"ipv4": {"address": "10.0.0.1", "netmask": "255.0.0.0"}}}),  # facts lack it
    _node(["eth0"], {"eth0": {"ipv4": [{"address": "10.0.0.1"}]}}),  # not a fact Ansible writes
])
def test_no_data_network_is_an_empty_answer_the_caller_refuses(node):
    assert data_network(node) == ""


def _cluster(*addresses, netmask="255.255.255.0", nic="eth1"):
    """hostvars of node-1.. whose first data NIC has these addresses (None: no IPv4)."""
    return {f"node-{i}": _node([nic], {nic: {"ipv4": {"address": a, "netmask": netmask}} if a else {"ipv4": {}}})
            for i, a in enumerate(addresses, 1)}


def test_a_network_that_holds_every_nodes_data_nic_is_accepted():
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_network_problem
    hv = _cluster("10.0.0.5", "10.0.0.6", "10.0.0.7")
    network = data_network(hv["node-1"])
    assert network == "10.0.0.0/24"
    assert data_network_problem(network, hv, list(hv), "validate_mpi_network") == ""
    # An operator's wider network holds them too; one node alone is fine on its own /32.
    assert data_network_problem("10.0.0.0/16", hv, list(hv), "validate_mpi_network") == ""
    one = _cluster("10.0.0.5", netmask="255.255.255.255")
    assert data_network_problem(data_network(one["node-1"]), one, ["node-1"], "validate_mpi_network") == ""


def test_a_gcp_slash_32_holds_only_the_first_node_and_is_refused_naming_the_fix():
    """GCP gives each VM a /32 and routes the subnet: the first node's network is its own address."""
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_network_problem
    hv = _cluster("10.128.0.5", "10.128.0.6", netmask="255.255.255.255")
    network = data_network(hv["node-1"])
    assert network == "10.128.0.5/32"
    msg = data_network_problem(network, hv, list(hv), "benchmark_mpi_network")
    assert msg.startswith("benchmark_mpi_network is '10.128.0.5/32', which does not hold the data NIC address of")
    assert "node-2 (eth1 10.128.0.6)" in msg and "node-1" not in msg.split("address of")[1].split(":")[0]
    assert "Fix: set benchmark_mpi_network to the network that holds every node's" in msg


def test_the_mpi_network_is_the_setting_or_the_first_nodes_data_network():
    """One place decides the default of validate_mpi_network and benchmark_mpi_network."""
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_network_problem, mpi_network
    hv = _cluster("10.0.0.5", "10.0.1.6")
    assert mpi_network("", hv, list(hv)) == "10.0.0.0/24"
    # The first host given, not the first in hostvars.
    assert mpi_network(None, hv, ["node-2", "node-1"]) == "10.0.1.0/24"
    hv = _cluster("10.0.0.5", "10.0.0.6")
    assert mpi_network(" 10.0.0.0/16 ", hv, list(hv)) == "10.0.0.0/16"
    assert mpi_network("", hv, []) == ""
    assert mpi_network("", hv, "node-1") == "10.0.0.0/24"
    # Unset, the check judges the default it resolves to, and says that it was the default.
    assert data_network_problem("", hv, list(hv), "benchmark_mpi_network") == ""
    gcp = _cluster("10.128.0.5", "10.128.0.6", netmask="255.255.255.255")
    assert mpi_network("", gcp, list(gcp)) == "10.128.0.5/32"
    msg = data_network_problem("", gcp, list(gcp), "benchmark_mpi_network")
    assert msg.startswith("benchmark_mpi_network is unset, so it is node-1's first data NIC's network (10.128.0.5/32, "
                          "eth1), which does not hold the data NIC address of node-2 (eth1 10.128.0.6)")
    assert "Fix: set benchmark_mpi_network to the network" in msg


@pytest.mark.parametrize("network, expect", [
    ("eth0", "validate_mpi_network is 'eth0': not an IPv4 network"),
    ("10.0.0.0", "validate_mpi_network is '10.0.0.0': not an IPv4 network"),
    ("10.0.0.0/33", "not an IPv4 network"),
    ("fd00::/64", "not an IPv4 network"),
    ("", "validate_mpi_network is unset: the network of node-1's first data NIC (eth1, the nccl_env stage's choice), "
         "which has no IPv4 address there"),
    (None, "validate_mpi_network is unset"),
    # Open MPI reads the part after '/' as a number: a netmask there would be misread.
    ("10.0.0.0/255.255.255.0", "not an IPv4 network written a.b.c.d/N"),
    ("10.0.0.0/0.0.0.255", "not an IPv4 network written a.b.c.d/N"),
    (" 10.0.0.0/24x", "not an IPv4 network"),
    ("0.0.0.0/0", "it holds every address, so MPI would not be kept on the data NICs"),
])
def test_a_value_that_is_no_network_is_refused(network, expect):
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_network_problem
    hv = _cluster(None, "10.0.0.6")
    msg = data_network_problem(network, hv, list(hv), "validate_mpi_network")
    assert expect in msg and "Fix: set validate_mpi_network" in msg


def test_a_node_without_a_data_address_or_contract_is_named():
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_network_problem
    hv = _cluster("10.0.0.5", None)
    msg = data_network_problem("10.0.0.0/24", hv, list(hv), "validate_mpi_network")
    assert "first data NIC has no IPv4 address: node-2 (eth1)" in msg and "Fix: set validate_mpi_network" in msg
    hv["node-3"] = {"ansible_local": {}, "ansible_facts": {}}
    msg = data_network_problem("10.0.0.0/24", hv, list(hv), "validate_mpi_network")
    assert msg.startswith("node-3: no data NIC in the node contract") and msg.endswith("run site.yml on node-3 first.")
    msg = data_network_problem("", {"node-3": hv["node-3"]}, ["node-3"], "v")
    assert "node-3 has no data NIC in its node contract yet" in msg
    assert "Fix: run site.yml on node-3 first, or set v" in msg
    # A host given as one string is one host, not its letters.
    assert data_network_problem("10.0.0.0/24", hv, "node-1", "v") == ""


@pytest.mark.parametrize("host_vars", [
    # Ansible stores a .fact file it cannot parse as this string.
    {"ansible_local": {"gpucluster": "error loading facts as JSON or ini - please check content: /etc/x.fact"}},
    {"ansible_local": "broken", "ansible_facts": "broken"},
    None,
    _node(["eth1"], {"eth1": {"ipv4": {"address": "10.0.0.300", "netmask": "255.255.255.0"}}}),
    _node(["eth1"], {"eth1": {"ipv4": {"address": "10.0.0.5/24", "netmask": "255.255.255.0"}}}),
    _node(["eth1"], {"eth1": {"ipv4": {"address": "10.0.0.5", "netmask": "255.0.255.0"}}}),
    _node("eth1", {"eth1": {"ipv4": "10.0.0.5"}}),
])
def test_a_broken_contract_or_fact_is_no_network_and_no_crash(host_vars):
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import (
        data_network_problem,
        data_nic_facts,
    )
    assert data_network(host_vars) == ""
    assert isinstance(data_nic_facts(host_vars), list)
    msg = data_network_problem("10.0.0.0/24", {"n1": host_vars}, ["n1"], "validate_mpi_network")
    assert msg.startswith("n1") or "n1 (eth1)" in msg


def test_nodes_that_share_a_data_address_are_refused():
    """Two nodes on one address (a /32 copied to both, a cloned VM): MPI cannot tell them apart."""
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_network_problem
    hv = _cluster("10.0.0.5", "10.0.0.5", netmask="255.255.255.255")
    msg = data_network_problem("10.0.0.5/32", hv, list(hv), "validate_mpi_network")
    assert "nodes share a data NIC address: 10.0.0.5 (node-1, node-2)" in msg


def test_data_nic_facts_lists_each_nic_once():
    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import data_nic_facts
    node = _node(["eth1", "eth1", "eth2"], {"eth1": {"speed": 100000}})
    assert data_nic_facts(node) == [{"speed": 100000, "device": "eth1"}, {"device": "eth2"}]


def test_the_filter_is_registered():
    assert "gpucluster_data_network_problem" in FILTERS


def test_hostvars_as_ansible_passes_them_are_read():
    """Ansible hands ``hostvars`` and ``hostvars[host]`` to a filter as Mappings that are no dicts
    (HostVars, HostVarsVars): they must be read like dicts."""
    from types import MappingProxyType

    from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import (
        data_network_problem,
        data_nic_facts,
        mpi_network,
    )
    from ansible_collections.gpucluster.cluster.plugins.filter.plan import contract_problem
    hv = {h: MappingProxyType({k: MappingProxyType(v) for k, v in node.items()})
          for h, node in _cluster("10.0.0.5", "10.0.0.6").items()}
    hostvars = MappingProxyType(hv)
    assert mpi_network("", hostvars, ["node-1", "node-2"]) == "10.0.0.0/24"
    assert data_nic_facts(hostvars["node-1"])[0]["device"] == "eth1"
    assert data_network_problem("10.0.0.0/24", hostvars, ["node-1", "node-2"], "v") == ""
    contract = MappingProxyType({"nccl": MappingProxyType({"data_interfaces": ["eth1"]})})
    assert contract_problem(contract, {"nccl": "nccl_env"}, "node-1", "x") == ""
