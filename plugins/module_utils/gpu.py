"""The GPU component's public names in one place, for code written before the split.

The readers live in their parts, and new code imports the part it needs:

- ``gpu_pci``: ``lspci -nn`` (GPUs, NVSwitch bridges), PCI bus ids;
- ``gpu_smi``: ``nvidia-smi --query-gpu`` CSV and the ``nvidia-smi -q`` report;
- ``gpu_topology``: ``nvidia-smi topo -m`` / ``-p2p``, GPU-NIC map, GPU subsets;
- ``gpu_driver``: driver versions and the one driver state model (``driver_state``);
- ``gpu_kernel``: ``NVRM:`` kernel log lines (Xid, fallen off the bus, RmInitAdapter);
- ``gpu_fabric``: nvidia-fabricmanager (systemctl, journal) and whether it applies.

This module defines nothing itself; it re-exports the same objects (a test checks it).
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_driver import (  # noqa: F401
    DRIVER_STATES,
    driver_state,
    missing_gpus,
    nvidia_userspace_version,
    parse_dpkg_versions,
    parse_proc_driver_version,
    upstream_version,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_fabric import (  # noqa: F401
    fabricmanager_state,
    parse_fabricmanager,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_kernel import (  # noqa: F401
    ACTIONS,
    XID_CATALOG,
    parse_kernel_log,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import (  # noqa: F401
    GPU_PCI_CLASSES,
    NVIDIA_VENDOR_ID,
    NVSWITCH_PCI_CLASS,
    normalize_bus_id,
    parse_lspci_nn,
    parse_lspci_nvswitches,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_smi import (  # noqa: F401
    GPU_QUERY_FIELDS,
    gpus_from_query,
    parse_query_gpu_csv,
    parse_smi_q,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_topology import (  # noqa: F401
    PCIE_LINK_RANK,
    TopologyError,
    gpu_nic_map,
    parse_cpu_list,
    parse_topo_matrix,
    parse_topo_p2p,
    pick_gpu_subset,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (  # noqa: F401
    ParseError,
)
