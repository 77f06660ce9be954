"""Kubernetes node labels from the GPU facts (``gpu_facts``: ``ansible_facts.gpucluster_gpu``).

Labels (``<prefix>/...``, default prefix ``gpucluster.io``):

- ``gpu-count``: GPUs nvidia-smi reports, else GPUs on the PCI bus;
- ``gpu-model``: the GPU name (nvidia-smi, else lspci) made a label value
  (``NVIDIA A100-SXM4-80GB`` -> ``NVIDIA-A100-SXM4-80GB``), ``mixed`` when a node has several;
- ``nvlink``: ``true``/``false`` (any GPU pair connected by NV# in ``nvidia-smi topo -m``),
  ``unknown`` without the topology;
- ``gpu-topology``: ``nvswitch`` (every GPU pair on NVLink, inferred by ``parse_topo_matrix``),
  ``nvlink``, ``pcie`` or ``unknown``;
- and, on nodes with two or more GPUs, ``ack.node.gpu.schedule: topology``: the label with which
  Alibaba Cloud ACK turns on topology-aware GPU scheduling for a node ("kubectl label node
  <node> ack.node.gpu.schedule=topology", ACK "Topology-aware GPU scheduling" guide); a node
  with that label is not used by ACK's regular GPU scheduling.

Label values follow Kubernetes' syntax: at most 63 characters, ``[A-Za-z0-9]`` at both ends,
``-_.`` inside.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

ACK_TOPOLOGY_LABEL = ("ack.node.gpu.schedule", "topology")
_PREFIX = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_value(text: Any) -> str:
    """``text`` as a Kubernetes label value: runs of other characters become ``-``, trimmed
    to 63 characters, alphanumeric at both ends (``""`` when nothing is left)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text or "")).strip("-_.")
    value = value[:63].rstrip("-_.")
    return value


def k8s_node_labels(gpu: Mapping[str, Any] | None, prefix: str = "gpucluster.io", ack_topology: bool = True) -> dict:
    """The labels of one node (``{}`` for a node without GPUs)."""
    if not _PREFIX.match(str(prefix)) or len(str(prefix)) > 253:
        raise AnsibleFilterError(f"label prefix {prefix!r} must be a DNS subdomain, e.g. gpucluster.io")
    gpu = gpu or {}
    smi = gpu.get("gpus") or []
    pci = gpu.get("pci_gpus") or []
    count = int(gpu.get("gpu_count") or len(smi) or gpu.get("pci_gpu_count") or len(pci) or 0)
    if count < 1:
        return {}
    names = sorted({label_value(g.get("name")) for g in (smi or pci) if g.get("name")})
    model = names[0] if len(names) == 1 else ("mixed" if names else "unknown")
    topo = gpu.get("topology")
    if isinstance(topo, Mapping):
        nvlink = "true" if topo.get("nvlink") else "false"
        topology = "nvswitch" if topo.get("nvswitch") else ("nvlink" if topo.get("nvlink") else "pcie")
    else:
        nvlink = topology = "unknown"
    labels = {
        f"{prefix}/gpu-count": str(count),
        f"{prefix}/gpu-model": model or "unknown",
        f"{prefix}/nvlink": nvlink,
        f"{prefix}/gpu-topology": topology,
    }
    if ack_topology and count > 1:
        labels[ACK_TOPOLOGY_LABEL[0]] = ACK_TOPOLOGY_LABEL[1]
    return labels


def k8s_operator_patch(documents: Any, extra_args: Any, manifest: str = "the manifest", image: Any = "") -> dict:
    """mpi-operator's install manifest (``documents``: its YAML documents) with container
    ``mpi-operator`` of Deployment ``mpi-operator`` patched: ``extra_args`` added to its args and,
    where ``image`` is given, that image (the upstream manifest names the moving ``master`` tag).
    Earlier copies of those args and any earlier ``--gang-scheduling`` (``=x`` or ``x`` as the
    next arg) are dropped first, so patching a patched manifest changes nothing. The input is not
    changed. ``{"documents": [...], "error": ""}``; ``error`` names the manifest and the fix where
    it has no such container to patch."""
    docs = [d for d in (documents or []) if d]
    extra = [extra_args] if isinstance(extra_args, str) else [str(a) for a in (extra_args or [])]
    image = "" if image is None else str(image).strip()
    if not extra and not image:
        return {"documents": docs, "error": ""}
    out, found = [], False
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, Mapping) else None
        pod = _get(doc, "spec", "template", "spec")
        if not (isinstance(meta, Mapping) and doc.get("kind") == "Deployment" and meta.get("name") == "mpi-operator"
                and isinstance(pod, Mapping) and isinstance(pod.get("containers"), list)):
            out.append(doc)
            continue
        containers = []
        for c in pod["containers"]:
            if isinstance(c, Mapping) and c.get("name") == "mpi-operator":
                found = True
                c = {**c, "args": _without(c.get("args"), extra) + extra, **({"image": image} if image else {})}
            containers.append(c)
        spec = doc["spec"]
        template = {**spec["template"], "spec": {**pod, "containers": containers}}
        out.append({**doc, "spec": {**spec, "template": template}})
    if not found:
        what = " and ".join(([" ".join(extra) + " cannot be added (Volcano would not gang-schedule MPIJobs)"]
                             if extra else []) + ([f"the image {image} cannot be set"] if image else []))
        instead = " and ".join((["k8s_volcano: false"] if extra else [])
                               + (['k8s_mpi_operator_image: ""'] if image else []))
        return {"documents": docs, "error": (
            f"{manifest} has no Deployment mpi-operator with a container mpi-operator, so {what}. Fix: leave "
            f"k8s_mpi_operator_manifest unset (the pinned v0.8.2 manifest) or give one of the same shape, or set "
            f"{instead}.")}
    return {"documents": out, "error": ""}


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def _without(args: Any, extra: list[str]) -> list[str]:
    """``args`` without ``extra`` and without any ``--gang-scheduling`` (with its value)."""
    args = [args] if isinstance(args, str) else [str(a) for a in (args or [])]
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if re.match(r"^--?gang-scheduling$", a):
            skip = True
            continue
        if a in extra or re.match(r"^--?gang-scheduling=", a):
            continue
        out.append(a)
    return out


class FilterModule:
    def filters(self):
        return {
            "gpucluster_k8s_node_labels": k8s_node_labels,
            "gpucluster_k8s_label_value": label_value,
            "gpucluster_k8s_operator_patch": k8s_operator_patch,
        }
