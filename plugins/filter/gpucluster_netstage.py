"""Jinja filters of the network stage roles (hugepages, cloud_eni, multi_nic, nccl_env).

Thin wrappers over ``module_utils/netstage.py`` (and two existing parsers of
``hugepages.py`` / ``nccl_env.py`` that ``gpucluster_net`` does not expose). Shapes, units and
sources are in those modules' docstrings. Errors (NetStageError, HugepagesError, NcclEnvError,
ParseError: all ValueError) become AnsibleFilterError with the same message.

Examples::

    {{ multi_nic_interfaces | multi_nic_plan(ansible_facts, multi_nic_mtu, multi_nic_table_base) }}
    {{ nics | multi_nic_gpu_map(ansible_facts.gpucluster_gpu, ansible_facts.gpucluster_rdma, numa, 8) }}
    {{ ansible_facts.gpucluster_rdma | nccl_rdma_ports }}
    {{ plan | hugepages_node_status(meminfo, cmdline, runtime=run, mounts=mounts) }}
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import hugepages, nccl_env, netstage
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


def multi_nic_resolve(specs, facts, mtu=0):
    """``multi_nic_interfaces | multi_nic_resolve(ansible_facts, mtu)`` -> resolved NICs."""
    return netstage.resolve_secondary_nics(specs, facts, int(mtu or 0))


def multi_nic_plan(specs, facts, mtu=0, table_base=100):
    """``multi_nic_interfaces | multi_nic_plan(ansible_facts, mtu, 100)`` -> NICs with tables and probes."""
    return netstage.secondary_nic_plan(specs, facts, int(mtu or 0), int(table_base))


def multi_nic_gpu_map(nics, gpu_facts=None, rdma_facts=None, numa_nodes=None, gpu_count=0):
    """``nics | multi_nic_gpu_map(gpucluster_gpu, gpucluster_rdma, numa, count)`` -> GPU-NIC map."""
    if isinstance(numa_nodes, str):
        numa_nodes = netstage.parse_numa_nodes(numa_nodes)
    return netstage.gpu_netdev_map(nics, gpu_facts, rdma_facts, numa_nodes, int(gpu_count or 0))


def hugepages_node_status(plan, meminfo, cmdline, sysfs_pools=None, runtime=None, mounts=None,
                          mount_path="/dev/hugepages"):
    """``plan | hugepages_node_status(meminfo, cmdline, ...)`` -> {state, mismatches, ...}."""
    return netstage.hugepages_status(plan, meminfo, cmdline, sysfs_pools, runtime, mounts, mount_path)


class FilterModule:
    """Filters of the network stage roles."""

    def filters(self):
        table = {
            "net_interfaces_sorted": netstage.sorted_interfaces,
            "multi_nic_resolve": multi_nic_resolve,
            "multi_nic_plan": multi_nic_plan,
            "multi_nic_probes": netstage.probe_destinations,
            "multi_nic_numa_nodes": netstage.parse_numa_nodes,
            "multi_nic_gpu_map": multi_nic_gpu_map,
            "cloud_eni_multi_nic": netstage.eni_interfaces,
            "nccl_rdma_ports": netstage.rdma_ports,
            "nccl_container_env": netstage.container_env,
            "nccl_parse_conf": nccl_env.parse_nccl_conf,
            "hugepages_cmdline_active": netstage.cmdline_active,
            "hugepages_grub_args": netstage.grub_hugepage_args,
            "hugepages_parse_mounts": hugepages.parse_hugetlbfs_mounts,
            "hugepages_node_status": hugepages_node_status,
        }
        return {name: value_errors(func, named=True) for name, func in table.items()}
