"""The per-node plan: the facts every stage shares, derived once, in one place.

Preflight computes it on every run, whatever ``--tags`` (``roles/preflight/tasks/plan.yml``)
and sets it as ``gpucluster_plan``; the stages read it and keep no copy or fallback of their
own (hugepages, cloud_eni and multi_nic take ``gpus``; runtime_profile, container_ssh and the
benchmark take ``slots``). Before it existed GPUs per node had six fallbacks (8, 1, 0, ...), so
``--tags training`` on a 4-GPU node gave LIGHT_INTRA_SIZE=8 and a hostfile with ``slots=1``.

Inputs are what the node reported in this run: ``gpu_facts`` (``ansible_facts.gpucluster_gpu``),
``rdma_facts`` (``ansible_facts.gpucluster_rdma``) and the interface names of Ansible's setup,
plus the one inventory value it owns, ``gpucluster_slots_per_node``.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.inventory import UNSET, Problem, format_problems

#: Interfaces that are not a node's NICs: loopback, Docker's bridges and veths, libvirt's,
#: Linux bridges. Everything else is a NIC the stages may use.
NOT_A_NIC = re.compile(r"^(lo|docker|veth|virbr|br-)")

#: The plan's keys, in the order ``gpucluster plan`` prints them.
KEYS = ("gpus", "gpus_ready", "driver", "slots", "nics", "hcas")


def nics(interfaces):
    """The node's NICs among Ansible's interface names, sorted."""
    return sorted(str(i) for i in interfaces or () if not NOT_A_NIC.match(str(i)))


def _slots(slots_per_node, gpus):
    """Ranks per node: ``gpucluster_slots_per_node`` when set, else one per PCI GPU."""
    if slots_per_node in (None, "", UNSET):
        if gpus > 0:
            return gpus, []
        return 0, [Problem(
            "gpucluster_slots_per_node",
            "is not set and the node has no GPU (lspci shows no device of vendor 10de), so the hostfile and "
            "LIGHT_INTRA_SIZE would get 0 ranks per node",
            "set gpucluster_slots_per_node: <ranks per node> in this host's or its group's variables (1 on a CPU-only "
            "test node)",
        )]
    if isinstance(slots_per_node, bool):
        n = None
    else:
        try:
            n = int(str(slots_per_node).strip())
        except ValueError:
            n = None
    if n is None or n < 1:
        return 0, [Problem(
            "gpucluster_slots_per_node",
            f"{slots_per_node!r} is not a whole number of ranks per node of at least 1",
            (f"set it to the GPUs per node ({gpus} found here), or remove it to take that count" if gpus else
             "set it to the ranks per node, at least 1 (this node has no GPU, so it cannot be left out)"),
        )]
    return n, []


def node_plan(host, gpu_facts, rdma_facts, interfaces, slots_per_node=None):
    """``(plan, errors)`` for one node; ``errors`` are preflight's messages naming host, variable and fix."""
    gpu_facts = gpu_facts or {}
    rdma_facts = rdma_facts or {}
    gpus = int(gpu_facts.get("pci_gpu_count") or 0)
    slots, problems = _slots(slots_per_node, gpus)
    plan = {
        "gpus": gpus,
        "gpus_ready": int(gpu_facts.get("gpu_count") or 0),
        "driver": (gpu_facts.get("driver") or {}).get("state", "unknown"),
        "slots": slots,
        "nics": nics(interfaces),
        "hcas": sorted(h["name"] for h in rdma_facts.get("hcas") or () if h.get("name")),
    }
    return plan, format_problems(host, problems)
