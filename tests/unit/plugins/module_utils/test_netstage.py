"""Glue of the network stage roles (module_utils/netstage.py), on the fixtures."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import hugepages, netstage
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_topology import parse_topo_matrix
from ansible_collections.gpucluster.cluster.plugins.module_utils.multi_nic import policy_routes
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl import render_nccl_env
from ansible_collections.gpucluster.cluster.plugins.module_utils.netstage import NetStageError
from ansible_collections.gpucluster.cluster.plugins.module_utils.rdma import parse_ibdev2netdev

from tests.conftest import fixture_text

C02 = "nvidia-smi-topo/C02_topo_a100_nvswitch_roce_nic_legend.txt"
C04 = "nvidia-smi-topo/C04_topo_2gpu_tabs_gpu_numa_id_na_plus_p2p.1-nvidia-smi-topo-m.txt"
C05 = "rdma/C05_ibdev2netdev_h100_ib_plus_eth_netdev_down.txt"
C20 = "hugepages/C20_hugepages_runtime_alloc_kubelet_reports_zero.1-node-facts.txt"
GiB = 1024**3
MiB = 1024**2


def facts(**extra_ifaces):
    """ansible_facts of a cloud VM: eth0 primary with the default route, plus extra NICs."""
    out = {
        "interfaces": ["lo", "eth0", "docker0"],
        "default_ipv4": {"interface": "eth0", "address": "172.31.0.5", "gateway": "172.31.0.1"},
        "lo": {"device": "lo", "active": True, "type": "loopback", "ipv4": {"address": "127.0.0.1", "prefix": "8"}},
        "eth0": {"device": "eth0", "active": True, "type": "ether", "macaddress": "52:54:00:00:00:01",
                 "ipv4": {"address": "172.31.0.5", "prefix": "20"}},
        "docker0": {"device": "docker0", "active": False, "type": "bridge", "macaddress": "02:42:ac:11:00:01",
                    "ipv4": {"address": "172.17.0.1", "prefix": "16"}},
    }
    for name, fact in extra_ifaces.items():
        out["interfaces"].append(name)
        out[name] = {"device": name, "type": "ether", **fact}
    return out


ENIS = facts(
    eth1={"active": False, "macaddress": "20:90:6f:62:33:e2"},
    eth2={"active": True, "macaddress": "20:90:6f:62:33:e3", "ipv4": {"address": "10.0.64.14", "prefix": "20"}},
)


# --------------------------------------------------------------------------------------------
# resolve_secondary_nics
# --------------------------------------------------------------------------------------------


def test_resolve_by_mac_and_name_with_given_and_current_addresses():
    nics = netstage.resolve_secondary_nics(
        [
            {"mac": "20:90:6F:62:33:E2", "address": "10.0.64.13/20", "gateway": "10.0.64.1"},
            {"name": "eth2", "mtu": 9000},
        ],
        ENIS,
        mtu=0,
    )
    assert [n["name"] for n in nics] == ["eth1", "eth2"]
    assert nics[0] == {
        "name": "eth1", "mac": "20:90:6f:62:33:e2", "address": "10.0.64.13/20", "ip": "10.0.64.13", "prefix": 20,
        "network": "10.0.64.0/20", "gateway": "10.0.64.1", "mtu": None, "ipv4": ["10.0.64.13/20"],
    }
    assert nics[1]["address"] == "10.0.64.14/20" and nics[1]["mtu"] == 9000 and nics[1]["gateway"] is None
    # The resolved NICs are the shape nccl_env.policy_routes() takes: one table per NIC.
    routes = policy_routes(nics, 100)
    assert [r["rule"] for r in routes] == ["from 10.0.64.13 table 101", "from 10.0.64.14 table 102"]
    assert routes[1]["route"] == "10.0.64.0/20 dev eth2 src 10.0.64.14 table 102"


def test_resolve_default_mtu_and_bare_ip_taking_the_prefix_on_the_nic():
    nics = netstage.resolve_secondary_nics([{"name": "eth2", "address": "10.0.64.14"}], ENIS, mtu=8500)
    assert nics[0]["address"] == "10.0.64.14/20" and nics[0]["mtu"] == 8500


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([{"name": "eth0"}], "holds the node's default route"),
        ([{"name": "docker0", "address": "10.1.0.2/24"}], "not a NIC for GPU traffic"),
        ([{"name": "eth9"}], "eth9 is not on this node"),
        ([{"mac": "aa:bb:cc:dd:ee:ff", "address": "10.0.0.2/24"}], "no interface with MAC aa:bb:cc:dd:ee:ff"),
        ([{"mac": "20:90:6f:62:33:e2", "name": "eth2"}], "belongs to eth1, not eth2"),
        ([{"mac": "not-a-mac"}], "is not a MAC address"),
        ([{"name": "eth1"}], "eth1 has no IPv4 address now and none is given"),
        ([{"name": "eth1", "address": "10.0.64.13"}], "has no prefix length"),
        ([{"name": "eth1", "address": "10.0.64.0/20"}], "network or broadcast address"),
        ([{"name": "eth1", "address": "fd00::5/64"}], "is not IPv4"),
        ([{"name": "eth1", "address": "10.0.64.13/20", "gateway": "10.9.0.1"}], "not another address in eth1's subnet"),
        ([{"name": "eth2"}, {"name": "eth2"}], "already listed"),
        ([{"name": "eth1", "address": "10.0.64.14/20"}, {"name": "eth2"}], "already used by eth1"),
        ([{"name": "eth2", "mtu": 70000}], "MTU 70000 is outside"),
        ([{}], "names no NIC"),
        (["eth1"], "must be a dict"),
    ],
)
def test_resolve_refuses_with_the_fix(specs, message):
    with pytest.raises(NetStageError, match=message):
        netstage.resolve_secondary_nics(specs, ENIS)


def test_resolve_nothing():
    assert netstage.resolve_secondary_nics([], ENIS) == []


@pytest.mark.parametrize(
    ("address", "gateway", "peer", "remote"),
    [
        ("198.18.0.11/24", None, "198.18.0.254", None),
        ("198.18.0.254/24", "198.18.0.1", "198.18.0.1", "192.0.2.1"),
        ("10.0.0.0/31", None, "10.0.0.1", None),
        ("10.0.0.9/32", None, None, None),
    ],
)
def test_probe_destinations(address, gateway, peer, remote):
    assert netstage.probe_destinations({"address": address, "gateway": gateway}) == {"peer": peer, "remote": remote}


def test_parse_numa_nodes():
    text = (
        "/sys/class/net/eth1/device/numa_node:0\n/sys/class/net/eth2/device/numa_node:1\n"
        "/sys/class/net/eth3/device/numa_node:-1\ngrep: /sys/class/net/lo/device/numa_node: No such file\n"
    )
    assert netstage.parse_numa_nodes(text) == {"eth1": 0, "eth2": 1, "eth3": None}


# --------------------------------------------------------------------------------------------
# GPU-NIC map
# --------------------------------------------------------------------------------------------

# C02's matrix names its NICs mlx5_0..7 (RoCE); the netdev of each comes from ibdev2netdev.
C02_NETDEVS = parse_ibdev2netdev(
    "\n".join(f"mlx5_{i} port 1 ==> ens{i + 1}f0np0 (Up)" for i in range(8))
)


def test_map_from_topology_dgx_style_nics_in_the_matrix():
    topo = parse_topo_matrix(fixture_text(C02))
    nics = [{"name": f"ens{i + 1}f0np0", "ip": f"198.18.{i + 1}.1"} for i in range(8)]
    m = netstage.gpu_netdev_map(nics, {"topology": topo}, {"netdevs": C02_NETDEVS})
    # GPU0/1 share the PXB switch of mlx5_0/1: dealt round-robin; every GPU gets a PXB NIC.
    assert [(e["gpu"], e["nic"], e["hca"], e["link"]) for e in m] == [
        (i, f"ens{i + 1}f0np0", f"mlx5_{i}", "PXB") for i in range(8)
    ]
    assert m[3]["address"] == "198.18.4.1" and {e["source"] for e in m} == {"topology"}


def test_map_from_topology_only_among_the_secondary_nics():
    # Only four of the eight RoCE netdevs are secondary NICs: GPUs go to the closest of those.
    topo = parse_topo_matrix(fixture_text(C02))
    nics = ["ens1f0np0", "ens3f0np0", "ens5f0np0", "ens7f0np0"]
    m = netstage.gpu_netdev_map(nics, {"topology": topo}, {"netdevs": C02_NETDEVS})
    assert [e["nic"] for e in m] == [nics[0], nics[0], nics[1], nics[1], nics[2], nics[2], nics[3], nics[3]]


def test_map_c05_hcas_whose_netdevs_are_not_secondary_nics_fall_back():
    # C05's HCAs (mlx5_0..11) are not in C02's matrix: no RDMA join, and without NUMA data
    # the GPUs are dealt in order.
    topo = parse_topo_matrix(fixture_text(C02))
    netdevs = parse_ibdev2netdev("\n".join(ln for ln in fixture_text(C05).splitlines() if not ln.startswith("$")))
    assert len(netdevs) == 12
    m = netstage.gpu_netdev_map(["eth1", "eth2"], {"topology": topo}, {"netdevs": netdevs})
    assert [e["nic"] for e in m] == ["eth1", "eth2"] * 4 and {e["source"] for e in m} == {"order"}


def test_map_numa_split_box_with_enis_not_in_the_matrix():
    # The 8-GPU box of C02 without its RDMA NICs (a VPC node: ENIs are virtio, never in the
    # matrix): GPUs 0-3 are on NUMA node 0, 4-7 on node 1; two ENIs per node.
    topo = parse_topo_matrix(fixture_text(C02))
    topo = {**topo, "nics": []}
    numa = netstage.parse_numa_nodes(
        "\n".join(f"/sys/class/net/eth{i}/device/numa_node:{0 if i <= 2 else 1}" for i in range(1, 5))
    )
    m = netstage.gpu_netdev_map(["eth1", "eth2", "eth3", "eth4"], {"topology": topo}, None, numa)
    assert [(e["gpu"], e["nic"], e["link"]) for e in m] == [
        (0, "eth1", "NODE"), (1, "eth2", "NODE"), (2, "eth1", "NODE"), (3, "eth2", "NODE"),
        (4, "eth3", "NODE"), (5, "eth4", "NODE"), (6, "eth3", "NODE"), (7, "eth4", "NODE"),
    ]
    assert {e["source"] for e in m} == {"numa"}


def test_map_numa_split_one_nic_per_node_uses_the_far_one_never_for_near_gpus():
    topo = {**parse_topo_matrix(fixture_text(C02)), "nics": []}
    m = netstage.gpu_netdev_map(["eth1", "eth2"], {"topology": topo}, None, {"eth1": 1, "eth2": 0})
    assert [e["nic"] for e in m] == ["eth2"] * 4 + ["eth1"] * 4


def test_map_pcie_only_box_without_numa_data_deals_in_order():
    # C04: two GPUs behind one host bridge, no NIC in the matrix; the NICs have no NUMA
    # affinity (-1), so the map follows the inventory order.
    topo = parse_topo_matrix(fixture_text(C04))
    m = netstage.gpu_netdev_map(["eth1", "eth2"], {"topology": topo}, None, {"eth1": None, "eth2": None})
    assert [(e["gpu"], e["nic"], e["source"]) for e in m] == [(0, "eth1", "order"), (1, "eth2", "order")]


def test_map_without_topology_uses_the_pci_count():
    m = netstage.gpu_netdev_map([{"name": "eth1", "address": "10.0.64.13/20"}], {"topology": None}, gpu_count=3)
    assert [(e["gpu"], e["nic"], e["address"]) for e in m] == [(i, "eth1", "10.0.64.13") for i in range(3)]


@pytest.mark.parametrize(("nics", "count"), [([], 8), (["eth1"], 0)])
def test_map_empty(nics, count):
    assert netstage.gpu_netdev_map(nics, {}, gpu_count=count) == []


# --------------------------------------------------------------------------------------------
# NCCL inputs
# --------------------------------------------------------------------------------------------


def test_rdma_ports_feed_render_nccl_env():
    rdma = {
        "hcas": [
            {"name": "mlx5_0", "ports": [{"port": 1, "state": "ACTIVE", "link_layer": "Ethernet",
                                          "netdev": "ens1f0np0", "roce_gid_index": 3}]},
            {"name": "mlx5_1", "ports": [{"port": 1, "state": "DOWN", "link_layer": "Ethernet",
                                          "netdev": "ens2f0np0", "roce_gid_index": None}]},
        ]
    }
    ports = netstage.rdma_ports(rdma)
    assert ports[0] == {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "Ethernet",
                        "netdev": "ens1f0np0", "roce_v2_gid_index": 3}
    ifaces = [{"name": "ens1f0np0", "state": "up", "ipv4": ["198.18.1.1/24"]}]
    out = render_nccl_env(ifaces, ports)
    assert out["env"]["NCCL_IB_HCA"] == "=mlx5_0:1" and out["env"]["NCCL_IB_GID_INDEX"] == "3"
    assert netstage.rdma_ports(None) == [] and netstage.rdma_ports({"hcas": []}) == []


# --------------------------------------------------------------------------------------------
# cloud_eni -> multi_nic
# --------------------------------------------------------------------------------------------

ENI_RESULT = [
    {"id": "eni-1", "mac": "20:90:6F:62:33:E2", "private_ip": "10.0.64.13", "device_index": 1, "status": "attached"},
    {"id": "eni-2", "mac": "20:90:6f:62:33:e3", "private_ip": "10.0.64.14", "device_index": 2, "status": "attached"},
]


def test_eni_interfaces():
    assert netstage.eni_interfaces(ENI_RESULT, "10.0.64.0/20") == [
        {"mac": "20:90:6f:62:33:e2", "address": "10.0.64.13/20", "gateway": "10.0.64.1"},
        {"mac": "20:90:6f:62:33:e3", "address": "10.0.64.14/20", "gateway": "10.0.64.1"},
    ]
    out = netstage.eni_interfaces(ENI_RESULT[:1], "10.0.64.0/20", "10.0.64.2", 8500)
    assert out == [{"mac": "20:90:6f:62:33:e2", "address": "10.0.64.13/20", "gateway": "10.0.64.2", "mtu": 8500}]
    # ...and they resolve on a node that shows those MACs.
    nics = netstage.resolve_secondary_nics(netstage.eni_interfaces(ENI_RESULT, "10.0.64.0/20"), ENIS)
    assert [n["name"] for n in nics] == ["eth1", "eth2"]


@pytest.mark.parametrize(
    ("cidr", "gateway", "message"),
    [
        ("10.0.64.13/20", None, "not a subnet in CIDR form"),
        ("10.0.64.0/31", None, "/30 or larger"),
        ("10.0.64.0/20", "10.1.0.1", "not in cloud_eni_subnet_cidr"),
        ("10.0.80.0/20", None, "outside cloud_eni_subnet_cidr"),
    ],
)
def test_eni_interfaces_refuses(cidr, gateway, message):
    with pytest.raises(NetStageError, match=message):
        netstage.eni_interfaces(ENI_RESULT, cidr, gateway)


# --------------------------------------------------------------------------------------------
# Hugepages on the node
# --------------------------------------------------------------------------------------------

PLAN_1G = hugepages.plan(50, "1G", 1024 * GiB, [2 * MiB, GiB]).as_dict()
PLAN_2M = hugepages.plan(4096, "2M", 256 * GiB, [2 * MiB, GiB]).as_dict()
BOOT_1G = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro default_hugepagesz=1G hugepagesz=1G hugepages=50 quiet"
MEMINFO_1G = "MemTotal: 1073741824 kB\nHugePages_Total: 50\nHugePages_Free: 50\nHugepagesize: 1048576 kB\n"
MEMINFO_HOST = "MemTotal: 24000000 kB\nHugePages_Total: 0\nHugePages_Free: 0\nHugepagesize: 2048 kB\n"
MOUNT_1G = "hugetlbfs /dev/hugepages hugetlbfs rw,nosuid,nodev,relatime,pagesize=1024M 0 0\n"


def test_cmdline_active():
    assert netstage.cmdline_active(PLAN_1G, BOOT_1G)
    assert not netstage.cmdline_active(PLAN_1G, BOOT_1G.replace("hugepages=50", "hugepages=40"))
    assert not netstage.cmdline_active(PLAN_1G, "BOOT_IMAGE=/vmlinuz ro quiet")


def test_status_ok_after_boot_with_the_mount():
    s = netstage.hugepages_status(PLAN_1G, MEMINFO_1G, BOOT_1G, mounts=MOUNT_1G)
    assert s["state"] == "ok" and s["cmdline_active"] and s["mismatches"] == []
    assert s["mount"] == {"path": "/dev/hugepages", "present": True, "page_size": GiB, "page_size_name": "1G",
                          "expected": GiB, "ok": True}


def test_status_pending_reboot_says_why_including_the_refused_runtime_allocation():
    run = {"requested": True, "applied": False, "reason": "/proc/sys is read-only"}
    s = netstage.hugepages_status(PLAN_2M, MEMINFO_HOST, "BOOT_IMAGE=/vmlinuz ro", runtime=run, mounts="")
    assert s["state"] == "pending-reboot" and not s["cmdline_active"]
    assert "hugepages=4096" in s["message"] and "/proc/sys is read-only" in s["message"]
    assert s["mount"]["present"] is False and s["mount"]["ok"] is False


def test_status_mismatch_after_boot_names_the_cause():
    s = netstage.hugepages_status(PLAN_1G, MEMINFO_1G.replace("Total: 50", "Total: 31"), BOOT_1G)
    assert s["state"] == "mismatch" and "fragmented" in s["message"] and s["mount"] is None


def test_status_c20_runtime_2m_pool_in_place_and_default_mount():
    # C20: 4096 x 2 MiB allocated at run time, hugetlbfs mounted without pagesize= (default size).
    text = fixture_text(C20)
    run = {"requested": True, "applied": True, "reason": None}
    s = netstage.hugepages_status(PLAN_2M, text, "BOOT_IMAGE=/vmlinuz ro", runtime=run, mounts=text)
    assert s["state"] == "ok" and s["mount"]["ok"] and s["mount"]["page_size"] == 2 * MiB


def test_status_runtime_applied_but_short_is_a_mismatch():
    run = {"requested": True, "applied": True, "reason": None}
    meminfo = MEMINFO_HOST.replace("Total: 0", "Total: 1000")
    s = netstage.hugepages_status(PLAN_2M, meminfo, "ro", runtime=run)
    assert s["state"] == "mismatch" and "only 1000 of 4096" in s["message"]


def test_status_checks_non_default_pools_from_sysfs():
    plan = hugepages.plan_pools([(50, "1G"), (1024, "2M")], 1024 * GiB, [2 * MiB, GiB]).as_dict()
    cmd = BOOT_1G + " hugepagesz=2M hugepages=1024"
    s = netstage.hugepages_status(plan, MEMINFO_1G, cmd, sysfs_pools={"hugepages-2048kB": 1000})
    assert s["state"] == "mismatch" and s["mismatches"][0]["field"] == "nr_hugepages (2M)"


def test_status_refuses_a_non_plan():
    with pytest.raises(NetStageError, match="expected a hugepages plan"):
        netstage.hugepages_status({"count": 3}, MEMINFO_1G, BOOT_1G)


def test_grub_hugepage_args():
    text = (
        'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet hugepages=16"\n'
        "GRUB_CMDLINE_LINUX='default_hugepagesz=2M console=ttyS0'\n# hugepages=99 in a comment\n"
    )
    assert netstage.grub_hugepage_args(text) == ["hugepages=16", "default_hugepagesz=2M"]
    assert netstage.grub_hugepage_args('GRUB_CMDLINE_LINUX=""\n') == []


def test_container_env_merges_nccl_mca_plugin_and_extra_as_strings():
    rendered = render_nccl_env([{"name": "eth0", "state": "up", "ipv4": ["10.0.0.5/24"]},
                                {"name": "docker0", "state": "up", "ipv4": ["172.17.0.1/16"]}], net_plugin="harp")
    env = netstage.container_env(rendered, True, {"NCCL_NET_PLUGIN": "/opt/x/libnccl-net.so", "HARP_X": 1},
                                 {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_NTHREADS": 4})
    assert env == {
        "HARP_X": "1", "NCCL_DEBUG": "WARN", "NCCL_NET_PLUGIN": "/opt/x/libnccl-net.so", "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_SOCKET_NTHREADS": "4", "OMPI_MCA_btl_tcp_if_include": "eth0", "OMPI_MCA_oob_tcp_if_include": "eth0",
    }
    assert "OMPI_MCA_btl_tcp_if_include" not in netstage.container_env(rendered, False)
    with pytest.raises(NetStageError, match="not an environment variable name"):
        netstage.container_env(rendered, False, {"BAD-NAME": "x"})


def test_sorted_interfaces_make_the_rendering_independent_of_fact_order():
    a = facts(eth10={"active": True, "ipv4": {"address": "10.0.10.5", "prefix": "24"}},
              eth2={"active": True, "ipv4": {"address": "10.0.2.5", "prefix": "24"}})
    b = dict(a, interfaces=list(reversed(a["interfaces"])))
    assert [i["name"] for i in netstage.sorted_interfaces(a)] == ["docker0", "eth0", "eth2", "eth10", "lo"]
    env_a = render_nccl_env(netstage.sorted_interfaces(a))["env"]["NCCL_SOCKET_IFNAME"]
    env_b = render_nccl_env(netstage.sorted_interfaces(b))["env"]["NCCL_SOCKET_IFNAME"]
    assert env_a == env_b == "=eth0,eth2,eth10"
