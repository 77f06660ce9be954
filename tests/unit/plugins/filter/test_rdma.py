"""plugins/filter/rdma.py: the RDMA readers and the GID index, as templates call them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import fixture_text
from tests.unit.plugins.filter.filters import all_filters

FILTERS = all_filters()
N18 = "rdma/N18_ibv_devices_single_mlx5_bond_0_for_two_cx5_ports"
C32 = "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.1-ibv-devinfo-v-gid-table.txt"


def test_n18_coverage_through_the_filters():
    devices = FILTERS["rdma_parse_ibv_devices"](fixture_text(N18 + ".1-ibv-devices.txt"))
    functions = FILTERS["rdma_parse_lspci"](fixture_text(N18 + ".2-lspci-grep-ether.txt"))
    assert FILTERS["rdma_device_coverage"](devices, functions)["verdict"] == "ROCE_LAG_ACTIVE"


def test_gid_filters_check_a_configured_index():
    assert FILTERS["nccl_gid_index"](fixture_text(C32), "192.0.2.6") == 3
    assert FILTERS["rdma_check_gid_index"](fixture_text(C32), 3) == []
    assert "link-local" in FILTERS["rdma_check_gid_index"](fixture_text(C32), 1)[0]
    with pytest.raises(AnsibleFilterError, match="parse_rdma_link: rdma link line 1"):
        FILTERS["rdma_parse_link"]("link mlx5_0/1 lid 3\n")


def _rdma(rate, gid):
    return {"hcas": [{"name": "mlx5_0", "ports": [{"port": 1, "active": True, "link_layer": "Ethernet",
                                                   "rate_gbps": rate, "roce_gid_index": gid}]}]}


def test_perftest_filters_from_facts_to_verdict():
    facts = [{"default_ipv4": {"address": "192.0.2.1"}, "gpucluster_rdma": _rdma(400, 3)},
             {"default_ipv4": {"address": "192.0.2.2"}, "gpucluster_rdma": _rdma(400, 3)}]
    plan = FILTERS["perftest_write_bw_plan"](["n1", "n2"], facts)
    (run,) = plan["runs"]
    assert (run["address"], run["rate_gbps"], run["tcp_port"]) == ("192.0.2.1", 400, 18515)
    assert FILTERS["perftest_write_bw_argv"](run, "client")[-1] == "192.0.2.1"
    # Ansible's looped results: the run is the client task's item, the server's item.item.
    row = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
           " 1048576    5000             0.00               {}              0.04\n")
    clients = [{"item": run, "rc": 0, "stdout": row.format(390.5), "stderr": ""}]
    servers = [{"item": {"item": run}, "rc": 0, "stdout": row.format(390.4), "stderr": ""}]
    assert FILTERS["perftest_write_bw_check"](clients, servers, 0.95)["ok"]
    clients[0]["stdout"] = row.format(300.0)
    assert "300.0 Gb/s is under 0.95" in FILTERS["perftest_write_bw_check"](clients, servers, 0.95)["problems"][0]
    clients[0].update(rc=124, stdout="")
    servers[0]["stderr"] = "Couldn't connect to 192.0.2.1:18515\n"
    got = FILTERS["perftest_write_bw_check"](clients, servers)
    assert not got["ok"] and "exited 124: Couldn't connect" in got["problems"][0]
    sandbox = FILTERS["perftest_write_bw_plan"](["n1", "n2"], [{"gpucluster_rdma": {"hcas": []}}, {}])
    assert sandbox["runs"] == [] and "no node has an ACTIVE RDMA port" in sandbox["skipped"]
    with pytest.raises(AnsibleFilterError, match="2 hosts but 1 fact sets"):
        FILTERS["perftest_write_bw_plan"](["n1", "n2"], facts[:1])
