"""Benchmark output parsers and the scaling arithmetic.

Pure functions over the text the tools print (tested on the captured outputs in
``tests/fixtures/benchmark-output``):

- Horovod's synthetic benchmarks (``pytorch_synthetic_benchmark.py``,
  ``tensorflow2_synthetic_benchmark.py``): ``Iter #i: X img/sec per GPU``,
  ``Img/sec per GPU: X +-Y`` and ``Total img/sec on N GPU(s): X +-Y`` (the ``+-`` is the
  script's 1.96 x standard deviation), with or without a launcher's per-rank prefix
  (``[1,0]<stdout>:``, ``[0]<stdout>:``, Open MPI 5's forms: ``parsing.strip_launcher_prefix``),
  whole or as a fragment;
- tf_cnn_benchmarks: ``total images/sec: X``;
- nccl-tests (``all_reduce_perf`` and friends): the results table in the current layout
  (``root`` and ``#wrong`` columns) and the old one (no ``root``; an ``error`` column holding
  the maximum numeric error), ``Avg bus bandwidth``, ``Out of bounds values``, the device list,
  and a run that died (``Test NCCL failure file:line 'reason'``) reported as a failure with
  its reason.

  The table is read by its header line, whose grammar (nccl-tests ``src/common.cu`` and, from
  2025, ``src/util.cu`` ``writeResultHeader`` / ``writeBenchmarkLineBody``) is::

      size count type redop [root] BLOCK BLOCK [timestamp]
      BLOCK = (time | cputime) algbw busbw CHECK [i_min i_max i_p99 i_cv%]
      CHECK = #wrong   (current, 2022-09 on: a count printed with %5g / %6g, so past 1e6 it
                        reads 1.67772e+06; N/A when validation is off, -c 0)
            | error    (old: the maximum numeric error, %5.0le; N/A when -c 0)

  The two blocks are out-of-place then in-place. ``i_*`` are the per-iteration statistics of
  ``-I 1`` (v2.19.1, commit 0fdb00a); ``timestamp`` is ``-S 1`` (v2.17.6, commit a62c975),
  which appends ``%Y-%m-%d %H:%M:%S`` (two tokens) to every row. Old (pre-2022) device lists
  have no ``Group`` (``#   Rank  0 Pid  30938 on gpu01 device  0 [0x00] Tesla T4``).

Units: throughput in img/sec (samples/sec for non-image models); sizes in bytes; times in
microseconds; bandwidths in GB/s as nccl-tests prints them (1 GB = 1e9 bytes); line rates in
Gbit/s.

Formulas:

- scaling efficiency(N) = throughput(N) / (N x throughput(1)); speedup(N) =
  throughput(N) / throughput(1) (A. Sergeev, M. Del Balso, "Horovod: fast and easy
  distributed deep learning in TensorFlow", arXiv:1802.05799, 2018, which reports scaling
  efficiency this way);
- allreduce bus bandwidth = algbw x 2(n-1)/n, algbw = size / time (nccl-tests
  ``doc/PERFORMANCE.md``).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import strip_launcher_prefix

_NUM = r"([0-9]+(?:\.[0-9]+)?)"


class BenchmarkParseError(ValueError):
    """The text is not (a readable part of) the benchmark output this parser reads."""


def _lines(text: str) -> list[str]:
    if not isinstance(text, str):
        raise BenchmarkParseError(f"benchmark output must be text, not {type(text).__name__}")
    return [strip_launcher_prefix(line).rstrip() for line in text.splitlines()]


# --------------------------------------------------------------------------------------------
# Throughput: Horovod synthetic benchmarks and tf_cnn_benchmarks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThroughputResult:
    """A throughput reading.

    ``total`` is img/sec over all GPUs; ``total_ci`` / ``per_gpu_ci`` the ``+-`` the script
    prints; ``iterations`` the per-GPU img/sec of each ``Iter`` line (or, for
    tf_cnn_benchmarks, each step line's images/sec); ``gpus`` is None when the text does not
    say. ``rank_totals`` keeps every ``total images/sec`` line when several ranks printed one.
    """

    tool: str
    total: float
    gpus: int | None = None
    total_ci: float | None = None
    per_gpu: float | None = None
    per_gpu_ci: float | None = None
    iterations: tuple[float, ...] = ()
    model: str | None = None
    batch_size: int | None = None
    rank_totals: tuple[float, ...] = ()
    unit: str = "img/sec"

    @property
    def iterations_mean(self) -> float | None:
        return statistics.fmean(self.iterations) if self.iterations else None


def parse_horovod_synthetic(text: str) -> ThroughputResult:
    """Read Horovod's synthetic-benchmark output (``Total img/sec on N GPU(s): X +-Y``).

    Raises :class:`BenchmarkParseError` when the ``Total img/sec`` line is missing (the run
    did not finish, or this is not that benchmark's output) or appears more than once.
    """
    model = batch = header_gpus = None
    per_gpu = per_gpu_ci = None
    iterations: list[float] = []
    totals: list[tuple[int, float, float]] = []
    for line in _lines(text):
        if m := re.match(r"^Model:\s*(\S+)", line):
            model = m.group(1)
        elif m := re.match(r"^Batch size:\s*(\d+)", line):
            batch = int(m.group(1))
        elif m := re.match(r"^Number of GPUs:\s*(\d+)", line):
            header_gpus = int(m.group(1))
        elif m := re.match(rf"^Iter #\d+:\s*{_NUM}\s+img/sec per GPU", line):
            iterations.append(float(m.group(1)))
        elif m := re.match(rf"^Img/sec per GPU:\s*{_NUM}\s*\+-\s*{_NUM}", line):
            per_gpu, per_gpu_ci = float(m.group(1)), float(m.group(2))
        elif m := re.match(rf"^Total img/sec on (\d+) GPU\(s\):\s*{_NUM}\s*\+-\s*{_NUM}", line):
            totals.append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
    if not totals:
        raise BenchmarkParseError(
            "no 'Total img/sec on N GPU(s): X +-Y' line: the Horovod synthetic benchmark did not finish, "
            "or this is not its output (rank 0 prints the total at the end)"
        )
    if len(totals) > 1:
        raise BenchmarkParseError(
            f"{len(totals)} 'Total img/sec' lines: give the output of one run at a time"
        )
    gpus, total, total_ci = totals[0]
    if header_gpus is not None and header_gpus != gpus:
        raise BenchmarkParseError(
            f"'Number of GPUs: {header_gpus}' disagrees with 'Total img/sec on {gpus} GPU(s)': "
            "the text mixes two runs"
        )
    return ThroughputResult(
        tool="horovod_synthetic",
        total=total,
        gpus=gpus,
        total_ci=total_ci,
        per_gpu=per_gpu,
        per_gpu_ci=per_gpu_ci,
        iterations=tuple(iterations),
        model=model,
        batch_size=batch,
    )


def parse_tf_cnn_benchmarks(text: str) -> ThroughputResult:
    """Read tf_cnn_benchmarks output (``total images/sec: X``; step lines are tab-separated).

    With ``--variable_update=horovod`` every rank prints its own ``total images/sec`` line;
    all are kept in ``rank_totals`` and ``total`` is the first one (rank 0 when the launcher
    tags or orders the output). ``gpus`` is None: the text does not say.
    """
    totals: list[float] = []
    steps: list[float] = []
    for line in _lines(text):
        if m := re.match(rf"^\s*total images/sec:\s*{_NUM}", line):
            totals.append(float(m.group(1)))
        elif m := re.match(rf"^\s*\d+\s+images/sec:\s*{_NUM}", line):
            steps.append(float(m.group(1)))
    if not totals:
        raise BenchmarkParseError(
            "no 'total images/sec: X' line: tf_cnn_benchmarks did not finish, or this is not its output"
        )
    return ThroughputResult(
        tool="tf_cnn_benchmarks",
        total=totals[0],
        iterations=tuple(steps),
        rank_totals=tuple(totals),
    )


def parse_throughput(text: str) -> ThroughputResult:
    """Read whichever of the two throughput outputs ``text`` is."""
    lines = _lines(text)
    if any(line.startswith("Total img/sec on ") for line in lines):
        return parse_horovod_synthetic(text)
    if any(re.match(r"^\s*total images/sec:", line) for line in lines):
        return parse_tf_cnn_benchmarks(text)
    raise BenchmarkParseError(
        "neither a Horovod synthetic benchmark ('Total img/sec on N GPU(s)') nor tf_cnn_benchmarks "
        "('total images/sec') result line found"
    )


# --------------------------------------------------------------------------------------------
# nccl-tests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclRank:
    """One line of the ``Using devices`` list."""

    rank: int
    pid: int
    host: str
    device: int
    bus_id: str
    name: str
    group: int | None = None  # None in the lists printed before nccl-tests d313d20 (2022-09)


@dataclass(frozen=True)
class NcclRow:
    """One results row. ``size`` bytes, ``time`` microseconds, ``algbw``/``busbw`` GB/s.

    ``wrong`` is the ``#wrong`` count of the current layout (None for ``N/A``, printed when
    validation is off; past 1e6 nccl-tests prints it with 6 significant digits, so the count
    is then rounded); ``error`` is the old layout's maximum numeric error (a magnitude,
    not a count: ``5e-07`` is a pass; None for ``N/A``). Prefix ``oop_`` = out-of-place,
    ``ip_`` = in-place. ``*_per_iter`` is ``(i_min us, i_max us, i_p99 us, i_cv %)`` of a
    ``-I 1`` run, ``timestamp`` the ``-S 1`` suffix (``2025-10-28 12:00:01``, local time).
    """

    size: int
    count: int
    type: str
    redop: str
    root: int | None
    oop_time: float
    oop_algbw: float
    oop_busbw: float
    ip_time: float
    ip_algbw: float
    ip_busbw: float
    oop_wrong: int | None = None
    ip_wrong: int | None = None
    oop_error: float | None = None
    ip_error: float | None = None
    oop_per_iter: tuple[float, float, float, float] | None = None
    ip_per_iter: tuple[float, float, float, float] | None = None
    timestamp: str | None = None


@dataclass(frozen=True)
class NcclFailure:
    """Why a run died: ``Test NCCL failure common.cu:959 'internal error ...'``."""

    message: str
    host: str | None = None
    pid: int | None = None
    locations: tuple[str, ...] = ()


@dataclass(frozen=True)
class NcclTestsResult:
    """A parsed nccl-tests run. ``ok`` is False when it died, printed wrong results or
    reported out-of-bounds values; ``reason`` then says why."""

    layout: str  # "current" (root, #wrong) | "old" (error column) | "none" (no table)
    rows: tuple[NcclRow, ...] = ()
    ranks: tuple[NcclRank, ...] = ()
    avg_busbw: float | None = None
    out_of_bounds: int | None = None
    failure: NcclFailure | None = None
    #: From the ``nThread`` line: nThread, nGpus (per process), minBytes, maxBytes, validation.
    header: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def reason(self) -> str | None:
        if self.failure is not None:
            where = f" on {self.failure.host}" if self.failure.host else ""
            pid = f" (pid {self.failure.pid})" if self.failure.pid is not None else ""
            at = f" at {', '.join(self.failure.locations)}" if self.failure.locations else ""
            return f"run failed{where}{pid}{at}: {self.failure.message}"
        if self.out_of_bounds:
            return f"{self.out_of_bounds} out-of-bounds values: the allreduce produced wrong data"
        bad = [r.size for r in self.rows if (r.oop_wrong or 0) > 0 or (r.ip_wrong or 0) > 0]
        if bad:
            return f"#wrong > 0 at {len(bad)} sizes (first {bad[0]} bytes): the allreduce produced wrong data"
        return None

    @property
    def hosts(self) -> dict[str, int]:
        """Ranks per host from the device list, in order of appearance."""
        out: dict[str, int] = {}
        for r in self.ranks:
            out[r.host] = out.get(r.host, 0) + 1
        return out

    def peak_busbw(self, placement: str | None = None) -> tuple[float, int, str]:
        """The highest bus bandwidth: ``(GB/s, size in bytes, "out-of-place"|"in-place")``.

        ``placement`` limits the search to one of the two; ties go to the larger size.
        """
        if not self.rows:
            raise BenchmarkParseError(f"no results table to take a peak from ({self.reason or 'empty'})")
        candidates = []
        for r in self.rows:
            if placement in (None, "out-of-place"):
                candidates.append((r.oop_busbw, r.size, "out-of-place"))
            if placement in (None, "in-place"):
                candidates.append((r.ip_busbw, r.size, "in-place"))
        return max(candidates, key=lambda c: (c[0], c[1]))

    def mean_busbw(self) -> float:
        """Mean of every busbw value in the table (both placements): what ``Avg bus bandwidth``
        prints, up to rounding."""
        values = [v for r in self.rows for v in (r.oop_busbw, r.ip_busbw)]
        if not values:
            raise BenchmarkParseError("no results table")
        return statistics.fmean(values)


# "Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" (nccl-tests d313d20, 2022-09 on);
# before it "Rank %2d Pid %6d on %10s device %2d [0x%02x] %s" (src/common.cu @51af557).
_RANK = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_HEADER = re.compile(r"\b(nThread|nGpus|minBytes|maxBytes|validation|graph):?\s+(\d+)")
_FAIL = re.compile(r"^(?:(\S+):\s+)?Test (NCCL|CUDA) failure (\S+) '(.*)'\s*$")
_FAIL_PID = re.compile(r"^\s*\.\.\s+(\S+) pid (\d+): Test failure (\S+)")


_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")
_CHECK = {"#wrong": "current", "error": "old"}


@dataclass(frozen=True)
class _Table:
    """What a results-table header says about its rows (see the module docstring)."""

    layout: str  # "current" | "old"
    root: bool
    per_iter: bool
    timestamp: bool

    @property
    def width(self) -> int:
        return 4 + self.root + 2 * (4 + 4 * self.per_iter) + 2 * self.timestamp

    @property
    def label(self) -> str:
        extras = [name for name, on in (("per-iteration", self.per_iter), ("timestamp", self.timestamp)) if on]
        return self.layout + (f" (with {' and '.join(extras)})" if extras else "")


def _table(tokens: list[str]) -> _Table | None:
    """The header ``tokens`` read by the grammar in the module docstring, or None."""
    rest = tokens[4:]
    root = rest[:1] == ["root"]
    rest = rest[root:]
    timestamp = rest[-1:] == ["timestamp"]
    if timestamp:
        rest = rest[:-1]
    half = len(rest) // 2
    block, second = rest[:half], rest[half:]
    if block != second or len(block) not in (4, 8) or block[0] not in ("time", "cputime"):
        return None
    if block[1:3] != ["algbw", "busbw"] or block[3] not in _CHECK or block[4:] not in ([], list(_PER_ITER)):
        return None
    return _Table(_CHECK[block[3]], root, len(block) == 8, timestamp)


def _float(token: str) -> float:
    return float(token)


def _wrong(cell: str) -> int | None:
    """``#wrong``: ``N/A`` (validation off) or a count printed with ``%6g`` (``%5g`` before
    2025): past 1e6 it is in exponent form, ``1.67772e+06`` (nccl-tests src/util.cu
    writeBenchmarkLineBody)."""
    if cell == "N/A":
        return None
    value = float(cell)
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise ValueError(f"#wrong {cell!r} is not a count of elements")
    return int(value)


def _error(cell: str) -> float | None:
    """The old layout's ``error``: ``%5.0le`` of the maximum delta, or ``N/A`` when run with
    ``-c 0`` (nccl-tests src/common.cu @8274cb4, BenchTime)."""
    return None if cell == "N/A" else float(cell)


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Read an nccl-tests run (``all_reduce_perf`` etc.).

    Reads the device list (also when the leading ``#`` is lost, as in fixture E08), the
    table in either layout, ``Avg bus bandwidth`` (GB/s) and ``Out of bounds values``. A run
    that died is returned with ``failure`` set (``ok`` False, ``reason`` says where and why).
    Raises :class:`BenchmarkParseError` when the text has neither a results table nor a
    failure message (the output is cut short, or it is not nccl-tests output).
    """
    lines = _lines(text)
    layout = "none"
    table: _Table | None = None
    rows: list[NcclRow] = []
    ranks: list[NcclRank] = []
    header: dict[str, int] = {}
    avg = None
    oob = None
    failure_msg = failure_host = None
    failure_pid = None
    locations: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = raw.lstrip("#").strip()
        if not line:
            continue
        if m := _RANK.search(line):
            group = int(m.group(2)) if m.group(2) is not None else None
            ranks.append(NcclRank(int(m.group(1)), int(m.group(3)), m.group(4), int(m.group(5)),
                                  m.group(6), m.group(7).strip(), group))
            continue
        if line.startswith("nThread "):
            header = {key: int(value) for key, value in _HEADER.findall(line)}
            continue
        tokens = line.split()
        if tokens[:4] == ["size", "count", "type", "redop"]:
            table = _table(tokens)
            if table is None:
                raise BenchmarkParseError(f"line {number}: unknown nccl-tests table header: {raw.strip()!r}")
            layout = table.layout
            continue
        if m := re.match(rf"^Avg bus bandwidth\s*:\s*{_NUM}", line):
            avg = float(m.group(1))
            continue
        if m := re.match(r"^Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)", line):
            oob = int(m.group(1))
            continue
        if m := _FAIL.match(raw.strip()):
            failure_host = failure_host or m.group(1)
            failure_msg = failure_msg or f"{m.group(2)} failure: {m.group(4).rstrip(' /')}"
            locations.append(m.group(3))
            continue
        if m := _FAIL_PID.match(raw):
            failure_host = failure_host or m.group(1)
            failure_pid = int(m.group(2))
            locations.append(m.group(3))
            continue
        if table is not None and tokens and tokens[0].isdigit():
            rows.append(_row(tokens, table, number, raw))
    failure = None
    if failure_msg is not None:
        failure = NcclFailure(failure_msg, failure_host, failure_pid, tuple(dict.fromkeys(locations)))
    if not rows and failure is None:
        raise BenchmarkParseError(
            "no nccl-tests results table and no failure message: the output stops early "
            f"({len(ranks)} ranks listed) or is not nccl-tests output; capture the whole run"
        )
    return NcclTestsResult(layout=layout, rows=tuple(rows), ranks=tuple(ranks), avg_busbw=avg,
                           out_of_bounds=oob, failure=failure, header=header)


def _row(tokens: list[str], table: _Table, number: int, raw: str) -> NcclRow:
    if len(tokens) != table.width:
        raise BenchmarkParseError(
            f"line {number}: {len(tokens)} columns where the {table.label} layout has "
            f"{table.width}: {raw.strip()!r}"
        )
    try:
        cells = list(tokens)
        timestamp = None
        if table.timestamp:
            date, clock = cells[-2:]
            if not (re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) and re.fullmatch(r"\d{2}:\d{2}:\d{2}", clock)):
                raise ValueError(f"timestamp {date} {clock!r} is not %Y-%m-%d %H:%M:%S")
            timestamp = f"{date} {clock}"
            del cells[-2:]
        size, count, type_, redop = int(cells[0]), int(cells[1]), cells[2], cells[3]
        root = int(cells[4]) if table.root else None
        blocks = cells[4 + table.root:]
        half = len(blocks) // 2
        values = {}
        for prefix, block in (("oop_", blocks[:half]), ("ip_", blocks[half:])):
            values[prefix + "time"] = _float(block[0])
            values[prefix + "algbw"] = _float(block[1])
            values[prefix + "busbw"] = _float(block[2])
            if table.layout == "current":
                values[prefix + "wrong"] = _wrong(block[3])
            else:
                values[prefix + "error"] = _error(block[3])
            if table.per_iter:
                values[prefix + "per_iter"] = tuple(_float(cell) for cell in block[4:8])
        return NcclRow(size=size, count=count, type=type_, redop=redop, root=root, timestamp=timestamp, **values)
    except ValueError as exc:
        raise BenchmarkParseError(f"line {number}: unreadable nccl-tests row {raw.strip()!r}: {exc}") from exc


def check_bus_bandwidth(
    result: NcclTestsResult, line_rate_gbit: float, *, fraction: float = 0.8
) -> tuple[bool, str]:
    """Compare the peak allreduce bus bandwidth with ``fraction`` x the NIC line rate.

    ``line_rate_gbit`` is the per-GPU share of the inter-node NIC rate in Gbit/s (e.g. 100 for
    one 100 GbE RoCE NIC per GPU); nccl-tests' GB/s are 1e9 bytes/s, so the bar is
    ``line_rate_gbit / 8 x fraction`` GB/s. The peak (largest message sizes) is compared, not
    ``Avg bus bandwidth``, which the latency-bound small sizes pull down. Returns
    ``(passed, message)``; a failed run never passes.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction={fraction} must be in (0, 1]")
    if line_rate_gbit <= 0:
        raise ValueError(f"line_rate_gbit={line_rate_gbit} must be positive (Gbit/s)")
    if not result.ok:
        return False, f"nccl-tests {result.reason}"
    peak, size, placement = result.peak_busbw()
    bar = line_rate_gbit / 8 * fraction
    verdict = "ok" if peak >= bar else "too low"
    message = (
        f"peak bus bandwidth {peak:.2f} GB/s ({placement}, {size} bytes) vs {fraction:.0%} of "
        f"{line_rate_gbit:g} Gbit/s line rate = {bar:.2f} GB/s: {verdict}"
    )
    return peak >= bar, message


# --------------------------------------------------------------------------------------------
# Arithmetic
# --------------------------------------------------------------------------------------------


def algbw(size_bytes: int, time_us: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s): ``size / time`` (nccl-tests PERFORMANCE.md)."""
    if time_us <= 0:
        raise ValueError(f"time_us={time_us} must be positive")
    return size_bytes / (time_us * 1e-6) / 1e9


def busbw(algbw_gbs: float, n: int) -> float:
    """Allreduce bus bandwidth in GB/s: ``algbw x 2(n-1)/n`` for ``n`` ranks (nccl-tests
    doc/PERFORMANCE.md, "AllReduce": each rank sends and receives 2(n-1)/n of the data)."""
    if n < 1:
        raise ValueError(f"n={n} ranks must be >= 1")
    return algbw_gbs * 2 * (n - 1) / n


def speedup(throughput_by_gpus: Mapping[int, float]) -> dict[int, float]:
    """``{N: throughput(N) / throughput(1)}`` (linear speedup would be N)."""
    base = _baseline(throughput_by_gpus)
    return {n: throughput_by_gpus[n] / base for n in sorted(throughput_by_gpus)}


def scaling_efficiency(throughput_by_gpus: Mapping[int, float]) -> dict[int, float]:
    """``{N: throughput(N) / (N x throughput(1))}``, 1.0 = linear scaling.

    ``throughput_by_gpus`` maps GPU count to throughput (img/sec) and must hold the 1-GPU
    baseline. Source: Sergeev & Del Balso 2018 (arXiv:1802.05799).
    """
    base = _baseline(throughput_by_gpus)
    return {n: throughput_by_gpus[n] / (n * base) for n in sorted(throughput_by_gpus)}


def _baseline(throughput_by_gpus: Mapping[int, float]) -> float:
    for n, value in throughput_by_gpus.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"GPU count {n!r} must be a positive integer")
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ValueError(f"throughput at {n} GPUs is {value!r}; give a non-negative number")
    if 1 not in throughput_by_gpus:
        raise ValueError(
            "scaling needs the 1-GPU throughput as its baseline: run the benchmark on 1 GPU too"
        )
    base = float(throughput_by_gpus[1])
    if base <= 0:
        raise ValueError("the 1-GPU throughput is 0: the baseline run did not work")
    return base

