"""Tests for module_utils/rdma.py on the captured outputs in tests/fixtures.

Every case of tests/fixtures/rdma is read here, plus the GID table of nccl-network/C32 (the
RoCE GID index rule), each checked against the "Expected reading" of its .md file.
"""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl import select_hcas
from ansible_collections.gpucluster.cluster.plugins.module_utils.rdma import (
    ParseError,
    check_gid_index,
    classify_hcas,
    classify_no_devices,
    gid_entry,
    parse_gid_table,
    parse_ibdev2netdev,
    parse_ibstatus,
    parse_ibv_devices,
    parse_ibv_devinfo,
    parse_lspci_rdma_functions,
    parse_rate,
    parse_rdma_link,
    parse_sysfs_infiniband,
    pick_roce_gid_index,
    rdma_device_coverage,
    rdma_inventory,
    rdma_problems,
)

from tests.conftest import FIXTURES, cut_text, fixture_text

C05 = "rdma/C05_ibdev2netdev_h100_ib_plus_eth_netdev_down.txt"
C06 = "rdma/C06_ibstatus_roce_8x100g_ethernet_link_layer.txt"
C07 = "rdma/C07_ibv_devinfo_vf_in_pod_port_init.txt"
C32 = "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.1-ibv-devinfo-v-gid-table.txt"

COVERED = {"C05", "C06", "C07", "N18", "N20"}

# A representative `ibv_devinfo -v` of a RoCE ConnectX-6 Dx (no full -v capture is among the
# fixtures; C32 has only its GID table): flag lists and notes on lines of their own, nested
# capability blocks, the GID table of C32.
IBV_DEVINFO_V = """\
hca_id:\tmlx5_bond_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t22.36.1010
\tnode_guid:\t\t\t0c42:a103:00aa:bb01
\tsys_image_guid:\t\t\t0c42:a103:00aa:bb01
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4125
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000359
\tphys_port_cnt:\t\t\t1
\tmax_mr_size:\t\t\t0xffffffffffffffff
\tdevice_cap_flags:\t\t0xed721c36
\t\t\t\t\tBAD_PKEY_CNTR
\t\t\t\t\tBAD_QKEY_CNTR
\tgeneral_odp_caps:
\t\t\t\t\tODP_SUPPORT
\ttso_caps:
\t\tmax_tso:\t\t\t262144
\t\tsupported_qp:
\t\t\t\t\tSUPPORT_RAW_PACKET
\ttag matching not supported
\tcompletion timestamp_mask:\t\t\t0x7fffffffffffffff
\tnum_comp_vectors:\t\t63
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t0
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tEthernet
\t\t\tmax_vl_num:\t\tinvalid value (0)
\t\t\tgid_tbl_len:\t\t256
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t25.0 Gbps (32)
\t\t\tphys_state:\t\tLINK_UP (5)
""" + "\n".join(ln for ln in fixture_text(C32).splitlines() if "GID[" in ln) + "\n"


def _without_prompts(text):
    return "\n".join(ln for ln in text.splitlines() if not re.match(r"^(\$ |root@)", ln))


def test_every_case_is_covered():
    assert {p.name.split("_")[0] for p in (FIXTURES / "rdma").glob("*.md")} == COVERED


# --------------------------------------------------------------------------------------------
# C05 ibdev2netdev
# --------------------------------------------------------------------------------------------

C05_IB = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
C05_ETH = ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]


def test_ibdev2netdev_c05_records():
    records = parse_ibdev2netdev(_without_prompts(fixture_text(C05)))
    assert len(records) == 12
    assert [r["hca"] for r in records] == [f"mlx5_{i}" for i in range(12)]  # natural sort
    assert all(r["port"] == 1 for r in records)
    by_hca = {r["hca"]: r for r in records}
    assert by_hca["mlx5_0"] == {"hca": "mlx5_0", "port": 1, "netdev": "ibp26s0",
                                "netdev_state": "Down", "netdev_type": "ipoib",
                                "bus_id": None, "port_state": None}
    assert by_hca["mlx5_7"]["netdev"] == "enp157s0f0np0"
    assert by_hca["mlx5_7"]["netdev_state"] == "Up"
    assert by_hca["mlx5_10"]["netdev"] == "ibp204s0"  # '# CX-7 ...' annotation stripped


def test_ibdev2netdev_c05_ib_and_ethernet_sets():
    records = parse_ibdev2netdev(_without_prompts(fixture_text(C05)))
    hcas = classify_hcas(records)
    assert hcas == {"infiniband": C05_IB, "ethernet": C05_ETH}
    # (Down) is the IPoIB netdev state, not the IB port: the IB HCAs stay in the IB set.
    assert all(r["netdev_state"] == "Down" for r in records if r["hca"] in C05_IB)
    assert ",".join(hcas["infiniband"]) == "mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"


def test_classify_hcas_link_layer_wins_over_netdev_name():
    records = parse_ibdev2netdev("mlx5_0 port 1 ==> ib0 (Up)\nmlx5_1 port 1 ==> eth2 (Up)\n")
    ports = [{"hca": "mlx5_0", "link_layer": "InfiniBand"},
             {"hca": "mlx5_1", "link_layer": "InfiniBand"},
             {"hca": "mlx5_2", "link_layer": "Ethernet"}]
    assert classify_hcas(records, ports) == {"infiniband": ["mlx5_0", "mlx5_1"],
                                             "ethernet": ["mlx5_2"]}


def test_ibdev2netdev_verbose_and_bond():
    text = ("0000:1a:00.0 mlx5_0 (MT4123 - MCX653105A-HDAT) ConnectX-6 VPI adapter card fw "
            "20.31.1014 port 1 (ACTIVE) ==> ib0 (Up)\n"
            "mlx5_bond_0 port 1 ==> bond0 (Up)\n")
    records = parse_ibdev2netdev(text)
    assert records[0]["bus_id"] == "0000:1a:00.0"
    assert records[0]["port_state"] == "ACTIVE"
    assert records[1]["hca"] == "mlx5_bond_0"  # LAG HCA name accepted (C32)
    assert records[1]["netdev_type"] == "ethernet"


@pytest.mark.parametrize("text", [
    pytest.param(cut_text(_without_prompts(fixture_text(C05))), id="C05-half"),
    pytest.param("mlx5_0 port 1 ==> ib0\n", id="no-state"),
    pytest.param("No such file or directory\n", id="garbage"),
])
def test_ibdev2netdev_rejects_bad_input(text):
    with pytest.raises(ParseError, match=r"ibdev2netdev line \d+: expected"):
        parse_ibdev2netdev(text)


# --------------------------------------------------------------------------------------------
# C06 ibstatus
# --------------------------------------------------------------------------------------------


def test_ibstatus_c06_eight_roce_ports():
    ports = parse_ibstatus(fixture_text(C06))
    assert [(p["hca"], p["port"]) for p in ports] == [(f"mlx5_{i}", 1) for i in range(8)]
    for i, port in enumerate(ports):
        assert port["state"] == "ACTIVE" and port["state_num"] == 4
        assert port["phys_state"] == "LinkUp" and port["phys_state_num"] == 5
        assert port["rate_gbps"] == 100
        assert port["link_layer"] == "Ethernet"
        assert port["fabric"] == "RoCE"  # the '(4X EDR)' label does not make it InfiniBand
        assert port["speed"] == "EDR" and port["width"] == "4X"
        assert port["default_gid"] == f"fe80:0000:0000:0000:0200:00ff:fe00:000{i + 1}"
        assert port["default_gid_link_local"] is True


def test_ibstatus_c06_default_gid_is_never_the_nccl_gid():
    for port in parse_ibstatus(fixture_text(C06)):
        entry = gid_entry(0, port["default_gid"], "RoCE v2")
        assert entry["link_local"] is True
        assert pick_roce_gid_index([entry]) is None


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(cut_text(fixture_text(C06)), r"line 37: expected 'key: value', got 'Infiniband de'",
                 id="C06-half"),
    pytest.param(fixture_text(C06).split("        phys state", 1)[0],
                 r"'mlx5_0' port 1 .* lacks phys state, rate, link_layer; output truncated",
                 id="C06-cut-after-state"),
    pytest.param(fixture_text(C06).rsplit("link_layer", 1)[0], r"mlx5_7' port 1 .* lacks link_layer",
                 id="C06-last-line-missing"),
    pytest.param(fixture_text(C06)[:-4], r"link layer should be one of", id="C06-last-word-cut"),
    pytest.param("        state: 4: ACTIVE\n", r"line 1: expected \"Infiniband device", id="no-header"),
    pytest.param("Infiniband device 'mlx5_0' port 1 status:\n garbage\n", r"line 2: expected 'key: value'",
                 id="garbage"),
    pytest.param(fixture_text(C06).replace("4: ACTIVE", "4: ACT", 1), r"not a port state",
                 id="state-cut"),
])
def test_ibstatus_rejects_bad_input(text, message):
    with pytest.raises(ParseError, match=message):
        parse_ibstatus(text)


def test_parse_rate():
    assert parse_rate("100 Gb/sec (4X EDR)") == {"rate_gbps": 100, "width": "4X", "speed": "EDR"}
    assert parse_rate("56 Gb/sec (4X FDR)")["rate_gbps"] == 56
    assert parse_rate("2.5 Gb/sec (1X SDR)")["rate_gbps"] == 2.5
    assert parse_rate("400 Gb/sec (4X NDR)")["speed"] == "NDR"
    with pytest.raises(ParseError, match="rate"):
        parse_rate("100 Gb/se")


# --------------------------------------------------------------------------------------------
# C07 ibv_devinfo (and -v)
# --------------------------------------------------------------------------------------------


def test_ibv_devinfo_c07_vf_in_pod():
    devices = parse_ibv_devinfo(_without_prompts(fixture_text(C07)))
    assert len(devices) == 1
    dev = devices[0]
    assert dev["hca"] == "mlx5_7"
    assert dev["fw_ver"] == "28.39.3004"
    assert dev["vendor_part_id"] == 4126
    assert dev["transport"] == "InfiniBand"
    assert dev["node_guid"] == "0000:0000:0000:0000" and dev["node_guid_zero"] is True
    assert dev["phys_port_cnt"] == 1
    (port,) = dev["ports"]
    assert port["port"] == 1
    assert (port["state"], port["state_num"], port["active"]) == ("INIT", 2, False)
    assert port["link_layer"] == "InfiniBand" and port["fabric"] == "InfiniBand"
    assert port["sm_lid"] == 4
    assert port["max_mtu"] == 4096 and port["active_mtu"] == 4096
    assert port["port_lid"] is None  # the paste says 'port_id', an unknown key: skipped


def test_ibv_devinfo_c07_verdict():
    problems = rdma_problems(parse_ibv_devinfo(_without_prompts(fixture_text(C07))))
    assert problems == [
        "mlx5_7: node_guid is 0000:0000:0000:0000 (all zero: a virtual function without an "
        "assigned GUID)",
        "mlx5_7 port 1: state INIT (2), not ACTIVE",
    ]


def test_ibv_devinfo_verbose_with_gid_table():
    (dev,) = parse_ibv_devinfo(IBV_DEVINFO_V)
    assert dev["hca"] == "mlx5_bond_0" and dev["node_guid_zero"] is False
    (port,) = dev["ports"]
    assert port["active"] is True and port["fabric"] == "RoCE"
    assert port["active_width"] == "4X" and port["active_speed"] == "25.0 Gbps"
    assert port["rate_gbps"] == 100
    assert port["phys_state"] == "LINK_UP"
    assert [g["index"] for g in port["gids"]] == [0, 1, 2, 3]
    assert pick_roce_gid_index(port["gids"]) == 3
    assert rdma_problems([dev]) == []


def test_ibv_devinfo_no_devices():
    assert parse_ibv_devinfo("No IB devices found\n") == []


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(cut_text(_without_prompts(fixture_text(C07))), r"no 'port:' section|truncated",
                 id="C07-half"),
    pytest.param(_without_prompts(fixture_text(C07)).rsplit("link_layer", 1)[0], r"lacks link_layer",
                 id="C07-no-link-layer"),
    pytest.param(_without_prompts(fixture_text(C07))[:-6], r"link layer should be one of",
                 id="C07-last-word-cut"),
    pytest.param(fixture_text(C07), r"line 1: expected 'hca_id: <device>' first", id="C07-with-prompt"),
    pytest.param(_without_prompts(fixture_text(C07)).replace("PORT_INIT (2)", "PORT_INIT"),
                 r"port state should read like 'PORT_ACTIVE \(4\)'", id="state-without-code"),
    pytest.param(IBV_DEVINFO_V.replace("\t\tport:\t1", "\t\tnoport:\t1"), r"GID line outside a 'port:' section",
                 id="no-port-section"),
    pytest.param("garbage\n", r"expected 'hca_id: <device>' first", id="garbage"),
    pytest.param("", r"no 'hca_id:' line", id="empty"),
])
def test_ibv_devinfo_rejects_bad_input(text, message):
    with pytest.raises(ParseError, match=message):
        parse_ibv_devinfo(text)


# --------------------------------------------------------------------------------------------
# C32 GID table and the NCCL GID index
# --------------------------------------------------------------------------------------------


def test_gid_table_c32():
    gids = parse_gid_table(fixture_text(C32))
    summary = {g["index"]: (g["roce_version"], g["link_local"], g["ipv4"]) for g in gids}
    assert summary == {0: (1, True, None), 1: (2, True, None),
                       2: (1, False, "192.0.2.6"), 3: (2, False, "192.0.2.6")}


@pytest.mark.parametrize(("ipv4", "expected"), [
    pytest.param(None, 3, id="any-ipv4"),
    pytest.param("192.0.2.6", 3, id="the-interface-address"),
    pytest.param(["198.18.0.1", "192.0.2.6"], 3, id="address-list"),
    pytest.param("198.18.0.1", None, id="other-address"),
])
def test_pick_roce_gid_index_c32(ipv4, expected):
    gids = parse_gid_table(fixture_text(C32))
    assert pick_roce_gid_index(gids, ipv4) == expected
    assert pick_roce_gid_index(gids, ipv4) != 1  # link-local RoCE v2 times out (nccl #769)


def test_pick_roce_gid_index_rejects_bad_address_and_ignores_v1():
    gids = parse_gid_table(fixture_text(C32))
    with pytest.raises(ParseError, match="not an IPv4 address"):
        pick_roce_gid_index(gids, "192.0.2")
    assert pick_roce_gid_index([g for g in gids if g["roce_version"] == 1]) is None


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(fixture_text(C32).replace("::ffff:192.0.2.6", "::ffff:192.0"), r"not a 128-bit GID",
                 id="gid-cut"),
    pytest.param(fixture_text(C32).replace("RoCE v2", "RoCE", 1), r"type 'RoCE'", id="type-cut"),
    pytest.param("GID[ 0]\n", r"expected 'GID\[ n\]: <gid>", id="no-colon"),
    pytest.param("phys_state: LINK_UP (5)\n", r"no 'GID\[ n\]:' lines", id="no-gid-lines"),
])
def test_gid_table_rejects_bad_input(text, message):
    with pytest.raises(ParseError, match=message):
        parse_gid_table(text)


# --------------------------------------------------------------------------------------------
# sysfs reader and the merged inventory
# --------------------------------------------------------------------------------------------


def _sysfs_from_c06_c32():
    """sysfs contents of the C06 host's mlx5_0 and mlx5_1 with the C32 GID table."""
    files = {}
    for hca, netdev in (("mlx5_0", "ens1f0"), ("mlx5_1", "ens1f1")):
        base = f"{hca}/ports/1"
        files.update({f"{base}/state": "4: ACTIVE", f"{base}/phys_state": "5: LinkUp",
                      f"{base}/link_layer": "Ethernet", f"{base}/rate": "100 Gb/sec (4X EDR)",
                      f"{hca}/device/net/{netdev}/dev_port": "0",
                      f"{hca}/device/net/{netdev}/operstate": "up"})
        for gid in parse_gid_table(fixture_text(C32)):
            files[f"{base}/gids/{gid['index']}"] = gid["gid"]
            files[f"{base}/gid_attrs/types/{gid['index']}"] = (
                "IB/RoCE v1" if gid["roce_version"] == 1 else "RoCE v2")
            files[f"{base}/gid_attrs/ndevs/{gid['index']}"] = netdev
        files[f"{base}/gids/4"] = "0000:0000:0000:0000:0000:0000:0000:0000"  # unused slot
    files["mlx5_0/ports/1/unrelated_file"] = "ignored"
    return files


def test_sysfs_reader_picks_roce_v2_ipv4_gid():
    result = parse_sysfs_infiniband(_sysfs_from_c06_c32())
    ports = result["ports"]
    assert [(p["hca"], p["port"]) for p in ports] == [("mlx5_0", 1), ("mlx5_1", 1)]
    port = ports[0]
    assert (port["state"], port["phys_state"], port["link_layer"], port["fabric"],
            port["rate_gbps"]) == ("ACTIVE", "LinkUp", "Ethernet", "RoCE", 100)
    assert [g["index"] for g in port["gids"]] == [0, 1, 2, 3]  # all-zero slot 4 left out
    assert port["gids"][0]["type"] == "IB/RoCE v1" and port["gids"][0]["roce_version"] == 1
    assert port["gids"][3]["netdev"] == "ens1f0"
    assert port["roce_gid_index"] == 3
    assert result["netdevs"] == [
        {"hca": "mlx5_0", "port": 1, "netdev": "ens1f0", "netdev_state": "Up",
         "netdev_type": "ethernet", "bus_id": None, "port_state": "ACTIVE"},
        {"hca": "mlx5_1", "port": 1, "netdev": "ens1f1", "netdev_state": "Up",
         "netdev_type": "ethernet", "bus_id": None, "port_state": "ACTIVE"}]


def test_sysfs_netdev_from_gid_ndevs_when_device_net_is_missing():
    files = {k: v for k, v in _sysfs_from_c06_c32().items() if "/device/net/" not in k}
    netdevs = parse_sysfs_infiniband(files)["netdevs"]
    assert [(n["hca"], n["netdev"], n["netdev_state"]) for n in netdevs] == [
        ("mlx5_0", "ens1f0", None), ("mlx5_1", "ens1f1", None)]


@pytest.mark.parametrize(("change", "message"), [
    pytest.param({"mlx5_0/ports/1/state": "ACTIVE"}, r"expected '<n>: <NAME>'", id="state-format"),
    pytest.param({"mlx5_0/ports/1/state": "4: ACT"}, r"not a port state", id="state-cut"),
    pytest.param({"mlx5_0/ports/1/link_layer": "Ether"}, r"link layer should be one of",
                 id="link-layer-cut"),
    pytest.param({"mlx5_0/ports/1/gids/3": "::ffff:192.0"}, r"not a 128-bit GID", id="gid-cut"),
    pytest.param({"mlx5_0/device/net/ens1f0/dev_port": "x"}, r"dev_port: expected a number",
                 id="dev-port"),
])
def test_sysfs_reader_rejects_bad_values(change, message):
    files = _sysfs_from_c06_c32()
    files.update(change)
    with pytest.raises(ParseError, match=message):
        parse_sysfs_infiniband(files)


def test_sysfs_reader_port_without_state_is_an_error():
    files = _sysfs_from_c06_c32()
    del files["mlx5_1/ports/1/state"]
    with pytest.raises(ParseError, match=r"sysfs mlx5_1/ports/1: state missing"):
        parse_sysfs_infiniband(files)


def test_rdma_inventory_roce_host():
    devices = parse_ibv_devinfo(IBV_DEVINFO_V.replace("mlx5_bond_0", "mlx5_0"))
    facts = rdma_inventory(devices, parse_sysfs_infiniband(_sysfs_from_c06_c32()), None,
                           "192.0.2.6")
    assert [h["name"] for h in facts["hcas"]] == ["mlx5_0", "mlx5_1"]
    mlx5_0 = facts["hcas"][0]
    assert mlx5_0["fw_ver"] == "22.36.1010"
    assert mlx5_0["ports"][0]["netdev"] == "ens1f0"
    assert mlx5_0["ports"][0]["roce_gid_index"] == 3
    assert facts["roce_hcas"] == ["mlx5_0", "mlx5_1"]
    assert facts["infiniband_hcas"] == []
    assert facts["active_hcas"] == ["mlx5_0", "mlx5_1"]
    assert facts["nccl_ib_gid_index"] == 3
    assert facts["problems"] == []


def test_rdma_inventory_ib_host_c05_c07():
    devices = parse_ibv_devinfo(_without_prompts(fixture_text(C07)))
    netdevs = parse_ibdev2netdev(_without_prompts(fixture_text(C05)))
    facts = rdma_inventory(devices, None, netdevs)
    (hca,) = facts["hcas"]
    assert hca["name"] == "mlx5_7" and hca["ports"][0]["netdev"] == "enp157s0f0np0"
    assert facts["infiniband_hcas"] == ["mlx5_7"]
    assert facts["active_hcas"] == []
    assert facts["nccl_ib_gid_index"] is None
    assert "mlx5_7 port 1: state INIT (2), not ACTIVE" in facts["problems"]
    assert len(facts["netdevs"]) == 12


def test_rdma_inventory_flags_roce_port_without_ipv4_gid_and_disagreement():
    files = _sysfs_from_c06_c32()
    for index in (2, 3):
        del files[f"mlx5_1/ports/1/gids/{index}"]
    facts = rdma_inventory(None, parse_sysfs_infiniband(files))
    assert facts["nccl_ib_gid_index"] is None
    assert any("mlx5_1 port 1: ACTIVE RoCE port without a RoCE v2 IPv4 GID" in p
               for p in facts["problems"])
    files = _sysfs_from_c06_c32()
    files["mlx5_1/ports/1/gids/3"] = "0000:0000:0000:0000:0000:0000:0000:0000"
    files["mlx5_1/ports/1/gids/5"] = "::ffff:192.0.2.7"
    files["mlx5_1/ports/1/gid_attrs/types/5"] = "RoCE v2"
    facts = rdma_inventory(None, parse_sysfs_infiniband(files))
    assert facts["nccl_ib_gid_index"] is None
    assert any("disagree" in p and "mlx5_0/1: 3" in p and "mlx5_1/1: 5" in p
               for p in facts["problems"])


def test_rdma_inventory_empty_node():
    facts = rdma_inventory()
    assert facts == {"hcas": [], "netdevs": [], "infiniband_hcas": [], "roce_hcas": [],
                     "active_hcas": [], "nccl_ib_gid_index": None, "problems": []}


# ---- C32 and show_gids: the one GID table reader -------------------------------------------------------------


def c32_gids_read():
    return parse_gid_table(fixture_text(C32))


def test_c32_gid_table_reading():
    gids = {g["index"]: (g["type"], g["ipv4"], g["link_local"]) for g in c32_gids_read()}
    assert gids == {
        0: ("RoCE v1", None, True),
        1: ("RoCE v2", None, True),
        2: ("RoCE v1", "192.0.2.6", False),
        3: ("RoCE v2", "192.0.2.6", False),
    }


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
    with pytest.raises(ParseError, match="no 'GID"):
        parse_gid_table("nothing here")




def test_show_gids_ipv4_column_must_match_the_gid():
    text = ("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n"
            "mlx5_0\t1\t3\t0000:0000:0000:0000:0000:ffff:c000:0206\t192.0.2.7  \tv2\tens1f0\n")
    with pytest.raises(ParseError, match="line 2: IPv4 column 192.0.2.7 does not match"):
        parse_gid_table(text)


def test_show_gids_cut_row_is_refused_naming_the_line():
    text = ("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n"
            "mlx5_0\t1\t3\t0000:0000:0000:0000:0000:ffff:c000:0206\t192.0.2.6  \tv2\tens1f0\n"
            "mlx5_0\t1\t4\t0000:0000:0000:0000:0000:ff\n")
    with pytest.raises(ParseError, match="show_gids line 3"):
        parse_gid_table(text)


def test_devinfo_gids_carry_device_and_port():
    text = "hca_id:\tmlx5_bond_0\n\tport:\t1\n" + fixture_text(C32)
    gids = parse_gid_table(text)
    assert {(g["device"], g["port"]) for g in gids} == {("mlx5_bond_0", 1)}
    assert pick_roce_gid_index(gids, "192.0.2.6/24") == 3


@pytest.mark.parametrize("index, problem", [
    (3, None),
    ("3", None),
    (-1, None),                       # NCCL >= 2.21: automatic
    (1, "link-local"),                # C32: the failing choice
    (2, "is RoCE v1, not RoCE v2"),
    (7, "no such GID in the table"),
    ("x", "is not a number"),
])
def test_configured_gid_index_is_checked_against_the_table(index, problem):
    found = check_gid_index(index, parse_gid_table(fixture_text(C32)))
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0]
        if problem != "is not a number":
            assert "index 3" in found[0]


def test_configured_gid_index_must_carry_the_data_address():
    found = check_gid_index(3, parse_gid_table(fixture_text(C32)), "198.18.0.9")
    assert found and "not the data address 198.18.0.9" in found[0]


# ---- N18: ibv_devices, one bond device for two ConnectX-5 functions (RoCE LAG) --------------------

N18 = "rdma/N18_ibv_devices_single_mlx5_bond_0_for_two_cx5_ports"
N20 = "rdma/N20_ibv_devinfo_no_ib_devices_found_missing_verbs_providers.txt"


def test_n18_ibv_devices_reading():
    devices = parse_ibv_devices(fixture_text(N18 + ".1-ibv-devices.txt"))
    assert devices == [{"hca": "mlx5_bond_0", "node_guid": "e8ebd30300000001", "node_guid_zero": False,
                        "bond": True}]


def test_n18_lspci_functions_and_lag_verdict():
    functions = parse_lspci_rdma_functions(fixture_text(N18 + ".2-lspci-grep-ether.txt"))
    assert [(f["slot"], f["name"]) for f in functions] == [
        ("0000:17:00.0", "MT27800 Family [ConnectX-5]"), ("0000:17:00.1", "MT27800 Family [ConnectX-5]")]
    devices = parse_ibv_devices(fixture_text(N18 + ".1-ibv-devices.txt"))
    cover = rdma_device_coverage(devices, functions)
    assert cover["verdict"] == "ROCE_LAG_ACTIVE" and cover["problems"] == [] and cover["found"] == 1
    # The rdmatop bug: a reader that drops mlx5_bond_* sees 0 devices; that must be flagged.
    missing = rdma_device_coverage([], functions)
    assert missing["verdict"] == "DEVICES_MISSING" and "0 verbs device(s)" in missing["problems"][0]


def test_n18_nccl_ib_hca_is_the_bond_port_1():
    devices = parse_ibv_devices(fixture_text(N18 + ".1-ibv-devices.txt"))
    ports = [{"device": d["hca"], "port": 1, "state": "ACTIVE", "link_layer": "Ethernet"} for d in devices]
    chosen, _ = select_hcas(ports)
    assert [f"{p['device']}:{p['port']}" for p in chosen] == ["mlx5_bond_0:1"]


@pytest.mark.parametrize(("text", "message"), [
    ("    device          \t   node GUID\n    ------          \t----------------\n    mlx5_0 \te8ebd303000\n",
     "line 3: expected '<device> <16 hex digit node GUID>'"),
    ("    mlx5_0\n", "line 1"),
    ("Failed to get IB devices list: Function not implemented\n", "libibverbs could not list devices"),
])
def test_ibv_devices_refuses_cut_or_failed_output(text, message):
    with pytest.raises(ParseError, match=message):
        parse_ibv_devices(text)


def test_ibv_devices_header_only_means_no_devices():
    assert parse_ibv_devices("    device          \t   node GUID\n    ------          \t----------------\n") == []


# ---- N20: "No IB devices found" because the verbs providers are missing ---------------------------


def test_n20_no_devices_and_providers_missing():
    text = fixture_text(N20)
    assert parse_ibv_devinfo(text) == []
    found = classify_no_devices(text)
    assert found["class"] == "RDMA_VERBS_PROVIDERS_MISSING"
    assert "/etc/libibverbs.d" in found["evidence"] and "ibverbs-providers" in found["fix"]


def test_no_devices_other_causes():
    assert classify_no_devices("No IB devices found\n", sysfs_hcas=[])["class"] == "RDMA_KERNEL_DEVICES_MISSING"
    assert classify_no_devices("No IB devices found\n")["class"] == "RDMA_NO_DEVICES"
    warn = ("libibverbs: Warning: no userspace device-specific driver found for "
            "/sys/class/infiniband_verbs/uverbs0\nNo IB devices found\n")
    assert classify_no_devices(warn)["class"] == "RDMA_VERBS_PROVIDERS_MISSING"
    assert classify_no_devices(fixture_text(C07)) is None


# ---- rdma link show (iproute2) -------------------------------------------------------------------

RDMA_LINK_NEW = (
    "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0 \n"
    "link mlx5_1/1 subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state DOWN "
    "physical_state DISABLED \n"
    "link mlx5_10/1 state ACTIVE physical_state LINK_UP netdev ens10f0 \n"
)
RDMA_LINK_OLD = (
    "0/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev ens1f0 \n"
    "1/1: mlx5_1/1: subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state DOWN physical_state DISABLED \n"
    "2/1: mlx5_10/1: state ACTIVE physical_state LINK_UP netdev ens10f0 \n"
)


def _link_summary(ports):
    return [(p["hca"], p["port"], p["state"], p["active"], p["phys_state"], p["netdev"], p["lid"]) for p in ports]


def test_rdma_link_both_grammars_read_the_same():
    expected = [
        ("mlx5_0", 1, "ACTIVE", True, "LINK_UP", "ens1f0", None),
        ("mlx5_1", 1, "DOWN", False, "DISABLED", None, 13),
        ("mlx5_10", 1, "ACTIVE", True, "LINK_UP", "ens10f0", None),
    ]
    assert _link_summary(parse_rdma_link(RDMA_LINK_NEW)) == expected
    assert _link_summary(parse_rdma_link(RDMA_LINK_OLD)) == expected


def test_rdma_link_json_and_details():
    js = ('[{"ifindex":0,"port":1,"ifname":"mlx5_0/1","state":"ACTIVE","physical_state":"LINK_UP",'
          '"netdev":"ens1f0","netdev_index":4}]')
    (port,) = parse_rdma_link(js)
    assert (port["hca"], port["netdev"], port["netdev_index"], port["active"]) == ("mlx5_0", "ens1f0", 4, True)
    detail = "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0 netdev_index 4 caps <CM, IP_BASED_GID>\n"
    assert parse_rdma_link(detail)[0]["caps"] == ["CM", "IP_BASED_GID"]


def test_rdma_link_wrapped_paste_joins_the_continuation():
    wrapped = ("link mlx5_1/1 subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1\n"
               "  lmc 0 state DOWN physical_state DISABLED\n")
    assert _link_summary(parse_rdma_link(wrapped)) == [("mlx5_1", 1, "DOWN", False, "DISABLED", None, 13)]


@pytest.mark.parametrize(("text", "message"), [
    ("link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev\n", "line 1: .*'netdev' has no value"),
    ("link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 13\n", "line 1: mlx5_0/1 has no 'state'"),
    ("link mlx5_0/1 state ACTIV physical_state LINK_UP\n", "state 'ACTIV' is not a port state"),
    ("state ACTIVE physical_state LINK_UP\n", "line 1: expected 'link <dev>/<port>"),
    ('[{"ifname": "mlx5_0/1", "state": "ACT', "not complete JSON"),
])
def test_rdma_link_refuses_cut_output(text, message):
    with pytest.raises(ParseError, match=message):
        parse_rdma_link(text)


# --------------------------------------------------------------------------------------------
# Probe 2a: forms read from the tools' own sources
# --------------------------------------------------------------------------------------------

# rdma-core commit b87d8c973 ("libibverbs: Fix reporting link_layer for efa devices", v33.0):
# ibv_devinfo on AWS EFA prints link_layer "Unspecified" and an all-zero node GUID.
EFA_DEVINFO = (
    "hca_id:\tefa_0\n"
    "\ttransport:\t\t\tunspecified (4)\n"
    "\tfw_ver:\t\t\t\t0.0.0.0\n"
    "\tnode_guid:\t\t\t0000:0000:0000:0000\n"
    "\tsys_image_guid:\t\t\t0000:0000:0000:0000\n"
    "\tvendor_id:\t\t\t0x1d0f\n"
    "\tvendor_part_id:\t\t\t61344\n"
    "\thw_ver:\t\t\t\t0xEFA0\n"
    "\tphys_port_cnt:\t\t\t1\n"
    "\t\tport:\t1\n"
    "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
    "\t\t\tmax_mtu:\t\t4096 (5)\n"
    "\t\t\tactive_mtu:\t\t4096 (5)\n"
    "\t\t\tsm_lid:\t\t\t0\n"
    "\t\t\tport_lid:\t\t0\n"
    "\t\t\tport_lmc:\t\t0x01\n"
    "\t\t\tlink_layer:\t\tUnspecified\n"
    "\n"
)


def test_ibv_devinfo_efa_unspecified_link_layer():
    [dev] = parse_ibv_devinfo(EFA_DEVINFO)
    assert dev["hca"] == "efa_0" and dev["transport"] == "unspecified"
    [port] = dev["ports"]
    assert port["link_layer"] == "Unspecified" and port["fabric"] is None and port["active"]
    # EFA has no node GUID by design: not the "VF without an assigned GUID" finding of C07.
    assert rdma_problems([dev]) == []
    facts = rdma_inventory(devices=[dev])
    assert facts["active_hcas"] == ["efa_0"]
    assert facts["infiniband_hcas"] == [] and facts["roce_hcas"] == []
    assert facts["problems"] == []


def test_ibv_devinfo_unspecified_is_not_accepted_from_sysfs():
    # The kernel says "Unknown" for the same port; "Unspecified" is ibv_devinfo's word only.
    with pytest.raises(ParseError, match="link layer should be one of"):
        parse_sysfs_infiniband({"efa_0/ports/1/state": "4: ACTIVE",
                                "efa_0/ports/1/link_layer": "Unspecified"})


# MLNX_OFED ibdev2netdev, "old style" branch (no /sys/class/net/*/dev_id): print_line echoes
# "$1 port $2 <===> $3" without a state (copy in Mellanox/docker-sriov-plugin, ibdev2netdev).
def test_ibdev2netdev_old_style_without_state():
    records = parse_ibdev2netdev("mlx4_0 port 1 <===> ib0\nmlx4_0 port 2 <===> eth2\n")
    assert [(r["hca"], r["port"], r["netdev"], r["netdev_state"], r["netdev_type"])
            for r in records] == [("mlx4_0", 1, "ib0", None, "ipoib"),
                                  ("mlx4_0", 2, "eth2", None, "ethernet")]
    with pytest.raises(ParseError, match="ibdev2netdev line 1: expected"):
        parse_ibdev2netdev("mlx4_0 port 1 <===>\n")
