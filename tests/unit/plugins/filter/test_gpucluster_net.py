"""The gpucluster_net filter plugin: names, error mapping, template use, import fallback."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.filter import gpucluster_net

from tests.conftest import fixture_text

PLUGIN = Path(gpucluster_net.__file__)
FILTERS = gpucluster_net.FilterModule().filters()
GiB = 1024**3


def test_filter_names():
    assert {
        "hugepages_vendor_count",
        "hugepages_plan",
        "hugepages_plan_pools",
        "hugepages_kernel_args",
        "hugepages_parse_meminfo",
        "hugepages_supported_sizes",
        "hugepages_verify",
        "nccl_env",
        "nccl_conf",
        "nccl_check_socket_ifname",
        "nccl_gid_index",
        "net_arp_sysctls",
        "diagnose_failure",
        "nccl_transport_summary",
        "parse_ulimit_a",
        "memlock_check",
    } <= set(FILTERS)
    assert all(callable(f) for f in FILTERS.values())


def test_hugepages_filters():
    assert FILTERS["hugepages_vendor_count"](8) == 50
    plan = FILTERS["hugepages_plan"](50, "1G", 1024 * GiB, ["hugepages-2048kB", "hugepages-1048576kB"])
    assert plan["kernel_args"] == ["default_hugepagesz=1G", "hugepagesz=1G", "hugepages=50"]
    assert FILTERS["hugepages_kernel_args"](plan) == plan["kernel_args"]
    meminfo = "HugePages_Total: 50\nHugePages_Free: 50\nHugepagesize: 1048576 kB\n"
    assert FILTERS["hugepages_verify"](meminfo, plan) == []
    pools = FILTERS["hugepages_plan_pools"](
        [[5128, "2M"], [4, "512M"]], 480 * GiB, FILTERS["hugepages_kernel_page_sizes"]("aarch64", 65536), "2M"
    )
    assert pools["kernel_args"][0] == "default_hugepagesz=2M"


def test_errors_become_ansible_filter_errors_with_the_numbers():
    with pytest.raises(
        AnsibleFilterError, match=r"50 x 1 GiB = 50 GiB would leave 14 GiB of 64 GiB \(22% < 25%\)"
    ):
        FILTERS["hugepages_plan"](50, "1G", 64 * GiB, [2 * 1024**2, GiB])
    with pytest.raises(AnsibleFilterError, match="no usable data interface"):
        FILTERS["nccl_env"]([{"name": "lo", "state": "up", "ipv4": ["127.0.0.1/8"], "type": "loopback"}])


def test_nccl_filters_from_ansible_facts_and_template():
    facts = {
        "interfaces": ["lo", "docker0", "enp159s0"],
        "lo": {
            "device": "lo",
            "active": True,
            "type": "loopback",
            "ipv4": {"address": "127.0.0.1", "prefix": "8"},
        },
        "docker0": {
            "device": "docker0",
            "active": True,
            "type": "bridge",
            "ipv4": {"address": "172.17.0.1", "netmask": "255.255.0.0"},
        },
        "enp159s0": {
            "device": "enp159s0",
            "active": True,
            "type": "ether",
            "ipv4": {"address": "198.18.160.6", "netmask": "255.255.240.0"},
        },
    }
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    text = env.from_string("{{ (facts | nccl_env(net_plugin='harp')).env | nccl_conf }}").render(facts=facts)
    assert text.splitlines()[1:] == ["NCCL_NET_PLUGIN=harp", "NCCL_SOCKET_IFNAME==enp159s0"]
    mca = env.from_string("{{ (facts | nccl_env(mca_use_cidr=true)).mca.btl_tcp_if_include }}").render(
        facts=facts
    )
    assert mca == "198.18.160.0/20"
    assert FILTERS["nccl_check_socket_ifname"]("^docker0")
    assert FILTERS["net_arp_sysctls"](["ens1"])["net.ipv4.conf.ens1.rp_filter"] == "2"
    gid_text = fixture_text(
        "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.1-ibv-devinfo-v-gid-table.txt"
    )
    assert FILTERS["nccl_gid_index"](gid_text, "192.0.2.6") == 3


def test_diagnosis_filters():
    d = FILTERS["diagnose_failure"](
        fixture_text("nccl-logs/E18_mpirun_btl_tcp_connect_docker0_refused.1-mpirun-error-line.txt")
    )
    assert d["kind"] == "mpi_tcp_wrong_interface"
    assert FILTERS["diagnose_failure"](fixture_text("nccl-logs/E16_nccl_info_containers_ib_4hca.txt")) is None
    ulimit = fixture_text("mpi-containers/C36_memlock_ulimit_64k_ibv_create_cq_enomem.1-ulimit-a.txt")
    assert FILTERS["memlock_check"](ulimit)["kind"] == "rdma_memlock"
    assert FILTERS["parse_ulimit_a"](ulimit)["memlock"] == 64
    assert (
        FILTERS["nccl_transport_summary"](fixture_text("nccl-logs/E14_nccl_info_roce_ib_gdr_disabled.txt"))[
            "gdr"
        ]
        is False
    )
    with pytest.raises(AnsibleFilterError, match="ulimit -a"):
        FILTERS["parse_ulimit_a"]("nothing")
