#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module gpu_facts: NVIDIA GPUs, driver state and topology of a node, as facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: NVIDIA GPU inventory, driver state and PCIe/NVLink topology as facts
description:
  - Reads C(lspci -Dnn), C(nvidia-smi --query-gpu), C(nvidia-smi topo -m),
    C(/proc/driver/nvidia/version) and C(dpkg-query -W) on the node and returns what they say
    as the fact C(gpucluster_gpu).
  - Read-only; runs the same way in check mode.
  - A missing tool is a normal state, not an error. A node without GPU gets an empty list and
    driver state C(absent); a node whose driver is broken gets C(installed-not-loaded) with a
    class, a reason and a hint.
  - Output the parsers cannot read fails the module with the parser's message (what was
    expected, on which line), never a guessed value.
options:
  topology:
    description:
      - Read C(nvidia-smi topo -m) when the driver is ready, and map every GPU to its closest
        NIC.
    type: bool
    default: true
  kernel_log:
    description:
      - When nvidia-smi finds no device, a lost GPU, or fewer GPUs than lspci, read C(dmesg)
        for the NVRM lines
        (C(RmInitAdapter failed), fallen off the bus, Xid 79) that name the failing bus id and
        PCI id.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - gpucluster.cluster.node_facts
notes:
  - Parsers live in C(module_utils/gpu_pci.py), C(gpu_smi.py), C(gpu_topology.py),
    C(gpu_driver.py) and C(gpu_kernel.py); their docstrings give every rule and its source.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  gpucluster.cluster.gpu_facts:

- name: Fail early when the driver is installed but not usable
  ansible.builtin.assert:
    that: gpucluster_gpu.driver.state != 'installed-not-loaded'
    fail_msg: >-
      {{ inventory_hostname }}: NVIDIA driver {{ gpucluster_gpu.driver.class }}:
      {{ gpucluster_gpu.driver.reason }}. Fix: {{ gpucluster_gpu.driver.hint }}

- name: NIC for each local rank
  ansible.builtin.debug:
    msg: "GPU{{ item.gpu }} -> {{ item.nic }} ({{ item.link }})"
  loop: "{{ gpucluster_gpu.gpu_nic_map }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpucluster_gpu:
      description: GPU inventory of the node.
      type: dict
      contains:
        driver:
          description:
            - C(state) is C(absent), C(installed-not-loaded) or C(ready); C(class) is one of
              READY, ABSENT, NOT_LOADED, DRIVER_LIBRARY_MISMATCH, NO_DEVICES_INITIALISED,
              USERSPACE_MISSING, GPU_LOST, INFOROM_CORRUPTED (nvidia-smi exit code 14, state
              ready, the board to replace in C(failed_bus_ids)), NVML_ERROR; C(reason) and
              C(hint) are one line each (null for READY); C(version) is the running driver (nvidia-smi, else the kernel
              module); C(kernel_version) from /proc, C(userspace_version) from dpkg or NVML;
              C(failed_bus_ids) and C(pci_ids) from the kernel log.
          type: dict
          sample:
            state: installed-not-loaded
            class: DRIVER_LIBRARY_MISMATCH
            reason: "Driver/library version mismatch: kernel module 520.56.06, user-space library 525.85.12"
            hint: "bring the kernel module and the user-space driver to one version ..."
            version: "520.56.06"
            kernel_version: "520.56.06"
            userspace_version: "525.85.12"
            failed_bus_ids: []
            pci_ids: []
        pci_gpus:
          description:
            - NVIDIA GPUs on the PCI bus, whatever the driver state, from C(lspci -Dnn); where
              lspci is missing or fails, from C(/sys/bus/pci/devices) with C(name) null (see
              C(pci_source)).
          type: list
          elements: dict
          sample:
            - bus_id: "0000:17:00.0"
              vendor_id: "10de"
              device_id: "20b2"
              pci_id: "10de:20b2"
              class_id: "0302"
              name: "GA100 [A100 SXM4 80GB]"
              rev: "a1"
        gpus:
          description: GPUs nvidia-smi reports (empty unless the driver is ready); memory in MiB.
          type: list
          elements: dict
          sample:
            - index: 0
              name: "NVIDIA A100-SXM4-80GB"
              bus_id: "0000:17:00.0"
              uuid: "GPU-00000000-0000-0000-0000-000000000001"
              memory_total_mib: 81920
              persistence_mode: true
              driver_version: "525.105.17"
        gpu_count:
          description: Number of entries in C(gpus).
          type: int
        pci_gpu_count:
          description: Number of entries in C(pci_gpus) (0 when neither lspci nor /sys/bus/pci/devices was read).
          type: int
        nvswitches:
          description:
            - NVSwitch bridges on the PCI bus (NVIDIA class 0680; lspci, else /sys/bus/pci/devices
              with name null) as bus_id, pci_id, name; null when neither could be read. Fabric
              Manager applies only when this is not empty
              (C(gpu_fabric.fabricmanager_state)).
          type: list
          elements: dict
          sample:
            - bus_id: "0000:c1:00.0"
              pci_id: "10de:1af1"
              name: "Device"
        secure_boot:
          description:
            - UEFI Secure Boot, from the C(SecureBoot) EFI variable (EFI_GLOBAL_VARIABLE's GUID, as
              mokutil reads it; its value is the byte after 4 bytes of attributes) - true where it is
              on (only signed kernel modules load, so a DKMS-built driver needs its key enrolled),
              false where it is off or the variable is missing on a UEFI boot, null where the node
              did not boot by UEFI (no C(/sys/firmware/efi)). The module fails where the variable is
              there but cannot be read.
          type: bool
        pci_source:
          description:
            - Where C(pci_gpus) and C(nvswitches) were read, C(lspci) or C(/sys/bus/pci/devices);
              null when neither.
          type: str
          sample: lspci
        topology:
          description:
            - C(nvidia-smi topo -m) as read by C(parse_topo_matrix) (gpu_count, gpus with
              cpu_affinity/numa_node, nics with name/label, links, nvlink, nvswitch); null
              when not read.
          type: dict
        gpu_nic_map:
          description: Closest NIC per GPU (list of gpu, name, nic, link), empty without NICs.
          type: list
          elements: dict
        missing_gpus:
          description:
            - GPUs lspci lists that nvidia-smi does not (driver ready), by bus id, with the
              kernel log's reason (dmesg is read when one is missing and C(kernel_log) is on).
          type: list
          elements: dict
          sample:
            - bus_id: "0000:b3:00.0"
              pci_id: "10de:26b5"
              reason: "fell off the bus"
              action: "drain"
        tools:
          description: Which tools were found (lspci, nvidia_smi, dpkg_query, dmesg).
          type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.cluster.plugins.module_utils.facts import parse_or_fail, run_tool
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_driver import (
    driver_state,
    missing_gpus,
    nvidia_userspace_version,
    parse_dpkg_versions,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_kernel import parse_kernel_log
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import (
    SYSFS_PCI_DEVICES,
    parse_lspci_nn,
    parse_lspci_nvswitches,
    parse_sysfs_pci,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_smi import (
    GPU_QUERY_FIELDS,
    gpus_from_query,
    parse_query_gpu_csv,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_topology import (
    gpu_nic_map,
    parse_topo_matrix,
)

ARGUMENT_SPEC = {
    "topology": {"type": "bool", "default": True},
    "kernel_log": {"type": "bool", "default": True},
}
PROC_VERSION = "/proc/driver/nvidia/version"
# Packages that carry the user-space driver (see gpu_driver.nvidia_userspace_version).
DPKG_PATTERNS = ("nvidia-utils-*", "nvidia-smi", "libnvidia-ml1", "libnvidia-compute-*",
                 "nvidia-driver-*", "nvidia-driver", "cuda-drivers")


EFI_DIR = "/sys/firmware/efi"
SECURE_BOOT_VARIABLE = "efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def secure_boot(efi_dir=EFI_DIR):
    """True, False or None (no UEFI boot) from the SecureBoot EFI variable: 4 bytes of
    attributes, then the value (1: on). Raises OSError where it is there but cannot be read."""
    if not os.path.isdir(efi_dir):
        return None
    path = os.path.join(efi_dir, SECURE_BOOT_VARIABLE)
    if not os.path.exists(path):
        return False
    with open(path, "rb") as handle:
        data = handle.read(5)
    return len(data) == 5 and data[4] == 1


def read_file(path):
    """Text of ``path``, or None when it does not exist or cannot be read."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def list_dir(path):
    """Names in ``path``, or None when it cannot be listed."""
    try:
        return os.listdir(path)
    except OSError:
        return None


def sysfs_pci(read, listdir):
    """``{slot: {vendor, device, class, revision}}`` from /sys/bus/pci/devices (the texts of
    the files; an unreadable one is None), or None when the directory cannot be listed."""
    slots = listdir(SYSFS_PCI_DEVICES)
    if slots is None:
        return None
    out = {}
    for slot in slots:
        base = f"{SYSFS_PCI_DEVICES}/{slot}"
        vendor = read(f"{base}/vendor")
        if vendor is None:
            continue
        out[slot] = {"vendor": vendor, "device": read(f"{base}/device"), "class": read(f"{base}/class"),
                     "revision": read(f"{base}/revision")}
    return out


def _parse(module, what, func, *args):
    return parse_or_fail(module, f"gpu_facts: cannot read the output of {what}", func, *args)


def collect(module, read=None, listdir=None):
    """Run the probes and return the ``gpucluster_gpu`` dict (``read``: file reader,
    ``listdir``: directory lister, for tests)."""
    read = read or read_file
    listdir = listdir or list_dir
    tools = {name: module.get_bin_path(name) for name in ("lspci", "nvidia-smi", "dpkg-query",
                                                         "dmesg")}
    pci_gpus = None
    nvswitches = None
    pci_source = None
    if tools["lspci"]:
        rc, out, err = run_tool(module, [tools["lspci"], "-Dnn"])
        if rc == 0:
            pci_gpus = _parse(module, "lspci -Dnn", parse_lspci_nn, out)
            nvswitches = _parse(module, "lspci -Dnn", parse_lspci_nvswitches, out)
            pci_source = "lspci"
        else:
            module.warn(f"lspci -Dnn exited {rc}: {err.strip()}")
    # Without lspci (pciutils is not on every minimal install), the kernel's own list: the same
    # devices, without names. One reader of the PCI bus for every stage (the plan, the driver).
    if pci_gpus is None:
        devices = sysfs_pci(read, listdir)
        if devices is not None:
            pci_gpus, nvswitches = _parse(module, SYSFS_PCI_DEVICES, parse_sysfs_pci, devices)
            pci_source = SYSFS_PCI_DEVICES

    userspace = None
    if tools["dpkg-query"]:
        # rc 1 only says that some pattern matched nothing; the matches are still printed.
        _rc, out, _err = run_tool(module, [tools["dpkg-query"], "-W", "-f",
                                           "${db:Status-Abbrev}\t${Package}\t${Version}\n",
                                           *DPKG_PATTERNS])
        packages = _parse(module, "dpkg-query -W", parse_dpkg_versions, out)
        userspace = nvidia_userspace_version(packages)

    proc_text = read(PROC_VERSION)
    smi_rc, smi_out, smi_text = None, "", ""
    if tools["nvidia-smi"]:
        smi_rc, smi_out, err = run_tool(module, [tools["nvidia-smi"],
                                                 "--query-gpu=" + ",".join(GPU_QUERY_FIELDS),
                                                 "--format=csv,noheader,nounits"])
        smi_text = smi_out + err
    state = _parse(module, "nvidia-smi / driver version files", driver_state, smi_rc, smi_text,
                   proc_text, userspace, pci_gpus, None, pci_source)
    if (state["class"] in ("NO_DEVICES_INITIALISED", "GPU_LOST") and module.params["kernel_log"]
            and tools["dmesg"]):
        rc, log, _err = run_tool(module, [tools["dmesg"]])
        if rc == 0:
            state = driver_state(smi_rc, smi_text, proc_text, userspace, pci_gpus, log, pci_source)

    gpus = []
    topology = None
    nic_map = []
    if state["state"] == "ready":
        rows = _parse(module, "nvidia-smi --query-gpu", parse_query_gpu_csv, smi_out,
                      GPU_QUERY_FIELDS)
        gpus = _parse(module, "nvidia-smi --query-gpu", gpus_from_query, rows)
        if module.params["topology"] and gpus:
            rc, out, err = run_tool(module, [tools["nvidia-smi"], "topo", "-m"])
            if rc == 0:
                topology = _parse(module, "nvidia-smi topo -m", parse_topo_matrix, out)
                nic_map = _parse(module, "nvidia-smi topo -m", gpu_nic_map, topology)
            else:
                module.warn(f"nvidia-smi topo -m exited {rc}: {(out + err).strip()[:200]}")

    missing = missing_gpus(pci_gpus, gpus) if state["state"] == "ready" and pci_gpus else []
    if missing and module.params["kernel_log"] and tools["dmesg"]:
        rc, log, _err = run_tool(module, [tools["dmesg"]])
        if rc == 0:
            kernel = _parse(module, "dmesg", parse_kernel_log, log)
            missing = missing_gpus(pci_gpus, gpus, kernel)

    try:
        secure = secure_boot()
    except OSError as exc:
        module.fail_json(msg=f"gpu_facts: cannot read {EFI_DIR}/{SECURE_BOOT_VARIABLE} ({exc}): the driver stage "
                             "needs to know whether Secure Boot is on. Fix: check efivarfs is mounted readable "
                             "(mount -t efivarfs efivarfs /sys/firmware/efi/efivars) and rerun.")
    driver = dict(state)
    driver["version"] = (gpus[0]["driver_version"] if gpus and gpus[0]["driver_version"]
                         else state["kernel_version"])
    return {
        "driver": driver,
        "pci_gpus": pci_gpus or [],
        "gpus": gpus,
        "gpu_count": len(gpus),
        "pci_gpu_count": len(pci_gpus or []),
        "nvswitches": nvswitches,
        "pci_source": pci_source,
        "secure_boot": secure,
        "topology": topology,
        "gpu_nic_map": nic_map,
        "missing_gpus": missing,
        "tools": {k.replace("-", "_"): bool(v) for k, v in tools.items()},
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    facts = collect(module)
    module.exit_json(changed=False, ansible_facts={"gpucluster_gpu": facts})


if __name__ == "__main__":
    main()
