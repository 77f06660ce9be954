"""Jinja filters of the health component: the node health verdict and the network proof.

Thin wrappers; the logic, input shapes and sources are in ``plugins/module_utils/health.py``
and ``plugins/module_utils/nccl_transport.py``. ValueError becomes AnsibleFilterError with
the same message.

Examples::

    {{ node_inputs | gpucluster.cluster.node_health_evaluate }}     -> verdict dict with checks and drift
    {{ {'generated': ts, 'nodes': results} | gpucluster.cluster.node_health_markdown }}
    {{ journal.stdout | gpucluster.cluster.node_health_kernel_log }}  -> gpu_kernel events + PCIe AER
    {{ smi_q.stdout | gpucluster.cluster.node_health_ecc_rows }}      -> ECC rows read by gpu_smi.parse_smi_q
    {{ smi_q.stdout | gpucluster.cluster.node_health_dcgm_packages(4) }} -> ['datacenter-gpu-manager-4-cuda12']
    {{ nccl_log | gpucluster.cluster.nccl_transport_check(transport='IB', gdr=true) }}
    {{ mpirun_out | gpucluster.cluster.ompi_tcp_verbose
       | gpucluster.cluster.mpi_interfaces_check('10.0.0.0/24', data_nics) }}
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import health, nccl_transport
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


def nccl_transport_check(log, **kwargs):
    """``log | nccl_transport_check(net_plugin=..., transport=..., gdr=..., nccl_tests=...,
    line_rate_gbit=..., fraction=...)``; empty strings/None mean "not configured"."""
    clean = {k: v for k, v in kwargs.items() if v not in ("", None)}
    return nccl_transport.check_nccl_transport(log, **clean)


class FilterModule:
    def filters(self):
        table = {
            "node_health_evaluate": health.evaluate,
            "node_health_markdown": health.markdown,
            "node_health_profile_problems": health.profile_problems,
            "node_health_lspci_vv": health.parse_lspci_vv,
            "node_health_kernel_log": health.kernel_log,
            "node_health_ecc_rows": health.ecc_rows,
            "node_health_dcgm_packages": health.dcgm_packages,
            "nccl_transport_check": nccl_transport_check,
            "ompi_tcp_verbose": nccl_transport.parse_ompi_tcp_verbose,
            "mpi_interfaces_check": nccl_transport.check_mpi_interfaces,
            "mpi_data_nics": nccl_transport.data_nics_by_host,
        }
        return {name: value_errors(func, named=True) for name, func in table.items()}
