"""Allreduce bandwidth arithmetic and the validation table.

Definitions from nccl-tests (doc/PERFORMANCE.md):
- algorithm bandwidth ``algbw = S / t`` with S the buffer size in bytes and t the time of one
  allreduce in seconds;
- bus bandwidth ``busbw = algbw * 2(n-1)/n`` for allreduce on n ranks: the rate each link
  must carry in a ring, comparable to the hardware's line rate whatever n is.
Bandwidths are reported in GB/s (10^9 bytes per second), as nccl-tests prints them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# busbw_gbps(algbw, ranks): the one definition of bus bandwidth, with its source, is bench.busbw.
from ansible_collections.gpucluster.cluster.plugins.module_utils.bench import busbw as busbw_gbps


def algbw_gbps(size_bytes: int, time_s: float) -> float:
    """Algorithm bandwidth in GB/s for ``size_bytes`` reduced in ``time_s`` seconds."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, got {time_s}")
    return size_bytes / time_s / 1e9


@dataclass
class Row:
    bytes: int
    count: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    correct: bool


def rows(bench: dict) -> list[Row]:
    """Table rows from the JSON that ``roles/validate/files/allreduce_bench.py`` prints."""
    n = int(bench["ranks"])
    out = []
    for r in bench["results"]:
        alg = algbw_gbps(int(r["bytes"]), float(r["time_s"]))
        out.append(Row(int(r["bytes"]), int(r["count"]), float(r["time_s"]) * 1e6, alg,
                       busbw_gbps(alg, n), int(r["wrong_elements"]) == 0))
    return out


def human_bytes(n: float) -> str:
    """1024 -> '1 KiB', 67108864 -> '64 MiB' (binary units, as the sizes are powers of 2)."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} GiB"


def table(bench: dict) -> str:
    """A fixed-width text table like nccl-tests' (size, count, time, algbw, busbw, check)."""
    lines = [
        f"allreduce (sum, float32) on {bench['ranks']} ranks: {', '.join(bench.get('hosts', []))}",
        f"{'size':>10} {'count':>10} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}  result",
    ]
    for r in rows(bench):
        lines.append(
            f"{human_bytes(r.bytes):>10} {r.count:>10} {r.time_us:>12.1f} {r.algbw_gbps:>12.3f} "
            f"{r.busbw_gbps:>12.3f}  {'OK' if r.correct else 'WRONG'}"
        )
    return "\n".join(lines)


def report(bench: dict) -> dict:
    """The JSON report: input metadata, per-size rows, and whether every value was correct."""
    rs = rows(bench)
    return {
        "ranks": bench["ranks"],
        "hosts": bench.get("hosts", []),
        "op": bench.get("op", "sum"),
        "rows": [asdict(r) for r in rs],
        "all_correct": all(r.correct for r in rs),
        "max_busbw_gbps": max((r.busbw_gbps for r in rs), default=0.0),
    }
