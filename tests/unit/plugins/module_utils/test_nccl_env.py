"""NCCL / Open MPI network settings, on the fixtures in tests/fixtures/nccl-network."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_env import (
    NcclEnvError,
    arp_sysctls,
    check_socket_ifname,
    ifname_matches,
    interfaces_from_ansible_facts,
    lint_nccl_conf,
    mca_env,
    mpirun_args,
    normalize_interface,
    parse_gid_table,
    parse_ifconfig,
    parse_nccl_conf,
    policy_routes,
    render_nccl_conf,
    render_nccl_env,
    same_subnet_groups,
    select_hcas,
    select_roce_v2_gid_index,
    simulate_socket_ifname,
)

from tests.conftest import fixture_text

C29 = "nccl-network/C29_nccl_socket_ifname_exclude_docker0_selects_lo"
C30 = "nccl-network/C30_openmpi_btl_tcp_uses_docker0_with_host_network"
C31 = "nccl-network/C31_multi_nic_same_subnet_arp_flux_policy_routing"
C32 = "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works"

LO = {"name": "lo", "state": "unknown", "ipv4": ["127.0.0.1/8"], "type": "loopback"}
DOCKER_GW = {"name": "docker_gwbridge", "state": "up", "ipv4": ["172.18.0.1/16"], "type": "bridge"}


def c30_interfaces():
    return parse_ifconfig(fixture_text(C30 + ".3-ifconfig-partial.txt"))


# ---- NCCL_SOCKET_IFNAME syntax (NCCL env docs) -------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name", "used"),
    [
        ("=eth0", "eth0", True),
        ("=eth0", "eth01", False),
        ("=eth0,eth1", "eth1", True),
        ("eth", "eth1", True),
        ("eth", "ens1", False),
        ("^docker", "docker_gwbridge", False),
        ("^docker", "eth0", True),
        ("^=docker0", "docker0", False),
        ("^=docker0", "docker_gwbridge", True),
        ("^docker0", "lo", True),
        ("^docker,lo", "lo", False),
        ("=mlx5_0:1,mlx5_1:1", "mlx5_1", True),
    ],
)
def test_ifname_matches_nccl_semantics(spec, name, used):
    assert ifname_matches(spec, name) is used


# ---- C29: ^docker0 lets NCCL pick lo -----------------------------------------------------------


def c29_value():
    line = fixture_text(C29 + ".1-nccl-conf-line-written-by-the-image.txt")
    return re.search(r"NCCL_SOCKET_IFNAME=(\S+)", line).group(1)


def test_c29_exclude_docker0_alone_is_flagged():
    value = c29_value()
    assert value == "^docker0"
    findings = check_socket_ifname(value)
    assert any("may pick lo" in f for f in findings)
    assert any("docker_gwbridge" in f for f in findings)


def test_c29_simulated_selection_picks_lo_and_other_docker_bridges():
    ifaces = [LO, DOCKER_GW] + c30_interfaces()
    assert simulate_socket_ifname(c29_value(), ifaces) == ["lo", "docker_gwbridge", "enp159s0"]
    # NCCL's own default (unset) does not pick lo or docker here.
    assert simulate_socket_ifname(None, ifaces) == ["enp159s0"]
    findings = check_socket_ifname(c29_value(), ifaces)
    assert "NCCL would use lo: loopback: peers cannot reach 127.0.0.1" in findings


def test_c29_renderer_emits_explicit_include_never_a_bare_exclude():
    ifaces = [LO, DOCKER_GW] + c30_interfaces()
    out = render_nccl_env(ifaces)
    assert out["env"]["NCCL_SOCKET_IFNAME"] == "=enp159s0"
    assert not out["env"]["NCCL_SOCKET_IFNAME"].startswith("^")
    assert set(out["excluded_interfaces"]) == {"lo", "docker_gwbridge", "docker0"}
    # The rendered file lints clean; the image's line does not.
    assert lint_nccl_conf(render_nccl_conf(out), ifaces) == []
    assert lint_nccl_conf(f"NCCL_SOCKET_IFNAME={c29_value()}\n", ifaces)


def test_lint_nccl_conf_flags_quotes_and_include_of_never_interfaces():
    findings = lint_nccl_conf('# site\nNCCL_DEBUG="WARN"\nNCCL_SOCKET_IFNAME==docker0\n')
    assert any("does not strip quotes" in f for f in findings)
    assert any("includes docker0" in f for f in findings)
    assert parse_nccl_conf("NCCL_SOCKET_IFNAME==ens1f0\nnot a setting\n") == {"NCCL_SOCKET_IFNAME": "=ens1f0"}


# ---- C30: MPI TCP wandering onto docker0 with host networking ------------------------------------


def test_c30_ifconfig_reading():
    ifaces = c30_interfaces()
    assert [i["name"] for i in ifaces] == ["docker0", "enp159s0"]
    assert ifaces[0]["ipv4"] == ["172.17.0.1/16"]
    assert ifaces[1]["ipv4"] == ["198.18.160.6/20"]
    assert all(i["state"] == "up" and i["mtu"] == 1500 for i in ifaces)


def test_c30_mpi_and_nccl_pinned_to_the_data_nic():
    out = render_nccl_env(c30_interfaces())
    assert out["data_interfaces"] == ["enp159s0"]
    assert out["env"] == {"NCCL_SOCKET_IFNAME": "=enp159s0"}
    assert out["mca"] == {"btl_tcp_if_include": "enp159s0", "oob_tcp_if_include": "enp159s0"}
    assert "172.17.0.1" in out["excluded_interfaces"]["docker0"]
    args = mpirun_args(out)
    assert args == [
        "-mca", "btl_tcp_if_include", "enp159s0",
        "-mca", "oob_tcp_if_include", "enp159s0",
        "-x", "NCCL_SOCKET_IFNAME==enp159s0",
    ]  # fmt: skip
    assert mca_env(out) == {
        "OMPI_MCA_btl_tcp_if_include": "enp159s0",
        "OMPI_MCA_oob_tcp_if_include": "enp159s0",
    }


def test_c30_mca_as_cidr_for_nodes_with_different_nic_names():
    out = render_nccl_env(c30_interfaces(), mca_use_cidr=True)
    assert out["mca"]["btl_tcp_if_include"] == "198.18.160.0/20"
    assert out["mca"]["oob_tcp_if_include"] == "198.18.160.0/20"


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
    with pytest.raises(NcclEnvError, match="strict 1"):
        arp_sysctls(["ens1"], rp_filter=1)
    with pytest.raises(NcclEnvError, match="arp_ignore must be 1 or 2"):
        arp_sysctls(["ens1"], arp_ignore=0)
    assert "net.ipv4.conf.eth0/100.arp_announce" in arp_sysctls(["eth0.100"])
    with pytest.raises(NcclEnvError, match="no IPv4 address"):
        policy_routes([{"name": "ens9", "state": "up", "ipv4": []}])
    with pytest.raises(NcclEnvError, match="docker0 is not a data NIC"):
        arp_sysctls(["ens1", "docker0"])
    with pytest.raises(NcclEnvError, match="lo is not a data NIC"):
        policy_routes([LO])


# ---- C32: the RoCE v2 GID to choose -------------------------------------------------------------


def c32_gids():
    return parse_gid_table(fixture_text(C32 + ".1-ibv-devinfo-v-gid-table.txt"))


def test_c32_gid_table_reading():
    gids = {g["index"]: (g["type"], g["ipv4"], g["link_local"]) for g in c32_gids()}
    assert gids == {
        0: ("RoCE v1", None, True),
        1: ("RoCE v2", None, True),
        2: ("RoCE v1", "192.0.2.6", False),
        3: ("RoCE v2", "192.0.2.6", False),
    }


def test_c32_selects_ipv4_roce_v2_never_link_local():
    gids = c32_gids()
    assert select_roce_v2_gid_index(gids) == 3
    assert select_roce_v2_gid_index(gids, "192.0.2.6/24") == 3
    assert select_roce_v2_gid_index(gids, ["198.18.0.9"]) is None
    assert select_roce_v2_gid_index([g for g in gids if g["index"] != 3]) is None  # index 1 is never chosen


def test_c32_renders_bond_hca_and_gid_index_3():
    ifaces = [{"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"], "type": "bonding"}]
    port = {
        "device": "mlx5_bond_0",
        "port": 1,
        "state": "PORT_ACTIVE (4)",
        "link_layer": "Ethernet",
        "netdev": "bond0",
        "gids": c32_gids(),
    }
    out = render_nccl_env(ifaces, [port])
    assert out["env"]["NCCL_IB_HCA"] == "=mlx5_bond_0:1"
    assert out["env"]["NCCL_IB_GID_INDEX"] == "3"
    assert out["hcas"] == ["mlx5_bond_0:1"]


def test_c32_without_ipv4_gid_is_a_clear_error():
    ifaces = [{"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"]}]
    port = {
        "device": "mlx5_bond_0",
        "port": 1,
        "state": "ACTIVE",
        "link_layer": "Ethernet",
        "netdev": "bond0",
        "gids": [g for g in c32_gids() if g["index"] < 2],
    }
    with pytest.raises(NcclEnvError, match="no RoCE v2 GID with an IPv4 address on mlx5_bond_0:1"):
        render_nccl_env(ifaces, [port])


def test_show_gids_format():
    text = (
        "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n"
        "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n"
        "mlx5_0\t1\t2\t0000:0000:0000:0000:0000:ffff:c000:0206\t192.0.2.6  \tv1\tens1f0\n"
        "mlx5_0\t1\t3\t0000:0000:0000:0000:0000:ffff:c000:0206\t192.0.2.6  \tv2\tens1f0\n"
    )
    gids = parse_gid_table(text)
    assert [(g["device"], g["port"], g["index"], g["type"], g["netdev"]) for g in gids] == [
        ("mlx5_0", 1, 2, "RoCE v1", "ens1f0"),
        ("mlx5_0", 1, 3, "RoCE v2", "ens1f0"),
    ]
    with pytest.raises(NcclEnvError, match="no GID entries"):
        parse_gid_table("nothing here")


# ---- HCA choice and the other NCCL settings ------------------------------------------------------

ETH0 = {"name": "eth0", "state": "up", "ipv4": ["192.0.2.10/24"], "type": "ether"}


def _port(dev, ll, state="ACTIVE", **kw):
    return dict(device=dev, port=1, state=state, link_layer=ll, **kw)


def test_infiniband_fabric_leaves_ethernet_ports_out_and_sorts_naturally():
    ports = [
        _port("mlx5_10", "InfiniBand"),
        _port("mlx5_1", "Ethernet", roce_v2_gid_index=3),
        _port("mlx5_2", "InfiniBand"),
        _port("mlx5_0", "InfiniBand", state="PORT_INIT (2)"),
    ]
    out = render_nccl_env([ETH0], ports)
    assert out["env"]["NCCL_IB_HCA"] == "=mlx5_2:1,mlx5_10:1"
    assert "NCCL_IB_GID_INDEX" not in out["env"]  # InfiniBand link layer: no GID index
    assert out["excluded_hcas"]["mlx5_0:1"].startswith("port state PORT_INIT")
    assert "InfiniBand fabric" in out["excluded_hcas"]["mlx5_1:1"]


def test_roce_ports_gid_index_must_agree():
    ports = [
        _port("mlx5_0", "Ethernet", roce_v2_gid_index=3),
        _port("mlx5_1", "Ethernet", roce_v2_gid_index=5),
    ]
    with pytest.raises(NcclEnvError, match="differs between HCAs"):
        render_nccl_env([ETH0], ports)
    ports[1]["roce_v2_gid_index"] = 3
    assert render_nccl_env([ETH0], ports)["env"]["NCCL_IB_GID_INDEX"] == "3"


def test_roce_port_with_down_netdev_is_left_out():
    ifaces = [ETH0, {"name": "ens2", "state": "down", "ipv4": []}]
    chosen, excluded = select_hcas([_port("mlx5_0", "Ethernet", netdev="ens2", roce_v2_gid_index=3)], ifaces)
    assert chosen == []
    assert excluded == {"mlx5_0:1": "RoCE netdev ens2 is down"}
    out = render_nccl_env(ifaces, [_port("mlx5_0", "Ethernet", netdev="ens2", roce_v2_gid_index=3)])
    assert "NCCL_IB_HCA" not in out["env"]
    assert "socket transport" in out["warnings"][0]


def test_explicit_hcas():
    ports = [_port("mlx5_0", "InfiniBand"), _port("mlx5_1", "InfiniBand")]
    assert render_nccl_env([ETH0], ports, hcas="mlx5_1:1")["env"]["NCCL_IB_HCA"] == "=mlx5_1:1"
    with pytest.raises(NcclEnvError, match="mlx5_7:1 is not on this node"):
        render_nccl_env([ETH0], ports, hcas=["mlx5_7"])


def test_gdr_plugin_and_socket_threads():
    ports = [_port("mlx5_0", "InfiniBand")]
    out = render_nccl_env(
        [ETH0], ports, gdr_level="pxb", net_plugin="harp", socket_nthreads=4, nsocks_perthread=8
    )
    assert out["env"] == {
        "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_IB_HCA": "=mlx5_0:1",
        "NCCL_NET_GDR_LEVEL": "PXB",
        "NCCL_NET_PLUGIN": "harp",
        "NCCL_SOCKET_NTHREADS": "4",
        "NCCL_NSOCKS_PERTHREAD": "8",
    }
    assert render_nccl_env([ETH0], ports, gpudirect_rdma=False)["env"]["NCCL_NET_GDR_LEVEL"] == "LOC"
    with pytest.raises(NcclEnvError, match="one of LOC, PIX, PXB, PHB, SYS"):
        render_nccl_env([ETH0], ports, gdr_level="NVL")
    with pytest.raises(NcclEnvError, match=r"8 x 16 = 128 exceeds NCCL's limit of 64"):
        render_nccl_env([ETH0], socket_nthreads=8, nsocks_perthread=16)
    with pytest.raises(NcclEnvError, match="1-16"):
        render_nccl_env([ETH0], socket_nthreads=17)
    with pytest.raises(NcclEnvError, match="plugin name"):
        render_nccl_env([ETH0], net_plugin="harp; rm -rf /")


# ---- interface choice ---------------------------------------------------------------------------


def test_no_usable_interface_is_a_clear_error():
    ifaces = [
        LO,
        {"name": "docker0", "state": "up", "ipv4": ["172.17.0.1/16"]},
        {"name": "eth0", "state": "down", "ipv4": ["192.0.2.10/24"]},
        {"name": "veth1a2b", "state": "up", "ipv4": []},
        {"name": "virbr0", "state": "up", "ipv4": ["192.168.122.1/24"]},
    ]
    with pytest.raises(NcclEnvError) as err:
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
    with pytest.raises(NcclEnvError, match="'docker0' cannot be used: Docker bridge"):
        render_nccl_env(ifaces, data_interfaces=["docker0"])
    with pytest.raises(NcclEnvError, match="'ens7' is not on this node"):
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
    with pytest.raises(NcclEnvError, match="no interface"):
        parse_ifconfig("ifconfig: command not found")


# ---- nccl.conf ----------------------------------------------------------------------------------


def test_render_nccl_conf_text():
    out = render_nccl_env([ETH0], [_port("mlx5_0", "InfiniBand")], net_plugin="harp")
    text = render_nccl_conf(out)
    assert text == (
        "# Managed by Ansible (gpucluster): NCCL settings for this node; edits are overwritten\n"
        "NCCL_IB_HCA==mlx5_0:1\n"
        "NCCL_NET_PLUGIN=harp\n"
        "NCCL_SOCKET_IFNAME==eth0\n"
    )
    assert parse_nccl_conf(text) == out["env"]
    assert render_nccl_conf(out["env"]) == text
    with pytest.raises(NcclEnvError, match="line break"):
        render_nccl_conf({"NCCL_DEBUG": "WARN\nNCCL_P2P_DISABLE=1"})
    with pytest.raises(NcclEnvError, match="not an environment variable name"):
        render_nccl_conf({"nccl debug": "WARN"})


@pytest.mark.parametrize(
    "ifaces,ports",
    [
        ([ETH0, {"name": "docker0", "state": "up", "ipv4": ["172.17.0.1/16"]}], []),
        ([ETH0], [_port("mlx5_10", "InfiniBand"), _port("mlx5_2", "InfiniBand"), _port("mlx5_1", "Ethernet")]),
        ([{"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"], "type": "bonding"}],
         [{"device": "mlx5_bond_0", "port": 1, "state": "PORT_ACTIVE (4)", "link_layer": "Ethernet",
           "netdev": "bond0", "gids": c32_gids()}]),
    ],
)
def test_rendering_again_from_the_recorded_choice_gives_the_same_settings(ifaces, ports):
    # playbooks/runtime.yml re-renders /etc/nccl.conf from what the last converge recorded
    # (ansible_local.gpucluster_nccl: data_interfaces, hcas) because it has no GPU-NIC map;
    # the result must be what site.yml wrote, or the next converge would change the node again.
    first = render_nccl_env(ifaces, ports)
    again = render_nccl_env(ifaces, ports, data_interfaces=first["data_interfaces"], hcas=first["hcas"] or None)
    assert again["env"] == first["env"] and again["mca"] == first["mca"]


# --- /etc/nccl.conf shared with the user: one managed block, user lines kept ------------------

def test_parse_nccl_conf_first_line_wins_as_in_nccl_setenv_no_overwrite():
    assert parse_nccl_conf("NCCL_DEBUG=WARN\nNCCL_DEBUG=INFO\n") == {"NCCL_DEBUG": "WARN"}


def test_merge_nccl_conf_keeps_user_lines_and_comments_out_the_c29_line():
    from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_env import (
        NCCL_CONF_BEGIN,
        NCCL_CONF_END,
        merge_nccl_conf,
    )
    # C29: the image appended NCCL_SOCKET_IFNAME=^docker0 (it lets NCCL pick lo).
    c29 = fixture_text("nccl-network/C29_nccl_socket_ifname_exclude_docker0_selects_lo."
                       "1-nccl-conf-line-written-by-the-image.txt")
    image_line = c29.split(">>")[0].replace("echo ", "").strip()
    assert image_line == "NCCL_SOCKET_IFNAME=^docker0"
    user = f"# site tuning\nNCCL_DEBUG=INFO\n{image_line}\nNCCL_IB_TIMEOUT=22\n"
    env = {"NCCL_SOCKET_IFNAME": "=data0,eth0", "NCCL_IB_HCA": "=mlx5_0:1"}
    out = merge_nccl_conf(user, env)
    lines = out["text"].splitlines()
    assert lines[0] == NCCL_CONF_BEGIN and lines[3] == NCCL_CONF_END
    assert lines[1:3] == ["NCCL_IB_HCA==mlx5_0:1", "NCCL_SOCKET_IFNAME==data0,eth0"]
    assert lines[4:] == ["# site tuning", "NCCL_DEBUG=INFO",
                         "# gpucluster: overridden by the managed block above, kept for reference: "
                         "NCCL_SOCKET_IFNAME=^docker0", "NCCL_IB_TIMEOUT=22"]
    assert out["overridden"] == [image_line]
    read = parse_nccl_conf(out["text"])  # what NCCL reads
    assert read == {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "=data0,eth0", "NCCL_DEBUG": "INFO",
                    "NCCL_IB_TIMEOUT": "22"}
    # rerun on its own output: same text; a changed plan replaces only the block
    assert merge_nccl_conf(out["text"], env)["text"] == out["text"]
    again = merge_nccl_conf(out["text"], {"NCCL_SOCKET_IFNAME": "=eth0"})
    assert again["text"].splitlines()[1:3] == ["NCCL_SOCKET_IFNAME==eth0", NCCL_CONF_END]
    assert again["text"].splitlines()[3:] == lines[4:]


def test_merge_nccl_conf_replaces_a_file_an_older_gpucluster_wrote_whole():
    from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_env import merge_nccl_conf
    old = render_nccl_conf({"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "WARN"})
    out = merge_nccl_conf(old, {"NCCL_SOCKET_IFNAME": "=eth1"})
    assert parse_nccl_conf(out["text"]) == {"NCCL_SOCKET_IFNAME": "=eth1"}
    assert out["overridden"] == [] and out["user_lines"] == []
    assert merge_nccl_conf("", {"NCCL_SOCKET_IFNAME": "=eth1"})["text"] == out["text"]
