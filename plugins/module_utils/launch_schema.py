"""The job spec's JSON Schema (draft 2020-12) and the names and defaults it is built from.

:data:`JOB_SPEC_SCHEMA` is a plain dict, so the CLI, the filters and a test read it without a
file outside Python; :func:`launch.parse_job_spec
<ansible_collections.gpucluster.cluster.plugins.module_utils.launch.parse_job_spec>` checks a
spec against it with ``jsonschema`` (imported there, inside the function) and then runs the
checks a schema cannot express (NCCL_SOCKET_IFNAME semantics, MPI interface refusal,
Kubernetes quantity arithmetic, cross-field rules that need the runtime profile).

Every subschema that can fail carries a ``description``: what the value must be, a noun phrase
that error messages complete as ``<field>=<value> must be <description>``. A few rules with a
message of their own carry ``errorMessage`` (the convention of ajv-errors; jsonschema ignores
unknown keywords), used as written. This module imports nothing beyond the runtime module, so
it loads on a managed node too.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpucluster.cluster.plugins.module_utils.runtime import DEFAULT_GPUS_PER_NODE, RUNTIMES

API_VERSIONS = {"v2beta1": "kubeflow.org/v2beta1", "v1": "kubeflow.org/v1"}
CLEAN_POD_POLICIES = ("None", "Running", "All")
DEFAULT_SSH_PORT = 2222
#: Host path of the network stack's tools: ``training_image_tools_dir`` of
#: ``roles/training_image/defaults/main.yml`` (the NCCL net plugin goes to its ``nccl-net``,
#: ``nccl_net_plugin_dir``), so the pods mount what the roles installed.
DEFAULT_TOOLS_DIR = "/opt/gpucluster/tools"
#: ``/dev/shm`` of each pod, mirroring the Docker path's ``--shm-size=32g``
#: (``training_image_shm_size``; Docker's ``g`` is GiB). Kubernetes' default is 64 MiB, too
#: small for NCCL's shared-memory transport.
DEFAULT_SHM_SIZE = "32Gi"

DNS1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123 = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
HOSTNAME = r"^[A-Za-z0-9_.-]+$"
#: Kubernetes resource quantity, as in the CRD (x-kubernetes-int-or-string pattern).
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_ENV_VALUE = {
    "type": ["string", "number"],
    "not": {"type": "string", "pattern": "[\n\x00]"},
    "description": "a single-line string or a number",
}


def _env_map(names: dict[str, Any], what: str) -> dict[str, Any]:
    return {"type": "object", "propertyNames": names, "additionalProperties": _ENV_VALUE,
            "description": f"a mapping NAME: value of {what}"}


_VOLCANO = {
    "type": "object",
    "description": "a mapping {enabled, queue, priority_class, podgroup}",
    "additionalProperties": False,
    "properties": {
        "enabled": {"type": "boolean", "default": False, "description": "true or false"},
        "queue": {"type": "string", "pattern": DNS1123, "default": "default",
                  "description": "a Volcano queue name, e.g. default"},
        "priority_class": {"type": "string", "pattern": DNS1123, "description": "a PriorityClass name"},
        "podgroup": {"type": "boolean", "default": False, "description": "true or false"},
    },
    "if": {"properties": {"podgroup": {"const": True}}, "required": ["podgroup"]},
    "then": {"properties": {"enabled": {"const": True}}, "required": ["enabled"],
             "errorMessage": "k8s.volcano.podgroup needs k8s.volcano.enabled: true"},
}

_RUN_POLICY = {
    "type": "object",
    "description": "a mapping {clean_pod_policy, backoff_limit, ttl_seconds_after_finished, active_deadline_seconds}",
    "additionalProperties": False,
    "properties": {
        "clean_pod_policy": {"enum": list(CLEAN_POD_POLICIES), "default": "Running",
                             "description": f"one of {', '.join(CLEAN_POD_POLICIES)}"},
        "backoff_limit": {"type": "integer", "minimum": 0, "description": "an integer >= 0"},
        "ttl_seconds_after_finished": {"type": "integer", "minimum": 0, "description": "an integer >= 0 (seconds)"},
        "active_deadline_seconds": {"type": "integer", "minimum": 1, "description": "an integer >= 1 (seconds)"},
    },
}

_K8S = {
    "type": "object",
    "description": "a mapping of MPIJob options",
    "additionalProperties": False,
    "properties": {
        "api_version": {"enum": sorted(API_VERSIONS), "default": "v2beta1",
                        "description": f"one of {', '.join(sorted(API_VERSIONS))} (the kubeflow.org MPIJob version)"},
        "namespace": {"type": "string", "pattern": DNS1123, "maxLength": 63, "default": "default",
                      "description": "a DNS-1123 label, e.g. default"},
        "hugepages_1gi": {"type": "integer", "minimum": 0, "default": 0,
                          "description": "an integer >= 0 (1 GiB pages per worker pod)"},
        "memory": {"type": ["string", "integer"], "pattern": QUANTITY, "minimum": 1,
                   "description": "a Kubernetes quantity, e.g. 512Gi (memory per worker pod)"},
        "shm_size": {"type": ["string", "integer"], "pattern": QUANTITY, "minimum": 1, "default": DEFAULT_SHM_SIZE,
                     "description": f"a positive Kubernetes quantity, e.g. {DEFAULT_SHM_SIZE} (the pods' /dev/shm; "
                                    "the Docker path runs with --shm-size=32g)"},
        "tools_dir": {"type": "string", "pattern": "^/", "default": DEFAULT_TOOLS_DIR,
                      "description": f"an absolute host path, e.g. {DEFAULT_TOOLS_DIR}"},
        "host_network": {"type": "boolean", "default": False, "description": "true or false"},
        "network_interface": {"type": "string",
                              "description": "the pods' interface for MPI's TCP traffic, e.g. eth0"},
        "ssh_auth_mount_path": {"type": "string", "pattern": "^/", "default": "/root/.ssh",
                                "description": "an absolute path, e.g. /root/.ssh"},
        "volcano": _VOLCANO,
        "run_policy": _RUN_POLICY,
    },
    "allOf": [
        {"if": {"properties": {"hugepages_1gi": {"type": "integer", "minimum": 1}}, "required": ["hugepages_1gi"]},
         "then": {"required": ["memory"],
                  "errorMessage": "k8s.hugepages_1gi is set but k8s.memory is not: Kubernetes admits hugepages only "
                                  "with a cpu or memory request, so set k8s.memory (e.g. 512Gi)"}},
        {"if": {"properties": {"host_network": {"const": True}}, "required": ["host_network"]},
         "then": {"required": ["network_interface"],
                  "errorMessage": "k8s.host_network is true but k8s.network_interface is not set: with host "
                                  "networking the pods see the node's NICs, so name the routable one "
                                  "(e.g. ens1f0np0)"}},
    ],
}

#: A job spec (see the docstring of ``launch.py`` for the YAML form). A field given as null is
#: the same as a field left out (``launch.parse_job_spec`` drops nulls first).
JOB_SPEC_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "gpucluster job spec",
    "description": "a YAML mapping (name, image, command, ...)",
    "type": "object",
    # Unknown fields first: a misspelt field also shows up as a missing one.
    "additionalProperties": False,
    "required": ["name", "image", "command"],
    "properties": {
        "name": {"type": "string", "pattern": DNS1035, "maxLength": 63,
                 "description": "a DNS-1035 label (lowercase letters, digits, '-', starting with a letter, at most "
                                "63 characters): it names the MPIJob and its pods"},
        "image": {"type": "string", "pattern": r"^\S+$",
                  "description": "an image reference, e.g. registry:5000/train:latest"},
        "command": {"description": "a non-empty list of arguments (or one string), e.g. [python, train.py]",
                    "anyOf": [{"type": "string", "pattern": r"\S"},
                              {"type": "array", "minItems": 1, "items": {"type": ["string", "number"]}}]},
        "nodes": {"type": "array", "minItems": 1, "uniqueItems": True,
                  "items": {"type": "string", "pattern": HOSTNAME,
                            "description": "a host name (letters, digits, '.', '-', '_')"},
                  "description": "a non-empty list of host names, e.g. [gpu-node-1, gpu-node-2]"},
        "node_count": {"type": "integer", "minimum": 1,
                       "description": "an integer >= 1 (enough for an MPIJob; mpirun needs nodes)"},
        "gpus_per_node": {"type": "integer", "minimum": 1, "default": DEFAULT_GPUS_PER_NODE,
                          "description": "an integer >= 1 (GPUs of each node, one MPI rank each)"},
        "runtime": {"enum": list(RUNTIMES), "default": "lightcc", "description": f"one of {', '.join(RUNTIMES)}"},
        "profile": {"type": "object",
                    "description": "a mapping of runtime variables, e.g. {LIGHT_TOPK_RATIO: 0.01}"},
        "nccl_env": _env_map({"type": "string", "pattern": r"^NCCL_[A-Za-z0-9_]*$",
                              "description": "an NCCL_* variable: only NCCL_* variables belong here; move it to env"},
                             "NCCL_* variables"),
        "env": _env_map({"type": "string", "pattern": ENV_NAME,
                         "description": "a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)"},
                        "environment variables"),
        "network_interface": {"type": "string",
                              "description": "the NIC name (or CIDR) MPI's TCP traffic uses, e.g. eth0"},
        "ssh_port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": DEFAULT_SSH_PORT,
                     "description": "a TCP port (1-65535): the sshd of the training containers"},
        "hostfile": {"type": "string", "pattern": r"\S",
                     "description": "a path (in the launching container) or left out"},
        "k8s": _K8S,
    },
    "allOf": [
        {"anyOf": [{"required": ["nodes"]}, {"required": ["node_count"]}],
         "errorMessage": "give nodes: [host, ...] (needed for mpirun) or node_count: N (enough for an MPIJob)"},
    ],
}
