"""Hugepage arithmetic, parsers and post-boot verification (pure functions, stdlib only).

Runs on managed nodes (Python 3.8+) and on the controller (filter plugin ``hugepages``).

Units: every size in this module is in **bytes** unless the name says otherwise (``*_kb`` is
KiB, as /proc/meminfo prints it: its "kB" means 1024 bytes). Page counts are plain integers.

Sources:

- Vendor sizing rule for the user-space network stack (issue 4): 1 GiB pages = GPUs x 5 + 10.
- Kernel command line semantics (``default_hugepagesz=``, ``hugepagesz=``, ``hugepages=``; a
  ``hugepages=`` applies to the ``hugepagesz=`` before it, or to the default size when none
  precedes it): Linux ``Documentation/admin-guide/mm/hugetlbpage.rst`` and
  ``Documentation/admin-guide/kernel-parameters.txt``.
- Page sizes a kernel offers: the directories ``/sys/kernel/mm/hugepages/hugepages-<N>kB``
  (hugetlbpage.rst). Without sysfs, per architecture and base page size: x86_64 2 MiB and, with
  the ``pdpe1gb`` CPU flag, 1 GiB; arm64 per granule (``Documentation/arch/arm64/hugetlbpage.rst``):
  4 KiB granule -> 64 KiB, 2 MiB, 32 MiB, 1 GiB; 16 KiB -> 2 MiB, 32 MiB, 1 GiB;
  64 KiB -> 2 MiB, 512 MiB, 16 GiB (no 1 GiB: fixture C22, NVIDIA/nodewright-packages PR #127).
- Kubelet discovers hugepage capacity only when it starts (kubernetes/kubernetes #64309,
  fixture C20); resource names are ``hugepages-<size>`` with a binary suffix (``hugepages-2Mi``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

DEFAULT_MIN_FREE_SHARE = 0.25

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgGtT]?)(i?[bB]?)\s*$")
_SYSFS_NAME_RE = re.compile(r"hugepages-(\d+)kB")
_UNIT = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": TiB}


class HugepagesError(ValueError):
    """A hugepage request that cannot be met, or input that cannot be read.

    The message always carries the numbers and what to change.
    """


class HugepagesParseError(HugepagesError, ParseError):
    """A node output (meminfo, kubectl describe node, a quantity) that does not read; names the line."""


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------


def parse_size(value) -> int:
    """Page size in bytes from ``1G``, ``1GiB``, ``2M``, ``2048kB``, ``hugepages-1048576kB`` or an int.

    Letters are binary (``1G`` = 2**30 bytes), as the kernel reads ``hugepagesz=``; an int is
    taken as bytes. Raises HugepagesError for anything else.
    """
    if isinstance(value, bool):
        raise HugepagesError(f"page size must be a size such as '1G' or '2M', got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise HugepagesError(f"page size must be positive, got {value} bytes")
        return value
    text = str(value).strip()
    m = _SYSFS_NAME_RE.fullmatch(text)
    if m:
        return int(m.group(1)) * KiB
    m = _SIZE_RE.match(text)
    if not m or int(m.group(1)) <= 0:
        raise HugepagesError(
            f"cannot read page size {value!r}: use a size such as '1G', '2M', '512M' or '2048kB'"
        )
    return int(m.group(1)) * _UNIT[m.group(2).lower()]


def kernel_size(size_bytes: int) -> str:
    """The kernel command-line spelling of a size: 1 GiB -> ``1G``, 2 MiB -> ``2M``, 64 KiB -> ``64K``."""
    for unit, letter in ((TiB, "T"), (GiB, "G"), (MiB, "M"), (KiB, "K")):
        if size_bytes % unit == 0:
            return f"{size_bytes // unit}{letter}"
    return str(size_bytes)


def human_size(size_bytes: float) -> str:
    """Human form for messages: ``1 GiB``, ``512 MiB``, ``13.5 GiB``."""
    for unit, name in ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if size_bytes >= unit:
            value = size_bytes / unit
            if abs(value - round(value)) < 0.05:
                return f"{round(value)} {name}"
            return f"{value:.1f} {name}"
    return f"{int(size_bytes)} B"


def kubelet_resource_name(size_bytes: int) -> str:
    """Kubernetes extended resource name for a page size: 2 MiB -> ``hugepages-2Mi``."""
    for unit, suffix in ((GiB, "Gi"), (MiB, "Mi"), (KiB, "Ki")):
        if size_bytes % unit == 0:
            return f"hugepages-{size_bytes // unit}{suffix}"
    return f"hugepages-{size_bytes}"


# --------------------------------------------------------------------------------------------
# Sizing rule
# --------------------------------------------------------------------------------------------


def vendor_page_count(gpus: int) -> int:
    """Number of 1 GiB pages the vendor's network stack wants: ``gpus * 5 + 10`` (50 on 8 GPUs).

    Source: the vendor's sizing rule quoted in issue 4 (user-space network stack loaded by NCCL
    as a net plugin). ``gpus`` is the GPU count of the node (int >= 0).
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise HugepagesError(f"GPU count must be an integer >= 0, got {gpus!r}")
    return gpus * 5 + 10


# --------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------

_MEMINFO_RE = re.compile(r"^\s*([A-Za-z_()]+)\s*:\s*(\d+)(?:\s*kB)?\s*$")
_MEMINFO_KEYS = {
    "HugePages_Total": "total",
    "HugePages_Free": "free",
    "HugePages_Rsvd": "rsvd",
    "HugePages_Surp": "surp",
    "Hugepagesize": "page_size_kb",
    "MemTotal": "mem_total_kb",
    "Hugetlb": "hugetlb_kb",
}


def parse_meminfo(text: str) -> dict:
    """Read the hugepage lines of ``/proc/meminfo`` (whole file or ``grep -i huge`` of it).

    Returns ``{"total", "free", "rsvd", "surp"}`` (pages of the default size),
    ``"page_size_kb"`` (Hugepagesize, KiB), ``"mem_total_kb"`` and ``"hugetlb_kb"`` (KiB, all
    pool sizes together, kernel >= 4.16); a field absent from the text is None. Derived:
    ``"page_size"`` (bytes) and ``"total_bytes"`` (total x page size). Other lines (a shell
    prompt, sysfs or mount lines pasted with it) are ignored. Raises HugepagesError when no
    ``HugePages_Total`` line is found.
    """
    out = dict.fromkeys(_MEMINFO_KEYS.values())
    for line in str(text).splitlines():
        m = _MEMINFO_RE.match(line)
        if m and m.group(1) in _MEMINFO_KEYS:
            out[_MEMINFO_KEYS[m.group(1)]] = int(m.group(2))
    if out["total"] is None:
        raise HugepagesParseError("no 'HugePages_Total:' line in the text: pass the output of 'cat /proc/meminfo'")
    out["page_size"] = out["page_size_kb"] * KiB if out["page_size_kb"] is not None else None
    out["total_bytes"] = out["total"] * out["page_size"] if out["page_size"] is not None else None
    return out


def mem_total_bytes(text: str) -> int:
    """Node memory in bytes from ``/proc/meminfo``'s ``MemTotal`` line (the reader of
    :func:`parse_meminfo`, without its need for the hugepage lines: a kernel without hugetlbfs
    has none, and the plan refuses that with the sizes it offers). Raises HugepagesParseError
    when no ``MemTotal`` line is found."""
    for line in str(text).splitlines():
        m = _MEMINFO_RE.match(line)
        if m and m.group(1) == "MemTotal":
            return int(m.group(2)) * KiB
    raise HugepagesParseError("no 'MemTotal:' line in the text: pass the output of 'cat /proc/meminfo'")


def supported_page_sizes(listing) -> list:
    """Page sizes (bytes, ascending) the running kernel offers.

    ``listing`` is the output of ``ls /sys/kernel/mm/hugepages`` (a string, any whitespace) or a
    list of its names (``hugepages-1048576kB``) or of full paths to them. Raises HugepagesError
    when nothing in it names a pool (hugetlbfs not built in, or the wrong text).
    """
    items = listing.split() if isinstance(listing, str) else list(listing or [])
    sizes = set()
    for item in items:
        m = _SYSFS_NAME_RE.search(str(item))
        if m:
            sizes.add(int(m.group(1)) * KiB)
    if not sizes:
        raise HugepagesError(
            f"no 'hugepages-<N>kB' entries in {listing!r}: the kernel offers no hugepage sizes (is "
            "CONFIG_HUGETLBFS enabled?) or this is not a listing of /sys/kernel/mm/hugepages"
        )
    return sorted(sizes)


def kernel_page_sizes(arch: str, base_page_size: int = 4096, cpu_flags=None) -> list:
    """Page sizes (bytes) a kernel offers by architecture and base page size (``getconf PAGESIZE``).

    For render time, before a node can be asked for its sysfs listing. ``cpu_flags`` (x86_64
    only; list of /proc/cpuinfo flags) removes 1 GiB when ``pdpe1gb`` is absent; None assumes
    present. Sources in the module docstring (arm64 hugetlbpage.rst per granule).
    """
    a = str(arch).lower()
    if a in ("x86_64", "amd64"):
        sizes = [2 * MiB, GiB]
        if cpu_flags is not None and "pdpe1gb" not in cpu_flags:
            sizes = [2 * MiB]
        return sizes
    if a in ("aarch64", "arm64"):
        table = {
            4 * KiB: [64 * KiB, 2 * MiB, 32 * MiB, GiB],
            16 * KiB: [2 * MiB, 32 * MiB, GiB],
            64 * KiB: [2 * MiB, 512 * MiB, 16 * GiB],
        }
        if int(base_page_size) in table:
            return table[int(base_page_size)]
        raise HugepagesError(
            f"unknown arm64 base page size {base_page_size!r} bytes (expected 4096, 16384 or 65536)"
        )
    if a in ("ppc64le", "ppc64"):
        return [2 * MiB, GiB] if int(base_page_size) == 64 * KiB else [16 * MiB, 16 * GiB]
    raise HugepagesError(
        f"no built-in hugepage table for architecture {arch!r}: read /sys/kernel/mm/hugepages instead"
    )


_CMD_TOKEN_RE = re.compile(r"^(default_hugepagesz|hugepagesz|hugepages)=(\S+)$")
# hugepages=<integer> or, Linux 5.16+ (commit b5389086ad7b), the node format
# <node>:<integer>[,<node>:<integer>] (kernel-parameters.txt; mm/hugetlb.c hugepages_setup,
# which also steps over a trailing comma).
_CMD_COUNT_RE = re.compile(r"^\d+$")
_CMD_NODES_RE = re.compile(r"^\d+:\d+(?:,\d+:\d+)*,?$")


def parse_cmdline_hugepages(cmdline: str) -> dict:
    """Hugepage pools requested by a kernel command line (``/proc/cmdline`` or a grub line).

    Returns ``{"default_size": bytes or None, "pools": {size_bytes: count}}``, following the
    kernel's rule that ``hugepages=N`` applies to the ``hugepagesz=`` before it, or to the
    default size when none precedes it (the default is then recorded under key 0 when no
    ``default_hugepagesz=`` names it). Other tokens are ignored.

    The per-NUMA-node form ``hugepages=0:4,1:4`` (Linux 5.16+) counts as the sum of the nodes
    (the kernel adds them to the pool: 8 here); the split is kept under an extra key,
    ``"nodes": {size_bytes: {node: count}}``, present only when some pool is given per node.
    Raises HugepagesParseError naming the token for a size or count that does not read.
    """
    default = None
    current = None
    pools = {}
    nodes = {}
    for token in str(cmdline).split():
        m = _CMD_TOKEN_RE.match(token)
        if not m:
            continue
        key, value = m.groups()
        if key in ("default_hugepagesz", "hugepagesz"):
            try:
                size = parse_size(value)
            except HugepagesError as exc:
                raise HugepagesParseError(f"kernel command line token {token!r}: {exc}") from None
            if key == "default_hugepagesz":
                default = size
            else:
                current = size
            continue
        pool = current if current is not None else (default or 0)
        if _CMD_COUNT_RE.match(value):
            pools[pool] = int(value)
            nodes.pop(pool, None)
        elif _CMD_NODES_RE.match(value):
            split = {}
            for pair in value.rstrip(",").split(","):
                node, count = (int(part) for part in pair.split(":"))
                if node in split:
                    raise HugepagesParseError(f"kernel command line token {token!r}: node {node} is given twice")
                split[node] = count
            pools[pool] = sum(split.values())
            nodes[pool] = split
        else:
            raise HugepagesParseError(
                f"kernel command line token {token!r}: hugepages= takes a page count (hugepages=16) or "
                "per-node counts (hugepages=0:4,1:4)"
            )
    if default is not None:
        if 0 in pools:
            pools[default] = pools.pop(0)
        if 0 in nodes:
            nodes[default] = nodes.pop(0)
    out = {"default_size": default, "pools": pools}
    if nodes:
        out["nodes"] = nodes
    return out


def parse_node_pages(text: str) -> dict:
    """Per-NUMA-node pool counters from ``cat`` of sysfs files, as pasted with the command.

    Reads pairs such as ``$ cat /sys/devices/system/node/node0/hugepages/hugepages-2048kB/
    free_hugepages`` followed by a number line. Returns
    ``{node: {size_bytes: {"free_hugepages": n, ...}}}`` (node is an int). Also reads
    ``grep . /sys/devices/system/node/node*/hugepages/hugepages-*/*``, which puts each value
    after its path and a colon on one line (``.../hugepages-1048576kB/nr_hugepages:3``).
    """
    out = {}
    pending = None
    path_re = re.compile(r"node(\d+)/hugepages/hugepages-(\d+)kB/(\w+)(?::\s*(\d+)\s*$)?")
    for line in str(text).splitlines():
        m = path_re.search(line)
        if m:
            pending = (int(m.group(1)), int(m.group(2)) * KiB, m.group(3))
            if m.group(4) is not None:  # grep's "path:value" form
                out.setdefault(pending[0], {}).setdefault(pending[1], {})[pending[2]] = int(m.group(4))
                pending = None
            continue
        if pending and line.strip().isdigit():
            node, size, counter = pending
            out.setdefault(node, {}).setdefault(size, {})[counter] = int(line.strip())
            pending = None
    return out


def parse_hugetlbfs_mounts(text: str) -> list:
    """hugetlbfs mounts from ``/proc/mounts`` (or ``grep huge`` of it).

    Returns ``[{"mountpoint": str, "page_size": bytes or None, "options": [str]}]``; page_size
    is None when the mount has no ``pagesize=`` option (it then uses the default size). Lines of
    other filesystems (e.g. the hugetlb cgroup controller) are skipped.
    """
    mounts = []
    for line in str(text).splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "hugetlbfs":
            options = parts[3].split(",")
            size = None
            for opt in options:
                if opt.startswith("pagesize="):
                    size = parse_size(opt.split("=", 1)[1])
            mounts.append({"mountpoint": parts[1], "page_size": size, "options": options})
    return mounts


_QUANTITY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?\s*$")
_QUANTITY_UNIT = {
    None: 1,
    "Ki": KiB,
    "Mi": MiB,
    "Gi": GiB,
    "Ti": TiB,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Pi": 1024 * TiB,
    "P": 10**15,
}


def parse_quantity(text: str) -> int:
    """Kubernetes resource quantity in bytes: ``8Gi`` -> 8589934592, ``0`` -> 0, ``264110532Ki``."""
    m = _QUANTITY_RE.match(str(text))
    if not m:
        raise HugepagesParseError(f"cannot read Kubernetes quantity {text!r}")
    return int(float(m.group(1)) * _QUANTITY_UNIT[m.group(2)])


_NODE_SECTIONS = ("Capacity", "Allocatable")
_SECTION_RE = re.compile(r"^([A-Z][A-Za-z ]*):\s*$")
_OTHER_FIELD_RE = re.compile(r"^[A-Z][A-Za-z ]*:")
_RESOURCE_RE = re.compile(r"^([a-z0-9][A-Za-z0-9._/-]*)\s*:\s*(\S*)\s*$")
_ELISION_RE = re.compile(r"^(?:\.\.\.|…|#.*|\$.*|\[[^\]]*\][#$].*)$")


def _resource_value(name, raw, where):
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        try:
            return parse_quantity(raw)
        except HugepagesError:
            raise HugepagesParseError(f"{where}: {name} {raw!r} is not a Kubernetes quantity") from None
    if name == "cpu":
        m = re.match(r"^(\d+)(m?)$", raw)
        if not m:
            raise HugepagesParseError(f"{where}: cpu {raw!r} is not a CPU quantity (2, 500m)")
        return int(m.group(1)) * (1 if m.group(2) else 1000)  # millicores
    return int(raw) if raw.isdigit() else raw


def parse_node_resources(text: str) -> dict:
    """``Capacity`` and ``Allocatable`` of ``kubectl describe node`` (kubectl 1.10 to 1.33).

    Grammar: a section header ``Capacity:`` / ``Allocatable:`` at column 0, then one
    ``<resource>: <quantity>`` line each (one-space indent, padded with spaces); the next header
    (``System Info:``, ``Allocated resources:``, ...) ends it. The indentation may be lost in a
    paste (resource names are lower case, headers capitalised); ``...`` elisions, ``#``
    comments and prompt lines are skipped. Each value is read with its own unit (fixture N12:
    ``ephemeral-storage`` is ``39269648Ki`` under Capacity but plain bytes under Allocatable).

    Returns ``{"capacity": {...}, "allocatable": {...}}``: memory, ephemeral-storage and
    ``hugepages-*`` in bytes, ``cpu`` in millicores, counts (pods, ``nvidia.com/gpu``) as ints,
    anything else as the text. Raises HugepagesError naming the line for a resource line
    without a value (a cut paste) or a quantity that does not read.
    """
    out = {"capacity": {}, "allocatable": {}}
    section = None
    for lineno, line in enumerate(str(text).splitlines(), 1):
        s = line.strip()
        if not s or _ELISION_RE.match(s):
            continue
        m = _SECTION_RE.match(s)
        if m:
            section = m.group(1).strip().lower() if m.group(1).strip() in _NODE_SECTIONS else None
            continue
        if section is None:
            continue
        if _OTHER_FIELD_RE.match(s):
            section = None
            continue
        m = _RESOURCE_RE.match(s)
        if not m:
            raise HugepagesParseError(f"kubectl describe node line {lineno}: expected '<resource>: "
                                 f"<quantity>' under {section.capitalize()}, got {s!r}")
        if not m.group(2):
            raise HugepagesParseError(f"kubectl describe node line {lineno}: {m.group(1)} has no value "
                                 f"(paste cut?)")
        out[section][m.group(1)] = _resource_value(m.group(1), m.group(2),
                                                   f"kubectl describe node line {lineno}")
    if not out["capacity"] and not out["allocatable"]:
        raise HugepagesParseError("kubectl describe node: no 'Capacity:' or 'Allocatable:' section with "
                                  "resources (pass the output of 'kubectl describe node <name>')")
    return out


def parse_kubelet_capacity(text: str, section: str = "Capacity") -> dict:
    """``hugepages-*`` and ``memory`` of one section of ``kubectl describe node``, in bytes
    (:func:`parse_node_resources`). E.g. ``{"hugepages-1Gi": 0, "hugepages-2Mi": 0,
    "memory": 270449184768}``.
    """
    values = parse_node_resources(text)[section.lower()]
    return {k: v for k, v in values.items() if k == "memory" or k.startswith("hugepages-")}


def _resource_size(name):
    """``hugepages-2Mi`` -> 2097152 (the page size a kubelet resource name stands for)."""
    return parse_quantity(name[len("hugepages-"):])


def node_hugepages_reading(meminfo, describe_node) -> dict:
    """What a node's hugepages are, from ``/proc/meminfo`` and ``kubectl describe node`` together.

    Returns ``{"total", "free", "in_use" (pages), "page_size" (bytes or None),
    "page_size_source" ("meminfo" | "kubelet capacity" | None), "free_bytes" (None when the size
    is unknown), "capacity", "allocatable" (parse_node_resources), "memory_reserved_bytes"
    (Capacity - Allocatable memory beyond the hugepages, i.e. kube/system reserve and eviction
    threshold), "findings": [sentences]}``.

    The page size comes from meminfo's ``Hugepagesize``, else from the kubelet resource whose
    capacity is exactly ``HugePages_Total`` pages of its size (fixture N12: hugepages-2Mi = 1Gi
    = 512 x 2 MiB); otherwise it stays unknown, never assumed. Allocatable is static: pods'
    use does not lower it (N12); free memory is HugePages_Free x size, which is what the
    findings say instead of reporting a fault.
    """
    info = parse_meminfo(meminfo) if isinstance(meminfo, str) else meminfo
    node = parse_node_resources(describe_node) if isinstance(describe_node, str) else describe_node
    cap, alloc = node["capacity"], node["allocatable"]
    size, source = info.get("page_size"), "meminfo" if info.get("page_size") else None
    if size is None and info.get("total"):
        fits = [_resource_size(k) for k, v in cap.items()
                if k.startswith("hugepages-") and v == info["total"] * _resource_size(k)]
        if len(fits) == 1:
            size, source = fits[0], "kubelet capacity"
    free = info.get("free")
    in_use = info["total"] - free if free is not None else None
    findings = []
    hp_alloc = sum(v for k, v in alloc.items() if k.startswith("hugepages-"))
    reserved = None
    if "memory" in cap and "memory" in alloc:
        reserved = cap["memory"] - alloc["memory"] - hp_alloc
    if size is None:
        findings.append("hugepage size unknown (no Hugepagesize line and no kubelet resource matches "
                        "HugePages_Total): free bytes not computed")
    elif size is not None and free is not None:
        name = kubelet_resource_name(size)
        if name in alloc and in_use:
            findings.append(f"{name} Allocatable {human_size(alloc[name])} is static: the {in_use} pages in "
                            f"use do not lower it; free now: {free} x {human_size(size)} = "
                            f"{human_size(free * size)} (meminfo)")
        if name in cap and cap[name] != info["total"] * size:
            findings.append(f"kubelet reports {name} capacity {human_size(cap[name])} but the kernel has "
                            f"{info['total']} x {human_size(size)}: restart kubelet to rediscover (C20)")
    return {"total": info["total"], "free": free, "in_use": in_use, "page_size": size,
            "page_size_source": source, "free_bytes": free * size if size and free is not None else None,
            "capacity": cap, "allocatable": alloc, "memory_reserved_bytes": reserved,
            "findings": findings}


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HugepagesPlan:
    """A checked hugepage request.

    ``pools``: tuple of ``(page_size_bytes, count)`` in the order they go on the command line;
    ``default_size``: bytes (``default_hugepagesz``); ``mem_total``: bytes of node memory;
    ``reserved``: bytes all pools take; ``free_share``: share of memory left (0..1).
    """

    pools: tuple
    default_size: int
    mem_total: int
    reserved: int = field(default=0)
    free_share: float = field(default=1.0)

    @property
    def count(self) -> int:
        """Pages in the default-size pool (what /proc/meminfo reports as HugePages_Total)."""
        return dict(self.pools).get(self.default_size, 0)

    def as_dict(self) -> dict:
        """Plain-data form (for Ansible facts and templates); sizes in bytes plus kernel spelling."""
        return {
            "pools": [
                {"page_size": size, "page_size_name": kernel_size(size), "count": count}
                for size, count in self.pools
            ],
            "default_size": self.default_size,
            "default_size_name": kernel_size(self.default_size),
            "count": self.count,
            "mem_total": self.mem_total,
            "reserved": self.reserved,
            "free_share": round(self.free_share, 4),
            "kernel_args": kernel_cmdline_args(self),
        }


def _as_plan(plan) -> HugepagesPlan:
    if isinstance(plan, HugepagesPlan):
        return plan
    if isinstance(plan, dict) and "pools" in plan:
        pools = tuple((int(p["page_size"]), int(p["count"])) for p in plan["pools"])
        reserved = sum(s * c for s, c in pools)
        mem = int(plan.get("mem_total") or 0)
        return HugepagesPlan(
            pools=pools,
            default_size=int(plan["default_size"]),
            mem_total=mem,
            reserved=reserved,
            free_share=(mem - reserved) / mem if mem else 0.0,
        )
    raise HugepagesError(
        f"expected a hugepages plan (from plan() or the hugepages_plan filter), got {plan!r}"
    )


def _equivalent_hint(total_bytes: int, wanted: int, supported: list) -> str:
    smaller = [s for s in supported if s < wanted and total_bytes % s == 0]
    if not smaller:
        return ""
    size = max(smaller)
    n = total_bytes // size
    return (
        f"; the same {human_size(total_bytes)} fits as {n} x {human_size(size)} "
        f"(hugepagesz={kernel_size(size)} hugepages={n})"
    )


def plan_pools(
    pools,
    mem_total_bytes: int,
    supported_sizes,
    default_size=None,
    min_free_share: float = DEFAULT_MIN_FREE_SHARE,
) -> HugepagesPlan:
    """Check several pools together, e.g. ``[(5128, "2M"), (4, "512M")]`` (fixture C22).

    ``pools``: list of ``(count, page_size)`` with page_size as parse_size() reads it;
    ``mem_total_bytes``: node memory (MemTotal x 1024); ``supported_sizes``: what the running
    kernel offers (supported_page_sizes() or kernel_page_sizes(); sizes or names);
    ``default_size``: the pool that becomes ``default_hugepagesz`` (default: the first pool).
    Pinning the default matters where the kernel's own default differs (on a 64 KiB-granule
    arm64 kernel it is 512 MiB). Raises HugepagesError with the numbers when a size is not
    offered or the pools would leave less than ``min_free_share`` of memory.
    """
    if not pools:
        raise HugepagesError("no hugepage pools requested")
    try:
        mem_total = int(mem_total_bytes)
    except (TypeError, ValueError):
        raise HugepagesError(f"node memory must be a byte count, got {mem_total_bytes!r}") from None
    if mem_total <= 0:
        raise HugepagesError(f"node memory must be positive, got {mem_total_bytes!r} bytes")
    if not 0 <= float(min_free_share) < 1:
        raise HugepagesError(f"min_free_share must be in [0, 1), got {min_free_share!r}")
    supported = sorted({parse_size(s) for s in (supported_sizes or [])})
    if not supported:
        raise HugepagesError("the running kernel offers no hugepage sizes (empty supported_sizes)")

    checked = []
    for count, size in pools:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise HugepagesError(f"hugepage count must be an integer >= 1, got {count!r}")
        size_b = parse_size(size)
        if size_b not in supported:
            offered = ", ".join(human_size(s) for s in supported)
            hint = _equivalent_hint(count * size_b, size_b, supported)
            raise HugepagesError(
                f"hugepage size {human_size(size_b)} (hugepagesz={kernel_size(size_b)}) is not offered "
                f"by the running kernel (it offers {offered}); the kernel would reject it at boot and "
                "drop the hugepages= that follows. "
                f"Choose hugepages_size from the offered sizes{hint}"
            )
        if size_b in dict((s, c) for s, c in checked):
            raise HugepagesError(f"page size {kernel_size(size_b)} requested twice")
        checked.append((size_b, count))

    default_b = parse_size(default_size) if default_size is not None else checked[0][0]
    if default_b not in dict(checked):
        raise HugepagesError(
            "default_hugepagesz={} names no requested pool ({})".format(
                kernel_size(default_b), ", ".join(kernel_size(s) for s, _ in checked)
            )
        )

    reserved = sum(s * c for s, c in checked)
    left = mem_total - reserved
    share = left / mem_total
    if share < float(min_free_share):
        what = " + ".join(f"{c} x {human_size(s)}" for s, c in checked)
        if len(checked) == 1:
            size_b, count = checked[0]
            max_count = int((mem_total * (1 - float(min_free_share))) // size_b)
            lower = f"lower hugepages_count to at most {max_count}"
        else:
            lower = "lower the pool counts"
        raise HugepagesError(
            f"{what} = {human_size(reserved)} would leave {human_size(max(left, 0))} of "
            f"{human_size(mem_total)} ({max(share, 0) * 100:.0f}% < {float(min_free_share) * 100:.0f}%); "
            f"{lower}, or lower hugepages_min_free_share if the node really needs less free memory"
        )
    return HugepagesPlan(
        pools=tuple(checked),
        default_size=default_b,
        mem_total=mem_total,
        reserved=reserved,
        free_share=share,
    )


def plan(
    count: int,
    page_size,
    mem_total_bytes: int,
    supported_sizes,
    min_free_share: float = DEFAULT_MIN_FREE_SHARE,
) -> HugepagesPlan:
    """One pool of ``count`` pages of ``page_size`` (``"1G"``, ``"2M"``, bytes), also the default size.

    ``mem_total_bytes``: node memory in bytes; ``supported_sizes``: sizes the running kernel
    offers. Example: ``plan(50, "1G", 64 * GiB, [2 * MiB, GiB])`` raises "50 x 1 GiB = 50 GiB
    would leave 14 GiB of 64 GiB (22% < 25%); lower hugepages_count to at most 48, ...".
    """
    return plan_pools([(count, page_size)], mem_total_bytes, supported_sizes, None, min_free_share)


def kernel_cmdline_args(plan) -> list:
    """Kernel arguments for a plan: ``['default_hugepagesz=1G', 'hugepagesz=1G', 'hugepages=50']``.

    ``default_hugepagesz`` comes first, then one ``hugepagesz=``/``hugepages=`` pair per pool in
    plan order (each ``hugepages=`` follows its own ``hugepagesz=``, per hugetlbpage.rst).
    Accepts a HugepagesPlan or its as_dict() form.
    """
    p = _as_plan(plan)
    args = [f"default_hugepagesz={kernel_size(p.default_size)}"]
    for size, count in p.pools:
        args.append(f"hugepagesz={kernel_size(size)}")
        args.append(f"hugepages={count}")
    return args


# --------------------------------------------------------------------------------------------
# Verification after boot
# --------------------------------------------------------------------------------------------


def verify(meminfo, plan, kubelet_capacity=None, sysfs_pools=None) -> list:
    """Compare what the node has with the plan; return the mismatches (empty list = all good).

    ``meminfo``: parse_meminfo() result or raw /proc/meminfo text; ``plan``: HugepagesPlan or
    its dict; ``kubelet_capacity``: optional parse_kubelet_capacity() result (bytes per
    ``hugepages-<size>``); ``sysfs_pools``: optional ``{size_bytes: nr_hugepages}`` for the
    non-default pools (meminfo only reports the default size). Each mismatch is
    ``{"field", "expected", "actual", "cause"}`` where cause names the likely reason and the fix.
    """
    info = parse_meminfo(meminfo) if isinstance(meminfo, str) else meminfo
    p = _as_plan(plan)
    out = []

    page_size = info.get("page_size")
    if page_size is None and info.get("page_size_kb") is not None:
        page_size = info["page_size_kb"] * KiB
    if page_size is not None and page_size != p.default_size:
        out.append(
            {
                "field": "Hugepagesize",
                "expected": p.default_size,
                "actual": page_size,
                "cause": f"default hugepage size is {human_size(page_size)}, planned "
                f"{human_size(p.default_size)}: default_hugepagesz={kernel_size(p.default_size)} is not on "
                "the running kernel's command line (drop-in not applied, update-grub/grubby not run, "
                "or the node has not rebooted yet)",
            }
        )
    else:
        total = info.get("total")
        want = p.count
        if total is not None and total != want:
            if total == 0:
                cause = (
                    f"no pages allocated: the kernel command line with hugepages={want} is not active "
                    "(reboot pending, or the bootloader config was not regenerated), or the kernel "
                    f"rejected hugepagesz={kernel_size(p.default_size)}"
                )
            elif total < want:
                cause = (
                    f"only {total} of {want} pages: allocation at run time found memory too fragmented "
                    f"for contiguous {human_size(p.default_size)} pages (or too little free memory); "
                    "allocate them at boot on the kernel command line"
                )
            else:
                cause = (
                    f"{total} pages, {want} planned: something else also allocates pages (vm.nr_hugepages "
                    "in sysctl.d, another hugepages= on the command line, a tuned profile)"
                )
            out.append({"field": "HugePages_Total", "expected": want, "actual": total, "cause": cause})

    for size, count in p.pools:
        if size == p.default_size or not sysfs_pools or size not in sysfs_pools:
            continue
        actual = int(sysfs_pools[size])
        if actual != count:
            out.append(
                {
                    "field": f"nr_hugepages ({kernel_size(size)})",
                    "expected": count,
                    "actual": actual,
                    "cause": f"the {human_size(size)} pool has {actual} pages, planned {count}: "
                    f"hugepagesz={kernel_size(size)} hugepages={count} not active (reboot pending) or "
                    "memory fragmented at run-time allocation",
                }
            )

    if kubelet_capacity is not None:
        for size, count in p.pools:
            name = kubelet_resource_name(size)
            expected = size * count
            if name in kubelet_capacity and int(kubelet_capacity[name]) != expected:
                out.append(
                    {
                        "field": f"kubelet {name}",
                        "expected": expected,
                        "actual": int(kubelet_capacity[name]),
                        "cause": f"kubelet reports {name} = {human_size(int(kubelet_capacity[name]))} but "
                        f"the node has {human_size(expected)}: kubelet reads hugepage capacity only when "
                        "it starts, so the pages were allocated after kubelet started; allocate at boot "
                        "(or before kubelet), then restart kubelet and check the node capacity again",
                    }
                )
    return out
