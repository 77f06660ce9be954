"""Transitional name: ``launch.py`` still imports ``nccl_env`` for the NCCL_SOCKET_IFNAME checks.

The NCCL settings live in ``nccl.py``, the data-NIC choice in ``multi_nic.py``, the GID model in
``rdma.py``. This file only re-exports the three functions ``launch.py`` uses; remove it when
``launch.py`` imports ``nccl`` (``from ...module_utils import nccl`` and ``nccl.<name>``).
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl import (  # noqa: F401
    check_socket_ifname,
    ifname_matches,
    parse_ifname_spec,
)

__all__ = ["check_socket_ifname", "ifname_matches", "parse_ifname_spec"]
