"""Scaling report: JSON, a Markdown table and a PNG plot from benchmark results.

Input (``RESULTS.json``): a list of runs, or ``{"title": ..., "note": ..., "results": [...]}``;
each run is ``{"gpus": N, "nodes": M, "runtime": "horovod", "throughput": X, "unit": "img/sec"}``
(``throughput`` in ``unit`` over all GPUs; ``unit`` defaults to img/sec and must be the same
for every run, e.g. samples/sec for the CPU benchmark of the test cluster, whose ``title``
or ``note`` should say so).

Per runtime and GPU count the report gives throughput, speedup = T(N)/T(1) and scaling
efficiency = T(N)/(N x T(1)) (Sergeev & Del Balso 2018, arXiv:1802.05799; see
:mod:`gpucluster.bench`). With two or more runtimes it adds the comparison the vendor's
tables make: throughput and linear speedup of each runtime per GPU count, and the
difference of each runtime against the baseline (``horovod`` when present) in percent.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ansible_collections.gpucluster.cluster.plugins.module_utils.bench import scaling_efficiency, speedup

SOURCE = "scaling efficiency = T(N) / (N x T(1)) (Sergeev & Del Balso 2018, arXiv:1802.05799)"


class ResultsError(ValueError):
    """The benchmark results cannot make a report; the message names the run and field."""


@dataclass(frozen=True)
class BenchmarkRun:
    """One benchmark result: ``throughput`` in ``unit`` over ``gpus`` GPUs on ``nodes`` nodes."""

    gpus: int
    nodes: int
    runtime: str
    throughput: float
    unit: str = "img/sec"


def load_results(data: Any) -> tuple[list[BenchmarkRun], dict[str, str]]:
    """Validate results (a list, or a mapping with ``results``) into runs and ``{title, note}``."""
    meta: dict[str, str] = {}
    if isinstance(data, Mapping):
        for key in ("title", "note"):
            if data.get(key) is not None:
                meta[key] = str(data[key])
        unknown = set(data) - {"title", "note", "results"}
        expected = ("expected the results.json that playbooks/benchmark.yml writes to "
                    "reports/benchmark-<timestamp>/ ({title, note, results} or a list of runs)")
        if {"series", "comparison", "formula"} & unknown:
            raise ResultsError(
                "this is a report.json, the output of `gpucluster report`, not its input; "
                f"{expected}: give the results.json beside it"
            )
        if {"rows", "max_busbw_gbps", "all_correct"} & unknown:
            raise ResultsError(
                "this is a validate-*.json of playbooks/validate.yml (the allreduce check), not "
                f"benchmark results; {expected}"
            )
        if unknown:
            raise ResultsError(f"unknown top-level keys {sorted(unknown)}; {expected}")
        data = data.get("results")
    if not isinstance(data, Sequence) or isinstance(data, str) or not data:
        raise ResultsError("results must be a non-empty list of {gpus, nodes, runtime, throughput, unit}")
    runs: list[BenchmarkRun] = []
    for i, item in enumerate(data):
        where = f"results[{i}]"
        if not isinstance(item, Mapping):
            raise ResultsError(f"{where} must be a mapping")
        missing = [k for k in ("gpus", "nodes", "runtime", "throughput") if k not in item]
        if missing:
            raise ResultsError(f"{where} lacks {', '.join(missing)}")
        gpus, nodes, runtime, value = item["gpus"], item["nodes"], item["runtime"], item["throughput"]
        unit = item.get("unit", "img/sec")
        for name, n in (("gpus", gpus), ("nodes", nodes)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ResultsError(f"{where}.{name}={n!r} must be a positive integer")
        if nodes > gpus:
            raise ResultsError(f"{where}: nodes={nodes} > gpus={gpus}; every node runs at least one rank")
        if not isinstance(runtime, str) or not runtime.strip():
            raise ResultsError(f"{where}.runtime must be a name, e.g. horovod or lightcc")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise ResultsError(f"{where}.throughput={value!r} must be a non-negative number ({unit})")
        if not isinstance(unit, str) or not unit.strip():
            raise ResultsError(f"{where}.unit must be a string such as img/sec")
        runs.append(BenchmarkRun(gpus, nodes, runtime.strip(), float(value), unit.strip()))
    units = sorted({r.unit for r in runs})
    if len(units) > 1:
        raise ResultsError(f"runs mix units {units}; report one unit at a time")
    seen: set[tuple[str, int]] = set()
    for r in runs:
        if (r.runtime, r.gpus) in seen:
            raise ResultsError(
                f"two results for runtime {r.runtime} at {r.gpus} GPUs; keep one per GPU count"
            )
        seen.add((r.runtime, r.gpus))
    return runs, meta


def build_report(
    results: Any, *, title: str | None = None, baseline_runtime: str | None = None
) -> dict[str, Any]:
    """The report as a JSON-ready dict.

    ``series[runtime]`` lists ``{gpus, nodes, throughput, speedup, efficiency, ideal}`` by
    GPU count (``ideal`` = N x T(1); speedup, efficiency and ideal are None without a 1-GPU
    run); ``comparison`` (two or more runtimes) lists per GPU count each runtime's throughput
    and speedup and ``difference_pct`` = (T_runtime / T_baseline - 1) x 100.
    """
    runs, meta = load_results(results)
    runtimes = list(dict.fromkeys(r.runtime for r in runs))
    if baseline_runtime is None:
        baseline_runtime = "horovod" if "horovod" in runtimes else runtimes[0]
    elif baseline_runtime not in runtimes:
        raise ResultsError(f"baseline runtime {baseline_runtime!r} has no results; runtimes: {runtimes}")
    runtimes = [baseline_runtime] + [name for name in runtimes if name != baseline_runtime]
    notes = [meta["note"]] if "note" in meta else []
    series: dict[str, list[dict[str, Any]]] = {}
    for runtime in runtimes:
        mine = sorted((r for r in runs if r.runtime == runtime), key=lambda r: r.gpus)
        by_gpus = {r.gpus: r.throughput for r in mine}
        if 1 in by_gpus and by_gpus[1] > 0:
            sp, eff = speedup(by_gpus), scaling_efficiency(by_gpus)
            base = by_gpus[1]
        else:
            sp = eff = {}
            base = None
            notes.append(f"{runtime}: no 1-GPU result, so no speedup or scaling efficiency")
        series[runtime] = [
            {
                "gpus": r.gpus,
                "nodes": r.nodes,
                "throughput": r.throughput,
                "speedup": sp.get(r.gpus),
                "efficiency": eff.get(r.gpus),
                "ideal": None if base is None else r.gpus * base,
            }
            for r in mine
        ]
    comparison: list[dict[str, Any]] = []
    if len(runtimes) > 1:
        gpu_counts = sorted({r.gpus for r in runs})
        for n in gpu_counts:
            row: dict[str, Any] = {"gpus": n, "throughput": {}, "speedup": {}, "difference_pct": {}}
            entries = {rt: next((p for p in series[rt] if p["gpus"] == n), None) for rt in runtimes}
            nodes = {p["nodes"] for p in entries.values() if p}
            row["nodes"] = min(nodes)
            base_point = entries[baseline_runtime]
            for rt, point in entries.items():
                row["throughput"][rt] = point["throughput"] if point else None
                row["speedup"][rt] = point["speedup"] if point else None
                if rt != baseline_runtime:
                    row["difference_pct"][rt] = (
                        (point["throughput"] / base_point["throughput"] - 1) * 100
                        if point and base_point and base_point["throughput"] > 0
                        else None
                    )
            comparison.append(row)
    return {
        "title": title or meta.get("title") or "Scaling report",
        "unit": runs[0].unit,
        "formula": SOURCE,
        "baseline_runtime": baseline_runtime,
        "runtimes": runtimes,
        "series": series,
        "comparison": comparison,
        "notes": notes,
        "results": [asdict(r) for r in runs],
    }


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def render_markdown(report: Mapping[str, Any]) -> str:
    """Markdown: one table per runtime (GPUs, nodes, throughput, speedup, scaling
    efficiency) and, with two or more runtimes, the comparison table."""
    unit = report["unit"]
    out = [f"# {report['title']}", "",
           f"Throughput in {unit}; speedup = T(N) / T(1); {report['formula']}.", ""]
    for note in report.get("notes", []):
        out.append(f"> {note}")
    if report.get("notes"):
        out.append("")
    for runtime in report["runtimes"]:
        out += [f"## {runtime}", "",
                f"| GPUs | nodes | {unit} | ideal {unit} | speedup | scaling efficiency |",
                "|---:|---:|---:|---:|---:|---:|"]
        for p in report["series"][runtime]:
            eff = None if p["efficiency"] is None else p["efficiency"] * 100
            out.append(
                f"| {p['gpus']} | {p['nodes']} | {p['throughput']:.1f} | {_num(p['ideal'], '.1f')} | "
                f"{_num(p['speedup'], '.2f')} | {_num(eff, '.1f')}{' %' if eff is not None else ''} |"
            )
        out.append("")
    if report["comparison"]:
        base = report["baseline_runtime"]
        others = [rt for rt in report["runtimes"] if rt != base]
        out += [f"## {' and '.join(others)} vs {base}", ""]
        head = ["GPUs", "nodes"]
        head += [f"{rt} {unit}" for rt in report["runtimes"]]
        head += [f"{rt} vs {base}" for rt in others]
        head += [f"{rt} speedup" for rt in report["runtimes"]]
        out += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
        for row in report["comparison"]:
            cells = [str(row["gpus"]), str(row["nodes"])]
            cells += [_num(row["throughput"][rt], ".1f") for rt in report["runtimes"]]
            cells += [_signed_pct(row["difference_pct"][rt]) for rt in others]
            cells += [_num(row["speedup"][rt], ".2f") for rt in report["runtimes"]]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _signed_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f} %"


def node_boundary(report: Mapping[str, Any]) -> int | None:
    """GPUs per node where the points change from one node to several, or None when the report
    has no points on both sides. Taken from the multi-node points (GPUs / nodes, when every one
    agrees), else the largest single-node GPU count."""
    points = [p for pts in report["series"].values() for p in pts]
    intra = [p["gpus"] for p in points if p["nodes"] == 1]
    multi = [p for p in points if p["nodes"] > 1]
    if not intra or not multi:
        return None
    per_node = {p["gpus"] / p["nodes"] for p in multi}
    if len(per_node) == 1 and float(next(iter(per_node))).is_integer():
        return int(next(iter(per_node)))
    return max(intra)


def build_figure(report: Mapping[str, Any]):
    """The report's matplotlib ``Figure``, two panels:

    - throughput vs GPUs, log-log (both axes base 2), so that ideal scaling N x T(1) is a straight
      line of slope 1: one dashed ideal line per runtime, from that runtime's own 1-GPU baseline;
    - scaling efficiency T(N) / (N x T(1)) vs GPUs (log2 x, linear y), ideal the 100 % line.

    Both mark the boundary between intra-node and multi-node points (:func:`node_boundary`) with
    a vertical dotted line at the GPUs per node. Uses matplotlib's Agg canvas directly, so no
    display and no global pyplot state.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

    fig = Figure(figsize=(11, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax_tp, ax_eff = fig.subplots(1, 2)
    counts = sorted({p["gpus"] for points in report["series"].values() for p in points})
    plain = FuncFormatter(lambda value, _pos: f"{value:g}")
    for runtime in report["runtimes"]:
        points = report["series"][runtime]
        gpus = [p["gpus"] for p in points]
        (line,) = ax_tp.plot(gpus, [p["throughput"] for p in points], marker="o", label=runtime)
        if all(p["ideal"] is not None for p in points):
            base = points[0]["ideal"] / points[0]["gpus"]
            ax_tp.plot(gpus, [p["ideal"] for p in points], linestyle="--", color=line.get_color(),
                       alpha=0.6, label=f"{runtime} ideal N x {base:g}")
            ax_eff.plot(gpus, [p["efficiency"] * 100 for p in points], marker="o", color=line.get_color(),
                        label=runtime)
    ax_eff.axhline(100, linestyle="--", color="grey", label="ideal (100 %)")
    ax_tp.set_yscale("log", base=2, nonpositive="mask")
    ax_tp.yaxis.set_major_locator(LogLocator(base=2, subs=(1.0, 1.5)))
    ax_tp.yaxis.set_major_formatter(plain)
    ax_tp.yaxis.set_minor_locator(NullLocator())
    boundary = node_boundary(report)
    for ax in (ax_tp, ax_eff):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(counts))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(plain)
        ax.set_xlabel("GPUs")
        if boundary is not None:
            ax.axvline(boundary, linestyle=":", color="black", linewidth=1.2,
                       label=f"node boundary ({boundary} GPU{'s' if boundary > 1 else ''} per node)")
            ax.text(boundary, 0.5, " intra-node | multi-node ", transform=ax.get_xaxis_transform(), rotation=90,
                    ha="center", va="center", fontsize="x-small", backgroundcolor="white")
        ax.grid(True, alpha=0.3)
    # Rising lines leave the throughput panel's upper left free; efficiency falls from 100 %.
    ax_tp.legend(fontsize="small", loc="upper left")
    ax_eff.legend(fontsize="small", loc="lower left")
    ax_tp.set_ylabel(f"throughput ({report['unit']}, log scale)")
    ax_tp.set_title("Throughput (log-log: ideal scaling is straight)")
    ax_eff.set_ylabel("scaling efficiency (%)")
    top = max([p["efficiency"] * 100 for pts in report["series"].values() for p in pts
               if p["efficiency"] is not None] + [100.0])
    ax_eff.set_ylim(0, top * 1.1)
    ax_eff.set_title("Scaling efficiency T(N) / (N x T(1))")
    fig.suptitle(report["title"])
    fig.tight_layout()
    return fig


def render_plot(report: Mapping[str, Any], path: str | Path) -> Path:
    """Write :func:`build_figure` as a PNG to ``path`` (its directory must exist)."""
    path = Path(path)
    build_figure(report).savefig(path, format="png")
    return path


class OutDirError(ValueError):
    """The report's directory cannot be made or written; the message starts with the path and
    ends with the fix."""


def prepare_out_dir(out_dir: str | Path) -> Path:
    """Make ``out_dir`` (one level: its parent must exist) and check that it can be written."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutDirError(f"{out}: exists and is not a directory; give a directory (it is made when missing)")
    if not out.exists():
        parent = out.parent
        if parent.exists() and not parent.is_dir():
            raise OutDirError(f"{out}: its parent {parent} is not a directory; give a path inside a directory")
        if not parent.exists():
            raise OutDirError(
                f"{out}: its parent {parent} does not exist; create it first (mkdir -p {shlex.quote(str(parent))}) "
                "or give another directory"
            )
        try:
            out.mkdir()
        except OSError as exc:
            raise OutDirError(
                f"{out}: cannot create it ({exc.strerror or exc}); give a directory you can write"
            ) from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutDirError(f"{out}: not writable by this user; give a directory you can write")
    return out


def write_report(results: Any, out_dir: str | Path, *, title: str | None = None) -> dict[str, Path]:
    """Build the report and write ``report.json``, ``report.md`` and ``report.png`` to
    ``out_dir`` (made when missing; its parent must exist); returns ``{"json": path,
    "markdown": path, "png": path}``. Bad results raise :class:`ResultsError` and a directory
    that cannot be written :class:`OutDirError`, both before any file is written."""
    report = build_report(results, title=title)
    out = prepare_out_dir(out_dir)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "png": out / "report.png"}
    try:
        paths["json"].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        paths["markdown"].write_text(render_markdown(report), encoding="utf-8")
        render_plot(report, paths["png"])
    except OSError as exc:
        raise OutDirError(f"{out}: cannot write the report ({exc.strerror or exc}); give a directory you can "
                          "write, with free space") from exc
    return paths
