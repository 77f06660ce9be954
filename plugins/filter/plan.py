"""Filters of the per-node plan (``module_utils/plan.py``), which preflight sets as ``gpucluster_plan``.

Examples::

    {{ ansible_facts.gpucluster_gpu | gpucluster.cluster.gpucluster_node_plan(inventory_hostname,
       ansible_facts.gpucluster_rdma, ansible_facts.interfaces, slots_per_node) }}   -> {plan, errors}
    {{ groups | gpucluster.cluster.gpucluster_declared_membership(inventory_hostname, 'gpu_nodes',
       gpucluster_excluded_nodes) }}                                                 -> {membership, errors}
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import membership, plan


def node_plan(gpu_facts, host, rdma_facts, interfaces, slots_per_node=None):
    """``{"plan": {...}, "errors": [...]}`` for one node (``plan.node_plan``)."""
    p, errors = plan.node_plan(host, gpu_facts, rdma_facts, interfaces, slots_per_node)
    return {"plan": p, "errors": errors}


def declared_membership(groups, host, group, excluded=None):
    """``{"membership": {...}, "errors": [...]}``: the training group as the inventory declares it
    (``membership.declared``; ``groups``: Ansible's magic variable)."""
    m, errors = membership.declared(host, group, (groups or {}).get(group) or [], excluded)
    return {"membership": m, "errors": errors}


class FilterModule:
    def filters(self):
        return {"gpucluster_node_plan": node_plan, "gpucluster_declared_membership": declared_membership}
