"""Jinja filters of the gpudirect role: which peer-memory module, and do the pieces fit?

The rules about the modules themselves (which one for which driver, what their errors mean)
live in ``plugins/module_utils/peermem.py`` and are used as they are; this file
adds the node-level decision (:func:`plan`), unit-tested in
``tests/unit/roles/test_gpudirect_filters.py``.

GPUDirect RDMA needs all of (NVIDIA "GPUDirect RDMA" documentation, "Using nvidia-peermem";
peermem.py's sources):

- an NVIDIA GPU whose driver is loaded, and an RDMA device, on the same node;
- the peer-memory API (``ib_register_peer_memory_client``), which only MLNX_OFED's /
  DOCA-OFED's ib_core exports; nvidia-peermem built without it loads with EINVAL
  ("module compiled without IB peer memory symbols present", nvidia-peermem.c), so the
  driver's DKMS module must be built after OFED is installed;
- ``nvidia-peermem`` from the driver (>= 470), else ``nv_peer_mem`` 1.0-9 built with DKMS,
  never both.
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import peermem
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors

MODES = ("auto", "required", "disabled")
MODULE_CHOICES = ("auto", "nvidia-peermem", "nv_peer_mem")
_COMPILED_WITHOUT = "compiled without IB peer memory symbols"


def plan(mode, module_choice, driver, gpu_count, hcas, ofed_release, peer_api,
         nvidia_modinfo_ok, peermem_modinfo_ok, loaded=()):
    """What the gpudirect role does on one node.

    Inputs: ``mode`` (auto, required, disabled); ``module_choice`` (auto, nvidia-peermem,
    nv_peer_mem); ``driver``: gpu_facts' ``driver`` dict (state, version, userspace_version);
    ``gpu_count``: NVIDIA GPUs on the PCI bus; ``hcas``: rdma_facts' HCA names;
    ``ofed_release``: the installed MLNX_OFED release or None (inbox stack); ``peer_api``:
    True/False when ib_core is loaded (``grep -w ib_register_peer_memory_client
    /proc/kallsyms``), None when it is not; ``nvidia_modinfo_ok``/``peermem_modinfo_ok``:
    ``modinfo`` found the driver's module / nvidia-peermem for the running kernel;
    ``loaded``: peer-memory modules in lsmod.

    Returns ``{"action": "configure" | "refuse" | "skip" | "remove", "module", "modprobe",
    "source", "package", "package_version", "reason", "problems": [...], "notes": [...]}``:
    ``configure`` when nothing is missing, ``refuse`` with the ``problems`` (sentences with the
    fix) otherwise; ``skip`` when ``auto`` finds no GPU or no RDMA device (what would be
    missing besides goes to ``notes``); ``remove`` when disabled.
    """
    if mode not in MODES:
        raise ValueError(f"gpudirect_mode: {mode!r} is not one of {', '.join(MODES)}")
    if module_choice not in MODULE_CHOICES:
        raise ValueError(f"gpudirect_module: {module_choice!r} is not one of {', '.join(MODULE_CHOICES)}")
    result = {"action": "remove", "module": None, "modprobe": None, "source": None, "package": None,
              "package_version": None, "reason": "gpudirect_mode is disabled", "problems": [], "notes": []}
    if mode == "disabled":
        return result
    problems, notes = [], []

    version = (driver or {}).get("userspace_version") or (driver or {}).get("version")
    state = (driver or {}).get("state", "absent")
    if not version or state == "absent":
        problems.append("the NVIDIA driver is not installed (gpu_facts: driver absent). Fix: run the "
                        "nvidia_driver stage first")
    else:
        available = None if not nvidia_modinfo_ok else bool(peermem_modinfo_ok)
        pick = peermem.peer_memory_module(version, available)
        major = peermem.driver_major(version)
        if module_choice == "nvidia-peermem" and major < peermem.NVIDIA_PEERMEM_MIN_DRIVER:
            problems.append(f"gpudirect_module: nvidia-peermem comes with drivers >= "
                            f"{peermem.NVIDIA_PEERMEM_MIN_DRIVER}, this node has {version}. Fix: auto "
                            f"(nv_peer_mem {peermem.NV_PEER_MEM_VERSION}) or a newer driver")
        elif module_choice == "nv_peer_mem" and pick["module"] == "nvidia_peermem":
            problems.append(f"gpudirect_module: nv_peer_mem is for drivers older than "
                            f"{peermem.NVIDIA_PEERMEM_MIN_DRIVER}; driver {version} ships nvidia-peermem "
                            f"and the two must never be loaded together. Fix: auto")
        result.update({k: pick[k] for k in ("module", "modprobe", "source", "package", "package_version",
                                            "reason")})
        others = [m for m in loaded if m != pick["module"]]
        if others:
            problems.append(f"{', '.join(others)} is loaded; {pick['module']} must not run beside it. Fix: "
                            f"modprobe -r {' '.join(others)} and remove it from modules-load.d")
        if state != "ready" and gpu_count:
            problems.append(f"the NVIDIA driver {version} is not loaded ({driver.get('reason')}). Fix: "
                            f"the reboot point of playbooks/host_stack.yml (gpucluster_allow_reboot), "
                            f"or the nvidia_driver stage's message")

    if ofed_release is None and peer_api is not True:
        problems.append("the peer-memory API (ib_register_peer_memory_client) is only in MLNX_OFED's "
                        "or DOCA-OFED's ib_core, and this node runs the inbox RDMA stack (no ofed_info). Fix: "
                        "rdma_stack: ofed or doca, then rebuild the driver's DKMS module so that nvidia-peermem "
                        "is compiled against it")
    elif peer_api is False:
        problems.append(f"MLNX_OFED/DOCA-OFED {ofed_release} is installed but the loaded ib_core does not export "
                        f"ib_register_peer_memory_client (the inbox ib_core is still loaded, or OFED is "
                        f"broken). Fix: /etc/init.d/openibd restart or reboot; check "
                        f"`grep -w ib_register_peer_memory_client /proc/kallsyms`")

    hardware = []
    if not gpu_count:
        hardware.append("no NVIDIA GPU on the PCI bus")
    if not hcas:
        hardware.append("no RDMA device (rdma_facts)")
    if hardware and mode == "auto":
        result.update({"action": "skip", "problems": [],
                       "notes": notes + problems,
                       "reason": f"{' and '.join(hardware)}: GPUDirect RDMA has nothing to connect, "
                                 f"nothing configured"})
        return result
    if hardware:
        problems = [f"gpudirect_mode: required, but this node has {' and '.join(hardware)}. Fix: "
                    f"auto, or disabled for nodes without RDMA NICs"] + problems
    result.update({"action": "configure" if not problems else "refuse", "problems": problems,
                   "notes": notes})
    return result


def load_error(text):
    """peermem.classify_peermem_error, plus the DKMS-order case peermem.py does not name."""
    result = peermem.classify_peermem_error(text)
    if _COMPILED_WITHOUT in str(text):
        result = dict(result, **{
            "class": "BUILT_WITHOUT_PEER_MEMORY",
            "message": "nvidia-peermem was compiled without MLNX_OFED's peer-memory symbols (the driver's DKMS "
                       "module was built before OFED was installed): rebuild it (dkms remove/install of the "
                       "driver's module, or reinstall the driver package) now that OFED is there, then "
                       "modprobe nvidia-peermem again",
        })
    return result


class FilterModule:
    def filters(self):
        return {
            "gpudirect_plan": value_errors(plan),
            "gpudirect_load_error": value_errors(load_error),
            "gpudirect_loaded_modules": value_errors(peermem.loaded_peer_memory_modules),
            "gpudirect_ofed_release": value_errors(peermem.ofed_release),
        }
