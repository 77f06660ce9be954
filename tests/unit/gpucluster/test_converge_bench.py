"""The converge benchmark's arithmetic, goals, reports and the raw arm's script."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

import pytest

from gpucluster.converge_bench import (
    Sample,
    apt_sources_script,
    goals,
    parse_nodes,
    raw_script,
    render_markdown,
    summarise,
    write_results,
)


def samples():
    return [
        Sample(1, 1, "fresh", 100.0, 40.0), Sample(1, 1, "noop", 20.0, 6.0), Sample(1, 1, "raw", 80.0),
        Sample(1, 2, "fresh", 120.0, 44.0), Sample(1, 2, "noop", 30.0, 8.0), Sample(1, 2, "raw", 90.0),
        Sample(1, 3, "fresh", 110.0, 42.0), Sample(1, 3, "noop", 10.0, 4.0), Sample(1, 3, "raw", 70.0),
        Sample(4, 1, "fresh", 200.0, 100.0), Sample(4, 1, "noop", 50.0, 16.0), Sample(4, 1, "raw", 100.0),
    ]


def test_medians_ratios_and_cpu_per_host():
    s = summarise(samples())
    one, four = s["nodes"]["1"], s["nodes"]["4"]
    assert (one["fresh_s"], one["noop_s"], one["raw_s"]) == (110.0, 20.0, 80.0)
    assert one["rounds"] == 3
    assert one["fresh_over_raw"] == pytest.approx(110 / 80, abs=1e-3)
    assert one["noop_over_fresh"] == pytest.approx(20 / 110, abs=1e-3)
    assert one["controller_cpu_s"] == 6.0  # median no-op CPU, one host
    assert four["controller_cpu_s"] == 4.0  # 16 s over 4 hosts
    assert four["fresh_controller_cpu_s"] == 25.0


def test_goals_are_met_or_not_by_the_numbers():
    rows = {(g["goal"], g["nodes"]): g for g in goals(summarise(samples()))}
    fresh = rows[("fresh converge / raw package work", 1)]
    assert fresh["value"] == pytest.approx(1.375, abs=1e-3) and fresh["met"] is False
    assert rows[("no-op rerun / fresh converge", 1)]["met"] is True  # 0.18 <= 0.2
    assert rows[("no-op rerun / fresh converge", 4)]["met"] is False  # 0.25
    assert rows[("controller CPU per host per no-op run (s)", 4)]["met"] is False  # 4 > 3
    scaling = rows[("no-op(4) / no-op(1)", 4)]
    assert scaling["value"] == 2.5 and scaling["met"] is False


def test_failed_runs_are_kept_apart_and_missing_arms_read_none():
    s = summarise([Sample(2, 1, "fresh", 50.0, rc=2), Sample(2, 1, "noop", 5.0), Sample(2, 1, "raw", 40.0)])
    assert s["failed"][0]["arm"] == "fresh"
    row = s["nodes"]["2"]
    assert row["fresh_s"] is None and row["fresh_over_raw"] is None and row["noop_over_fresh"] is None
    assert {g["met"] for g in goals(s) if g["goal"].startswith("fresh")} == {None}
    with pytest.raises(ValueError, match="unknown arm"):
        summarise([Sample(1, 1, "warm", 1.0)])


def test_parse_nodes():
    assert parse_nodes("8, 1,4,4") == [1, 4, 8]
    for bad in ("0", "a", "", "1,-2"):
        with pytest.raises(ValueError, match="--nodes"):
            parse_nodes(bad)


def test_written_json_markdown_and_plot(tmp_path):
    meta = {"date": "2026-12-01", "commit": "abc1234", "machine": "x86_64, 2 cores", "rounds": 3}
    body = write_results(tmp_path, samples(), meta)
    data = json.loads((tmp_path / "converge.json").read_text())
    assert data["nodes"] == body["nodes"]
    assert set(data["nodes"]["1"]) >= {"fresh_s", "raw_s", "noop_s", "controller_cpu_s"}
    assert len(data["samples"]) == 12 and data["meta"]["commit"] == "abc1234"
    md = (tmp_path / "converge.md").read_text()
    assert "| 1 | 110 | 80 | 20 | 1.375 |" in md and "commit abc1234" in md and "**no**" in md
    assert (tmp_path / "converge.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert render_markdown(summarise([]), {}).count("\n|") >= 2


def test_raw_script_does_the_package_and_image_work():
    text = raw_script(["docker.io", "rdma-core"], "reg:5000", "u", "p w", "reg:5000/train:1")
    assert text.count("apt-get update") == 1 and text.count("apt-get install") == 1
    assert "docker.io rdma-core" in text
    assert '{"insecure-registries": ["reg:5000"]}' in text
    assert "'p w'" in text and "docker pull -q reg:5000/train:1" in text
    assert "docker run -d --name gpucluster-raw" in text


def test_raw_script_unpacks_the_converged_nodes_apt_sources_before_its_one_update(tmp_path):
    """The raw arm installs from the sources site.yml added (the driver stage's contrib/non-free,
    NVIDIA's repos): without them a fresh node has no candidate for nvidia-smi (the first real
    run of the bench failed so)."""
    node = tmp_path / "node"
    (node / "etc/apt/sources.list.d").mkdir(parents=True)
    (node / "etc/apt/sources.list.d/nvidia.sources").write_text("Types: deb\n")
    (node / "usr/share/keyrings").mkdir(parents=True)
    (node / "usr/share/keyrings/nvidia.gpg").write_bytes(b"\x99key")
    (node / "etc/apt/apt.conf.d").mkdir(parents=True)
    (node / "etc/apt/apt.conf.d/01proxy").write_text("proxy\n")
    tar = subprocess.run(["bash", "-c", apt_sources_script(str(node))], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        names = sorted(archive.getnames())
    assert names == ["etc/apt/sources.list.d", "etc/apt/sources.list.d/nvidia.sources", "usr/share/keyrings",
                     "usr/share/keyrings/nvidia.gpg"]
    text = raw_script(["nvidia-smi"], "reg:5000", "u", "p", "reg:5000/t:1", sources_on_stdin=True)
    assert text.index("tar -xzf - -C /") < text.index("apt-get update")
    assert "tar -xzf" not in raw_script(["x"], "r", "u", "p", "i")


def test_timed_keeps_the_whole_output(tmp_path):
    """The kept log is the run's whole output, not the tail returned (profile_tasks' summary
    is at the end of thousands of lines)."""
    from gpucluster.converge_bench import timed

    script = "import sys\nfor i in range(3000): print('line', i)\nsys.exit(3)"
    wall, cpu, rc, tail = timed([sys.executable, "-c", script], cwd=tmp_path, log=lambda m: None,
                                keep=tmp_path / "logs" / "a.log")
    kept = (tmp_path / "logs" / "a.log").read_text().splitlines()
    assert rc == 3 and wall > 0 and cpu >= 0
    assert kept[0] == "line 0" and kept[-1] == "line 2999" and len(kept) == 3000
    assert len(tail) <= 4000 and tail.rstrip().endswith("line 2999")
