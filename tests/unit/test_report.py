"""Scaling report: numbers, Markdown tables, JSON and a real PNG."""

from __future__ import annotations

import json
import os
import struct

import pytest

from gpucluster.cli import main
from gpucluster.report import (
    OutDirError,
    ResultsError,
    build_figure,
    build_report,
    load_results,
    node_boundary,
    render_markdown,
    write_report,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Two runtimes at 1, 8 and 16 GPUs (img/sec over all GPUs).
RESULTS = [
    {"gpus": 1, "nodes": 1, "runtime": "lightcc", "throughput": 125.0, "unit": "img/sec"},
    {"gpus": 8, "nodes": 1, "runtime": "lightcc", "throughput": 950.0, "unit": "img/sec"},
    {"gpus": 16, "nodes": 2, "runtime": "lightcc", "throughput": 1900.0, "unit": "img/sec"},
    {"gpus": 1, "nodes": 1, "runtime": "horovod", "throughput": 124.7, "unit": "img/sec"},
    {"gpus": 8, "nodes": 1, "runtime": "horovod", "throughput": 900.0, "unit": "img/sec"},
    {"gpus": 16, "nodes": 2, "runtime": "horovod", "throughput": 1700.0, "unit": "img/sec"},
]


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which must follow the signature."""
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def test_report_numbers():
    report = build_report(RESULTS)
    assert report["unit"] == "img/sec"
    assert report["baseline_runtime"] == "horovod"
    assert report["runtimes"] == ["horovod", "lightcc"]
    horovod = {p["gpus"]: p for p in report["series"]["horovod"]}
    assert horovod[16]["speedup"] == pytest.approx(1700 / 124.7)
    assert horovod[16]["efficiency"] == pytest.approx(1700 / (16 * 124.7))
    assert horovod[16]["ideal"] == pytest.approx(16 * 124.7)
    assert horovod[1]["efficiency"] == 1.0
    lightcc = {p["gpus"]: p for p in report["series"]["lightcc"]}
    assert lightcc[8]["efficiency"] == pytest.approx(0.95)
    row16 = report["comparison"][-1]
    assert row16["gpus"] == 16 and row16["nodes"] == 2
    assert row16["difference_pct"] == {"lightcc": pytest.approx((1900 / 1700 - 1) * 100)}
    assert row16["speedup"] == {"horovod": pytest.approx(13.633, abs=1e-3), "lightcc": 15.2}


def test_markdown_tables():
    md = render_markdown(build_report(RESULTS, title="ResNet-50 synthetic"))
    assert md.startswith("# ResNet-50 synthetic\n")
    assert "| GPUs | nodes | img/sec | ideal img/sec | speedup | scaling efficiency |" in md
    assert "| 8 | 1 | 900.0 | 997.6 | 7.22 | 90.2 % |" in md
    assert "| 16 | 2 | 1700.0 | 1995.2 | 13.63 | 85.2 % |" in md
    assert "| 16 | 2 | 1900.0 | 2000.0 | 15.20 | 95.0 % |" in md
    assert "## lightcc vs horovod" in md
    assert ("| GPUs | nodes | horovod img/sec | lightcc img/sec | lightcc vs horovod | horovod speedup "
            "| lightcc speedup |") in md
    assert "| 16 | 2 | 1700.0 | 1900.0 | +11.8 % | 13.63 | 15.20 |" in md
    assert "| 1 | 1 | 124.7 | 125.0 | +0.2 % | 1.00 | 1.00 |" in md


def test_single_runtime_has_no_comparison():
    report = build_report([r for r in RESULTS if r["runtime"] == "horovod"])
    assert report["comparison"] == []
    assert "vs" not in render_markdown(report)


def test_missing_one_gpu_baseline_is_reported_not_invented():
    runs = [{"gpus": 8, "nodes": 1, "runtime": "horovod", "throughput": 900.0},
            {"gpus": 16, "nodes": 2, "runtime": "horovod", "throughput": 1700.0}]
    report = build_report(runs)
    assert all(p["efficiency"] is None and p["speedup"] is None for p in report["series"]["horovod"])
    md = render_markdown(report)
    assert "| 8 | 1 | 900.0 | n/a | n/a | n/a |" in md
    assert "no 1-GPU result" in md


def test_title_note_and_unit_from_the_mapping_form():
    data = {"title": "CPU data-parallel benchmark (sandbox, no GPU)",
            "note": "numpy forward/backward + MPI allreduce; 'gpus' counts CPU ranks",
            "results": [{"gpus": 1, "nodes": 1, "runtime": "cpu", "throughput": 50, "unit": "samples/sec"},
                        {"gpus": 3, "nodes": 3, "runtime": "cpu", "throughput": 135, "unit": "samples/sec"}]}
    report = build_report(data)
    md = render_markdown(report)
    assert md.startswith("# CPU data-parallel benchmark (sandbox, no GPU)")
    assert "> numpy forward/backward" in md
    assert "| 3 | 3 | 135.0 | 150.0 | 2.70 | 90.0 % |" in md
    assert "samples/sec" in md and "img/sec" not in md


def test_write_report_writes_json_markdown_and_a_real_png(tmp_path):
    paths = write_report(RESULTS, tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == ["report.json", "report.md", "report.png"]
    data = paths["png"].read_bytes()
    assert len(data) > 10_000
    assert png_size(data) == (1100, 450)
    assert data.endswith(b"IEND\xaeB`\x82")
    saved = json.loads(paths["json"].read_text())
    assert saved == json.loads(json.dumps(build_report(RESULTS)))
    assert paths["markdown"].read_text() == render_markdown(build_report(RESULTS))


@pytest.mark.parametrize(("data", "needle"), [
    ([], "non-empty list"),
    ({"results": RESULTS, "extra": 1}, "unknown top-level keys"),
    ([{"gpus": 1, "nodes": 1, "runtime": "x"}], "lacks throughput"),
    ([{"gpus": 0, "nodes": 1, "runtime": "x", "throughput": 1}], "gpus=0"),
    ([{"gpus": 2, "nodes": 4, "runtime": "x", "throughput": 1}], "nodes=4 > gpus=2"),
    ([{"gpus": 1, "nodes": 1, "runtime": "x", "throughput": -1}], "throughput=-1"),
    ([{"gpus": 1, "nodes": 1, "runtime": "x", "throughput": "fast"}], "throughput='fast'"),
    ([{"gpus": 1, "nodes": 1, "runtime": "", "throughput": 1}], "runtime must be a name"),
    (RESULTS + [{"gpus": 8, "nodes": 1, "runtime": "horovod", "throughput": 1.0}], "two results for runtime"),
    (RESULTS + [{"gpus": 2, "nodes": 1, "runtime": "cpu", "throughput": 1.0, "unit": "samples/sec"}],
     "mix units"),
])
def test_bad_results_are_clear_errors(data, needle):
    with pytest.raises(ResultsError, match=needle):
        load_results(data)


def test_unknown_baseline_runtime():
    with pytest.raises(ResultsError, match="baseline runtime 'mxnet'"):
        build_report(RESULTS, baseline_runtime="mxnet")


def test_cli_report_writes_three_files(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    out = tmp_path / "report"
    assert main(["report", str(results), "--out-dir", str(out), "--title", "Scaling"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md", "report.png"]
    assert (out / "report.md").read_text().startswith("# Scaling\n")
    assert png_size((out / "report.png").read_bytes()) == (1100, 450)


def test_cli_report_bad_input_exits_1(tmp_path, capsys):
    bad = tmp_path / "results.json"
    bad.write_text("{not json")
    assert main(["report", str(bad), "--out-dir", str(tmp_path / "r")]) == 1
    assert "not valid JSON" in " ".join(capsys.readouterr().err.split())  # rich wraps lines
    assert main(["report", str(tmp_path / "missing.json"), "--out-dir", str(tmp_path / "r")]) == 1
    assert "cannot read the results (No such file or directory)" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_cli_report_says_which_file_it_expects_for_a_report_or_validate_json(tmp_path, capsys):
    """Given its own output (report.json) or playbooks/validate.yml's validate-*.json, the report
    names the file it wants: results.json from playbooks/benchmark.yml."""
    report_json = tmp_path / "report.json"
    report_json.write_text(json.dumps(build_report(RESULTS)))
    validate_json = tmp_path / "validate-20261129T124023Z.json"
    validate_json.write_text(json.dumps({"all_correct": True, "hosts": ["n1"], "max_busbw_gbps": 1.0, "nodes": 1,
                                         "op": "allreduce", "ranks": 2, "rows": []}))
    for path, needle in ((report_json, "this is a report.json"), (validate_json, "this is a validate-*.json")):
        assert main(["report", str(path), "--out-dir", str(tmp_path / "r")]) == 1
        err = " ".join(capsys.readouterr().err.split())  # Rich wraps lines
        assert needle in err
        assert "results.json that playbooks/benchmark.yml writes" in err
        assert str(path) in "".join(err.split())  # the file given is named
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- the plot


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_throughput_plot_is_log_log_with_one_straight_ideal_per_runtime():
    report = build_report(RESULTS)
    ax_tp, ax_eff = build_figure(report).axes
    assert (ax_tp.get_xscale(), ax_tp.get_yscale()) == ("log", "log")
    assert ax_tp.xaxis.get_transform().base == 2 and ax_tp.yaxis.get_transform().base == 2
    assert ax_eff.get_xscale() == "log" and ax_eff.get_yscale() == "linear"
    lines = _lines(ax_tp)
    ideals = {label: line for label, line in lines.items() if " ideal " in label}
    assert sorted(ideals) == ["horovod ideal N x 124.7", "lightcc ideal N x 125"]
    for label, line in ideals.items():
        base = {"horovod": 124.7, "lightcc": 125.0}[label.split()[0]]
        x, y = (list(map(float, v)) for v in line.get_data())
        assert x == [1.0, 8.0, 16.0]
        assert y == pytest.approx([n * base for n in x])
        # Straight on the log-log axes: the same slope (1) between every pair of points.
        screen = ax_tp.transData.transform(list(zip(x, y, strict=True)))
        slopes = {round((b[1] - a[1]) / (b[0] - a[0]), 6) for a, b in zip(screen, screen[1:], strict=False)}
        assert len(slopes) == 1
    measured = lines["horovod"]
    assert list(measured.get_ydata()) == [124.7, 900.0, 1700.0]


def test_plot_marks_the_node_boundary_at_gpus_per_node():
    report = build_report(RESULTS)
    assert node_boundary(report) == 8
    for ax in build_figure(report).axes:
        boundary = _lines(ax)["node boundary (8 GPUs per node)"]
        assert boundary.get_linestyle() == ":"
        assert list(boundary.get_xdata()) == [8, 8]
        assert any("multi-node" in t.get_text() for t in ax.texts)


def test_node_boundary_needs_points_on_both_sides():
    one_node = [r for r in RESULTS if r["nodes"] == 1]
    assert node_boundary(build_report(one_node)) is None
    fig = build_figure(build_report(one_node))
    assert not any(label.startswith("node boundary") for label in _lines(fig.axes[0]))
    # One rank per node (the CPU sandbox): the boundary is at 1.
    cpu = [{"gpus": n, "nodes": n, "runtime": "cpu", "throughput": 50.0 * n} for n in (1, 2, 3)]
    assert node_boundary(build_report(cpu)) == 1


# ---------------------------------------------------------------- the output directory


def test_out_dir_whose_parent_is_missing_or_a_file_is_refused_before_writing(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(OutDirError, match=r"its parent .*/no/such does not exist; create it first \(mkdir -p"):
        write_report(RESULTS, missing)
    assert not (tmp_path / "no").exists()
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(OutDirError, match="exists and is not a directory"):
        write_report(RESULTS, afile)
    with pytest.raises(OutDirError, match="afile is not a directory"):
        write_report(RESULTS, afile / "r")


def test_bad_results_are_reported_before_the_out_dir_is_made(tmp_path):
    with pytest.raises(ResultsError):
        write_report([], tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("where", ["missing-parent", "file-parent"])
def test_cli_report_unwritable_out_dir_is_one_line_exit_1(tmp_path, capsys, where):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    if where == "file-parent":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "report"
    else:
        out = tmp_path / "deep" / "er" / "report"
    assert main(["report", str(results), "--out-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err  # one line, whatever the terminal width
    assert err.startswith(f"error: --out-dir {out}: its parent {out.parent} ")
    fix = "give a path inside a directory" if where == "file-parent" else f"mkdir -p {out.parent}"
    assert fix in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes everywhere")
def test_cli_report_read_only_parent(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert main(["report", str(results), "--out-dir", str(ro / "r")]) == 1
    assert "cannot create it (Permission denied); give a directory you can write" in capsys.readouterr().err
