"""The ``gpucluster`` command line: --version, bare invocation, exit status 0 / 1 / 2."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib

import pytest
import yaml

import gpucluster
from gpucluster import cli
from tests.conftest import ROOT

GOOD_SPEC = {
    "name": "resnet50",
    "image": "registry.example:5000/train:1",
    "command": ["python", "bench.py"],
    "nodes": ["gpu-node-1", "gpu-node-2"],
    "gpus_per_node": 8,
    "network_interface": "eth0",
}
RESULTS = [
    {"gpus": 1, "nodes": 1, "runtime": "horovod", "throughput": 100.0},
    {"gpus": 8, "nodes": 1, "runtime": "horovod", "throughput": 760.0},
]


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"gpucluster {importlib.metadata.version('gpucluster')}\n"


def test_version_falls_back_to_the_package_when_not_installed(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert cli.version() == gpucluster.__version__


def test_package_version_matches_pyproject():
    """``__version__`` (the fallback) and the distribution's version are one number."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert gpucluster.__version__ == project["version"]


def test_bare_gpucluster_prints_the_help_and_exits_0():
    run = subprocess.run([sys.executable, "-m", "gpucluster.cli"], capture_output=True, text=True,
                         env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'collections'}", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: gpucluster")
    for command in ("sandbox", "hosts", "launch", "report"):
        assert command in run.stdout
    assert "exit status: 0 done, 1 wrong input or a failed check, 2 usage error" in " ".join(run.stdout.split())


@pytest.mark.parametrize("argv", [["nosuch"], ["launch"], ["launch", "x.yml"], ["report", "r.json"],
                                  ["launch", "x.yml", "--mpirun", "--mpijob"], ["--bogus"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: gpucluster" in capsys.readouterr().err


def test_hosts_init_help_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["hosts", "init", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--hosts" in out and "--inventory-dir" in out


def _spec(tmp_path, data):
    path = tmp_path / "job.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_launch_exit_status(tmp_path, capsys):
    assert cli.main(["launch", _spec(tmp_path, GOOD_SPEC), "--mpirun"]) == 0
    assert capsys.readouterr().out.startswith("mpirun ")
    # Wrong input: 1, with the field, the value and the fix on stderr; nothing on stdout.
    bad = dict(GOOD_SPEC, gpus_per_node="eight", nodez=["a"])
    assert cli.main(["launch", _spec(tmp_path, bad), "--mpirun"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = " ".join(captured.err.split())
    assert "gpus_per_node='eight' must be" in err
    assert "nodez: unknown field; did you mean nodes?" in err
    assert cli.main(["launch", str(tmp_path / "missing.yml"), "--mpijob"]) == 1
    assert "cannot read the job spec" in capsys.readouterr().err
    # Unwritable --output: 1.
    assert cli.main(["launch", _spec(tmp_path, GOOD_SPEC), "--mpirun", "-o", str(tmp_path / "no" / "x")]) == 1
    assert "does not exist; create it first" in " ".join(capsys.readouterr().err.split())
    # Usage: 2.
    with pytest.raises(SystemExit) as info:
        cli.main(["launch", _spec(tmp_path, GOOD_SPEC)])
    assert info.value.code == 2


def test_report_exit_status(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    assert cli.main(["report", str(results), "--out-dir", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.png").is_file()
    results.write_text(json.dumps([{"gpus": 0, "nodes": 1, "runtime": "x", "throughput": 1}]))
    assert cli.main(["report", str(results), "--out-dir", str(tmp_path / "r2")]) == 1
    assert "results[0].gpus=0 must be a positive integer" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "r2").exists()
    with pytest.raises(SystemExit) as info:
        cli.main(["report", str(results)])
    assert info.value.code == 2


def test_os_errors_are_one_message_exit_1(monkeypatch, capsys):
    """An OSError from any command (a socket, a file) is a failed check, not a traceback."""
    from gpucluster import hosts

    def unreachable(*_args, **_kwargs):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(hosts, "init", unreachable)
    assert cli.main(["hosts", "init", "--hosts", "a", "--user", "root"]) == 1
    assert capsys.readouterr().err == "error: [Errno 111] Connection refused\n"
