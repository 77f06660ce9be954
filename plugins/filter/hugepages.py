"""Jinja filters of the hugepages component: plan, kernel arguments, node readers and status.

Thin wrappers over ``module_utils/hugepages.py`` (sizes, plan, meminfo/cmdline/sysfs/kubelet
readers) and ``module_utils/netstage.py`` (GRUB arguments, node status). Errors
(HugepagesError, NetStageError: ValueError) become AnsibleFilterError with the same message,
so a template fails with the numbers and the fix.

Examples::

    {{ gpu_count | gpucluster.cluster.hugepages_vendor_count }}                      -> 50 on 8 GPUs
    {{ 50 | gpucluster.cluster.hugepages_plan('1G', mem_bytes, supported) }}          -> plan dict
    {{ plan | gpucluster.cluster.hugepages_kernel_args | join(' ') }}
    {{ describe_node | gpucluster.cluster.hugepages_parse_kubelet }}       -> capacity/allocatable
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import hugepages, netstage
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import refusal, value_errors


def hugepages_plan(count, page_size, mem_total_bytes, supported_sizes, min_free_share=0.25):
    """``count | hugepages_plan(size, mem_bytes, supported)`` -> plan dict (HugepagesPlan.as_dict())."""
    return hugepages.plan(
        int(count), page_size, mem_total_bytes, supported_sizes, float(min_free_share)
    ).as_dict()


def hugepages_plan_pools(pools, mem_total_bytes, supported_sizes, default_size=None, min_free_share=0.25):
    """``[[5128, '2M'], [4, '512M']] | hugepages_plan_pools(mem, supported, '2M')`` -> plan dict."""
    pairs = [(int(p["count"]), p["page_size"]) if isinstance(p, dict) else (int(p[0]), p[1]) for p in pools]
    return hugepages.plan_pools(
        pairs, mem_total_bytes, supported_sizes, default_size, float(min_free_share)
    ).as_dict()


def hugepages_verify(meminfo, plan, kubelet_capacity=None, sysfs_pools=None):
    """``meminfo_text | hugepages_verify(plan)`` -> list of mismatches (empty: all good)."""
    return hugepages.verify(meminfo, plan, kubelet_capacity, sysfs_pools)


def hugepages_node_status(plan, meminfo, cmdline, sysfs_pools=None, runtime=None, mounts=None,
                          mount_path="/dev/hugepages"):
    """``plan | hugepages_node_status(meminfo, cmdline, ...)`` -> {state, mismatches, ...}."""
    return netstage.hugepages_status(plan, meminfo, cmdline, sysfs_pools, runtime, mounts, mount_path)


class FilterModule:
    """Hugepage filters."""

    def filters(self):
        table = {
            "hugepages_vendor_count": hugepages.vendor_page_count,
            "hugepages_plan": hugepages_plan,
            "hugepages_plan_checked": refusal(hugepages_plan),
            "hugepages_plan_pools": hugepages_plan_pools,
            "hugepages_kernel_args": hugepages.kernel_cmdline_args,
            "hugepages_parse_meminfo": hugepages.parse_meminfo,
            "hugepages_mem_total": hugepages.mem_total_bytes,
            "hugepages_parse_cmdline": hugepages.parse_cmdline_hugepages,
            "hugepages_parse_mounts": hugepages.parse_hugetlbfs_mounts,
            "hugepages_supported_sizes": hugepages.supported_page_sizes,
            "hugepages_kernel_page_sizes": hugepages.kernel_page_sizes,
            "hugepages_verify": hugepages_verify,
            "hugepages_kubelet_resource": hugepages.kubelet_resource_name,
            "hugepages_parse_kubelet": hugepages.parse_node_resources,
            "hugepages_node_reading": hugepages.node_hugepages_reading,
            "hugepages_cmdline_active": netstage.cmdline_active,
            "hugepages_grub_args": netstage.grub_hugepage_args,
            "hugepages_node_status": hugepages_node_status,
        }
        return {name: value_errors(func, named=True) for name, func in table.items()}
