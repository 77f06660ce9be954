"""``nvidia-smi`` queries: ``--query-gpu`` CSV and the ``nvidia-smi -q`` report.

Part of the GPU component (see ``gpu_pci``). Pure functions, stdlib only, Python 3.8+.

Units: GPU memory is in MiB (1 MiB = 2**20 bytes) exactly as ``nvidia-smi`` reports it, power
in W, clocks in MHz, temperatures in degrees C, utilisation and fan speed in percent.

Sources:

- ``nvidia-smi --help-query-gpu`` and the nvidia-smi manual page (NVIDIA, section "GPU
  ATTRIBUTES"): field names, ``--format=csv,noheader,nounits``, the ``[N/A]`` /
  ``[Not Supported]`` sentinels (older drivers print ``[Not Supported]`` where newer ones print
  ``[N/A]``, fixture C11; some fields print a bare ``N/A``, fixture C13).
- ``nvidia-smi -q``: see :func:`parse_smi_q`.
"""

from __future__ import annotations

import csv
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import normalize_bus_id
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    shorten,
    split_lines,
)

# What gpu_facts asks nvidia-smi for (``--format=csv,noheader,nounits``); every field exists
# since long before driver 450, so the query works on old and new drivers alike.
GPU_QUERY_FIELDS = ("index", "name", "pci.bus_id", "uuid", "memory.total", "persistence_mode",
                    "driver_version")

# Fields that hold text even when it looks like a number (driver_version 440.64, serial digits).
_STRING_FIELDS = frozenset((
    "name", "gpu_name", "driver_version", "vbios_version", "uuid", "gpu_uuid", "serial",
    "gpu_serial", "pci.bus_id", "gpu_bus_id", "pstate", "compute_mode", "compute_cap",
    "display_mode", "display_active", "accounting.mode", "mig.mode.current", "mig.mode.pending",
    "persistence_mode", "power.management", "ecc.mode.current", "ecc.mode.pending",
    "gom.current", "gom.pending", "board_id", "timestamp",
))
_STRING_PREFIXES = ("pci.", "inforom.", "clocks_throttle_reasons.", "clocks_event_reasons.")
# Fields that must read as a number (or a sentinel); a word here means the columns shifted.
_NUMERIC_FIELDS = frozenset((
    "index", "count", "fan.speed", "power.draw", "power.draw.average", "power.draw.instant",
    "power.limit", "enforced.power.limit", "power.default_limit", "power.min_limit",
    "power.max_limit", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.gen.gpucurrent",
    "pcie.link.gen.gpumax", "pcie.link.gen.hostmax", "pcie.link.width.current",
    "pcie.link.width.max", "minor_number", "module_id",
))
_NUMERIC_PREFIXES = ("memory.", "temperature.", "utilization.", "clocks.", "ecc.errors.",
                     "encoder.stats.")
# Units nvidia-smi appends without ``nounits`` (nvidia-smi manual, --format).
_UNITS = ("MiB", "%", "W", "MHz")
_NUMBER_RE = re.compile(r"^(-?\d+(?:\.\d+)?)(?:\s*(?:MiB|%|W|MHz))?$")
_HEADER_CELL_RE = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*(?:\s*\[[^\]]*\])?$")

# Texts nvidia-smi prints instead of CSV when it cannot talk to the driver (see driver_state).
_SMI_ERROR_MARKERS = (
    "Failed to initialize NVML", "couldn't communicate with the NVIDIA driver",
    "No devices were found", "NVIDIA-SMI has failed", "Unable to determine the device handle",
    "is not a valid field to query", "Driver/library version mismatch",
)


# nvidia-smi exit code 14 prints the reading plus this line (NVIDIA GPU Operator troubleshooting,
# "infoROM is corrupted"); gpu_driver.driver_state reports it (class INFOROM_CORRUPTED).
_INFOROM_WARNING_RE = re.compile(r"^WARNING: infoROM is corrupted at gpu \S+$")


def _is_sentinel(value):
    return value == "N/A" or (value.startswith("[") and value.endswith("]"))


def _field_kind(field):
    if field in _STRING_FIELDS or field.startswith(_STRING_PREFIXES):
        return "string"
    if field in _NUMERIC_FIELDS or field.startswith(_NUMERIC_PREFIXES):
        return "number"
    return "auto"


def _convert_cell(field, value, lineno):
    value = value.strip()
    if _is_sentinel(value):
        return None
    kind = _field_kind(field)
    if value in ("Enabled", "Disabled") and kind != "number":
        return value == "Enabled"
    if kind == "string":
        return value
    m = _NUMBER_RE.match(value)
    if m:
        number = m.group(1)
        return float(number) if "." in number else int(number)
    if kind == "number":
        raise ParseError(f"nvidia-smi --query-gpu line {lineno}: field {field!r} should be a "
                         f"number (units {'/'.join(_UNITS)} allowed) or [N/A], got {value!r}; "
                         f"are the fields shifted?")
    return value


def _query_fields(fields):
    if isinstance(fields, str):
        fields = fields.split(",")
    fields = [f.strip() for f in fields if f and f.strip()]
    if not fields:
        raise ParseError("nvidia-smi --query-gpu: no field names given")
    return fields


def parse_query_gpu_csv(text, fields):
    """Rows of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader[,nounits]``.

    ``fields`` is the list (or the comma string) given to ``--query-gpu``, in order. Returns a
    list with one dict per GPU (output line), keyed by those field names::

        [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "pci.bus_id": "00000000:17:00.0",
          "memory.total": 81920, "persistence_mode": True, "driver_version": "525.105.17"}]

    Reading rules (nvidia-smi manual; fixtures C11, C13):

    - cells are split as CSV with ``skipinitialspace`` (``", "`` separators), never on
      whitespace, so ``GeForce RTX 2080`` stays one value; each line must have exactly
      ``len(fields)`` cells, else ParseError;
    - ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``, any other ``[...]`` and bare ``N/A``
      become ``None``;
    - without ``nounits`` the units ``MiB``, ``%``, ``W``, ``MHz`` are stripped (``52 %`` ->
      ``52``), so values have the same units either way (memory MiB, power W, clocks MHz);
    - numbers become int (``7979``) or float (``176.98``); text fields (name, uuid,
      driver_version, vbios_version, pci.*, pstate ...) stay strings even when they look
      numeric (driver ``440.64``); ``Enabled``/``Disabled`` become True/False;
    - a field known to be numeric (memory.*, power.*, clocks.* ...) holding a word raises
      ParseError (shifted columns);
    - a header line (``--format=csv`` without ``noheader``) is recognised and skipped, and so
      is ``WARNING: infoROM is corrupted at gpu <bus id>`` (exit code 14; classified by
      :func:`gpu_driver.driver_state`);
    - the text nvidia-smi prints instead of CSV ("Failed to initialize NVML: Driver/library
      version mismatch", "No devices were found", ...) raises ParseError naming it; classify
      such output with :func:`driver_state`.

    Empty output gives ``[]``.
    """
    fields = _query_fields(fields)
    lines = split_lines(text, "nvidia-smi --query-gpu")
    for lineno, line in enumerate(lines, 1):
        for marker in _SMI_ERROR_MARKERS:
            if marker in line:
                raise ParseError(f"nvidia-smi --query-gpu line {lineno}: nvidia-smi printed an "
                                 f"error instead of CSV: {line.strip()!r} (classify it with "
                                 f"driver_state())")
    rows = []
    first = True
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or _INFOROM_WARNING_RE.match(line.strip()):
            continue
        cells = [c.strip() for c in next(csv.reader([line], skipinitialspace=True))]
        if first and all(_HEADER_CELL_RE.match(c) for c in cells):
            first = False
            if len(cells) != len(fields):
                raise ParseError(f"nvidia-smi --query-gpu line {lineno}: header has {len(cells)} "
                                 f"columns, {len(fields)} fields were queried "
                                 f"({', '.join(fields)})")
            continue
        first = False
        if len(cells) != len(fields):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: expected {len(fields)} "
                             f"comma-separated values ({', '.join(fields)}), got {len(cells)}: "
                             f"{shorten(line)!r} (truncated line or wrong field list?)")
        rows.append({field: _convert_cell(field, cells[i], lineno)
                     for i, field in enumerate(fields)})
    return rows


def gpus_from_query(rows):
    """GPU records for facts from :func:`parse_query_gpu_csv` rows of GPU_QUERY_FIELDS.

    Returns, sorted by index::

        [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "bus_id": "0000:17:00.0",
          "uuid": "GPU-...", "memory_total_mib": 81920, "persistence_mode": True,
          "driver_version": "525.105.17"}]

    ``bus_id`` is normalised to the lspci/sysfs form so it can be joined with
    :func:`parse_lspci_nn`. Fields that were not queried are None. A row without an integer
    index raises ParseError.
    """
    out = []
    for row in rows:
        index = row.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ParseError(f"nvidia-smi --query-gpu: GPU row without an integer index: {row!r}")
        bus = row.get("pci.bus_id")
        out.append({
            "index": index,
            "name": row.get("name", row.get("gpu_name")),
            "bus_id": normalize_bus_id(bus) if bus is not None else None,
            "uuid": row.get("uuid", row.get("gpu_uuid")),
            "memory_total_mib": row.get("memory.total"),
            "persistence_mode": row.get("persistence_mode"),
            "driver_version": row.get("driver_version"),
        })
    out.sort(key=lambda g: g["index"])
    return out



# --------------------------------------------------------------------------------------------
# nvidia-smi -q
# --------------------------------------------------------------------------------------------

# Section headers of ``nvidia-smi -q`` -> the sections they sit in ("GPU" is the GPU block).
# Drivers R390 to R580; a header not listed here is an unknown section, read as opaque.
_Q_HEADERS = {
    "MIG Mode": ("GPU",), "MIG Devices": ("GPU",), "Driver Model": ("GPU",),
    "Inforom Version": ("GPU",), "Inforom BBX Object Flush": ("GPU",),
    "GPU Operation Mode": ("GPU",), "GPU C2C Mode": ("GPU",), "GPU Virtualization Mode": ("GPU",),
    "GPU Reset Status": ("GPU",), "GPU Recovery Action": ("GPU",), "IBMNPU": ("GPU",),
    "PCI": ("GPU",), "GPU Link Info": ("PCI",), "PCIe Generation": ("GPU Link Info",),
    "Link Width": ("GPU Link Info",), "Bridge Chip": ("PCI",),
    "Clocks Throttle Reasons": ("GPU",), "Clocks Event Reasons": ("GPU",),
    "Clocks Event Reasons Counters": ("GPU",), "FB Memory Usage": ("GPU",),
    "BAR1 Memory Usage": ("GPU",), "Conf Compute Protected Memory Usage": ("GPU",),
    "Utilization": ("GPU",), "Encoder Stats": ("GPU",), "FBC Stats": ("GPU",),
    "DRAM Encryption Mode": ("GPU",), "ECC Mode": ("GPU",), "ECC Errors": ("GPU",),
    "Volatile": ("ECC Errors",), "Aggregate": ("ECC Errors",),
    "Single Bit": ("Volatile", "Aggregate"), "Double Bit": ("Volatile", "Aggregate"),
    "Aggregate Uncorrectable SRAM Sources": ("ECC Errors",), "Retired Pages": ("GPU",),
    "Remapped Rows": ("GPU",), "Bank Remap Availability Histogram": ("Remapped Rows",),
    "Temperature": ("GPU",), "Power Readings": ("GPU",), "GPU Power Readings": ("GPU",),
    "Module Power Readings": ("GPU",), "Power Smoothing": ("GPU",),
    "Workload Power Profiles": ("GPU",), "Clocks": ("GPU",), "Applications Clocks": ("GPU",),
    "Default Applications Clocks": ("GPU",), "Deferred Clocks": ("GPU",), "Max Clocks": ("GPU",),
    "Max Customer Boost Clocks": ("GPU",), "Clock Policy": ("GPU",), "Supported Clocks": ("GPU",),
    "Voltage": ("GPU",), "Fabric": ("GPU",), "Processes": ("GPU",), "Capabilities": ("GPU",),
    "Accounted Processes": ("GPU",),
    # vGPU (NVIDIA Virtual GPU Software, nvidia-smi -q of a guest or a host): read opaque,
    # except that the licence section repeats "Product Name" (the licence's, not the GPU's).
    "vGPU Software Licensed Product": ("GPU",), "vGPU Device Capability": ("GPU",),
}
_THROTTLE_KEYS = ("Idle", "Applications Clocks Setting", "SW Power Cap", "HW Slowdown",
                  "HW Thermal Slowdown", "HW Power Brake Slowdown", "Sync Boost",
                  "SW Thermal Slowdown", "Display Clock Setting", "Unknown")
_OLD_ECC_KEYS = ("Device Memory", "Register File", "L1 Cache", "L2 Cache", "Texture Memory",
                 "Texture Shared", "CBU", "SRAM", "DRAM", "Total")
_NEW_ECC_KEYS = ("SRAM Correctable", "SRAM Uncorrectable", "SRAM Uncorrectable Parity",
                 "SRAM Uncorrectable SEC-DED", "DRAM Correctable", "DRAM Uncorrectable",
                 "SRAM Threshold Exceeded")
# Sections this reader reads -> the keys it knows there (all versions).
_Q_KEYS = {
    "vGPU Software Licensed Product": ("Product Name", "License Status"),
    "GPU": ("Product Name", "GPU UUID", "Persistence Mode", "Minor Number", "Performance State",
            "Remapped Rows", "Processes", "ECC Errors", "Retired Pages"),
    "PCI": ("Bus", "Device", "Domain", "Base Classcode", "Sub Classcode", "Device Id", "Bus Id",
            "Sub System Id", "Replays Since Reset", "Replay Number Rollovers", "Tx Throughput",
            "Rx Throughput", "Atomic Caps Inbound", "Atomic Caps Outbound"),
    "PCIe Generation": ("Max", "Current", "Device Current", "Device Max", "Host Max"),
    "Link Width": ("Max", "Current"),
    "ECC Mode": ("Current", "Pending"),
    "Volatile": _NEW_ECC_KEYS, "Aggregate": _NEW_ECC_KEYS,
    "Single Bit": _OLD_ECC_KEYS, "Double Bit": _OLD_ECC_KEYS,
    "Retired Pages": ("Single Bit ECC", "Double Bit ECC", "Pending Page Blacklist", "Pending",
                      "Pending Page Retirement"),
    "Remapped Rows": ("Correctable Error", "Uncorrectable Error", "Pending",
                      "Remapping Failure Occurred"),
    "Temperature": ("GPU Current Temp", "GPU T.Limit Temp", "GPU Shutdown T.Limit Temp",
                    "GPU Slowdown T.Limit Temp", "GPU Max Operating T.Limit Temp",
                    "GPU Shutdown Temp", "GPU Slowdown Temp", "GPU Max Operating Temp",
                    "GPU Target Temperature", "Memory Current Temp", "Memory Max Operating Temp",
                    "Memory Max Operating T.Limit Temp"),
    "Clocks Throttle Reasons": _THROTTLE_KEYS, "Clocks Event Reasons": _THROTTLE_KEYS,
    "GPU Reset Status": ("Reset Required", "Drain and Reset Recommended"),
}
# Sections whose whole key set is known: an unknown key there means a displaced line.
_Q_FLAGGED = frozenset(("PCIe Generation", "Link Width", "ECC Mode", "Volatile", "Aggregate",
                        "Single Bit", "Double Bit", "Retired Pages", "Remapped Rows",
                        "Clocks Throttle Reasons", "Clocks Event Reasons", "GPU Reset Status"))
# Keys of the GPU block itself (R390-R580), so that after a section a GPU-level key is not
# taken for a displaced line when the indentation is lost.
_Q_ROOT_KNOWN = frozenset((
    "Product Name", "Product Brand", "Product Architecture", "Display Mode", "Display Active",
    "Display Attached", "Persistence Mode", "Addressing Mode", "Accounting Mode",
    "Accounting Mode Buffer Size", "Serial Number", "GPU UUID", "GPU PDI", "Minor Number",
    "VBIOS Version", "MultiGPU Board", "Board ID", "Board Part Number", "GPU Part Number",
    "FRU Part Number", "Platform Info", "Module ID", "Module Id", "GSP Firmware Version",
    "Fan Speed", "Performance State", "Sparse Operation Mode", "Compute Mode", "Remapped Rows",
    "Processes", "ECC Errors", "Retired Pages", "GPU C2C Mode", "GPU Fabric GUID",
    "Chassis Serial Number", "Slot Number", "Tray Index", "Host ID", "Peer Type",
    "Conf Compute Protected Memory Usage", "Power Readings", "GPU Recovery Action",
))
# Keys a started section must have, else the GPU reads incomplete (cut or shuffled paste).
# Keys that every version prints in a started section; ``_Q_GROUPS``: keys that come all
# together or not at all (newer drivers). A line moved out of its section shows up here.
_Q_REQUIRED = {
    "PCIe Generation": ("Max", "Current"), "Link Width": ("Max", "Current"),
    "ECC Mode": ("Current", "Pending"), "Single Bit": ("Total",), "Double Bit": ("Total",),
    "Retired Pages": ("Single Bit ECC", "Double Bit ECC"),
    "Remapped Rows": ("Correctable Error", "Uncorrectable Error", "Pending",
                      "Remapping Failure Occurred"),
    "Temperature": ("GPU Current Temp",),
    "GPU Reset Status": ("Reset Required", "Drain and Reset Recommended"),
    "Clocks Throttle Reasons": _THROTTLE_KEYS[:-1], "Clocks Event Reasons": _THROTTLE_KEYS[:-1],
    "Volatile": ("SRAM Correctable", "DRAM Correctable", "DRAM Uncorrectable"),
    "Aggregate": ("SRAM Correctable", "DRAM Correctable", "DRAM Uncorrectable"),
}
_Q_GROUPS = {
    "PCIe Generation": (("Device Current", "Device Max", "Host Max"),),
    "Volatile": (("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED"),),
    "Aggregate": (("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED"),),
}
# Keys one of which a started section must have.
_Q_ONE_OF = {
    "Retired Pages": ("Pending Page Blacklist", "Pending", "Pending Page Retirement"),
    "Volatile": ("SRAM Uncorrectable", "SRAM Uncorrectable Parity"),
    "Aggregate": ("SRAM Uncorrectable", "SRAM Uncorrectable Parity"),
}
# Sections inside "MIG Devices" (R450+ with MIG enabled), one set per MIG device.
_Q_MIG_SECTIONS = frozenset(("MIG Device", "Device Attributes", "Shared", "ECC Errors",
                             "Volatile", "Aggregate", "FB Memory Usage", "BAR1 Memory Usage"))
# Older spellings of the same header (R418 prints "Ecc Mode").
_Q_HEADER_ALIASES = {"Ecc Mode": "ECC Mode"}
# A vGPU guest (R535) says "Attached vGPUs" where a bare-metal host says "Attached GPUs".
_Q_TOP_KEYS = ("Timestamp", "Driver Version", "CUDA Version", "Attached GPUs", "Attached vGPUs")
# Sections of the header, before the first GPU (vGPU host R525+: "vGPU Driver Capability" with
# "Heterogenous Multi-vGPU : Supported"); their keys are not read.
_Q_TOP_SECTIONS = frozenset(("vGPU Driver Capability",))
_Q_GPU_RE = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_Q_SENTINELS = ("N/A", "[N/A]", "Not Available", "Not Supported", "[Not Supported]",
                "Unknown Error", "[Unknown Error]", "Unknown")


_Q_FORMS = {"int": "a number", "temp": "a temperature such as 30 C",
            "width": "a link width such as 16x"}


def _q_value(kind, value, key, lineno):
    if value in _Q_SENTINELS or value == "":
        return None
    pattern = {"int": r"^(-?\d+)$", "temp": r"^(-?\d+) C$", "width": r"^(\d+)x$"}.get(kind)
    if pattern:
        m = re.match(pattern, value)
        if not m:
            raise ParseError(f"nvidia-smi -q line {lineno}: {key!r} should be {_Q_FORMS[kind]} "
                             f"or N/A, got {value!r} (cut line?)")
        return int(m.group(1))
    words = {"enabled": ("Enabled", "Disabled"), "yesno": ("Yes", "No"),
             "active": ("Active", "Not Active")}.get(kind)
    if words:
        if value not in words:
            raise ParseError(f"nvidia-smi -q line {lineno}: {key!r} should be {words[0]} or "
                             f"{words[1]} (or N/A), got {value!r} (cut line?)")
        return value == words[0]
    return value


def _q_kind(section, key):
    if section in ("Volatile", "Aggregate", "Single Bit", "Double Bit"):
        return "yesno" if key == "SRAM Threshold Exceeded" else "int"
    if section in ("Clocks Throttle Reasons", "Clocks Event Reasons"):
        return "active"
    if section == "PCI":
        return "text"
    if section in ("PCIe Generation",) or key in ("Minor Number", "Single Bit ECC",
                                                  "Double Bit ECC", "Correctable Error",
                                                  "Uncorrectable Error"):
        return "int"
    if section == "Link Width":
        return "width"
    if section == "Temperature":
        return "temp" if key == "GPU Current Temp" else "text"
    if key in ("Persistence Mode",) or section == "ECC Mode":
        return "enabled"
    if section in ("Retired Pages", "Remapped Rows", "GPU Reset Status"):
        return "yesno"
    return "text"


def _q_sum(values):
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _q_ecc(sections, which):
    """{"correctable", "uncorrectable", "counters"} of Volatile/Aggregate, or None."""
    new = sections.get(("ECC Errors", which))
    single = sections.get(("ECC Errors", which, "Single Bit"))
    double = sections.get(("ECC Errors", which, "Double Bit"))
    if new is None and single is None and double is None:
        return None
    counters = {}
    if single is not None or double is not None:
        counters = {"Single Bit Total": (single or {}).get("Total", (None,))[0],
                    "Double Bit Total": (double or {}).get("Total", (None,))[0]}
        return {"correctable": (single or {}).get("Total", (None,))[0],
                "uncorrectable": (double or {}).get("Total", (None,))[0], "counters": counters}
    for key, (value, _line) in new.items():
        if key in _NEW_ECC_KEYS:
            counters[key] = value
    unc_sram = counters.get("SRAM Uncorrectable")
    if unc_sram is None:
        unc_sram = _q_sum([counters.get("SRAM Uncorrectable Parity"),
                           counters.get("SRAM Uncorrectable SEC-DED")])
    return {"correctable": _q_sum([counters.get("SRAM Correctable"),
                                   counters.get("DRAM Correctable")]),
            "uncorrectable": _q_sum([unc_sram, counters.get("DRAM Uncorrectable")]),
            "counters": counters}


def _q_gpu_record(block):
    sections = block["sections"]
    root = sections[()]

    def get(path, key):
        sec = sections.get(path)
        return None if sec is None or key not in sec else sec[key][0]

    missing = []
    for path, sec in sections.items():
        name = path[-1] if path else "GPU"
        where = " > ".join(path)
        old_style = name in ("Volatile", "Aggregate") and (
            path + ("Single Bit",) in sections or path + ("Double Bit",) in sections)
        if old_style:
            continue  # R418-era report: the counters are in Single Bit / Double Bit
        for key in _Q_REQUIRED.get(name, ()):
            if key not in sec:
                missing.append(f"{where}: {key}")
        for group in _Q_GROUPS.get(name, ()):
            present = [k for k in group if k in sec]
            if present and len(present) != len(group):
                missing.append(f"{where}: {', '.join(k for k in group if k not in sec)}")
        one_of = _Q_ONE_OF.get(name)
        if one_of and not any(k in sec for k in one_of):
            missing.append(f"{where}: {' or '.join(one_of)}")
    if not any(sections.values()):
        # A 'GPU <bus id>' line and nothing under it: even a -d report lists the fields it was
        # asked for, so the paste was cut right after the header.
        missing.append("GPU: every field (the block is empty: cut after its header?)")
    full = "Product Name" in root
    if full:
        if "GPU UUID" not in root:
            missing.append("GPU UUID")
        if "Processes" not in root and not block["ended"]:
            missing.append("Processes (the end of the GPU block)")
        if ("PCI",) not in sections or "Bus Id" not in sections[("PCI",)]:
            missing.append("PCI: Bus Id")
    bus_from_pci = get(("PCI",), "Bus Id")
    if bus_from_pci is not None and normalize_bus_id(bus_from_pci) != block["bus_id"]:
        raise ParseError(f"nvidia-smi -q line {sections[('PCI',)]['Bus Id'][1]}: Bus Id "
                         f"{bus_from_pci} inside the block of GPU {block['bus_id']} "
                         f"(shuffled paste?)")
    link = ("PCI", "GPU Link Info")
    width_cur, width_max = get(link + ("Link Width",), "Current"), get(link + ("Link Width",), "Max")
    gen = link + ("PCIe Generation",)
    throttle = sections.get(("Clocks Event Reasons",)) or sections.get(("Clocks Throttle Reasons",))
    reasons = {k: v for k, (v, _line) in (throttle or {}).items()}
    remap = sections.get(("Remapped Rows",))
    retired = sections.get(("Retired Pages",))
    pending_retire = None
    if retired is not None:
        for key in ("Pending Page Blacklist", "Pending", "Pending Page Retirement"):
            if key in retired:
                pending_retire = retired[key][0]
                break
    reset = sections.get(("GPU Reset Status",))
    return {
        "bus_id": block["bus_id"],
        "uuid": root.get("GPU UUID", (None,))[0],
        "product_name": root.get("Product Name", (None,))[0],
        "minor_number": root.get("Minor Number", (None,))[0],
        "persistence_mode": root.get("Persistence Mode", (None,))[0],
        "performance_state": root.get("Performance State", (None,))[0],
        "pcie": {"gen_current": get(gen, "Current"), "gen_max": get(gen, "Max"),
                 "gen_device_max": get(gen, "Device Max"), "gen_host_max": get(gen, "Host Max"),
                 "width_current": width_cur, "width_max": width_max,
                 "width_degraded": (width_cur < width_max) if width_cur and width_max else None},
        "ecc_mode": {"current": get(("ECC Mode",), "Current"),
                     "pending": get(("ECC Mode",), "Pending")},
        "ecc_errors": {"volatile": _q_ecc(sections, "Volatile"),
                       "aggregate": _q_ecc(sections, "Aggregate")},
        "retired_pages": None if retired is None else {
            "single_bit": retired.get("Single Bit ECC", (None,))[0],
            "double_bit": retired.get("Double Bit ECC", (None,))[0],
            "pending": pending_retire},
        "remapped_rows": None if remap is None else {
            "correctable": remap.get("Correctable Error", (None,))[0],
            "uncorrectable": remap.get("Uncorrectable Error", (None,))[0],
            "pending": remap.get("Pending", (None,))[0],
            "failure": remap.get("Remapping Failure Occurred", (None,))[0]},
        "temperature_c": get(("Temperature",), "GPU Current Temp"),
        "clocks_event_reasons": reasons,
        "active_clocks_event_reasons": sorted(k for k, v in reasons.items() if v and k != "Idle"),
        "reset_status": None if reset is None else {
            "reset_required": reset.get("Reset Required", (None,))[0],
            "drain_and_reset_recommended": reset.get("Drain and Reset Recommended", (None,))[0]},
        "display_filtered": not full,
        "missing": missing,
        "unrecognised": block["unrecognised"],
        "complete": not missing and not block["unrecognised"],
    }


def _q_place_header(path, name, lineno):
    parents = _Q_HEADERS[name]
    for depth in range(len(path), -1, -1):
        owner = path[depth - 1] if depth else "GPU"
        if owner in parents:
            return path[:depth] + (name,)
    raise ParseError(f"nvidia-smi -q line {lineno}: section {name!r} outside "
                     f"{' or '.join(repr(p) for p in parents)} (shuffled or cut paste?)")


def parse_smi_q(text):
    """Read ``nvidia-smi -q`` (the full report, or one filtered with ``-d ECC,PCIE,...``).

    Grammar (nvidia-smi manual, "-q, --query" and the report layout of drivers R390 to R580):
    a header (``Timestamp``, ``Driver Version``, ``CUDA Version``, ``Attached GPUs : n``), then
    one block per GPU opened by ``GPU 00000000:18:00.0``; inside, ``Key : Value`` lines and
    section headers (a line without a colon) nested by indentation. Key names changed across
    versions and all spellings are read: ``Clocks Throttle Reasons`` (<= R530) / ``Clocks Event
    Reasons`` (R535+); ECC counters per ``Single Bit`` / ``Double Bit`` location with ``Total``
    (Kepler-Volta era) or ``SRAM``/``DRAM Correctable``/``Uncorrectable`` (R450+, split into
    ``Parity`` / ``SEC-DED`` in R550+); ``Retired Pages > Pending`` (old) / ``Pending Page
    Blacklist``; ``Remapped Rows`` a section (A100 and newer) or ``Remapped Rows : N/A``; ``GPU
    Reset Status`` (R550+); with MIG enabled a ``MIG Devices`` section repeats ``ECC Errors``
    and memory sections per MIG device, which are skipped (the GPU's own sections are read).
    NVIDIA vGPU reports read too: a guest's header says ``Attached vGPUs : n`` and its GPU
    block has ``vGPU Software Licensed Product`` with the licence's own ``Product Name`` and
    ``License Status`` (R535); a host's header has a ``vGPU Driver Capability`` section and its
    GPU blocks ``vGPU Device Capability`` (R525+, akb486/vgpu README). These vGPU sections are
    not part of the reading.
    ``N/A``, ``Not Supported``, ``Unknown Error`` read None.

    Indentation is not needed: every section header has a known place in the report
    (``_Q_HEADERS``) and every key is looked up from the innermost section outwards, so a paste
    that lost its indentation or had it turned into tabs reads the same. A line without a colon
    that is no known header, right after a value this reader uses, is a wrapped line and raises
    ParseError, as does a value of the wrong form (``Link Width : 1`` cut from ``16x``), a
    section outside its parent, a key twice in one section or a section twice in one GPU
    (shuffled paste), and GPU fields before any ``GPU <bus id>`` line.

    Returns::

        {"driver_version": "535.104.05" or None, "cuda_version": "12.2" or None,
         "attached_gpus": 8 or None,      # "Attached GPUs" (or a vGPU guest's "Attached vGPUs")
         "gpus": [{                               # sorted by bus id
            "bus_id": "0000:18:00.0", "uuid": "GPU-..." or None,   # stable ids
            "product_name": "NVIDIA H100 80GB HBM3", "minor_number": 0,
            "persistence_mode": True, "performance_state": "P0",
            "pcie": {"gen_current": 5, "gen_max": 5, "gen_device_max": 5 or None,
                     "gen_host_max": 5 or None, "width_current": 16, "width_max": 16,
                     "width_degraded": False},     # current width below max
            "ecc_mode": {"current": True, "pending": True},
            "ecc_errors": {"volatile": {"correctable": 0, "uncorrectable": 0,
                                        "counters": {"SRAM Correctable": 0, ...}} or None,
                           "aggregate": {...} or None},
            "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False} or None,
            "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                              "failure": False} or None,     # None: not on this GPU
            "temperature_c": 30,
            "clocks_event_reasons": {"Idle": True, "HW Slowdown": False, ...},
            "active_clocks_event_reasons": ["HW Slowdown"],  # active, Idle left out
            "reset_status": {"reset_required": False, "drain_and_reset_recommended": None}
                            or None,
            "display_filtered": False,   # True: a -d report (no Product Name), fields absent
            "missing": [],      # sections cut short / a full report without its end
            "unrecognised": [],  # line numbers of unknown keys in the sections read
            "complete": True}],
         "truncated": False,    # the text ends inside a line
         "complete": True}      # every GPU complete, all attached GPUs present, not truncated

    A full report's GPU block ends with ``Processes``; one without it reads incomplete (cut
    paste). A section read here that lacks a key every version prints (``_Q_REQUIRED``), or has
    only part of a key group newer drivers print together (``_Q_GROUPS``), lists it in
    ``missing``: that is how a cut or a line moved elsewhere shows. Reports of drivers before
    R410 (fewer clocks reasons) therefore read incomplete. ECC ``counters`` are the SRAM/DRAM
    counters of R450+ reports, or ``Single Bit Total`` / ``Double Bit Total`` of older ones.
    Raises ParseError for the cases above and for an empty report.
    """
    lines = split_lines(text, "nvidia-smi -q")
    top = {}
    blocks = []
    block = None
    path = ()
    in_mig = False
    top_section = False  # inside a header section (_Q_TOP_SECTIONS)
    last_read = None  # line number of the last value this reader uses
    for lineno, raw in enumerate(lines, 1):
        line = " ".join(raw.split())
        if not line or set(line) <= set("=") or line.startswith("=") and "NVSMI LOG" in line:
            last_read = None
            continue
        m = _Q_GPU_RE.match(line)
        if m:
            block = {"bus_id": normalize_bus_id(m.group(1)), "line": lineno,
                     "sections": {(): {}}, "unrecognised": [], "ended": False}
            if any(b["bus_id"] == block["bus_id"] for b in blocks):
                raise ParseError(f"nvidia-smi -q line {lineno}: second block for GPU "
                                 f"{block['bus_id']}")
            blocks.append(block)
            path, last_read, in_mig = (), None, False
            continue
        if in_mig:
            # MIG Devices repeats ECC Errors / FB Memory Usage per MIG device; it ends at the
            # next key of the GPU block or a GPU section a MIG device does not have.
            name = line if ":" not in line else " ".join(line.split(":", 1)[0].split())
            if (name in _Q_MIG_SECTIONS or (":" in line and name not in _Q_ROOT_KNOWN)
                    or (":" not in line and name not in _Q_HEADERS)):
                continue
            in_mig = False
        if ":" not in line:
            line = _Q_HEADER_ALIASES.get(line, line)
            if line == "MIG Devices" and block is not None:
                in_mig, last_read = True, None
                path = ()
                continue
            if block is None and line in _Q_TOP_SECTIONS:
                top_section = True
                continue
            if block is None:
                raise ParseError(f"nvidia-smi -q line {lineno}: expected 'Key : Value' or "
                                 f"'GPU <bus id>', got {shorten(raw)!r}")
            if line in _Q_HEADERS:
                path = _q_place_header(path, line, lineno)
                if path in block["sections"]:
                    raise ParseError(f"nvidia-smi -q line {lineno}: section {' > '.join(path)!r} "
                                     f"twice in GPU {block['bus_id']} (shuffled paste?)")
                if path[-1] in _Q_KEYS:
                    block["sections"][path] = {}
                if line == "Processes":
                    block["ended"] = True
            else:
                if last_read is not None:
                    raise ParseError(f"nvidia-smi -q line {lineno}: {shorten(raw.strip())!r} "
                                     f"follows the value on line {last_read} without a ':': a "
                                     f"wrapped line, or a section this reader does not know")
                path = path + (line,)
            last_read = None
            continue
        key, value = (" ".join(p.split()) for p in line.split(":", 1))
        last_read = None
        if block is None:
            if key in _Q_TOP_KEYS:
                top[key] = value
                top_section = False
                continue
            if top_section:
                continue
            raise ParseError(f"nvidia-smi -q line {lineno}: {key!r} before any 'GPU <bus id>' "
                             f"line (the paste starts inside a GPU block?)")
        if key in _Q_TOP_KEYS:
            raise ParseError(f"nvidia-smi -q line {lineno}: {key!r} inside the block of GPU "
                             f"{block['bus_id']}; it belongs before the first GPU (shuffled "
                             f"paste?)")
        owner = None
        innermost = path[-1] if path else "GPU"
        if innermost in _Q_HEADERS or innermost == "GPU":
            for depth in range(len(path), -1, -1):
                name = path[depth - 1] if depth else "GPU"
                if key in _Q_KEYS.get(name, ()) and path[:depth] in block["sections"]:
                    owner = path[:depth]
                    break
        elif key in _Q_KEYS["GPU"]:
            owner = ()
        if owner is None:
            if innermost in _Q_FLAGGED and key not in _Q_ROOT_KNOWN:
                block["unrecognised"].append(lineno)
            continue
        section = block["sections"][owner]
        if key in section:
            raise ParseError(f"nvidia-smi -q line {lineno}: {key!r} twice in "
                             f"{' > '.join(owner) or 'GPU ' + block['bus_id']} (shuffled paste?)")
        name = owner[-1] if owner else "GPU"
        if not owner and key in ("Remapped Rows", "ECC Errors", "Retired Pages"):
            if value not in _Q_SENTINELS:
                raise ParseError(f"nvidia-smi -q line {lineno}: {key!r} should be a section or "
                                 f"N/A, got {value!r}")
            section[key] = (None, lineno)
            continue
        section[key] = (_q_value(_q_kind(name, key), value, key, lineno), lineno)
        last_read = lineno
    if not blocks:
        raise ParseError("nvidia-smi -q: no 'GPU <bus id>' block (expected the output of "
                         "nvidia-smi -q)")
    attached_key = "Attached GPUs" if "Attached GPUs" in top else "Attached vGPUs"
    attached = top.get(attached_key)
    if attached is not None and not re.match(r"^\d+$", attached):
        raise ParseError(f"nvidia-smi -q: {attached_key!r} should be a number, got {attached!r}")
    attached = int(attached) if attached is not None else None
    gpus = sorted((_q_gpu_record(b) for b in blocks), key=lambda g: g["bus_id"])
    truncated = bool(text) and not text.endswith("\n")
    return {
        "driver_version": top.get("Driver Version"),
        "cuda_version": top.get("CUDA Version"),
        "attached_gpus": attached,
        "gpus": gpus,
        "truncated": truncated,
        "complete": (not truncated and all(g["complete"] for g in gpus)
                     and (attached is None or attached == len(gpus))),
    }
