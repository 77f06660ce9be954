"""``nvidia-smi topo -m`` / ``topo -p2p``, the GPU-NIC map and GPU subsets.

Part of the GPU component (see ``gpu_pci``). Pure functions, stdlib only, Python 3.8+.

Sources:

- ``nvidia-smi topo -m`` legend (printed by the tool itself, fixtures C02/C04): ``X`` self,
  ``NV#`` a bonded set of # NVLinks, ``PIX`` at most one PCIe bridge, ``PXB`` several PCIe
  bridges, ``PHB`` a PCIe host bridge, ``NODE`` host bridges within a NUMA node, ``SYS`` the
  SMP interconnect between NUMA nodes (``SOC`` is the pre-2017 name of ``SYS``).
- Linux ``Documentation/admin-guide/cputopology.rst`` (cpulist format).
"""

from __future__ import annotations

import itertools
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    natural_key,
    shorten,
    split_lines,
)

# Link ranks for GPU<->NIC distance, closest first (legend of ``nvidia-smi topo -m``).
PCIE_LINK_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "SOC": 4}


class TopologyError(ValueError):
    """A request the topology cannot satisfy (e.g. more GPUs than the node has)."""


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
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------------

_LINK_TYPES = "X, NV#, PIX, PXB, PHB, NODE, SYS, SOC"
# NVLinks of one GPU, most of any generation (A100 12; H100, B200, GB200 18: NVIDIA data sheets).
MAX_NVLINKS_PER_GPU = 18
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

    NVSwitch inference (no NVSwitch row exists in ``topo -m``): every pair of GPUs is linked by
    NVLink with one and the same bond width ``NV#`` (all ``NV12`` on HGX A100 8-GPU, ``NV18`` on
    HGX H100, ``NV6`` on DGX-2, ``NV18`` on a 4-GPU GB200 NVL72 tray), and either there are more
    than four GPUs (no baseboard wires more than four GPUs all-to-all directly) or the links
    the matrix gives one GPU, ``#`` times its ``n - 1`` peers, exceed the NVLinks a GPU has
    (at most 18: A100 12, H100 / B200 / GB200 18). A switch shows each peer all of a GPU's
    links; direct wires split them between the peers. So a 4-GPU board with all pairs NV4
    (HGX A100 4-GPU, 3 x 4 = 12 links) is direct-wired and reads False, and a GB200 tray (3 x 18
    = 54 links), or a subset of three or more GPUs of an NVSwitch box seen through
    CUDA_VISIBLE_DEVICES, reads True. Two GPUs alone cannot tell (18 links to one peer fit
    one GPU) and read False.

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
    # One bond width on every pair, and more GPUs or more links per GPU than direct wiring
    # allows (see the docstring).
    uniform = bool(nv) and all(c is not None for c in nv) and len(set(nv)) == 1
    switched = uniform and (len(gpu_names) > 4
                            or nv[0] * (len(gpu_names) - 1) > MAX_NVLINKS_PER_GPU)
    return {
        "gpu_count": len(gpus),
        "gpus": gpus,
        "nics": sorted(nics, key=lambda x: natural_key(x["name"])),
        "links": links,
        "nvlink": any(c is not None for c in nv),
        "nvswitch": switched,
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

