"""``gpucluster diagnose``: exit codes 0/1/2, table and --json, stdin."""

from __future__ import annotations

import io
import json

from gpucluster.cli import main
from tests.conftest import FIXTURES

TOPO = FIXTURES / "nvidia-smi-topo" / "C02_topo_a100_nvswitch_roce_nic_legend.txt"
N13 = FIXTURES / "cloud-eni" / "N13_eni_attachment_limit_exceeded_t2_medium_ipamd.txt"
N01 = FIXTURES / "nccl-net-plugin" / "N01_nccl_plugin_hpcx_v5_loaded_under_nccl_2_18_v6_api.txt"


def test_exit_0_healthy_table(capsys):
    assert main(["diagnose", str(TOPO), str(N01)]) == 0  # a warn row does not fail
    out = capsys.readouterr().out
    assert "nvidia-smi-topo" in out and "TOPOLOGY" in out and "PLUGIN_LOADED_OLDER_API" in out


def test_exit_1_problem_json(capsys):
    assert main(["diagnose", "--json", str(TOPO), str(N13)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1
    rows = {f["kind"]: f for f in doc["findings"]}
    assert rows["cloud-eni"]["state"] == "fail"
    assert rows["cloud-eni"]["class"] == "ENI_ATTACH_LIMIT_EXCEEDED"
    assert rows["cloud-eni"]["reading"]["eni_limit"] == 3
    assert rows["nvidia-smi-topo"]["state"] == "ok"


def test_exit_2_unreadable_stdin_and_missing_file(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.stdin", io.StringIO("nothing a tool printed\n"))
    assert main(["diagnose", "-"]) == 2
    assert "unreadable" in capsys.readouterr().err
    assert main(["diagnose", str(tmp_path / "absent.txt")]) == 2
    assert "absent.txt" in capsys.readouterr().err
    cut = tmp_path / "cut.txt"
    cut.write_text("0:\tfrom all lookup local\n32765:\tfrom 192.0.2.135 look\n")
    assert main(["diagnose", "--json", str(cut)]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"][0]["state"] == "unreadable" and "line 2" in doc["findings"][0]["cause"]


def test_stdin_multi_output_paste(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(TOPO.read_text() + N13.read_text()))
    assert main(["diagnose", "--json", "-"]) == 1
    kinds = [f["kind"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert kinds == ["nvidia-smi-topo", "cloud-eni"]
