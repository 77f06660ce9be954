"""NVIDIA GPUs on the PCI bus: ``lspci -nn`` / ``lspci -Dnn``, ``/sys/bus/pci/devices`` and PCI bus ids.

Part of the GPU component (``gpu_pci``: lspci; ``gpu_smi``: nvidia-smi queries; ``gpu_topology``:
``nvidia-smi topo``; ``gpu_driver``: driver state; ``gpu_kernel``: kernel log; ``gpu_fabric``:
Fabric Manager). Pure functions over the tools' text output, stdlib only, for Python 3.8+ on the
managed node (``gpu_facts``) and for pytest on the controller. Nothing here runs a command.

Every parser raises :class:`ParseError` (a ``ValueError``) that says what it expected and on
which line when the input is malformed or truncated; none returns a half-read value.

Sources:

- PCI class codes (PCI-SIG "PCI Code and ID Assignment Specification"): 0300 VGA compatible
  controller, 0302 3D controller, 0680 other bridge (NVSwitch); NVIDIA's vendor id is 10de.
- pciutils ``lspci(8)``: ``-n``/``-nn`` print ``[cccc]`` class and ``[vvvv:dddd]`` ids, ``-D``
  the domain.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    shorten,
    split_lines,
)

NVIDIA_VENDOR_ID = "10de"
# PCI class 03 (display controller): 00 = VGA compatible, 02 = 3D controller. NVIDIA's other
# functions on the same card (audio 0403, USB 0c03, UCSI 0c80) and NVSwitch bridges (0680) are
# not GPUs.
GPU_PCI_CLASSES = ("0300", "0302")
# NVSwitch (NVLink switch chips on HGX/DGX baseboards) show up as NVIDIA "Bridge [0680]".
NVSWITCH_PCI_CLASS = "0680"



_BUS_ID_RE = re.compile(
    r"^\s*(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*$")


def normalize_bus_id(bus_id):
    """PCI address in sysfs form ``dddd:bb:dd.f``, lower case.

    Accepts nvidia-smi's 8-digit domain (``00000000:17:00.0``), lspci's ``0000:17:00.0`` and
    the domain-less ``17:00.0`` (domain 0). Raises ParseError for anything else.
    """
    m = _BUS_ID_RE.match(str(bus_id))
    if not m:
        raise ParseError(f"PCI bus id: expected [domain:]bus:device.function such as "
                         f"0000:17:00.0, got {bus_id!r}")
    domain = int(m.group(1) or "0", 16)
    if domain > 0xFFFF:
        raise ParseError(f"PCI bus id {bus_id!r}: domain {domain:#x} does not fit 16 bits")
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


# --------------------------------------------------------------------------------------------
# lspci -nn
# --------------------------------------------------------------------------------------------

_LSPCI_RE = re.compile(
    r"^(?P<slot>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<class_name>[^\[]*?)\s*\[(?P<class>[0-9a-fA-F]{4})\]:\s+"
    r"(?P<desc>.*)\s\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]"
    r"(?:\s+\(rev\s+(?P<rev>[0-9a-fA-F]{2})\))?"
    r"(?:\s+\(prog-if\s+[^)]*\))?\s*$"
)


def _lspci_records(text):
    """Every device line of ``lspci -nn`` as a match of _LSPCI_RE; blank lines and ``pcilib:``
    warnings skipped, any other line that does not fit raises ParseError (one grammar for
    parse_lspci_nn and parse_lspci_nvswitches)."""
    for lineno, line in enumerate(split_lines(text, "lspci -nn"), 1):
        if not line.strip() or line.lstrip().startswith("pcilib:"):
            continue
        m = _LSPCI_RE.match(line.strip())
        if not m:
            raise ParseError(f"lspci -nn line {lineno}: expected '<slot> <class> [cccc]: <name> "
                             f"[vvvv:dddd]' (run lspci with -nn), got {shorten(line)!r}")
        yield m


def parse_lspci_nn(text):
    """NVIDIA GPUs in ``lspci -nn`` (or ``lspci -Dnn``) output.

    Returns a list, in bus order, of::

        {"bus_id": "0000:17:00.0",      # normalised, see normalize_bus_id
         "vendor_id": "10de", "device_id": "20b2", "pci_id": "10de:20b2",
         "class_id": "0302",            # 0300 VGA or 0302 3D controller
         "name": "GA100 [A100 SXM4 80GB]",   # lspci's device name, vendor prefix removed
         "rev": "a1" or None}

    Only vendor 10de with class 0300/0302 counts: the audio/USB functions of a consumer card
    and NVSwitch bridges (class 0680) are not GPUs. Blank lines and ``pcilib:`` warnings are
    skipped; any other line that is not ``<slot> <class> [cccc]: <name> [vvvv:dddd]`` raises
    ParseError (a truncated line loses its ``[vvvv:dddd]`` and is caught).
    """
    gpus = []
    for m in _lspci_records(text):
        vendor = m.group("vendor").lower()
        klass = m.group("class").lower()
        if vendor != NVIDIA_VENDOR_ID or klass not in GPU_PCI_CLASSES:
            continue
        name = re.sub(r"^NVIDIA Corporation\s+", "", m.group("desc").strip())
        device = m.group("device").lower()
        gpus.append({
            "bus_id": normalize_bus_id(m.group("slot")),
            "vendor_id": vendor,
            "device_id": device,
            "pci_id": f"{vendor}:{device}",
            "class_id": klass,
            "name": name,
            "rev": m.group("rev").lower() if m.group("rev") else None,
        })
    gpus.sort(key=lambda g: g["bus_id"])
    return gpus



def parse_lspci_nvswitches(text):
    """NVSwitch bridges in ``lspci -nn`` output: NVIDIA (10de) devices of class 0680.

    Returns ``[{"bus_id": "0000:c1:00.0", "pci_id": "10de:1af1", "name": "Device"}, ...]`` in
    bus order; ``[]`` on a node without NVSwitch (PCIe GPUs, NVLink bridges). Same line grammar
    and errors as :func:`parse_lspci_nn`. Fabric Manager applies only when this is not empty
    (see ``gpu_fabric.fabricmanager_state``).
    """
    out = []
    for m in _lspci_records(text):
        if (m.group("vendor").lower() != NVIDIA_VENDOR_ID
                or m.group("class").lower() != NVSWITCH_PCI_CLASS):
            continue
        out.append({"bus_id": normalize_bus_id(m.group("slot")),
                    "pci_id": f"{m.group('vendor').lower()}:{m.group('device').lower()}",
                    "name": re.sub(r"^NVIDIA Corporation\s+", "", m.group("desc").strip())})
    out.sort(key=lambda s: s["bus_id"])
    return out


# --------------------------------------------------------------------------------------------
# /sys/bus/pci/devices (the kernel's own list; lspci reads the same, plus pci.ids for names)
# --------------------------------------------------------------------------------------------

SYSFS_PCI_DEVICES = "/sys/bus/pci/devices"
_SYSFS_HEX_RE = re.compile(r"^0x([0-9a-fA-F]+)$")


def _sysfs_hex(slot, name, text, digits):
    m = _SYSFS_HEX_RE.match(str(text or "").strip())
    if not m or len(m.group(1)) != digits:
        raise ParseError(f"{SYSFS_PCI_DEVICES}/{slot}/{name}: expected 0x and {digits} hex digits "
                         f"(as the kernel writes it), got {shorten(str(text))!r}")
    return m.group(1).lower()


def parse_sysfs_pci(devices):
    """NVIDIA GPUs and NVSwitch bridges from ``/sys/bus/pci/devices``: ``(gpus, nvswitches)`` in
    the records of :func:`parse_lspci_nn` and :func:`parse_lspci_nvswitches`, in bus order, with
    ``name`` None (the names are lspci's, from pci.ids).

    ``devices`` maps each directory name (the bus id, ``0000:17:00.0``) to the text of its
    ``vendor`` (``0x10de``), ``device`` (``0x20b2``), ``class`` (``0x030200``: class, subclass,
    programming interface) and ``revision`` (``0xa1``) files; a missing ``revision`` is None.
    Raises ParseError for a value the kernel would not write.
    """
    gpus, switches = [], []
    for slot in sorted(devices):
        files = devices[slot]
        vendor = _sysfs_hex(slot, "vendor", files.get("vendor"), 4)
        if vendor != NVIDIA_VENDOR_ID:
            continue
        klass = _sysfs_hex(slot, "class", files.get("class"), 6)[:4]
        device = _sysfs_hex(slot, "device", files.get("device"), 4)
        bus_id = normalize_bus_id(slot)
        if klass in GPU_PCI_CLASSES:
            rev = files.get("revision")
            gpus.append({"bus_id": bus_id, "vendor_id": vendor, "device_id": device,
                         "pci_id": f"{vendor}:{device}", "class_id": klass, "name": None,
                         "rev": _sysfs_hex(slot, "revision", rev, 2) if rev is not None else None})
        elif klass == NVSWITCH_PCI_CLASS:
            switches.append({"bus_id": bus_id, "pci_id": f"{vendor}:{device}", "name": None})
    gpus.sort(key=lambda g: g["bus_id"])
    switches.sort(key=lambda s: s["bus_id"])
    return gpus, switches
