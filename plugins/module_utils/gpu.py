"""NVIDIA GPU fact parsers: ``lspci -nn``, ``nvidia-smi --query-gpu``, ``nvidia-smi topo -m``.

Pure functions over the tools' text output, stdlib only, for Python 3.8+ on the managed node
(``gpu_facts`` module) and for pytest on the controller. Nothing here runs a command.

Every parser raises :class:`ParseError` (a ``ValueError``) that says what it expected and on
which line when the input is malformed or truncated; none returns a half-read value.

Units: GPU memory is in MiB (1 MiB = 2**20 bytes) exactly as ``nvidia-smi`` reports it, power
in W, clocks in MHz, temperatures in degrees C, utilisation and fan speed in percent.

Sources:

- ``nvidia-smi --help-query-gpu`` and the nvidia-smi manual page (NVIDIA, section "GPU
  ATTRIBUTES"): field names, ``--format=csv,noheader,nounits``, the ``[N/A]`` /
  ``[Not Supported]`` sentinels (older drivers print ``[Not Supported]`` where newer ones print
  ``[N/A]``, fixture C11; some fields print a bare ``N/A``, fixture C13).
- ``nvidia-smi topo -m`` legend (printed by the tool itself, fixtures C02/C04): ``X`` self,
  ``NV#`` a bonded set of # NVLinks, ``PIX`` at most one PCIe bridge, ``PXB`` several PCIe
  bridges, ``PHB`` a PCIe host bridge, ``NODE`` host bridges within a NUMA node, ``SYS`` the
  SMP interconnect between NUMA nodes (``SOC`` is the pre-2017 name of ``SYS``).
- PCI class codes (PCI-SIG "PCI Code and ID Assignment Specification"): 0300 VGA compatible
  controller, 0302 3D controller; NVIDIA's vendor id is 10de.
- NVML return codes behind the nvidia-smi messages classified by :func:`driver_state`
  (NVML API reference, ``nvmlReturn_t``): ``NVML_ERROR_DRIVER_NOT_LOADED`` ("couldn't
  communicate with the NVIDIA driver"), ``NVML_ERROR_LIB_RM_VERSION_MISMATCH`` ("Driver/library
  version mismatch", fixture C09), and "No devices were found" with ``RmInitAdapter failed`` in
  the kernel log (fixture C14, NVIDIA/open-gpu-kernel-modules #862).
"""

from __future__ import annotations

import csv
import itertools
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    natural_key,
    shorten,
    split_lines,
)

NVIDIA_VENDOR_ID = "10de"
# PCI class 03 (display controller): 00 = VGA compatible, 02 = 3D controller. NVIDIA's other
# functions on the same card (audio 0403, USB 0c03, UCSI 0c80) and NVSwitch bridges (0680) are
# not GPUs.
GPU_PCI_CLASSES = ("0300", "0302")

# What gpu_facts asks nvidia-smi for (``--format=csv,noheader,nounits``); every field exists
# since long before driver 450, so the query works on old and new drivers alike.
GPU_QUERY_FIELDS = ("index", "name", "pci.bus_id", "uuid", "memory.total", "persistence_mode",
                    "driver_version")

# Link ranks for GPU<->NIC distance, closest first (legend of ``nvidia-smi topo -m``).
PCIE_LINK_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "SOC": 4}


class TopologyError(ValueError):
    """A request the topology cannot satisfy (e.g. more GPUs than the node has)."""


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


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


def parse_cpu_list(text):
    """CPU or NUMA node list in the kernel's cpulist format -> sorted list of ints.

    ``"0-31,64-95"`` -> ``[0, 1, ..., 31, 64, ..., 95]``; ``"N/A"``/empty/None -> ``None``.
    Format: Linux ``Documentation/admin-guide/cputopology.rst`` (cpulist). Raises ParseError
    for anything else.
    """
    if text is None:
        return None
    text = text.strip()
    if text in ("", "N/A", "[N/A]"):
        return None
    out = set()
    for part in text.split(","):
        m = re.match(r"^(\d+)(?:-(\d+))?$", part.strip())
        if not m:
            raise ParseError(f"cpu list: expected ranges such as '0-31,64-95', got {text!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ParseError(f"cpu list: range {part!r} runs backwards in {text!r}")
        out.update(range(lo, hi + 1))
    return sorted(out)


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
    for lineno, line in enumerate(split_lines(text, "lspci -nn"), 1):
        if not line.strip() or line.lstrip().startswith("pcilib:"):
            continue
        m = _LSPCI_RE.match(line.strip())
        if not m:
            raise ParseError(f"lspci -nn line {lineno}: expected '<slot> <class> [cccc]: <name> "
                             f"[vvvv:dddd]' (run lspci with -nn), got {shorten(line)!r}")
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


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]
# --------------------------------------------------------------------------------------------

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
    - a header line (``--format=csv`` without ``noheader``) is recognised and skipped;
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
        if not line.strip():
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
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------------

_LINK_TYPES = "X, NV#, PIX, PXB, PHB, NODE, SYS, SOC"
_LINK_RE = re.compile(r"^(?:X|SYS|SOC|NODE|PHB|PXB|PIX|NV\d+)$")
# GPU0, NIC0, or an RDMA device named directly (mlx5_0, mlx5_bond_0, bnxt_re0) by old drivers.
_DEVICE_COL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\d$")
_TAIL_HEADER_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+(?: \S+)*")


def _gpu_index(label):
    m = re.match(r"^GPU(\d+)$", label)
    return int(m.group(1)) if m else None


def _nv_count(link):
    m = re.match(r"^NV(\d+)$", link)
    return int(m.group(1)) if m else None


def _first_content_line(lines):
    idx = 0
    while idx < len(lines) and not lines[idx].strip():
        idx += 1
    return idx


def _read_topo_header(lines, idx):
    """Device columns and the names of the columns after them (CPU Affinity ...)."""
    header = lines[idx]
    columns = []
    for tok in header.split():
        if not _DEVICE_COL_RE.match(tok):
            break
        columns.append(tok)
    if not columns or columns[0] != "GPU0":
        raise ParseError(f"nvidia-smi topo -m line {idx + 1}: expected the header 'GPU0 GPU1 ... "
                         f"[NIC0 ...] CPU Affinity NUMA Affinity', got {shorten(header)!r}")
    if len(set(columns)) != len(columns):
        raise ParseError(f"nvidia-smi topo -m line {idx + 1}: duplicate column names in "
                         f"{shorten(header)!r}")
    tail = header
    for col in columns:
        tail = tail[tail.find(col) + len(col):]
    return columns, _TAIL_HEADER_RE.findall(tail.strip())


def _read_topo_row(line, lineno, columns, tail_names):
    tokens = line.split()
    label, cells = tokens[0], tokens[1:]
    n = len(columns)
    if label not in columns:
        raise ParseError(f"nvidia-smi topo -m line {lineno}: expected a row for one of "
                         f"{', '.join(columns)}, got {shorten(line)!r}")
    if len(cells) < n:
        raise ParseError(f"nvidia-smi topo -m line {lineno}: row {label} has {len(cells)} link "
                         f"cells, expected {n} (one per column {' '.join(columns)}); truncated?")
    links, extra = cells[:n], cells[n:]
    for i, link in enumerate(links):
        if not _LINK_RE.match(link):
            raise ParseError(f"nvidia-smi topo -m line {lineno}: row {label} column {columns[i]}: "
                             f"{link!r} is not a link type of the legend ({_LINK_TYPES})")
    diagonal = links[columns.index(label)]
    if diagonal != "X":
        raise ParseError(f"nvidia-smi topo -m line {lineno}: row {label} should read X on the "
                         f"diagonal, got {diagonal!r}")
    if extra and len(extra) != len(tail_names):
        raise ParseError(f"nvidia-smi topo -m line {lineno}: row {label} has {len(extra)} values "
                         f"for the {len(tail_names)} columns {', '.join(tail_names) or '(none)'}; "
                         f"truncated or shifted?")
    if _gpu_index(label) is not None and not extra and tail_names:
        raise ParseError(f"nvidia-smi topo -m line {lineno}: row {label} lacks the columns "
                         f"{', '.join(tail_names)}; truncated?")
    link_map = {columns[i]: links[i] for i in range(n)}
    extra_map = {tail_names[i]: extra[i] for i in range(len(extra))}
    return label, link_map, extra_map


def _read_nic_legend(lines, start):
    legend = {}
    inside = False
    for idx in range(start, len(lines)):
        stripped = lines[idx].strip()
        if stripped == "NIC Legend:":
            inside = True
            continue
        if inside and stripped:
            m = re.match(r"^(NIC\d+):\s*(\S+)$", stripped)
            if not m:
                raise ParseError(f"nvidia-smi topo -m line {idx + 1}: expected 'NICn: <rdma "
                                 f"device>' in the NIC Legend, got {shorten(lines[idx])!r}")
            legend[m.group(1)] = m.group(2)
    return legend


def _gpu_record(label, extra):
    cpu = extra.get("CPU Affinity")
    cpu = None if cpu in (None, "N/A") else cpu
    parse_cpu_list(cpu)  # validates the cpulist text, raises ParseError
    numa = extra.get("NUMA Affinity")
    numa = None if numa in (None, "N/A") else numa
    numa_nodes = parse_cpu_list(numa)
    gnid = extra.get("GPU NUMA ID")
    if gnid in (None, "N/A"):
        gnid_val = None
    elif gnid.isdigit():
        gnid_val = int(gnid)
    else:
        raise ParseError(f"nvidia-smi topo -m: {label} GPU NUMA ID should be a number or N/A, "
                         f"got {gnid!r}")
    return {
        "index": _gpu_index(label),
        "name": label,
        "cpu_affinity": cpu,
        "numa_affinity": numa,
        "numa_node": numa_nodes[0] if numa_nodes and len(numa_nodes) == 1 else None,
        "gpu_numa_id": gnid_val,
    }


def parse_topo_matrix(text):
    """Read ``nvidia-smi topo -m``.

    Returns::

        {"gpu_count": 8,
         "gpus": [{"index": 0, "name": "GPU0",
                   "cpu_affinity": "0-31,64-95" or None,   # cpulist text, see parse_cpu_list
                   "numa_affinity": "0" or None,          # as printed
                   "numa_node": 0 or None,                # int when exactly one node
                   "gpu_numa_id": None}, ...],           # "GPU NUMA ID" column (newer drivers)
         "nics": [{"name": "mlx5_0", "label": "NIC0"}, ...],   # label = column header
         "links": {"GPU0": {"GPU0": "X", "GPU1": "NV12", "mlx5_0": "PXB", ...},
                   "mlx5_0": {...}, ...},                 # keyed by GPU label / NIC name
         "nvlink": True,        # at least one GPU pair is NV#
         "nvswitch": True}      # inferred, see below

    Format handled: tab- or space-separated columns (pastes expand tabs); the empty cell that
    newer drivers pad between ``NUMA Affinity`` and ``GPU NUMA ID`` (fixture C04) does not shift
    columns, because every cell is one whitespace-free token; ``CPU Affinity``/``NUMA Affinity``
    may be missing (old drivers) and then read None; NIC columns named directly (``mlx5_0``,
    old drivers) or ``NIC0`` resolved through the ``NIC Legend`` section (newer drivers,
    fixture C02); ``SOC`` (pre-2017 name of ``SYS``) is accepted.

    NVSwitch inference (no NVSwitch row exists in ``topo -m``): every pair of more than four
    GPUs is linked by NVLink with one and the same bond width (all ``NV12`` on HGX A100 8-GPU,
    ``NV18`` on HGX H100, ``NV6`` on DGX-2). A GPU has 12 (A100) or 18 (H100) NVLinks, so no
    baseboard wires more than four GPUs all-to-all directly; a 4-GPU board with all pairs NV4
    (HGX A100 4-GPU) is direct-wired and reads False, as does a subset of an NVSwitch box seen
    through CUDA_VISIBLE_DEVICES with four GPUs or fewer.

    Raises ParseError when: the first line is not the header with GPU columns; a cell is not a
    legend link type (X, NV#, PIX, PXB, PHB, NODE, SYS, SOC); the diagonal is not X; a device
    of the header has no row, or a row has too few cells (truncated); a NIC# column has no
    ``NIC Legend`` entry; the ``Legend:`` block that always follows the matrix is missing.
    """
    lines = split_lines(text, "nvidia-smi topo -m")
    idx = _first_content_line(lines)
    if idx == len(lines):
        raise ParseError("nvidia-smi topo -m: empty output, expected a header line "
                         "'GPU0 GPU1 ... CPU Affinity'")
    columns, tail_names = _read_topo_header(lines, idx)

    rows = {}
    legend_seen = False
    idx += 1
    while idx < len(lines):
        stripped = lines[idx].strip()
        if stripped == "Legend:":
            legend_seen = True
            break
        if stripped:
            label, link_map, extra_map = _read_topo_row(lines[idx], idx + 1, columns, tail_names)
            if label in rows:
                raise ParseError(f"nvidia-smi topo -m line {idx + 1}: second row for {label}")
            rows[label] = (link_map, extra_map)
        idx += 1

    missing = [c for c in columns if c not in rows]
    if missing:
        raise ParseError(f"nvidia-smi topo -m: no row for {', '.join(missing)} after line {idx} "
                         f"(output truncated?)")
    if not legend_seen:
        raise ParseError(f"nvidia-smi topo -m: the 'Legend:' block that follows the matrix is "
                         f"missing after line {len(lines)} (output truncated?)")
    nic_legend = _read_nic_legend(lines, idx + 1)

    names = {}
    nics = []
    for col in columns:
        if _gpu_index(col) is not None:
            names[col] = col
            continue
        if re.match(r"^NIC\d+$", col):
            if col not in nic_legend:
                raise ParseError(f"nvidia-smi topo -m: column {col} has no entry in the "
                                 f"'NIC Legend' block (output truncated?)")
            names[col] = nic_legend[col]
        else:
            names[col] = col
        nics.append({"name": names[col], "label": col})
    if len(set(names.values())) != len(names):
        raise ParseError(f"nvidia-smi topo -m: two columns resolve to the same device: {names!r}")

    gpus = sorted((_gpu_record(col, rows[col][1]) for col in columns
                   if _gpu_index(col) is not None), key=lambda g: g["index"])
    links = {names[col]: {names[c]: v for c, v in rows[col][0].items()} for col in columns}

    gpu_names = [g["name"] for g in gpus]
    nv = [_nv_count(links[a][b]) for a, b in itertools.combinations(gpu_names, 2)]
    return {
        "gpu_count": len(gpus),
        "gpus": gpus,
        "nics": sorted(nics, key=lambda x: natural_key(x["name"])),
        "links": links,
        "nvlink": any(c is not None for c in nv),
        "nvswitch": len(gpu_names) > 4 and all(c is not None for c in nv) and len(set(nv)) == 1,
    }


_P2P_CODES = {"X": "self", "OK": "ok", "CNS": "chipset not supported",
              "GNS": "GPU not supported", "TNS": "topology not supported",
              "NS": "not supported", "DR": "disabled by regkey", "U": "unknown"}


def parse_topo_p2p(text):
    """Read ``nvidia-smi topo -p2p <r|w|n|a|p>`` (peer-to-peer capability matrix).

    Returns::

        {"gpus": ["GPU0", "GPU1"],
         "status": {"GPU0": {"GPU0": "X", "GPU1": "GNS"}, ...},   # codes of the tool's legend
         "supported": False}      # True when every off-diagonal pair reads OK

    Codes (the tool's legend): X self, OK, CNS chipset not supported, GNS GPU not supported,
    TNS topology not supported, NS not supported, DR disabled by regkey, U unknown.
    Raises ParseError for a missing header, a row with the wrong number of cells, an unknown
    code, a missing row or a missing ``Legend:`` block (truncated).
    """
    lines = split_lines(text, "nvidia-smi topo -p2p")
    idx = _first_content_line(lines)
    header = lines[idx].split() if idx < len(lines) else []
    if not header or not all(re.match(r"^GPU\d+$", t) for t in header):
        got = shorten(lines[idx]) if idx < len(lines) else ""
        raise ParseError(f"nvidia-smi topo -p2p line {idx + 1}: expected the header "
                         f"'GPU0 GPU1 ...', got {got!r}")
    status = {}
    legend = False
    idx += 1
    while idx < len(lines):
        stripped = lines[idx].strip()
        if stripped == "Legend:":
            legend = True
            break
        if stripped:
            tokens = stripped.split()
            label, cells = tokens[0], tokens[1:]
            if label not in header or len(cells) != len(header):
                raise ParseError(f"nvidia-smi topo -p2p line {idx + 1}: expected a row 'GPUn' "
                                 f"with {len(header)} codes, got {shorten(lines[idx])!r}")
            for code in cells:
                if code not in _P2P_CODES:
                    raise ParseError(f"nvidia-smi topo -p2p line {idx + 1}: unknown code "
                                     f"{code!r} (known: {', '.join(_P2P_CODES)})")
            status[label] = {header[i]: cells[i] for i in range(len(header))}
        idx += 1
    missing = [g for g in header if g not in status]
    if missing:
        raise ParseError(f"nvidia-smi topo -p2p: no row for {', '.join(missing)} "
                         f"(output truncated?)")
    if not legend:
        raise ParseError("nvidia-smi topo -p2p: the 'Legend:' block is missing "
                         "(output truncated?)")
    supported = all(status[a][b] == "OK" for a in header for b in header if a != b)
    return {"gpus": header, "status": status, "supported": supported}


# --------------------------------------------------------------------------------------------
# GPU <-> NIC affinity, GPU subsets
# --------------------------------------------------------------------------------------------


def gpu_nic_map(topology, nics=None):
    """Closest NIC for every GPU of a :func:`parse_topo_matrix` result.

    Returns a list ordered by GPU index::

        [{"gpu": 0, "name": "GPU0", "nic": "mlx5_0", "link": "PXB"}, ...]

    (``[]`` when the matrix has no NIC). ``nics`` optionally restricts the choice (e.g. the
    InfiniBand HCAs only, leaving out a management Ethernet port).

    Rule (NCCL picks, per GPU, the NIC with the shortest PCIe path, and GPUDirect RDMA reaches
    full bandwidth only when GPU and NIC share a PCIe switch: NVIDIA "GPUDirect RDMA"
    documentation, "Supported Systems"; NCCL ``NCCL_NET_GDR_LEVEL`` uses the same PIX < PXB <
    PHB < SYS ladder):

    1. distance is the link type read in the matrix, ranked PIX < PXB < PHB < NODE < SYS
       (SOC = SYS); only the NICs at the smallest distance from that GPU are candidates;
    2. GPUs are taken in index order; among the candidates the NIC that has been given to the
       fewest GPUs so far wins, and a tie goes to the first NIC in natural name order
       (mlx5_2 < mlx5_10). The candidates of a GPU are the NICs under its own PCIe switch or
       NUMA node, so this deals the GPUs round-robin over the equally close NICs of a NUMA
       node (GPU0 -> mlx5_0, GPU1 -> mlx5_1 when both NICs sit under the GPUs' switch). The
       result depends only on the matrix: deterministic.

    Raises ParseError when a GPU row lacks a NIC or holds a non-PCIe link type for it.
    """
    gpus = topology.get("gpus") or []
    links = topology.get("links") or {}
    nic_names = [n["name"] for n in topology.get("nics") or []]
    if nics is not None:
        wanted = set(nics)
        nic_names = [n for n in nic_names if n in wanted]
    nic_names.sort(key=natural_key)
    if not nic_names:
        return []
    load = {n: 0 for n in nic_names}
    out = []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        row = links.get(gpu["name"])
        if row is None:
            raise ParseError(f"topology has no link row for {gpu['name']}")
        ranked = []
        for nic in nic_names:
            link = row.get(nic)
            if link not in PCIE_LINK_RANK:
                raise ParseError(f"topology: link {gpu['name']} -> {nic} is {link!r}, expected "
                                 f"one of {', '.join(PCIE_LINK_RANK)}")
            ranked.append((PCIE_LINK_RANK[link], nic))
        best = min(r for r, _ in ranked)
        candidates = [nic for r, nic in ranked if r == best]
        choice = min(candidates, key=lambda nic: (load[nic], natural_key(nic)))
        load[choice] += 1
        out.append({"gpu": gpu["index"], "name": gpu["name"], "nic": choice,
                    "link": row[choice]})
    return out


def _gpu_link_rank(link):
    """Smaller is better: NV# (more links first), then PIX < PXB < PHB < NODE < SYS."""
    count = _nv_count(link)
    if count is not None:
        return (0, -count)
    if link in PCIE_LINK_RANK:
        return (1 + PCIE_LINK_RANK[link], 0)
    raise ParseError(f"topology: unexpected GPU-GPU link type {link!r}")


def pick_gpu_subset(topology, count):
    """Best ``count`` GPUs of one node for a job that wants fewer than all of them.

    Returns the sorted list of GPU indices. Choice, in order of precedence:

    1. the weakest link inside the subset is as strong as possible (NV# with more links, then
       PIX < PXB < PHB < NODE < SYS, the ladder of :func:`gpu_nic_map`);
    2. the subset spans as few NUMA nodes as possible;
    3. the lowest indices (lexicographic), so the result is deterministic.

    On an 8-GPU NVSwitch box every 4-GPU subset is all-NVLink and rule 2 picks
    ``[0, 1, 2, 3]`` (fixture C02). Raises TopologyError when the node has fewer than
    ``count`` GPUs (fixture C04: 2 GPUs cannot give 4).
    """
    gpus = sorted(topology.get("gpus") or [], key=lambda g: g["index"])
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise TopologyError(f"GPU subset size must be a positive integer, got {count!r}")
    if count > len(gpus):
        raise TopologyError(f"not enough GPUs: {count} requested, the node has {len(gpus)}")
    links = topology["links"]
    best_key = None
    best = None
    for subset in itertools.combinations(gpus, count):
        worst = max((_gpu_link_rank(links[a["name"]][b["name"]])
                     for a, b in itertools.combinations(subset, 2)), default=(0, 0))
        numa = {g["numa_node"] for g in subset}
        key = (worst, len(numa), [g["index"] for g in subset])
        if best_key is None or key < best_key:
            best_key, best = key, subset
    return [g["index"] for g in best]


# --------------------------------------------------------------------------------------------
# Driver versions and state
# --------------------------------------------------------------------------------------------

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


_BUS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_NVRM_FAIL_RE = re.compile(rf"NVRM: GPU ({_BUS}):.*(?:RmInitAdapter failed|rm_init_adapter failed)")
_NVRM_PCI_ID_RE = re.compile(
    rf"NVRM: The NVIDIA GPU ({_BUS})\s*\(PCI ID: ([0-9a-fA-F]{{4}}:[0-9a-fA-F]{{4}})\)")
_NVML_LIB_VERSION_RE = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")

DRIVER_STATES = ("absent", "installed-not-loaded", "ready")


def _result(state, klass, reason, hint, versions, failed_bus_ids=(), pci_ids=()):
    out = {"state": state, "class": klass, "reason": reason, "hint": hint,
           "failed_bus_ids": list(failed_bus_ids), "pci_ids": list(pci_ids)}
    out.update(versions)
    return out


def _no_devices(versions, lspci_gpus, kernel_log):
    log = kernel_log or ""
    pci = _NVRM_PCI_ID_RE.findall(log)
    failed = sorted({normalize_bus_id(b) for b in _NVRM_FAIL_RE.findall(log)}
                    | {normalize_bus_id(b) for b, _ in pci})
    pci_ids = sorted({p.lower() for _, p in pci})
    reason = "No devices were found"
    if failed:
        reason += f"; kernel log: RmInitAdapter failed for {', '.join(failed)}"
    if pci_ids:
        reason += f" (PCI ID {', '.join(pci_ids)})"
    if lspci_gpus:
        reason += f"; lspci still lists {len(lspci_gpus)} NVIDIA GPU(s)"
    elif lspci_gpus is not None:
        reason += "; lspci lists no NVIDIA GPU"
    if lspci_gpus is not None and not lspci_gpus:
        hint = ("lspci shows no NVIDIA GPU: reseat the card, check its power and the BIOS PCIe "
                "settings; the driver has no device to drive")
    else:
        hint = ("do not reinstall the driver: the GPU is on the bus but was not initialised; "
                "enable 'Above 4G Decoding' and 'Resizable BAR' in the BIOS and check that the "
                "installed driver supports this PCI device id")
    return _result("installed-not-loaded", "NO_DEVICES_INITIALISED", reason, hint, versions,
                   failed, pci_ids)


def driver_state(nvidia_smi_rc, nvidia_smi_output, proc_driver_version=None, dpkg_version=None,
                 lspci_gpus=None, kernel_log=None):
    """Classify the NVIDIA driver of a node as ``absent``, ``installed-not-loaded`` or ``ready``.

    Inputs:

    - ``nvidia_smi_rc``: exit code of ``nvidia-smi`` (plain or ``--query-gpu``); ``None`` or
      127 when nvidia-smi is not installed;
    - ``nvidia_smi_output``: its stdout and stderr together;
    - ``proc_driver_version``: the text of ``/proc/driver/nvidia/version`` (or just the
      version), None when the file does not exist (kernel module not loaded);
    - ``dpkg_version``: installed user-space driver version (``525.85.12`` or the Debian
      ``525.85.12-1``, see :func:`nvidia_userspace_version`), None when no package;
    - ``lspci_gpus``: :func:`parse_lspci_nn` result, None when lspci was not run;
    - ``kernel_log``: ``dmesg``/syslog text, read for ``NVRM:`` lines; optional.

    Returns::

        {"state": "absent" | "installed-not-loaded" | "ready",
         "class": "READY" | "ABSENT" | "NOT_LOADED" | "DRIVER_LIBRARY_MISMATCH"
                  | "NO_DEVICES_INITIALISED" | "USERSPACE_MISSING" | "GPU_LOST" | "NVML_ERROR",
         "reason": "one line: what nvidia-smi or the files say" or None,
         "hint": "what to do" or None,
         "kernel_version": "520.56.06" or None,     # loaded kernel module (/proc)
         "userspace_version": "525.85.12" or None,  # package, or NVML library in the message
         "failed_bus_ids": ["0000:01:00.0"],        # from NVRM RmInitAdapter lines
         "pci_ids": ["10de:2b85"]}

    Classes (NVML ``nvmlReturn_t`` behind the nvidia-smi messages):

    - ``DRIVER_LIBRARY_MISMATCH``: "Failed to initialize NVML: Driver/library version
      mismatch" (NVML_ERROR_LIB_RM_VERSION_MISMATCH): loaded kernel module and user-space
      library differ; bring both to one version, then reload the modules or reboot (a reboot
      alone does not help while the on-disk module is the old one; fixture C09);
    - ``NOT_LOADED``: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA
      driver" (NVML_ERROR_DRIVER_NOT_LOADED);
    - ``NO_DEVICES_INITIALISED``: "No devices were found"; the kernel log's ``RmInitAdapter
      failed`` lines name the bus id and PCI id (fixture C14). Reinstalling the driver does not
      fix it: check the BIOS (Above 4G Decoding, Resizable BAR) and that the installed driver
      supports the PCI id;
    - ``GPU_LOST``: "Unable to determine the device handle ... GPU is lost" (Xid 79 family);
    - ``NVML_ERROR``: any other nvidia-smi failure, reason = exit code and its first line;
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
            reason += f"; lspci lists {len(lspci_gpus)} NVIDIA GPU(s)"
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
        return _result("installed-not-loaded", "NOT_LOADED",
                       f"nvidia-smi couldn't communicate with the NVIDIA driver (kernel module "
                       f"not loaded{extra})",
                       "load the module (modprobe nvidia); if that fails, the DKMS build for "
                       "the running kernel or Secure Boot signing is the usual cause "
                       "(dkms status, dmesg | grep NVRM)", versions)

    if "No devices were found" in output:
        return _no_devices(versions, lspci_gpus, kernel_log)

    if "GPU is lost" in output or "Unable to determine the device handle" in output:
        return _result("installed-not-loaded", "GPU_LOST", first_line,
                       "a GPU fell off the bus; check dmesg for Xid 79, power and cooling, "
                       "then reset the GPU or reboot the node", versions)

    if nvidia_smi_rc != 0 or "Failed to initialize NVML" in output or "NVIDIA-SMI has failed" in output:
        return _result("installed-not-loaded", "NVML_ERROR",
                       f"nvidia-smi exited {nvidia_smi_rc}: {first_line or '(no output)'}",
                       "run nvidia-smi on the node and read dmesg | grep NVRM", versions)

    return _result("ready", "READY", None, None, versions)
