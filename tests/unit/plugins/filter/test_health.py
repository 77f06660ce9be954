"""The health filter plugin (plugins/filter/health.py): names, error mapping, a template over a real fixture."""

from __future__ import annotations

import jinja2
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.filter import health

from tests.conftest import fixture_text

FILTERS = health.FilterModule().filters()


def test_filter_names():
    assert set(FILTERS) == {
        "node_health_evaluate", "node_health_markdown", "node_health_profile_problems", "node_health_lspci_vv",
        "node_health_kernel_log", "node_health_ecc_rows", "node_health_dcgm_packages", "nccl_transport_check",
        "ompi_tcp_verbose", "mpi_interfaces_check", "mpi_data_nics"}


def test_value_errors_become_filter_errors_naming_the_function():
    with pytest.raises(AnsibleFilterError, match="parse_lspci_vv: lspci -vv: no device line"):
        FILTERS["node_health_lspci_vv"]("")
    with pytest.raises(AnsibleFilterError, match="needs net_plugin"):
        FILTERS["nccl_transport_check"]("", transport="plugin")


def test_template_judges_a_recorded_log_and_empty_options_mean_unset():
    env = jinja2.Environment()
    env.filters.update(FILTERS)
    tpl = env.from_string("{{ (log | nccl_transport_check(net_plugin='', transport='IB', gdr=True, nccl_tests='',"
                          " line_rate_gbit=0)).problems | join('; ') }}")
    out = tpl.render(log=fixture_text("nccl-logs/E14_nccl_info_roce_ib_gdr_disabled.txt"))
    assert out == "GPUDirect RDMA expected, disabled for mlx5_0, mlx5_1"


def test_dcgm_packages_filter_maps_errors():
    with pytest.raises(AnsibleFilterError, match="node_health_dcgm_major: 3"):
        FILTERS["node_health_dcgm_packages"]("", 4)
    assert FILTERS["node_health_dcgm_packages"]("", 3) == ["datacenter-gpu-manager"]
