"""Jinja filters of the NCCL component: NCCL settings, nccl.conf, the training container's env.

Thin wrappers over ``module_utils/nccl.py`` (NCCL_SOCKET_IFNAME semantics, HCA and GID index
choice, render/parse/lint of nccl.conf) and ``module_utils/netstage.py`` (container env,
rdma_facts ports). Errors (NcclEnvError, NetworkError, ParseError: all ValueError) become
AnsibleFilterError with the same message, so a template fails with the fix.

Examples::

    {{ ansible_facts | gpucluster.cluster.nccl_env(rdma_ports=rdma, net_plugin='harp') }}
    {{ (ansible_facts | gpucluster.cluster.nccl_env).env | gpucluster.cluster.nccl_conf }}
    {{ ansible_facts.gpucluster_rdma | gpucluster.cluster.nccl_rdma_ports }}
    {{ rendered | gpucluster.cluster.nccl_mpirun_args(job_spec) }}      -> launch.render_mpirun argv
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import launch, multi_nic, nccl, netstage
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


def _interfaces(value):
    if isinstance(value, dict):
        return multi_nic.interfaces_from_ansible_facts(value)
    return value


def nccl_env_filter(interfaces, rdma_ports=None, **kwargs):
    """``ansible_facts | nccl_env(rdma_ports=..., net_plugin=...)`` -> render_nccl_env() result.

    Takes ``ansible_facts`` (a dict) or an interface list.
    """
    return nccl.render_nccl_env(_interfaces(interfaces), rdma_ports, **kwargs)


def nccl_check_socket_ifname(value, interfaces=None):
    """``'^docker0' | nccl_check_socket_ifname(ifaces)`` -> list of findings."""
    return nccl.check_socket_ifname(value, _interfaces(interfaces) if interfaces is not None else None)


def nccl_conf_merge(existing, env):
    """``existing_text | nccl_conf_merge(env)`` -> {text, overridden, user_lines} (see merge_nccl_conf)."""
    return nccl.merge_nccl_conf(existing, env)


def nccl_lint_conf(text, interfaces=None, gids=None, ipv4=None):
    """``nccl_conf_text | nccl_lint_conf(ifaces, gid_table_text)`` -> list of findings."""
    return nccl.lint_nccl_conf(text, _interfaces(interfaces) if interfaces is not None else None, gids, ipv4)


def nccl_mpirun_args(rendered, job):
    """``rendered | nccl_mpirun_args(job_spec)`` -> the ``mpirun`` argv of ``launch.render_mpirun``
    for ``job`` (a job spec mapping) with the NCCL env and the MPI TCP interface of ``rendered``
    (nccl.launch_settings)."""
    return launch.render_mpirun({**dict(job), **nccl.launch_settings(rendered)})


class FilterModule:
    """NCCL filters."""

    def filters(self):
        table = {
            "nccl_env": nccl_env_filter,
            "nccl_conf": nccl.render_nccl_conf,
            "nccl_conf_merge": nccl_conf_merge,
            "nccl_parse_conf": nccl.parse_nccl_conf,
            "nccl_lint_conf": nccl_lint_conf,
            "nccl_check_socket_ifname": nccl_check_socket_ifname,
            "nccl_mca_env": nccl.mca_env,
            "nccl_launch_settings": nccl.launch_settings,
            "nccl_mpirun_args": nccl_mpirun_args,
            "nccl_rdma_ports": netstage.rdma_ports,
            "nccl_container_env": netstage.container_env,
        }
        return {name: value_errors(func, named=True) for name, func in table.items()}
