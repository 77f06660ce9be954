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
