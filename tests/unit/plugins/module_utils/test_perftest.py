"""perftest's ib_write_bw report reader, the per-port pair plan and the rate judgement."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import perftest
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import FIXTURES

P = FIXTURES / "perftest"


def _read(name):
    return (P / name).read_text()


def test_p01_roce_gbits_report():
    r = perftest.parse_bw_report(_read("P01_ib_write_bw_roce_gbits_post_list.txt"))
    assert r["test"] == "RDMA_Write Post List BW Test"
    assert (r["device"], r["link_type"], r["gid_index"], r["unit"]) == ("ib0", "Ethernet", 2, "Gb/sec")
    assert r["rows"] == [{"bytes": 8, "iterations": 224958464, "bw_peak": 0.0, "bw_average": 0.48,
                          "msg_rate_mpps": 7.498617, "bw_peak_gbps": 0.0, "bw_average_gbps": 0.48}]
    assert r["errors"] == []


def test_p02_mb_per_sec_is_mebibytes():
    r = perftest.parse_bw_report(_read("P02_ib_atomic_bw_infiniband_mb_per_sec.txt"))
    assert (r["test"], r["device"], r["link_type"], r["gid_index"]) == (
        "Atomic CMP_AND_SWAP BW Test", "pib_1", "IB", None)
    assert r["unit"] == "MB/sec" and r["errors"] == []
    (row,) = r["rows"]
    assert (row["bytes"], row["iterations"], row["bw_peak"], row["bw_average"]) == (8, 1000, 1.70, 1.67)
    assert row["bw_average_gbps"] == round(1.67 * 1048576 * 8 / 1e9, 3) == 0.014


def test_p03_connect_error_lines():
    r = perftest.parse_bw_report(_read("P03_ib_write_bw_client_cannot_connect.txt"))
    assert r["rows"] == [] and r["unit"] is None
    assert r["errors"] == ["Couldn't connect to 192.0.2.11:18515",
                           "Unable to open file descriptor for socket connection Unable to init the socket connection"]


# Newer perftest prints MiB/sec, and may print a warning between the header and the rows
# (grammar of perftest_resources.c; the layout as in public reports of perftest 4.5+).
MIB = """---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Link type       : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]
Conflicting CPU frequency values detected: 1500.000000 != 3300.016000. CPU Frequency is not max.
 65536      5000             11030.78            11030.45\t\t     0.176487
 1048576    5000             46567.34            46557.03\t\t     0.046557
---------------------------------------------------------------------------------------
"""


def test_mib_rows_and_interleaved_warning():
    r = perftest.parse_bw_report(MIB)
    assert r["unit"] == "MiB/sec" and [x["bytes"] for x in r["rows"]] == [65536, 1048576]
    assert r["rows"][1]["bw_average_gbps"] == round(46557.03 * 1048576 * 8 / 1e9, 3)


@pytest.mark.parametrize("text, match", [
    ("", "no '#bytes"),
    ("hello\n", "no '#bytes"),
    (" 65536 5000 1.0 2.0 0.1\n", "before the"),
    (" #bytes     #iterations    BW peak[MB/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n", "units"),
    (" #bytes     #iterations    BW peak[KB/sec]    BW average[KB/sec]   MsgRate[Mpps]\n", "units"),
])
def test_not_a_report(text, match):
    with pytest.raises(ParseError, match=match):
        perftest.parse_bw_report(text)


def _facts(*ports):
    hcas = {}
    for dev, port, link, rate, gid, active in ports:
        hcas.setdefault(dev, []).append({"port": port, "active": active, "link_layer": link,
                                         "rate_gbps": rate, "roce_gid_index": gid})
    return {"hcas": [{"name": n, "ports": p} for n, p in hcas.items()]}


def _node(host, *ports):
    return {"host": host, "address": f"192.0.2.{host[-1]}", "rdma": _facts(*ports)}


def test_plan_skips_without_rdma_and_with_one_node():
    plan = perftest.write_bw_plan([_node("n1"), _node("n2")])
    assert plan["runs"] == [] and "no node has an ACTIVE RDMA port" in plan["skipped"]
    assert "needs two" in perftest.write_bw_plan([_node("n1", ("mlx5_0", 1, "InfiniBand", 400, None, True))])["skipped"]


def test_plan_pairs_rails_in_a_ring():
    ports = [("mlx5_10", 1, "Ethernet", 400, 3, True), ("mlx5_2", 1, "Ethernet", 200, 3, True),
             ("mlx5_3", 1, "Ethernet", 400, 3, False)]
    nodes = [_node("n1", *ports), _node("n2", *ports), _node("n3", *ports)]
    plan = perftest.write_bw_plan(nodes)
    assert plan["problems"] == [] and plan["skipped"] is None
    pairs = [(r["server"], r["client"], r["server_device"], r["tcp_port"], r["rate_gbps"]) for r in plan["runs"]]
    assert pairs == [("n1", "n2", "mlx5_2", 18515, 200), ("n1", "n2", "mlx5_10", 18516, 400),
                     ("n2", "n3", "mlx5_2", 18517, 200), ("n2", "n3", "mlx5_10", 18518, 400),
                     ("n3", "n1", "mlx5_2", 18519, 200), ("n3", "n1", "mlx5_10", 18520, 400)]
    assert plan["runs"][0]["address"] == "192.0.2.1" and plan["runs"][0]["fabric"] == "RoCE"


def test_plan_two_nodes_one_direction_and_missing_gid_and_rail():
    a = _node("n1", ("mlx5_0", 1, "Ethernet", 100, 3, True), ("mlx5_1", 1, "Ethernet", 100, None, True))
    b = _node("n2", ("mlx5_0", 1, "Ethernet", 100, 3, True))
    plan = perftest.write_bw_plan([a, b])
    assert [(r["server"], r["client_device"]) for r in plan["runs"]] == [("n1", "mlx5_0")]
    assert any("different numbers" in p for p in plan["problems"])
    c = _node("n2", ("mlx5_0", 1, "Ethernet", 100, 3, True), ("mlx5_1", 1, "Ethernet", 100, 5, True))
    plan = perftest.write_bw_plan([a, c])
    assert len(plan["runs"]) == 1 and any("n1: mlx5_1 port 1 is RoCE without" in p for p in plan["problems"])


def test_argv_roce_and_ib():
    run = perftest.write_bw_plan([_node("n1", ("mlx5_0", 1, "Ethernet", 400, 3, True)),
                                  _node("n2", ("mlx5_0", 1, "Ethernet", 400, 5, True))])["runs"][0]
    assert perftest.write_bw_argv(run, "server") == [
        "ib_write_bw", "-d", "mlx5_0", "-i", "1", "-p", "18515", "-s", "1048576", "-D", "5", "-q", "1",
        "-F", "--report_gbits", "-x", "3"]
    assert perftest.write_bw_argv(run, "client", qps=4)[-4:] == ["--report_gbits", "-x", "5", "192.0.2.1"]
    ib = perftest.write_bw_plan([_node("n1", ("mlx5_0", 1, "InfiniBand", 400, None, True)),
                                 _node("n2", ("mlx5_0", 1, "InfiniBand", 400, None, True))])["runs"][0]
    assert "-x" not in perftest.write_bw_argv(ib, "client")
    with pytest.raises(ValueError, match="role"):
        perftest.write_bw_argv(run, "both")


def _run(rate):
    return {"server": "n1", "client": "n2", "server_device": "mlx5_0", "server_port": 1,
            "client_device": "mlx5_0", "client_port": 1, "rate_gbps": rate}


def _gbits(avg):
    return (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" 1048576    5000             0.00               {avg}              0.04\n")


def test_check_against_the_port_rate():
    ok = perftest.write_bw_check([{"run": _run(400), "rc": 0, "output": _gbits(381.2)}], 0.95)
    assert ok["ok"] and ok["runs"][0]["measured_gbps"] == 381.2 and ok["runs"][0]["required_gbps"] == 380.0
    short = perftest.write_bw_check([{"run": _run(400), "rc": 0, "output": _gbits(379.9)}], 0.95)
    assert not short["ok"] and "379.9 Gb/s is under 0.95 of the 400 Gb/s port rate (380.0 Gb/s)" in short["problems"][0]
    oci = perftest.write_bw_check([{"run": _run(400), "rc": 0, "output": _gbits(381.2)}], 0.96)
    assert not oci["ok"]


def test_check_fixture_failures():
    p01 = perftest.write_bw_check([{"run": _run(100), "rc": 0,
                                    "output": _read("P01_ib_write_bw_roce_gbits_post_list.txt")}])
    assert not p01["ok"] and "0.48 Gb/s is under" in p01["problems"][0]
    p03 = perftest.write_bw_check([{"run": _run(100), "rc": 1,
                                    "output": _read("P03_ib_write_bw_client_cannot_connect.txt")}])
    assert not p03["ok"] and "exited 1: Couldn't connect to 192.0.2.11:18515" in p03["problems"][0]
    assert p03["runs"][0]["measured_gbps"] is None
    garbage = perftest.write_bw_check([{"run": _run(100), "rc": 0, "output": "Segmentation fault\n",
                                        "server_output": "Unable to find the Infiniband/RoCE device\n"}])
    assert not garbage["ok"] and "no '#bytes" in garbage["problems"][0]
    norate = perftest.write_bw_check([{"run": _run(None), "rc": 0, "output": _gbits(90)}])
    assert not norate["ok"] and "rate is unknown" in norate["problems"][0]
    server = perftest.write_bw_check([{"run": _run(100), "rc": 1, "output": _gbits(90)[:80],
                                       "server_output": "Unable to find the Infiniband/RoCE device\n"}])
    assert "Unable to find the Infiniband/RoCE device" in server["problems"][0]
    with pytest.raises(ValueError, match="validate_ib_write_bw_fraction"):
        perftest.write_bw_check([], 95)


# linux-rdma/perftest write_bw.c / perftest_communication.c: these failures end the run without
# the " Unable to init the socket connection" summary line; they are errors, not "not a report".
@pytest.mark.parametrize("text", [
    " Unable to create RDMA_CM resources\n",
    " Couldn't create IB resources\n",
    " Failed to negotiate parameters\n",
    " Unable to set up socket connection\n",
    "\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n\n",
    "Couldn't listen to port 18515\n",
    " Parser function exited with Error\n",
    "rdma_resolve_addr failed\nUnable to connect (retries = 5)\n",
])
def test_error_lines_without_socket_summary(text):
    report = perftest.parse_bw_report(text)
    assert report["rows"] == [] and report["errors"]
    assert report["errors"] == perftest.parse_bw_report_errors(text)


def test_rdma_cm_client_failure_keeps_its_cause():
    # establish_connection(): the RDMA_CM detail, then the summary write_bw.c prints.
    text = ("rdma_resolve_addr failed\nUnable to connect (retries = 5)\n"
            " Unable to perform rdma_client function\n Unable to init the socket connection\n")
    assert perftest.parse_bw_report(text)["errors"] == [
        "rdma_resolve_addr failed", "Unable to connect (retries = 5)",
        "Unable to perform rdma_client function", "Unable to init the socket connection"]
