"""Jinja filters over the pure network/hugepage/diagnosis logic in ``plugins/module_utils``.

Each filter is a thin wrapper: the logic, input shapes, units and sources are documented in
``hugepages.py``, ``nccl_env.py`` and ``diagnose.py``. Errors (HugepagesError, NcclEnvError,
ValueError) become AnsibleFilterError with the same message, so a template fails with the
numbers and the fix. Results are plain dicts/lists (JSON-safe) for facts and templates.

Examples::

    {{ gpu_count | hugepages_vendor_count }}                                       -> 50 on 8 GPUs
    {{ 50 | hugepages_plan('1G', ansible_memtotal_mb * 1048576, supported) }}        -> plan dict
    {{ plan | hugepages_kernel_args | join(' ') }}
    {{ ansible_facts | nccl_env(rdma_ports=rdma, net_plugin='harp') }}
    {{ (ansible_facts | nccl_env).env | nccl_conf }}
    {{ mpirun_output | diagnose_failure }}
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import diagnose, hugepages, nccl_env
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors

# ---- hugepages ------------------------------------------------------------------------------


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


# ---- NCCL / MPI network ---------------------------------------------------------------------


def _interfaces(value):
    if isinstance(value, dict):
        return nccl_env.interfaces_from_ansible_facts(value)
    return value


def net_interfaces(facts):
    """``ansible_facts | net_interfaces`` -> normalized interface list."""
    return nccl_env.interfaces_from_ansible_facts(facts)


def nccl_env_filter(interfaces, rdma_ports=None, **kwargs):
    """``ansible_facts | nccl_env(rdma_ports=..., net_plugin=...)`` -> render_nccl_env() result.

    Takes ``ansible_facts`` (a dict) or an interface list.
    """
    return nccl_env.render_nccl_env(_interfaces(interfaces), rdma_ports, **kwargs)


def nccl_check_socket_ifname(value, interfaces=None):
    """``'^docker0' | nccl_check_socket_ifname(ifaces)`` -> list of findings."""
    return nccl_env.check_socket_ifname(value, _interfaces(interfaces) if interfaces is not None else None)


def nccl_conf_merge(existing, env):
    """``existing_text | nccl_conf_merge(env)`` -> {text, overridden, user_lines} (see merge_nccl_conf)."""
    return nccl_env.merge_nccl_conf(existing, env)


def nccl_lint_conf(text, interfaces=None):
    """``nccl_conf_text | nccl_lint_conf`` -> list of findings."""
    return nccl_env.lint_nccl_conf(text, _interfaces(interfaces) if interfaces is not None else None)


def nccl_gid_index(gids, ipv4=None):
    """``ibv_devinfo_text | nccl_gid_index('192.0.2.6')`` -> RoCE v2 IPv4 GID index or None."""
    if isinstance(gids, str):
        gids = nccl_env.parse_gid_table(gids)
    return nccl_env.select_roce_v2_gid_index(gids, ipv4)


def net_arp_sysctls(interfaces, arp_ignore=1, arp_announce=2, rp_filter=2):
    """``['ens1', 'ens2'] | net_arp_sysctls`` -> {sysctl name: value}."""
    return nccl_env.arp_sysctls(interfaces, arp_ignore, arp_announce, rp_filter)


# ---- diagnosis ------------------------------------------------------------------------------


def diagnose_failure(text, interfaces=None):
    """``output | diagnose_failure`` -> {kind, message, fix, evidence} or None when unknown."""
    found = diagnose.classify(text, interfaces)
    return found.as_dict() if found is not None else None


def memlock_check(limits, rdma=True, min_kib=None):
    """``ulimit_a_text | memlock_check`` -> diagnosis dict, or None when the limit is fine."""
    found = diagnose.check_memlock(limits, rdma, min_kib)
    return found.as_dict() if found is not None else None


class FilterModule:
    """gpucluster network, hugepage and diagnosis filters."""

    def filters(self):
        table = {
            # hugepages
            "hugepages_vendor_count": hugepages.vendor_page_count,
            "hugepages_plan": hugepages_plan,
            "hugepages_plan_pools": hugepages_plan_pools,
            "hugepages_kernel_args": hugepages.kernel_cmdline_args,
            "hugepages_parse_meminfo": hugepages.parse_meminfo,
            "hugepages_parse_cmdline": hugepages.parse_cmdline_hugepages,
            "hugepages_supported_sizes": hugepages.supported_page_sizes,
            "hugepages_kernel_page_sizes": hugepages.kernel_page_sizes,
            "hugepages_verify": hugepages_verify,
            "hugepages_kubelet_resource": hugepages.kubelet_resource_name,
            # NCCL / MPI network
            "net_interfaces": net_interfaces,
            "net_parse_ifconfig": nccl_env.parse_ifconfig,
            "net_same_subnet_groups": nccl_env.same_subnet_groups,
            "net_arp_sysctls": net_arp_sysctls,
            "net_policy_routes": nccl_env.policy_routes,
            "nccl_env": nccl_env_filter,
            "nccl_conf": nccl_env.render_nccl_conf,
            "nccl_conf_merge": nccl_conf_merge,
            "nccl_mca_env": nccl_env.mca_env,
            "nccl_mpirun_args": nccl_env.mpirun_args,
            "nccl_check_socket_ifname": nccl_check_socket_ifname,
            "nccl_lint_conf": nccl_lint_conf,
            "nccl_parse_gid_table": nccl_env.parse_gid_table,
            "nccl_gid_index": nccl_gid_index,
            # diagnosis
            "diagnose_failure": diagnose_failure,
            "nccl_transport_summary": diagnose.nccl_transport_summary,
            "parse_ulimit_a": diagnose.parse_ulimit_a,
            "memlock_check": memlock_check,
            "insecure_ssh_options": diagnose.find_insecure_ssh_options,
        }
        return {name: value_errors(func, named=True) for name, func in table.items()}
