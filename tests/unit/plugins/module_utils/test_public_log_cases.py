"""Network, RDMA and NCCL output forms the readers misread before, each as posted publicly.

Found by reading the tools' own format strings across versions (NVIDIA/nccl src/transport/net.cc,
src/graph/paths.cc, src/plugin/net.cc; rdma-core's and MLNX_OFED's ibdev2netdev script;
iproute2 ip/iproute.c and ip/ipaddress.c) and checked against logs posted in public issues:
NVIDIA/nccl #1059 (pdsh-prefixed ranks), #1151 (GDR disabled by distance), aws-ofi-nccl MPIJob
logs on EKS (Open MPI --tag-output, network "AWS Libfabric"), NCCL 2.20+ merged NICs, NCCL
2.23/2.26 "Could not find" lines, MLNX_OFED 4.x ``ibdev2netdev -v``, OpenVPN ``ip addr``.
"""

# ruff: noqa: E501 - the logs are quoted as printed
from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.diagnose import nccl_transport_summary
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_net_plugin import read_net_plugin
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_transport import check_nccl_transport
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError, strip_launcher_prefix
from ansible_collections.gpucluster.cluster.plugins.module_utils.policy_routing import (
    check_policy_routing,
    parse_ip_addr,
    parse_ip_route,
    read_session,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.rdma import parse_ibdev2netdev

# aws-ofi-nccl on EKS, mpirun --tag-output (an MPIJob's launcher log).
EFA_TAGGED = """\
[1,1]<stdout>:nccl-tests-efa-worker-0:27:27 [1] NCCL INFO Bootstrap : Using eth0:172.31.94.17<0>
[1,1]<stdout>:nccl-tests-efa-worker-0:27:27 [1] NCCL INFO NET/OFI Selected Provider is efa
[1,1]<stdout>:nccl-tests-efa-worker-0:27:27 [1] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v4 symbol.
[1,1]<stdout>:nccl-tests-efa-worker-0:27:27 [1] NCCL INFO Using network AWS Libfabric
[1,9]<stdout>:nccl-tests-efa-worker-1:26:26 [1] NCCL INFO Bootstrap : Using eth0:172.31.77.37<0>
[1,9]<stdout>:nccl-tests-efa-worker-1:26:26 [1] NCCL INFO Using network AWS Libfabric
[1,2]<stdout>:nccl-tests-efa-worker-0:28:69 [2] NCCL INFO Channel 01 : 2[201c0] -> 7[a01d0] via P2P/IPC/read
[1,6]<stdout>:nccl-tests-efa-worker-0:33:73 [6] NCCL INFO Channel 03 : 15[a01d0] -> 6[a01c0] [receive] via NET/AWS Libfabric/3/GDRDMA
[1,1]<stdout>:nccl-tests-efa-worker-0:27:72 [1] NCCL INFO Channel 00 : 1[101d0] -> 8[101c0] [send] via NET/AWS Libfabric/0/GDRDMA
"""

# NVIDIA/nccl #1059: pdsh (DeepSpeed) puts "<host>: " before every line.
PDSH = """\
MLVM2: MLVM2:10792:10792 [0] NCCL INFO cudaDriverVersion 12030
MLVM2: MLVM2:10792:10792 [0] NCCL INFO Bootstrap : Using ibP257s464513:172.16.1.56<0>
MLVM2: MLVM2:10792:10792 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory
MLVM2: MLVM2:10792:10792 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation
MLVM: MLVM:12345:12345 [2] NCCL INFO NET/Plugin : No plugin found, using internal implementation
MLVM2: MLVM2:10792:10792 [0] NCCL INFO NET/IB : Using [0]mlx5_ib0:1/IB ; OOB ibP257s464513:172.16.1.56<0>
MLVM2: MLVM2:10792:10792 [0] NCCL INFO Using network IB
MLVM: MLVM:12345:12345 [2] NCCL INFO Using network IB
"""

# NVIDIA/nccl #1151 and paths.cc: the HCAs can do GDR, but NCCL turns it off for this GPU.
GDR_BY_DISTANCE = """\
n013:101855:101855 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
n013:101855:101885 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/IB [RO]; OOB ib0:10.1.0.13<0>
n013:101855:101885 [0] NCCL INFO Using network IB
n013:101855:101885 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
n013:101855:101885 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_2'
n013:101855:101885 [0] NCCL INFO GPU Direct RDMA Disabled for GPU ca000 / HCA 0 (distance 7 > 4)
n013:101855:101885 [0] NCCL INFO GPU Direct RDMA Disabled for GPU ca000 / HCA 1 (distance 7 > 4)
n013:101855:101885 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0
n013:101855:101885 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
"""


def test_launcher_prefixes_are_stripped_once():
    assert strip_launcher_prefix("[1,0]<stdout>:host:1:1 [0] NCCL INFO x") == "host:1:1 [0] NCCL INFO x"
    assert strip_launcher_prefix("[1,0]<stderr>: text") == "text"  # Open MPI 5 adds a space
    assert strip_launcher_prefix("[3]<stdout>:Img/sec per GPU: 1.0") == "Img/sec per GPU: 1.0"
    assert strip_launcher_prefix("Model: ResNet50") == "Model: ResNet50"  # a label is not stripped
    # Open MPI 4 --timestamp-output; PRRTE (Open MPI 5) tag, tag-fullname, tag-detailed, rank
    assert strip_launcher_prefix("Thu May  7 10:39:20 2020[1,1]<stdout>:Hello") == "Hello"
    assert strip_launcher_prefix("[prterun-f5n18-100629@1,0]<stdout>: f5n18") == "f5n18"
    assert strip_launcher_prefix("[1,3][f5n17:4242]<stderr>: x") == "x"
    assert strip_launcher_prefix("[2]<stdout>x") == "x"


def test_a_tagged_mpirun_log_reads_as_the_plain_one():
    state = read_net_plugin(EFA_TAGGED)
    assert state.cls == "PLUGIN_LOADED" and state.severity == "ok"
    assert state.networks == ["AWS Libfabric"]
    summary = nccl_transport_summary(EFA_TAGGED)
    assert summary["hosts"] == ["nccl-tests-efa-worker-0", "nccl-tests-efa-worker-1"]
    assert summary["transport"] == "AWS Libfabric"
    assert summary["gdr"] is True  # "via NET/AWS Libfabric/<dev>/GDRDMA": a network name with a space
    assert check_nccl_transport(EFA_TAGGED, net_plugin="aws-ofi-nccl", transport="plugin", gdr=True)["problems"] == []


def test_a_pdsh_prefixed_log_reads_per_rank():
    state = read_net_plugin(PDSH)
    assert state.cls == "PLUGIN_NOT_FOUND"
    assert sorted(r["host"] for r in state.ranks) == ["MLVM", "MLVM2"]
    summary = nccl_transport_summary(PDSH)
    assert summary["hosts"] == ["MLVM2", "MLVM"]
    assert summary["transport"] == "IB"


def test_gdr_off_by_distance_is_off_although_the_hcas_could():
    summary = nccl_transport_summary(GDR_BY_DISTANCE)
    assert summary["gdr_by_hca"] == {"mlx5_0": True, "mlx5_2": True}
    assert summary["gdr_by_gpu"] == {"ca000": False}
    assert summary["gdr"] is False
    result = check_nccl_transport(GDR_BY_DISTANCE, transport="IB", gdr=True)
    assert not result["ok"]
    # Without the channel lines the per-GPU decision decides.
    no_channels = "\n".join(line for line in GDR_BY_DISTANCE.splitlines() if "Channel" not in line)
    assert nccl_transport_summary(no_channels)["gdr"] is False


@pytest.mark.parametrize("tail, gdr", [
    ("[send] via NET/IB/0/GDRDMA", True),
    ("[send] via NET/IB/0/GDRDMA/Shared", True),
    ("[send] via NET/IB/1(3)/GDRDMA", True),  # proxied through rank 3 (PXN)
    ("[send] via NET/IBext_v8/0", False),
    ("[receive] via NET/AWS Libfabric/7/GDRDMA/Shared", True),
])
def test_channel_lines_of_every_nccl_form_decide_gdr(tail, gdr):
    line = f"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] {tail}\n"
    capability = "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
    assert nccl_transport_summary(capability + line)["gdr"] is gdr


def test_merged_nics_of_nccl_2_20_are_read():
    log = ("bigo:1884:2298 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} "
           "[1]={[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE} [RO]; OOB bond0.526:169.136.106.9<0>\n")
    summary = nccl_transport_summary(log)
    assert [d["device"] for d in summary["ib_devices"]] == ["mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1"]
    assert {d["link_layer"] for d in summary["ib_devices"]} == {"RoCE"}
    assert summary["relaxed_ordering"] and summary["transport"] == "IB"
    assert summary["oob"] == [{"host": "bigo", "name": "bond0.526", "address": "169.136.106.9"}]


@pytest.mark.parametrize("version, wording", [("2.23.4+cuda12.1", "network"), ("2.26.2+cuda12.2", "net")])
def test_could_not_find_lists_the_libraries_and_the_prefixed_version_is_read(version, wording):
    log = (f"host-a:58239:58239 [0] NCCL INFO NCCL version {version}\n"
           f"host-a:58239:58245 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal {wording} plugin.\n"
           "host-a:58239:58245 [0] NCCL INFO Using network Socket\n")
    state = read_net_plugin(log)
    assert state.cls == "PLUGIN_NOT_FOUND"
    assert state.ranks[0]["not_found"] == ["libnccl-net.so"]
    assert state.nccl_version == version
    two = log.replace("find: libnccl-net.so.", "find: libnccl-net-ofi.so libnccl-net.so.")
    assert read_net_plugin(two).ranks[0]["not_found"] == ["libnccl-net-ofi.so", "libnccl-net.so"]


def test_a_requested_plugin_named_without_the_net_plugin_tag_is_the_request():
    log = ("nid007971:55487:55487 [0] NCCL INFO Plugin name set by env to librccl-net-ofi.so\n"
           "nid007971:55487:55487 [0] NCCL INFO NET/Plugin : dlerror=librccl-net-ofi.so: cannot open shared object "
           "file: No such file or directory No plugin found (librccl-net-ofi.so), using internal implementation\n"
           "nid007971:55487:55487 [0] NCCL INFO Using network Socket\n")
    state = read_net_plugin(log)
    assert state.requested_plugin == "librccl-net-ofi.so"
    assert state.severity == "fail"


def test_ibdev2netdev_v_pads_the_port_state():
    text = ("0000:31:00.0 mlx5_0 (MT4117 - MT2138K10121) CX4121A - ConnectX-4 LX SFP28 fw 14.27.1016 port 1 (DOWN  ) ==> ens4f0 (Down)\n"
            "0000:4b:00.0 mlx5_2 (MT4119 - MCX515A-CCAT) CX515A - ConnectX-5 QSFP28 fw 16.27.1016 port 1 (ACTIVE) ==> ens6 (Up)\n"
            "0000:b1:00.0 mlx5_5 (MT4123 - MCX653105A-HDAT) CX653105A - ConnectX-6 HDR fw 20.28.1002 port 1 (INIT  ) ==> ib0 (Up)\n")
    records = parse_ibdev2netdev(text)
    assert [(r["hca"], r["port_state"], r["netdev"], r["netdev_type"]) for r in records] == [
        ("mlx5_0", "DOWN", "ens4f0", "ethernet"), ("mlx5_2", "ACTIVE", "ens6", "ethernet"),
        ("mlx5_5", "INIT", "ib0", "ipoib")]


MULTIPATH = """\
default proto static metric 1024
\tnexthop via 192.168.1.1 dev eth0 weight 1
\tnexthop via 192.168.2.1 dev eth1 weight 1
192.168.1.0/24 dev eth0 proto kernel scope link src 192.168.1.10
"""


def test_a_multipath_route_has_its_nexthops():
    routes = parse_ip_route(MULTIPATH)
    assert routes[0]["dst"] == "default" and routes[0]["dev"] is None and routes[0]["metric"] == 1024
    assert routes[0]["nexthops"] == [{"via": "192.168.1.1", "dev": "eth0", "weight": 1},
                                     {"via": "192.168.2.1", "dev": "eth1", "weight": 1}]
    assert routes[1]["dev"] == "eth0" and routes[1]["nexthops"] == []
    one_line = parse_ip_route("default metric 1024 nexthop via 10.0.0.1 dev eth0 weight 1 "
                              "nexthop via 10.0.1.1 dev eth1 weight 2\n")
    assert [h["dev"] for h in one_line[0]["nexthops"]] == ["eth0", "eth1"]


def test_a_multipath_route_without_its_devices_or_route_is_refused():
    with pytest.raises(ParseError, match="nexthop 1 without 'dev'"):
        parse_ip_route("default metric 1024 nexthop via 10.0.0.1 weight 1\n")
    with pytest.raises(ParseError, match="without its route"):
        parse_ip_route("\tnexthop via 192.168.1.1 dev eth0 weight 1\n")
    with pytest.raises(ParseError, match="without 'dev'"):
        parse_ip_route("default proto static metric 1024\n")


def test_a_table_whose_default_is_multipath_over_the_nic_is_ok():
    session = read_session(
        "$ ip addr\n"
        "2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9001 state UP\n    inet 10.0.0.5/24 scope global eth0\n"
        "3: eth1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9001 state UP\n    inet 10.0.1.5/24 scope global eth1\n"
        "$ ip rule\n0:\tfrom all lookup local\n10001:\tfrom 10.0.1.5 lookup 10001\n32766:\tfrom all lookup main\n"
        "$ ip route\ndefault via 10.0.0.1 dev eth0\n"
        "$ ip route show table 10001\ndefault proto static\n\tnexthop via 10.0.1.1 dev eth1 weight 1\n"
        "\tnexthop via 10.0.1.2 dev eth1 weight 1\n")
    report = check_policy_routing(session)
    assert report["primary"] == "eth0"
    assert report["class"] == "POLICY_ROUTING_OK", report["cause"]


def test_point_to_point_and_ipoib_addresses():
    text = """\
4: ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 qdisc mq state UP group default qlen 256
    link/infiniband 00:00:10:29:fe:80:00:00:00:00:00:00:b8:59:9f:03:00:c6:2b:1e brd 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff
    inet 10.10.0.5/16 brd 10.10.255.255 scope global ib0
5: tun0: <POINTOPOINT,MULTICAST,NOARP,UP,LOWER_UP> mtu 1500 qdisc fq_codel state UNKNOWN group default qlen 100
    link/none
    inet 10.8.0.1 peer 10.8.0.2/32 scope global tun0
       valid_lft forever preferred_lft forever
"""
    ifaces = parse_ip_addr(text)
    assert ifaces["ib0"]["mac"] == "00:00:10:29:fe:80:00:00:00:00:00:00:b8:59:9f:03:00:c6:2b:1e"
    assert ifaces["ib0"]["inet"] == ["10.10.0.5/16"] and ifaces["ib0"]["peers"] == {}
    assert ifaces["tun0"]["inet"] == ["10.8.0.1/32"]
    assert ifaces["tun0"]["peers"] == {"10.8.0.1": "10.8.0.2/32"}
    with pytest.raises(ParseError, match="line 2"):
        parse_ip_addr("5: tun0: <POINTOPOINT,UP> mtu 1500 state UNKNOWN\n    inet 10.8.0.1 peer 10.8.0\n")
