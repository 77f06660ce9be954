#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module rdma_facts: RDMA HCAs, ports, netdevs and RoCE GID index, as facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: RDMA HCAs, port states, link layers, netdevs and the RoCE GID index as facts
description:
  - Reads C(/sys/class/infiniband) (port state, link layer, rate, GID table with types and
    netdevs), C(ibv_devinfo -v) (firmware, GUIDs, ports) and C(ibdev2netdev) when present
    (else the same mapping from sysfs), and returns them as the fact C(gpucluster_rdma).
  - Picks the GID index NCCL needs on RoCE (C(NCCL_IB_GID_INDEX)), the RoCE v2 entry holding
    the IPv4-mapped address, never the link-local one.
  - Read-only; runs the same way in check mode. A node without RDMA device gets empty lists.
  - Output the parsers cannot read fails the module with the parser's message.
options:
  ipv4_addresses:
    description:
      - IPv4 address(es) the RoCE GID must carry (the data-plane address of the node). Empty
        takes the lowest RoCE v2 IPv4 GID of each port.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - gpucluster.cluster.node_facts
notes:
  - Parsers live in C(module_utils/rdma.py); their docstrings give every rule and
    its source.
"""

EXAMPLES = r"""
- name: Gather RDMA facts
  gpucluster.cluster.rdma_facts:
    ipv4_addresses: ["{{ ansible_host }}"]

- name: NCCL settings for RoCE
  ansible.builtin.set_fact:
    nccl_env:
      NCCL_IB_HCA: "{{ gpucluster_rdma.active_hcas | join(',') }}"
      NCCL_IB_GID_INDEX: "{{ gpucluster_rdma.nccl_ib_gid_index }}"
  when: gpucluster_rdma.roce_hcas | length > 0
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpucluster_rdma:
      description: RDMA inventory of the node.
      type: dict
      contains:
        hcas:
          description:
            - One entry per HCA (natural order) with name, transport, fw_ver, node_guid,
              vendor_part_id, board_id and ports; each port has port, state (ACTIVE, INIT,
              DOWN ...), active, phys_state, link_layer (InfiniBand/Ethernet), fabric
              (InfiniBand/RoCE), rate_gbps (Gbit/s), netdev, netdev_state, roce_gid_index and
              gids (index, gid, type, roce_version, ipv4, link_local, netdev).
          type: list
          elements: dict
        netdevs:
          description: HCA port to netdev records (hca, port, netdev, netdev_state, netdev_type,
            bus_id, port_state). netdev_state is the netdev's, not the RDMA port's.
          type: list
          elements: dict
        infiniband_hcas:
          description: HCAs with an InfiniBand port.
          type: list
          elements: str
        roce_hcas:
          description: HCAs with an Ethernet (RoCE) port.
          type: list
          elements: str
        active_hcas:
          description: HCAs with at least one ACTIVE port.
          type: list
          elements: str
        nccl_ib_gid_index:
          description: RoCE v2 IPv4 GID index shared by every ACTIVE RoCE port, else null.
          type: int
        problems:
          description: One sentence per finding (port not ACTIVE, all-zero node GUID, RoCE port
            without IPv4 GID, ports disagreeing on the GID index, ibv_devinfo failure).
          type: list
          elements: str
        sources:
          description: Where the data came from (netdevs ibdev2netdev/sysfs, devices
            ibv_devinfo or null, sysfs true/false).
          type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.cluster.plugins.module_utils.facts import parse_or_fail, run_tool
from ansible_collections.gpucluster.cluster.plugins.module_utils.rdma import (
    parse_ibdev2netdev,
    parse_ibv_devinfo,
    parse_sysfs_infiniband,
    rdma_inventory,
)

ARGUMENT_SPEC = {"ipv4_addresses": {"type": "list", "elements": "str", "default": []}}
SYSFS_ROOT = "/sys/class/infiniband"
_PORT_FILES = ("state", "phys_state", "link_layer", "rate")
_ZERO_GIDS = ("0000:0000:0000:0000:0000:0000:0000:0000", "::")


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:  # unused GID slots answer EINVAL on newer kernels
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def read_sysfs(root=SYSFS_ROOT):
    """Contents of the files parse_sysfs_infiniband reads, keyed by path relative to root."""
    files = {}

    def put(rel):
        value = _read(os.path.join(root, rel))
        if value is not None:
            files[rel] = value
        return value

    for hca in _listdir(root):
        for port in _listdir(os.path.join(root, hca, "ports")):
            base = f"{hca}/ports/{port}"
            for name in _PORT_FILES:
                put(f"{base}/{name}")
            for index in _listdir(os.path.join(root, base, "gids")):
                gid = put(f"{base}/gids/{index}")
                if gid is None or gid in _ZERO_GIDS:
                    continue
                put(f"{base}/gid_attrs/types/{index}")
                put(f"{base}/gid_attrs/ndevs/{index}")
        for netdev in _listdir(os.path.join(root, hca, "device", "net")):
            put(f"{hca}/device/net/{netdev}/dev_port")
            put(f"{hca}/device/net/{netdev}/operstate")
    return files


def _parse(module, what, func, *args):
    return parse_or_fail(module, f"rdma_facts: cannot read {what}", func, *args)


def collect(module, sysfs_root=None):
    """Run the probes and return the ``gpucluster_rdma`` dict (``sysfs_root``: for tests)."""
    sysfs_root = sysfs_root or SYSFS_ROOT
    has_sysfs = os.path.isdir(sysfs_root)
    sysfs = _parse(module, sysfs_root, parse_sysfs_infiniband,
                   read_sysfs(sysfs_root) if has_sysfs else {})
    notes = []

    devices = None
    ibv_devinfo = module.get_bin_path("ibv_devinfo")
    if ibv_devinfo:
        rc, out, err = run_tool(module, [ibv_devinfo, "-v"])
        if "No IB devices found" in out + err:
            devices = []
        elif rc == 0:
            devices = _parse(module, "ibv_devinfo -v", parse_ibv_devinfo, out)
        else:
            notes.append(f"ibv_devinfo -v exited {rc}: {(err or out).strip()[:200]}")

    netdevs = None
    source = "sysfs" if has_sysfs else None
    ibdev2netdev = module.get_bin_path("ibdev2netdev")
    if ibdev2netdev:
        rc, out, err = run_tool(module, [ibdev2netdev])
        if rc == 0:
            netdevs = _parse(module, "ibdev2netdev", parse_ibdev2netdev, out)
            source = "ibdev2netdev"
        else:
            notes.append(f"ibdev2netdev exited {rc}: {(err or out).strip()[:200]}")

    ipv4 = module.params["ipv4_addresses"] or None
    facts = _parse(module, "the RDMA inventory", rdma_inventory, devices, sysfs, netdevs, ipv4)
    facts["problems"].extend(notes)
    facts["sources"] = {"netdevs": source, "devices": "ibv_devinfo" if devices else None,
                        "sysfs": has_sysfs}
    return facts


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    facts = collect(module)
    module.exit_json(changed=False, ansible_facts={"gpucluster_rdma": facts})


if __name__ == "__main__":
    main()
