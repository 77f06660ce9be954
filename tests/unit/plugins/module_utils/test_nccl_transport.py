"""Fail closed on the network (plugins/module_utils/nccl_transport.py).

NCCL: the recorded NCCL_DEBUG=INFO logs of tests/fixtures/nccl-logs (E12 Socket, E14 IB with
GDR disabled, E16 IB) and the nccl-tests tables of tests/fixtures/benchmark-output (E08, E09),
each judged against a configuration it matches and one it does not.

Open MPI: no verbose run could be captured here (the sandbox was down and this machine has no
Open MPI), so OMPI_VERBOSE is written from the format strings in Open MPI v4.1's
opal/mca/btl/tcp/btl_tcp_component.c and orte/mca/oob/tcp/oob_tcp_component.c, with
opal_output's "[host:pid] " prefix and mpirun's --tag-output prefix on some lines.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_transport import (
    check_mpi_interfaces,
    check_nccl_transport,
    expected_transport,
    parse_ompi_tcp_verbose,
)

from tests.conftest import fixture_text

E12 = "nccl-logs/E12_nccl_info_socket_no_ib_virbr0.txt"
E14 = "nccl-logs/E14_nccl_info_roce_ib_gdr_disabled.txt"
E16 = "nccl-logs/E16_nccl_info_containers_ib_4hca.txt"
E08 = "benchmark-output/E08_nccl_tests_allreduce_2node_16x_h100_gcp_a3mega.txt"
E09 = "benchmark-output/E09_nccl_tests_allreduce_2node_16x_v100_k8s_sriov_roce_oldformat.txt"
E11 = "benchmark-output/E11_nccl_tests_allreduce_2node_errored_internal_error.txt"
N01 = "nccl-net-plugin/N01_nccl_plugin_hpcx_v5_loaded_under_nccl_2_18_v6_api.txt"
N02 = "nccl-net-plugin/N02_nccl_plugin_found_but_no_supported_symbol_internal_fallback.txt"


@pytest.mark.parametrize(("log", "config"), [
    (E12, {"transport": "Socket"}),
    (E14, {"transport": "IB"}),
    (E16, {"transport": "IB"}),
])
def test_right_transport_passes(log, config):
    r = check_nccl_transport(fixture_text(log), **config)
    assert r["ok"], r["problems"]
    assert r["used"]["transport"] == config["transport"]


@pytest.mark.parametrize(("log", "config", "problem"), [
    (E12, {"transport": "IB"}, "IB expected, NCCL used Socket (libibverbs missing in the container)"),
    (E14, {"transport": "IB", "gdr": True}, "GPUDirect RDMA expected, disabled for mlx5_0, mlx5_1"),
    (E16, {"transport": "IB", "gdr": True}, "GPUDirect RDMA expected, not shown in the log"),
    (E14, {"transport": "plugin", "net_plugin": "aws-ofi-nccl"},
     "net plugin aws-ofi-nccl configured, but NCCL used its internal IB (INTERNAL_NETWORK: NCCL (version not in "
     "the log): NCCL uses its internal transport; the log has no plugin-loader line saying why; using network IB)"),
    (E12, {"transport": "plugin", "net_plugin": "harp"},
     "net plugin harp configured, but NCCL used its internal Socket (PLUGIN_NOT_FOUND: NCCL 2.16.5+cuda11.8: no net "
     "plugin library found (libnccl-net.so); internal transports; using network Socket)"),
    (E16, {"transport": "Socket"}, "Socket expected, NCCL used IB"),
])
def test_wrong_transport_fails_with_the_reason(log, config, problem):
    r = check_nccl_transport(fixture_text(log), **config)
    assert not r["ok"]
    assert problem in r["problems"]
    assert r["fix"]


def test_a_configured_plugin_is_judged_by_the_net_plugin_reader():
    # N01: HPC-X's plugin loaded through the v5 compat path; the capture stops before init.cc's
    # "Using network <name>" line, so it fails closed; with the line (the plugin's network
    # IBext, "P2P plugin IBext" in the same log) it passes.
    cut = check_nccl_transport(fixture_text(N01), transport="plugin", net_plugin="hpcx")
    assert not cut["ok"] and "does not say which network" in cut["problems"][0]
    using = "gpu-host-a100-n02:2293:2623 [0] NCCL INFO Using network IBext\n"
    ok = check_nccl_transport(fixture_text(N01) + using, transport="plugin", net_plugin="hpcx")
    assert ok["ok"], ok["problems"]
    assert ok["used"]["net_plugin_state"] == "PLUGIN_LOADED_OLDER_API"
    # N02: a libnccl-net.so without a supported symbol: NCCL unloaded it and used IB.
    fell = check_nccl_transport(fixture_text(N02) + using.replace("IBext", "IB"), transport="plugin",
                                net_plugin="hpcx")
    assert not fell["ok"] and "FOUND_BUT_INCOMPATIBLE" in fell["problems"][0]
    assert "install a plugin built for this NCCL's net API" in fell["fix"][0]


def test_a_log_that_does_not_say_fails_closed():
    r = check_nccl_transport("all_reduce_perf: some output without NCCL INFO lines\n", transport="IB")
    assert not r["ok"] and "does not say which network" in r["problems"][0]


def test_ring_busbw_against_the_line_rate():
    ok = check_nccl_transport(fixture_text(E16), transport="IB", nccl_tests=fixture_text(E08), line_rate_gbit=400,
                              fraction=0.8)
    assert ok["ok"] and "338.82 GB/s" in ok["busbw"]["message"]
    low = check_nccl_transport(fixture_text(E16), transport="IB", nccl_tests=fixture_text(E09), line_rate_gbit=400)
    assert not low["ok"]
    assert low["problems"] == ["Ring bus bandwidth: peak bus bandwidth 22.92 GB/s (out-of-place, 2147483648 bytes) "
                               "vs 80% of 400 Gbit/s line rate = 40.00 GB/s: too low"]
    died = check_nccl_transport(fixture_text(E16), transport="IB", nccl_tests=fixture_text(E11), line_rate_gbit=100)
    assert not died["ok"] and "run failed" in died["busbw"]["message"]
    cut = check_nccl_transport(fixture_text(E16), transport="IB", nccl_tests="# nThread 1\n", line_rate_gbit=100)
    assert not cut["ok"] and "unreadable" in cut["busbw"]["message"]


def test_configuration_errors():
    with pytest.raises(ValueError, match="needs net_plugin"):
        check_nccl_transport("", transport="plugin")
    with pytest.raises(ValueError, match="expected IB, Socket or plugin"):
        check_nccl_transport("", transport="RoCE")
    assert expected_transport("aws-ofi-nccl", rdma=True) == "plugin"
    assert expected_transport(None, rdma=True) == "IB"
    assert expected_transport(None, rdma=False) == "Socket"


OMPI_VERBOSE = """\
[node-1:00412] btl: tcp: Searching for include address+prefix: 172.18.0.0 / 16
[node-1:00412] btl: tcp: Found match: 172.18.0.3 (eth0)
[node-1:00412] btl:tcp: Attempting to bind to AF_INET port 1024
[node-1:00412] btl:tcp: Successfully bound to AF_INET port 1024
[node-1:00412] btl:tcp: my listening v4 socket is 0.0.0.0:1024
[node-1:00412] btl:tcp: examining interface eth0
[node-1:00412] btl:tcp: using ipv6 interface eth0
[1,1]<stderr>:[node-2:00388] btl:tcp: examining interface eth0
[1,1]<stderr>:[node-2:00388] btl:tcp: using ipv6 interface eth0
[node-1:00398] [[47711,0],0] oob:tcp:init rejecting interface lo (not in include list)
[node-1:00398] [[47711,0],0] oob:tcp:init rejecting interface docker0 (not in include list)
[node-1:00398] [[47711,0],0] oob:tcp:init adding 172.18.0.3 to our list of V4 connections
[node-2:00380] [[47711,0],1] oob:tcp:init adding 172.18.0.4 to our list of V4 connections
[node-1:00412] btl:tcp: now connected to 172.18.0.4, process [[47711,1],1]
"""


def test_ompi_verbose_reader():
    p = parse_ompi_tcp_verbose(OMPI_VERBOSE)
    assert p["btl_interfaces"] == {"node-1": ["eth0"], "node-2": ["eth0"]}
    assert p["btl_matches"] == [{"host": "node-1", "address": "172.18.0.3", "interface": "eth0"}]
    assert p["btl_connected"] == [{"host": "node-1", "address": "172.18.0.4"}]
    assert [a["address"] for a in p["oob_addresses"]] == ["172.18.0.3", "172.18.0.4"]
    assert [r["interface"] for r in p["oob_rejected"]] == ["lo", "docker0"]


def test_mpi_on_the_data_network_only_passes():
    r = check_mpi_interfaces(parse_ompi_tcp_verbose(OMPI_VERBOSE), "172.18.0.0/16",
                             {"node-1": ["eth0"], "node-2": ["eth0"]})
    assert r["ok"], r["problems"]
    assert r["used"]["oob_addresses"] == ["172.18.0.3", "172.18.0.4"]


def test_mpi_on_docker0_fails():
    wandered = OMPI_VERBOSE + (
        "[node-1:00412] btl:tcp: using ipv6 interface docker0\n"
        "[node-1:00412] btl:tcp: now connected to 172.17.0.1, process [[47711,1],1]\n"
        "[node-2:00380] [[47711,0],1] oob:tcp:init adding 172.17.0.1 to our list of V4 connections\n")
    nics = {"node-1": ["eth0"], "node-2": ["eth0"]}
    r = check_mpi_interfaces(parse_ompi_tcp_verbose(wandered), "172.18.0.0/16", nics)
    assert not r["ok"]
    assert r["problems"] == [
        "node-1: MPI TCP BTL used docker0, not a data NIC (eth0)",
        "node-1: MPI TCP connection to 172.17.0.1, outside 172.18.0.0/16",
        "node-2: Open MPI out-of-band channel on 172.17.0.1, outside 172.18.0.0/16",
    ]


def test_mpi_without_verbose_lines_proves_nothing_and_fails():
    r = check_mpi_interfaces(parse_ompi_tcp_verbose("rank 0 of 2 on node-1\nallreduce ok\n"), "172.18.0.0/16")
    assert not r["ok"] and "btl_base_verbose 100" in r["problems"][0]


def test_data_nics_by_host_from_ansible_facts():
    from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_transport import data_nics_by_host

    facts = {"node-1": {"hostname": "n1", "interfaces": ["lo", "eth0", "docker0", "data-1"],
                        "lo": {"ipv4": {"address": "127.0.0.1"}},
                        "eth0": {"ipv4": {"address": "172.18.0.3"}},
                        "docker0": {"ipv4": {"address": "172.17.0.1"}},
                        "data_1": {"ipv4": {"address": "10.0.0.1"}, "ipv4_secondaries": [{"address": "172.18.1.3"}]}}}
    assert data_nics_by_host(facts, "172.18.0.0/16") == {"node-1": ["data-1", "eth0"], "n1": ["data-1", "eth0"]}
