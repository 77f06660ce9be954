"""Filters of the per-node plan (``module_utils/plan.py``), which preflight sets as ``gpucluster_plan``.

Examples::

    {{ ansible_facts.gpucluster_gpu | gpucluster.cluster.gpucluster_node_plan(inventory_hostname,
       ansible_facts.gpucluster_rdma, ansible_facts.interfaces, slots_per_node) }}   -> {plan, errors}
    {{ groups | gpucluster.cluster.gpucluster_declared_membership(inventory_hostname, 'gpu_nodes',
       gpucluster_excluded_nodes) }}                                                 -> {membership, errors}
"""

from __future__ import annotations

from collections.abc import Mapping

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


def contract_problem(contract, needs, host, step):
    """Why a node is not ready for ``step`` (validate, the benchmark, the runtime switch), ``''``
    when it is: the node contract (``ansible_local.gpucluster``) must hold every stage in
    ``needs`` (``{contract stage: publishing role}``, or ``{stage: {"role": .., "keys": [..]}}`` for
    the keys an older gpucluster did not publish yet)."""
    contract = contract if isinstance(contract, Mapping) else {}
    missing, old = [], []
    for stage, need in (needs or {}).items():
        role, keys = (need.get("role"), need.get("keys") or []) if isinstance(need, Mapping) else (need, [])
        role = str(role or stage)
        keys = [keys] if isinstance(keys, str) else [str(k) for k in keys if k is not None]
        got = contract.get(stage)
        if not isinstance(got, Mapping):
            missing.append((stage, role))
        elif [k for k in keys if k not in got]:
            old.append(f"{stage} ({', '.join(k for k in keys if k not in got)}; the {role} stage)")
    if missing:
        roles = ", ".join(dict.fromkeys(r for _, r in missing))
        return (f"{host}: the node contract (ansible_local.gpucluster) has no {', '.join(s for s, _ in missing)} "
                f"(published by the {roles} stage): this node is not converged. "
                f"Fix: run site.yml on it first, then {step}.")
    if old:
        return (f"{host}: the node contract (ansible_local.gpucluster) lacks {'; '.join(old)}: it was published by "
                f"an older gpucluster. Fix: run site.yml on it first, then {step}.")
    return ""


class FilterModule:
    def filters(self):
        return {"gpucluster_node_plan": node_plan, "gpucluster_declared_membership": declared_membership,
                "gpucluster_contract_problem": contract_problem}
