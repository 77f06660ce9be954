"""Filters of the per-node plan (``module_utils/plan.py``), which preflight sets as ``gpucluster_plan``.

Examples::

    {{ ansible_facts.gpucluster_gpu | gpucluster.cluster.gpucluster_node_plan(inventory_hostname,
       ansible_facts.gpucluster_rdma, ansible_facts.interfaces, slots_per_node) }}   -> {plan, errors}
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import plan


def node_plan(gpu_facts, host, rdma_facts, interfaces, slots_per_node=None):
    """``{"plan": {...}, "errors": [...]}`` for one node (``plan.node_plan``)."""
    p, errors = plan.node_plan(host, gpu_facts, rdma_facts, interfaces, slots_per_node)
    return {"plan": p, "errors": errors}


class FilterModule:
    def filters(self):
        return {"gpucluster_node_plan": node_plan}
