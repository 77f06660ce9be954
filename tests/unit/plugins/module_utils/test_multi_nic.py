"""Data-NIC choice, interface fact shapes, several NICs in one subnet (multi_nic.py)."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.multi_nic import (
    NetworkError,
    arp_sysctls,
    interfaces_from_ansible_facts,
    normalize_interface,
    parse_ifconfig,
    policy_routes,
    same_subnet_groups,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl import (
    render_nccl_env,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text

C29 = "nccl-network/C29_nccl_socket_ifname_exclude_docker0_selects_lo"
C30 = "nccl-network/C30_openmpi_btl_tcp_uses_docker0_with_host_network"
C31 = "nccl-network/C31_multi_nic_same_subnet_arp_flux_policy_routing"
ETH0 = {"name": "eth0", "state": "up", "ipv4": ["192.0.2.10/24"], "type": "ether"}
C32 = "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works"

LO = {"name": "lo", "state": "unknown", "ipv4": ["127.0.0.1/8"], "type": "loopback"}
DOCKER_GW = {"name": "docker_gwbridge", "state": "up", "ipv4": ["172.18.0.1/16"], "type": "bridge"}


def c30_interfaces():
    return parse_ifconfig(fixture_text(C30 + ".3-ifconfig-partial.txt"))



# ---- C30: MPI TCP wandering onto docker0 with host networking ------------------------------------


def test_c30_ifconfig_reading():
    ifaces = c30_interfaces()
    assert [i["name"] for i in ifaces] == ["docker0", "enp159s0"]
    assert ifaces[0]["ipv4"] == ["172.17.0.1/16"]
    assert ifaces[1]["ipv4"] == ["198.18.160.6/20"]
    assert all(i["state"] == "up" and i["mtu"] == 1500 for i in ifaces)


# ---- C31: several NICs in one subnet -----------------------------------------------------------


def c31_plan(node, prefix):
    """The fixture's IP plan (no masks in it) as interfaces with the given prefix length."""
    text = fixture_text(C31 + ".1-1348-ip-plan.txt")
    block = text.split(node, 1)[1].split("Node", 1)[0]
    return [
        {"name": n, "state": "up", "ipv4": [f"{ip}/{prefix}"], "type": "ether"}
        for n, ip in re.findall(r"-\s+(\w+)\s*:\s*(\d+\.\d+\.\d+\.\d+)", block)
    ]


def test_c31_rail_per_subnet_needs_no_policy_routing():
    ifaces = c31_plan("Node1", 24)
    assert [(i["name"], i["ipv4"][0]) for i in ifaces] == [
        ("ens1", "198.18.1.1/24"),
        ("ens2", "198.18.2.1/24"),
        ("ens3", "198.18.3.1/24"),
    ]
    out = render_nccl_env(ifaces)
    assert out["env"]["NCCL_SOCKET_IFNAME"] == "=ens1,ens2,ens3"
    assert out["same_subnet"] == []
    assert out["warnings"] == []


def test_c31_one_subnet_warns_and_renders_arp_sysctls_and_policy_routes():
    ifaces = c31_plan("Node2", 16)
    out = render_nccl_env(ifaces)
    assert out["same_subnet"] == [["ens1", "ens2", "ens3"]]
    assert len(out["warnings"]) == 1 and "ARP flux" in out["warnings"][0]
    assert same_subnet_groups(ifaces) == [["ens1", "ens2", "ens3"]]

    sysctls = arp_sysctls(out["same_subnet"][0])
    assert sysctls["net.ipv4.conf.ens1.arp_ignore"] == "1"
    assert sysctls["net.ipv4.conf.ens1.arp_announce"] == "2"
    assert sysctls["net.ipv4.conf.ens1.rp_filter"] == "2"
    assert len(sysctls) == 9

    routes = policy_routes(ifaces)
    assert routes[0] == {
        "interface": "ens1",
        "address": "198.18.1.2",
        "network": "198.18.0.0/16",
        "table": 101,
        "rule": "from 198.18.1.2 table 101",
        "route": "198.18.0.0/16 dev ens1 src 198.18.1.2 table 101",
    }
    assert [r["table"] for r in routes] == [101, 102, 103]


def test_c31_arp_ignore_2_as_suggested_in_1269_is_accepted():
    suggested = fixture_text(C31 + ".3-1269-suggested-sysctl.txt")
    value = int(re.search(r"echo (\d) > /proc/sys/net/ipv4/conf/all/arp_ignore", suggested).group(1))
    assert value == 2
    assert arp_sysctls(["ens1"], arp_ignore=value)["net.ipv4.conf.ens1.arp_ignore"] == "2"


def test_arp_sysctls_guards_and_vlan_names():
    with pytest.raises(NetworkError, match="strict 1"):
        arp_sysctls(["ens1"], rp_filter=1)
    with pytest.raises(NetworkError, match="arp_ignore must be 1 or 2"):
        arp_sysctls(["ens1"], arp_ignore=0)
    assert "net.ipv4.conf.eth0/100.arp_announce" in arp_sysctls(["eth0.100"])
    with pytest.raises(NetworkError, match="no IPv4 address"):
        policy_routes([{"name": "ens9", "state": "up", "ipv4": []}])
    with pytest.raises(NetworkError, match="docker0 is not a data NIC"):
        arp_sysctls(["ens1", "docker0"])
    with pytest.raises(NetworkError, match="lo is not a data NIC"):
        policy_routes([LO])


# ---- interface choice ---------------------------------------------------------------------------


def test_no_usable_interface_is_a_clear_error():
    ifaces = [
        LO,
        {"name": "docker0", "state": "up", "ipv4": ["172.17.0.1/16"]},
        {"name": "eth0", "state": "down", "ipv4": ["192.0.2.10/24"]},
        {"name": "veth1a2b", "state": "up", "ipv4": []},
        {"name": "virbr0", "state": "up", "ipv4": ["192.168.122.1/24"]},
    ]
    with pytest.raises(NetworkError) as err:
        render_nccl_env(ifaces)
    msg = str(err.value)
    assert msg.startswith("no usable data interface for NCCL/MPI")
    for part in (
        "lo: loopback",
        "docker0: Docker bridge",
        "eth0: interface is down",
        "veth1a2b: veth",
        "virbr0: libvirt bridge",
        "name it in data_interfaces",
    ):
        assert part in msg


def test_ipv6_link_local_only_interface_is_not_used():
    # E17: NCCL used eth1 with only fe80:: and the bootstrap connect was refused.
    eth1 = {"name": "eth1", "state": "up", "ipv4": [], "ipv6": ["fe80::200:ff:fe00:1/64"]}
    out = render_nccl_env([LO, {"name": "eth0", "state": "up", "ipv4": ["192.0.2.40/24"]}, eth1])
    assert out["env"]["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert "no routable IPv4" in out["excluded_interfaces"]["eth1"]


def test_explicit_data_interfaces():
    ifaces = [
        ETH0,
        {"name": "ens1", "state": "up", "ipv4": ["198.18.1.1/24"]},
        {"name": "br0", "state": "up", "ipv4": ["198.18.9.1/24"], "type": "bridge"},
        {"name": "docker0", "state": "up", "ipv4": ["172.17.0.1/16"]},
    ]
    assert render_nccl_env(ifaces)["data_interfaces"] == ["eth0", "ens1"]  # bridge left out unless named
    assert render_nccl_env(ifaces, data_interfaces="ens1,br0")["env"]["NCCL_SOCKET_IFNAME"] == "=ens1,br0"
    with pytest.raises(NetworkError, match="'docker0' cannot be used: Docker bridge"):
        render_nccl_env(ifaces, data_interfaces=["docker0"])
    with pytest.raises(NetworkError, match="'ens7' is not on this node"):
        render_nccl_env(ifaces, data_interfaces=["ens7"])


def test_bond_members_use_the_bond():
    ifaces = [
        {"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"], "type": "bonding"},
        {"name": "ens1f0", "state": "up", "ipv4": [], "master": "bond0"},
    ]
    out = render_nccl_env(ifaces)
    assert out["data_interfaces"] == ["bond0"]
    assert out["excluded_interfaces"]["ens1f0"] == "member of bond0: use bond0 instead"


# ---- fact shapes --------------------------------------------------------------------------------


def test_ansible_setup_facts_shape():
    facts = {
        "interfaces": ["lo", "eth0", "docker0", "br-1a2b3c", "bond0", "ens1f0", "ens2"],
        "lo": {
            "device": "lo",
            "active": True,
            "type": "loopback",
            "ipv4": {"address": "127.0.0.1", "netmask": "255.0.0.0", "prefix": "8"},
        },
        "eth0": {
            "device": "eth0",
            "active": True,
            "type": "ether",
            "mtu": 9000,
            "ipv4": {
                "address": "198.18.160.6",
                "netmask": "255.255.240.0",
                "network": "198.18.160.0",
                "prefix": "20",
            },
            "ipv4_secondaries": [{"address": "198.18.161.6", "netmask": "255.255.240.0"}],
            "ipv6": [{"address": "fe80::200:5eff:fe00:5301", "prefix": "64", "scope": "link"}],
        },
        "docker0": {
            "device": "docker0",
            "active": False,
            "type": "bridge",
            "interfaces": [],
            "ipv4": {"address": "172.17.0.1", "netmask": "255.255.0.0"},
        },
        "br_1a2b3c": {
            "device": "br-1a2b3c",
            "active": True,
            "type": "bridge",
            "interfaces": ["veth0"],
            "ipv4": {"address": "172.19.0.1", "netmask": "255.255.0.0"},
        },
        "bond0": {
            "device": "bond0",
            "active": True,
            "type": "bonding",
            "slaves": ["ens1f0"],
            "ipv4": {"address": "192.0.2.6", "netmask": "255.255.255.0"},
        },
        "ens1f0": {"device": "ens1f0", "active": True, "type": "ether"},
        "ens2": {"device": "ens2", "active": False, "type": "ether"},
    }
    ifaces = interfaces_from_ansible_facts(facts)
    by = {i["name"]: i for i in ifaces}
    assert by["eth0"]["ipv4"] == ["198.18.160.6/20", "198.18.161.6/20"]
    assert by["eth0"]["ipv6"] == ["fe80::200:5eff:fe00:5301/64"]
    assert by["eth0"]["mtu"] == 9000
    assert by["docker0"]["state"] == "down"
    assert by["br-1a2b3c"]["ipv4"] == ["172.19.0.1/16"]
    assert by["ens1f0"]["master"] == "bond0"
    out = render_nccl_env(ifaces)
    assert out["data_interfaces"] == ["eth0", "bond0"]
    # hostvars-style keys work too
    hv = {"ansible_interfaces": ["eth0"], "ansible_eth0": facts["eth0"]}
    assert interfaces_from_ansible_facts(hv)[0]["ipv4"][0] == "198.18.160.6/20"


def test_ip_json_shape():
    entry = {
        "ifname": "ens1",
        "operstate": "UP",
        "link_type": "ether",
        "mtu": 9000,
        "addr_info": [
            {"family": "inet", "local": "198.18.1.1", "prefixlen": 24},
            {"family": "inet6", "local": "fe80::1", "prefixlen": 64},
        ],
    }
    assert normalize_interface(entry) == {
        "name": "ens1",
        "state": "up",
        "ipv4": ["198.18.1.1/24"],
        "ipv6": ["fe80::1/64"],
        "type": "ether",
        "master": None,
        "mtu": 9000,
    }


def test_new_style_ifconfig():
    text = (
        "ens1: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 9000\n"
        "        inet 198.18.1.1  netmask 255.255.255.0  broadcast 198.18.1.255\n"
        "lo: flags=73<UP,LOOPBACK,RUNNING>  mtu 65536\n"
        "        inet 127.0.0.1  netmask 255.0.0.0\n"
        "ens2: flags=4098<BROADCAST,MULTICAST>  mtu 1500\n"
    )
    got = [(i["name"], i["state"], i["type"], i["ipv4"], i["mtu"]) for i in parse_ifconfig(text)]
    assert got == [
        ("ens1", "up", "ether", ["198.18.1.1/24"], 9000),
        ("lo", "up", "loopback", ["127.0.0.1/8"], 65536),
        ("ens2", "down", "ether", [], 1500),
    ]
    with pytest.raises(ParseError, match="no interface"):
        parse_ifconfig("ifconfig: command not found")




def test_ifconfig_ipoib_block_with_the_net_tools_stderr_warning():
    # Real `ifconfig` (net-tools 2.10) paste of an IPoIB port, 2>&1: lib/ib.c pr_ib() writes the
    # warning to stderr at column 0 inside the block; the hardware line names InfiniBand.
    text = (
        "ib0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 2044\n"
        "        inet 10.66.80.44  netmask 255.255.240.0  broadcast 10.66.95.255\n"
        "        inet6 fe80::22f1:7c03:c4:adfa  prefixlen 64  scopeid 0x20<link>\n"
        "Infiniband hardware address can be incorrect! Please read BUGS section in ifconfig(8).\n"
        "        infiniband 80:00:02:08:FE:80:00:00:00:00:00:00:00:00:00:00:00:00:00:00  txqueuelen 256  (InfiniBand)\n"
        "        RX packets 8825440  bytes 518586377 (494.5 MiB)\n"
        "\n"
        "ibp194s0f1: flags=4099<UP,BROADCAST,MULTICAST>  mtu 4092\n"
        "Infiniband hardware address can be incorrect! Please read BUGS section in ifconfig(8).\n"
        "        infiniband xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx:xx  txqueuelen 256  (InfiniBand)\n"
    )
    got = [(i["name"], i["type"], i["ipv4"], i["mtu"]) for i in parse_ifconfig(text)]
    assert got == [("ib0", "infiniband", ["10.66.80.44/20"], 2044), ("ibp194s0f1", "infiniband", [], 4092)]
    old = "ib0       Link encap:InfiniBand  HWaddr 80:00:00:48:FE:80:00:00:00:00:00:00:00:00:00:00:00:00:00:00  \n"
    assert parse_ifconfig(old)[0]["type"] == "infiniband"
