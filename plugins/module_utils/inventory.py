"""Checks of inventory values that types alone cannot express.

Each check returns a list of ``Problem``s naming the variable, what is wrong and the fix;
the preflight role prefixes the host. They run before any stage changes a node, so a bad
value never leaves a half-converged cluster.
"""

from __future__ import annotations

import re
from collections import namedtuple

from ansible.module_utils.parsing.convert_bool import boolean

Problem = namedtuple("Problem", "variable message fix")

# Docker image reference grammar (distribution/reference, reference.go):
#   reference := name [ ":" tag ] [ "@" digest ]
#   name      := [domain '/'] path-component ['/' path-component]*
#   domain    := host [':' port]; path components are lowercase alnum joined by [._-] separators.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:localhost|{_LABEL}(?:\.{_LABEL})*)(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
# Docker's --shm-size: a number of bytes with an optional unit b, k, m or g (docker run docs).
SIZE = re.compile(r"^[0-9]+(?:\.[0-9]+)?[bkmgBKMG]?$")


def parse_image_ref(ref):
    """Split an image reference into (domain, path, tag, digest); ValueError if malformed.

    A first component counts as a registry host when it has a '.' or ':' or is localhost
    (the Docker CLI rule); ``domain`` is None for Docker Hub names.
    """
    if not isinstance(ref, str) or not ref or len(ref) > 255:
        raise ValueError("empty or longer than 255 characters")
    m = IMAGE_REF.match(ref)
    if not m:
        raise ValueError("not of the form [registry[:port]/]name[:tag][@sha256:digest] (lowercase name)")
    domain = m.group("domain")
    path = m.group("path")
    if domain and not ("." in domain or ":" in domain or domain == "localhost"):
        if not re.match("^" + _COMPONENT + "$", domain):
            raise ValueError(f"{domain!r} is neither a registry host nor a lowercase repository name")
        path = domain + "/" + path
        domain = None
    return domain, path, m.group("tag"), m.group("digest")


def check_training_image(ref, shm_size, memlock, privileged, rdma_devices=0):
    out = []
    try:
        parse_image_ref(ref)
    except ValueError as exc:
        out.append(Problem(
            "training_image_ref", f"{ref!r} is not an image reference: {exc}",
            "set it to e.g. registry.example.com:5000/team/train:1.0",
        ))
    if not SIZE.match(str(shm_size)):
        out.append(Problem(
            "training_image_shm_size", f"{shm_size!r} is not a size",
            "use a number of bytes with an optional b/k/m/g unit, e.g. 32g",
        ))
    try:
        memlock_value = int(memlock)
    except (TypeError, ValueError):
        memlock_value = None
    if memlock_value is None or (memlock_value != -1 and memlock_value < 0):
        out.append(Problem(
            "training_image_ulimit_memlock", f"{memlock!r} is not -1 (unlimited) or a byte count",
            "use -1",
        ))
    elif rdma_devices and memlock_value != -1 and not privileged:
        # fixtures/mpi-containers/C36: 64 KiB memlock -> ibv_create_cq() ENOMEM.
        out.append(Problem(
            "training_image_ulimit_memlock",
            f"memlock is bounded at {memlock_value} bytes on a node with {rdma_devices} RDMA device(s); "
            "verbs cannot register memory (ibv_create_cq: Cannot allocate memory)",
            "use -1 (unlimited)",
        ))
    return out


def check_ssh_port(port, network_mode="host", node_ssh_port=22):
    try:
        value = int(port)
    except (TypeError, ValueError):
        return [Problem("container_ssh_port", f"{port!r} is not a port number", "use an integer 1-65535, e.g. 2222")]
    if not 1 <= value <= 65535:
        return [Problem("container_ssh_port", f"{value} is out of range", "use an integer 1-65535, e.g. 2222")]
    if network_mode == "host" and value == int(node_ssh_port):
        # fixtures/mpi-containers/C34: mpirun lands on the node's sshd -> "orted: No such file".
        return [Problem(
            "container_ssh_port",
            f"{value} is the node's own sshd port; with host networking mpirun would reach the node, not the container",
            "use a port of its own, e.g. 2222",
        )]
    return []


def check_gpus(gpu_count, require_gpu):
    # -e preflight_require_gpu=false arrives as the string "false": read it as Ansible does.
    try:
        require_gpu = boolean(require_gpu, strict=True)
    except TypeError:
        return [Problem("preflight_require_gpu", f"{require_gpu!r} is not a boolean", "use true or false")]
    if require_gpu and int(gpu_count) == 0:
        return [Problem(
            "preflight_require_gpu",
            "no NVIDIA GPU found on this node (lspci shows no device of vendor 10de)",
            "check the node is a GPU node; for a GPU-less node set preflight_require_gpu: false explicitly",
        )]
    return []


def format_problems(host, problems):
    """One message per problem: '<host>: <variable>: <what>. Fix: <fix>.'"""
    return [f"{host}: {p.variable}: {p.message}. Fix: {p.fix}." for p in problems]
