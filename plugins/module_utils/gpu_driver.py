"""NVIDIA driver state: one model of the driver of a node (absent / installed-not-loaded / ready).

Part of the GPU component (see ``gpu_pci``). Pure functions, stdlib only, Python 3.8+.

Sources:

- NVML return codes behind the nvidia-smi messages classified by :func:`driver_state`
  (NVML API reference, ``nvmlReturn_t``): ``NVML_ERROR_DRIVER_NOT_LOADED`` ("couldn't
  communicate with the NVIDIA driver"), ``NVML_ERROR_LIB_RM_VERSION_MISMATCH`` ("Driver/library
  version mismatch", fixture C09), and "No devices were found" with ``RmInitAdapter failed`` in
  the kernel log (fixture C14, NVIDIA/open-gpu-kernel-modules #862); the kernel log is read by
  ``gpu_kernel.parse_kernel_log``.
- nvidia-smi exit codes (nvidia-smi(1), RETURN VALUE): 0 success, 2 invalid argument, 3 not
  supported, 4 no permission, 6 not found, 8 external power cables not attached, 9 driver not
  loaded, 10 kernel interrupt issue, 12 NVML shared library not found, 13 function not found,
  14 infoROM corrupted, 15 GPU fallen off the bus, 255 other error. Exit code 14 still prints
  the reading, with ``WARNING: infoROM is corrupted at gpu <bus id>`` (NVIDIA GPU Operator
  troubleshooting, "infoROM is corrupted (nvidia-smi return code 14)": replace the GPU).
- ``/proc/driver/nvidia/version`` as printed by the proprietary and the open kernel modules;
  dpkg(1) / dpkg-query(1) output formats.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_kernel import parse_kernel_log
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import normalize_bus_id
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    shorten,
    split_lines,
)

_PROC_VERSION_RE = re.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")
_VERSION_RE = re.compile(r"^\d+\.\d+(?:\.\d+)?$")


def parse_proc_driver_version(text):
    """Kernel module version from ``/proc/driver/nvidia/version``.

    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  Thu Oct  6 ...`` and the open
    modules' ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release
    Build ...`` both give the version string (``"520.56.06"``); a bare version is returned as
    is. Raises ParseError when no ``NVRM version:`` line carries a version.
    """
    for line in split_lines(text, "/proc/driver/nvidia/version"):
        if _VERSION_RE.match(line.strip()):
            return line.strip()
        m = _PROC_VERSION_RE.search(line + " ")
        if m:
            return m.group(1)
    raise ParseError("/proc/driver/nvidia/version: expected a line 'NVRM version: NVIDIA UNIX "
                     "... Kernel Module  <version>  <date>', none found")


def upstream_version(version):
    """Debian package version -> driver version: ``1:525.85.12-1ubuntu1`` -> ``525.85.12``.

    Raises ParseError when the version does not start with a driver version.
    """
    v = str(version).strip()
    if ":" in v:
        v = v.split(":", 1)[1]
    m = re.match(r"^(\d+\.\d+(?:\.\d+)?)", v)
    if not m:
        raise ParseError(f"package version {version!r} does not start with a driver version "
                         f"such as 525.85.12")
    return m.group(1)


def parse_dpkg_versions(text):
    """Installed packages and versions from ``dpkg -l`` or ``dpkg-query -W`` output.

    Accepts the ``dpkg -l`` table (a row counts when its status column says installed, the
    second letter ``i``: ``ii``, ``hi``), ``dpkg-query -W -f
    '${db:Status-Abbrev}\\t${Package}\\t${Version}\\n'`` (same rule) and plain ``dpkg-query -W``
    (``name<TAB>version``; an empty version means not installed). Architecture qualifiers are
    dropped (``libnvidia-ml1:amd64`` -> ``libnvidia-ml1``). Returns ``{package: version}`` with
    the Debian version as printed (``"525.85.12-1"``). Raises ParseError for any other line.
    """
    out = {}
    for lineno, line in enumerate(split_lines(text, "dpkg"), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("Desired=", "|", "+++-", "dpkg-query: no packages")):
            continue
        parts = [p.strip() for p in line.split("\t")] if "\t" in line else stripped.split()
        if len(parts) >= 3 and re.match(r"^[a-z][a-zA-Z][A-Z]?$", parts[0]):
            if parts[0][1] == "i" and parts[2]:
                out[parts[1].split(":")[0]] = parts[2]
            continue
        if "\t" in line and len(parts) == 2:
            if parts[1]:
                out[parts[0].split(":")[0]] = parts[1]
            continue
        raise ParseError(f"dpkg line {lineno}: expected 'ii  <package>  <version> ...' (dpkg -l) "
                         f"or '<package><TAB><version>' (dpkg-query -W), got {shorten(line)!r}")
    return out


# dpkg packages that carry the user-space driver (libnvidia-ml / nvidia-smi), most specific first:
# Ubuntu nvidia-utils-<branch> / libnvidia-compute-<branch>, Debian nvidia-smi / libnvidia-ml1,
# NVIDIA CUDA repository nvidia-driver-<branch> / cuda-drivers.
_USERSPACE_PACKAGES = (r"nvidia-utils-\d+(?:-server)?", r"nvidia-smi", r"libnvidia-ml1",
                       r"libnvidia-compute-\d+(?:-server)?",
                       r"nvidia-driver-\d+(?:-server|-open)?", r"nvidia-driver", r"cuda-drivers")


def nvidia_userspace_version(packages):
    """User-space driver version (``"525.85.12"``) from :func:`parse_dpkg_versions`, or None.

    Looks at the packages that ship libnvidia-ml/nvidia-smi (Ubuntu ``nvidia-utils-<branch>``,
    Debian ``nvidia-smi``/``libnvidia-ml1``, ``libnvidia-compute-<branch>``, CUDA repository
    ``nvidia-driver-<branch>``/``cuda-drivers``), in that order.
    """
    for pattern in _USERSPACE_PACKAGES:
        for name in sorted(packages):
            if re.match(f"^{pattern}$", name):
                return upstream_version(packages[name])
    return None


_NVML_LIB_VERSION_RE = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")
_INFOROM_RE = re.compile(r"infoROM is corrupted at gpu (\S+)")
# nvidia-smi(1) RETURN VALUE; 255 ("other error") says nothing the message does not.
SMI_EXIT_CODES = {2: "invalid argument", 3: "not supported", 4: "no permission", 6: "not found",
                  8: "external power cables not attached", 9: "driver not loaded",
                  10: "interrupt issue with a GPU", 12: "NVML shared library not found",
                  13: "NVML function not found", 14: "infoROM corrupted",
                  15: "GPU has fallen off the bus"}
RC_INFOROM_CORRUPTED = 14

DRIVER_STATES = ("absent", "installed-not-loaded", "ready")


def _result(state, klass, reason, hint, versions, failed_bus_ids=(), pci_ids=()):
    out = {"state": state, "class": klass, "reason": reason, "hint": hint,
           "failed_bus_ids": list(failed_bus_ids), "pci_ids": list(pci_ids)}
    out.update(versions)
    return out


def _kernel_findings(log):
    """What the kernel log says about the GPUs that failed, by event kind: (text, fixes)."""
    failed = log["failed_bus_ids"] if log else []
    events = log["events"] if log else []
    named = set()
    parts = []
    init = sorted({e["bus_id"] for e in events if e["kind"] == "init_failed"})
    if init:
        parts.append(f"RmInitAdapter failed for {', '.join(init)}")
        named.update(init)
    fixes = []
    for event in events:
        if event["kind"] == "unsupported_gpu" and event["bus_id"] not in named:
            named.add(event["bus_id"])
            parts.append(f"{event['bus_id']} {event['reason']}")
            if event["fix"] not in fixes:
                fixes.append(event["fix"])
    lost = sorted({e["bus_id"] for e in events if e["kind"] == "gpu_lost"} - named)
    if lost:
        parts.append(f"{', '.join(lost)} fell off the bus")
        named.update(lost)
    rest = [b for b in failed if b not in named]
    if rest:  # only a cut message names them: say no more than that
        parts.append(f"{', '.join(rest)} named in an incomplete NVRM message")
    return "; ".join(parts), fixes


def _no_devices(versions, lspci_gpus, kernel_log, pci_source="lspci"):
    log = parse_kernel_log(kernel_log) if kernel_log else None
    failed = log["failed_bus_ids"] if log else []
    pci_ids = sorted({g["pci_id"] for g in log["gpus"].values() if g["pci_id"]}) if log else []
    findings, fixes = _kernel_findings(log)
    reason = "No devices were found"
    if findings:
        reason += f"; kernel log: {findings}"
    if pci_ids:
        reason += f" (PCI ID {', '.join(pci_ids)})"
    if lspci_gpus:
        reason += f"; {pci_source} still lists {len(lspci_gpus)} NVIDIA GPU(s)"
    elif lspci_gpus is not None:
        reason += f"; {pci_source} lists no NVIDIA GPU"
    if lspci_gpus is not None and not lspci_gpus:
        hint = (f"{pci_source} shows no NVIDIA GPU: reseat the card, check its power and the BIOS PCIe "
                "settings; the driver has no device to drive")
    elif fixes and "RmInitAdapter" not in findings:
        # The driver refused the GPU (gpu_kernel unsupported_gpu): the BIOS is not the cause.
        hint = "; ".join(fixes)
    else:
        hint = ("do not reinstall the driver: the GPU is on the bus but was not initialised; "
                "enable 'Above 4G Decoding' and 'Resizable BAR' in the BIOS and check that the "
                "installed driver supports this PCI device id")
        if fixes:
            hint = "; ".join(fixes) + "; " + hint
    return _result("installed-not-loaded", "NO_DEVICES_INITIALISED", reason, hint, versions,
                   failed, pci_ids)


def driver_state(nvidia_smi_rc, nvidia_smi_output, proc_driver_version=None, dpkg_version=None,
                 lspci_gpus=None, kernel_log=None, pci_source="lspci"):
    """Classify the NVIDIA driver of a node as ``absent``, ``installed-not-loaded`` or ``ready``.

    Inputs:

    - ``nvidia_smi_rc``: exit code of ``nvidia-smi`` (plain or ``--query-gpu``); ``None`` or
      127 when nvidia-smi is not installed;
    - ``nvidia_smi_output``: its stdout and stderr together;
    - ``proc_driver_version``: the text of ``/proc/driver/nvidia/version`` (or just the
      version), None when the file does not exist (kernel module not loaded);
    - ``dpkg_version``: installed user-space driver version (``525.85.12`` or the Debian
      ``525.85.12-1``, see :func:`nvidia_userspace_version`), None when no package;
    - ``lspci_gpus``: :func:`parse_lspci_nn` result (or :func:`parse_sysfs_pci`'s GPUs, with
      ``pci_source`` naming where they were read, as the reasons say it), None when neither
      was read;
    - ``kernel_log``: ``dmesg``/syslog text, read by ``gpu_kernel.parse_kernel_log`` for the
      bus ids and PCI ids of GPUs that failed to initialise; optional.

    Returns::

        {"state": "absent" | "installed-not-loaded" | "ready",
         "class": "READY" | "ABSENT" | "NOT_LOADED" | "DRIVER_LIBRARY_MISMATCH"
                  | "NO_DEVICES_INITIALISED" | "USERSPACE_MISSING" | "GPU_LOST"
                  | "INFOROM_CORRUPTED" | "NVML_ERROR",
         "reason": "one line: what nvidia-smi or the files say" or None,
         "hint": "what to do" or None,
         "kernel_version": "520.56.06" or None,     # loaded kernel module (/proc)
         "userspace_version": "525.85.12" or None,  # package, or NVML library in the message
         "failed_bus_ids": ["0000:01:00.0"],        # parse_kernel_log failed_bus_ids, or
                                                    # the GPUs with a corrupted infoROM
         "pci_ids": ["10de:2b85"]}

    Classes (NVML ``nvmlReturn_t`` behind the nvidia-smi messages):

    - ``DRIVER_LIBRARY_MISMATCH``: "Failed to initialize NVML: Driver/library version
      mismatch" (NVML_ERROR_LIB_RM_VERSION_MISMATCH): loaded kernel module and user-space
      library differ; bring both to one version, then reload the modules or reboot (a reboot
      alone does not help while the on-disk module is the old one; fixture C09);
    - ``NOT_LOADED``: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA
      driver" (NVML_ERROR_DRIVER_NOT_LOADED); with ``kernel_log`` naming GPUs the driver
      refused (``unsupported_gpu``), reason and hint name them and the fix;
    - ``NO_DEVICES_INITIALISED``: "No devices were found"; the kernel log's ``RmInitAdapter
      failed`` lines name the bus id and PCI id (fixture C14). Reinstalling the driver does not
      fix it: check the BIOS (Above 4G Decoding, Resizable BAR) and that the installed driver
      supports the PCI id. When the log says the driver refused the GPU (``unsupported_gpu``: the open module on a
      GPU without GSP, or a release that does not list the PCI id), reason and hint say so
      and name the fix (proprietary module / a driver branch that supports the GPU);
    - ``GPU_LOST``: "Unable to determine the device handle ... GPU is lost" (Xid 79 family);
      with ``kernel_log``, ``failed_bus_ids`` are the GPUs that fell off the bus (fixture N24);
    - ``INFOROM_CORRUPTED``: nvidia-smi exit code 14 / ``WARNING: infoROM is corrupted at gpu
      <bus id>``: the driver is loaded and NVML answers, so ``state`` stays ``ready`` (the
      GPUs can be read) unless NVML failed to initialise; ``failed_bus_ids`` are the GPUs the
      warning names; the fix is to replace the board (contact the vendor), not the driver;
    - ``NVML_ERROR``: any other nvidia-smi failure, reason = exit code (with its nvidia-smi(1)
      meaning) and the first line of output;
    - ``USERSPACE_MISSING``: kernel module loaded or package installed, nvidia-smi missing;
    - ``ABSENT``: no nvidia-smi, no kernel module, no package.

    Raises ParseError when ``proc_driver_version`` or ``dpkg_version`` is not readable.
    """
    output = nvidia_smi_output or ""
    first_line = next((ln.strip() for ln in output.splitlines() if ln.strip()), "")
    kernel_version = parse_proc_driver_version(proc_driver_version) if proc_driver_version else None
    userspace = upstream_version(dpkg_version) if dpkg_version else None
    m = _NVML_LIB_VERSION_RE.search(output)
    if m:
        userspace = m.group(1)
    versions = {"kernel_version": kernel_version, "userspace_version": userspace}

    if nvidia_smi_rc is None or nvidia_smi_rc == 127:
        if kernel_version or userspace:
            what = (f"kernel module {kernel_version} is loaded" if kernel_version
                    else f"package {userspace} is installed")
            return _result("installed-not-loaded", "USERSPACE_MISSING",
                           f"nvidia-smi is not installed although the driver {what}",
                           "install the user-space driver package of the same version "
                           "(nvidia-utils-<branch>) and check PATH", versions)
        reason = "nvidia-smi not found, /proc/driver/nvidia/version absent, no driver package"
        if lspci_gpus is not None:
            reason += f"; {pci_source} lists {len(lspci_gpus)} NVIDIA GPU(s)"
        if lspci_gpus:
            hint = "install the NVIDIA driver (role nvidia_driver)"
        elif lspci_gpus is None:
            hint = "run lspci -nn to see whether the node has an NVIDIA GPU at all"
        else:
            hint = None
        return _result("absent", "ABSENT", reason, hint, versions)

    if "Driver/library version mismatch" in output:
        return _result("installed-not-loaded", "DRIVER_LIBRARY_MISMATCH",
                       f"Driver/library version mismatch: kernel module "
                       f"{kernel_version or 'unknown'}, user-space library "
                       f"{userspace or 'unknown'}",
                       "bring the kernel module and the user-space driver to one version (fix "
                       "the broken apt/dkms state, e.g. apt update && apt install --fix-broken), "
                       "then reload the nvidia modules or reboot; a reboot alone is not enough "
                       "while the on-disk kernel module is the old one", versions)

    if ("couldn't communicate with the NVIDIA driver" in output
            or "Failed to initialize NVML: Driver Not Loaded" in output):
        extra = "" if userspace is None else f", user-space {userspace} installed"
        reason = (f"nvidia-smi couldn't communicate with the NVIDIA driver (kernel module "
                  f"not loaded{extra})")
        log = parse_kernel_log(kernel_log) if kernel_log else None
        findings, fixes = _kernel_findings(log)
        if fixes:
            # The module refused every GPU (nothing to drive), so it did not stay loaded.
            return _result("installed-not-loaded", "NOT_LOADED", f"{reason}; kernel log: {findings}",
                           "; ".join(fixes), versions, log["failed_bus_ids"],
                           sorted({g["pci_id"] for g in log["gpus"].values() if g["pci_id"]}))
        return _result("installed-not-loaded", "NOT_LOADED", reason,
                       "load the module (modprobe nvidia); if that fails, the DKMS build for "
                       "the running kernel or Secure Boot signing is the usual cause "
                       "(dkms status, dmesg | grep NVRM)", versions)

    if "No devices were found" in output:
        return _no_devices(versions, lspci_gpus, kernel_log, pci_source)

    if "GPU is lost" in output or "Unable to determine the device handle" in output:
        log = parse_kernel_log(kernel_log) if kernel_log else None
        lost = log["lost_bus_ids"] if log else []
        reason = first_line + (f"; kernel log: {', '.join(lost)} fell off the bus" if lost else "")
        pci_ids = sorted({log["gpus"][b]["pci_id"] for b in lost if log["gpus"][b]["pci_id"]})
        return _result("installed-not-loaded", "GPU_LOST", reason,
                       "a GPU fell off the bus (Xid 79): drain the node, check power, cooling "
                       "and seating, update the SBIOS, then reset the GPU or reboot; do not "
                       "reinstall the driver first", versions, lost, pci_ids)

    nvml_failed = "Failed to initialize NVML" in output or "NVIDIA-SMI has failed" in output
    corrupted = sorted({normalize_bus_id(b) for b in _INFOROM_RE.findall(output)})
    if nvidia_smi_rc == RC_INFOROM_CORRUPTED or corrupted:
        where = ", ".join(corrupted) or "a GPU the output does not name (see nvidia-smi -q)"
        return _result("installed-not-loaded" if nvml_failed else "ready", "INFOROM_CORRUPTED",
                       f"nvidia-smi exited {nvidia_smi_rc}: infoROM is corrupted at {where}",
                       "the board's infoROM (its on-board configuration / ECC store) is "
                       "corrupted: replace the board / contact the vendor (RMA) for "
                       f"{where}; reinstalling the driver does not help", versions, corrupted)

    if nvidia_smi_rc != 0 or nvml_failed:
        meaning = SMI_EXIT_CODES.get(nvidia_smi_rc)
        code = f"{nvidia_smi_rc} ({meaning})" if meaning else f"{nvidia_smi_rc}"
        return _result("installed-not-loaded", "NVML_ERROR",
                       f"nvidia-smi exited {code}: {first_line or '(no output)'}",
                       "run nvidia-smi on the node and read dmesg | grep NVRM", versions)

    return _result("ready", "READY", None, None, versions)


_KERNEL_REASONS = (("gpu_lost", "fell off the bus"),
                   ("init_failed", "failed to initialise (RmInitAdapter)"),
                   ("unsupported_gpu", None))  # the event's own reason: open module or release


def missing_gpus(pci_gpus, smi_gpus, kernel=None):
    """GPUs on the PCI bus that nvidia-smi does not list, and why, by bus id (fixture N24).

    ``pci_gpus``: ``gpu_pci.parse_lspci_nn`` result (what the node has); ``smi_gpus``:
    ``gpu_smi.gpus_from_query`` result, or the ``gpus`` of ``gpu_smi.parse_smi_q`` (what the
    driver sees); ``kernel``: ``gpu_kernel.parse_kernel_log`` result, optional. Returns, in bus
    order::

        [{"bus_id": "0000:b3:00.0", "pci_id": "10de:26b5",
          "reason": "fell off the bus" or "failed to initialise (RmInitAdapter)"
                    or "not supported by the installed driver"
                    or "not supported by the installed (open) driver" or None,  # None: log silent
          "action": "drain" or None}]                                      # gpu_kernel.ACTIONS

    ``[]`` when every PCI GPU is seen. A GPU record without a bus id raises ParseError (the
    join needs the stable id, never the display name).
    """
    seen = set()
    for gpu in smi_gpus or []:
        if not gpu.get("bus_id"):
            raise ParseError(f"nvidia-smi GPU without a PCI bus id: {gpu!r}; query pci.bus_id")
        seen.add(gpu["bus_id"])
    out = []
    for gpu in sorted(pci_gpus or [], key=lambda g: g["bus_id"]):
        if gpu["bus_id"] in seen:
            continue
        reason = action = None
        for kind, text in _KERNEL_REASONS:
            events = [e for e in (kernel or {}).get("events", [])
                      if e["kind"] == kind and e["bus_id"] == gpu["bus_id"]]
            if events:
                reason, action = text or events[0]["reason"], events[0]["action"]
                break
        if reason is None and kernel and gpu["bus_id"] in kernel.get("lost_bus_ids", []):
            reason, action = "fell off the bus", "drain"
        out.append({"bus_id": gpu["bus_id"], "pci_id": gpu["pci_id"], "reason": reason,
                    "action": action})
    return out
