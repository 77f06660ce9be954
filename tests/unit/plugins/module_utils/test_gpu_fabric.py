"""Tests for module_utils/gpu_fabric.py: nvidia-fabricmanager (N21) and its applicability."""
# ruff: noqa: E501 - captured log lines are kept whole

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_fabric import (
    fabricmanager_state,
    parse_fabricmanager,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import (
    parse_lspci_nvswitches,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text
from tests.unit.plugins.module_utils.gpu_cases import LSPCI, N21_JOURNAL, N21_START

A40_LSPCI = (
    "0000:31:00.0 3D controller [0302]: NVIDIA Corporation GA102GL [A40] [10de:2235] (rev a1)\n"
    "0000:4b:00.0 3D controller [0302]: NVIDIA Corporation GA102GL [A40] [10de:2235] (rev a1)\n"
)


def _n21():
    return parse_fabricmanager(fixture_text(N21_START) + fixture_text(N21_JOURNAL))


def test_n21_start_failed_nothing_to_do_zh_locale():
    fm = _n21()
    assert fm["unit"] == "nvidia-fabricmanager.service"
    assert fm["start_failed"] is True
    assert fm["state"] == "failed"
    assert fm["exit_status"] == 1
    assert fm["pids"] == [4177]
    assert fm["tokens"] == ["NV_WARN_NOTHING_TO_DO"]
    assert fm["nothing_to_do"] is True
    assert fm["errors"][0]["pid"] == 4177
    assert "request to query NVSwitch device information" in fm["errors"][0]["text"]
    assert fm["complete"] is True


def test_n21_journal_alone_reads_the_state():
    fm = parse_fabricmanager(fixture_text(N21_JOURNAL))
    assert fm["state"] == "failed" and fm["start_failed"] is False and fm["exit_status"] == 1


def test_n21_class_depends_on_the_hardware_not_the_string():
    fm = _n21()
    no_switch = fabricmanager_state(fm, parse_lspci_nvswitches(A40_LSPCI))
    assert no_switch["class"] == "FABRIC_MANAGER_NOT_APPLICABLE"
    assert no_switch["severity"] == "ok"
    assert "systemctl disable --now nvidia-fabricmanager" in no_switch["hint"]
    switch = fabricmanager_state(fm, parse_lspci_nvswitches(LSPCI))
    assert switch["class"] == "FABRIC_MANAGER_NVSWITCH_NOT_VISIBLE"
    assert switch["severity"] == "fail"
    unknown = fabricmanager_state(fm)
    assert unknown["class"] == "FABRIC_MANAGER_NOTHING_TO_DO" and unknown["severity"] == "unknown"
    assert "lspci -nn" in unknown["hint"]


def test_version_skew_warns():
    fm = dict(_n21(), version="520.61.05")
    out = fabricmanager_state(fm, [], driver_version="515.105.01")
    assert out["version_mismatch"] is True and out["severity"] == "warn"
    assert "520.61.05 does not match driver 515.105.01" in out["reason"]


STATUS_RUNNING = """\
\u25cf nvidia-fabricmanager.service - NVIDIA fabric manager service
     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled; vendor preset: enabled)
     Active: active (running) since Tue 2024-01-23 10:00:01 UTC; 2h ago
   Main PID: 2911 (nv-fabricmanage)
Jan 23 10:00:00 hgx1 systemd[1]: Starting NVIDIA fabric manager service...
Jan 23 10:00:01 hgx1 nv-fabricmanager[2911]: Connected to 1 node.
Jan 23 10:00:01 hgx1 nv-fabricmanager[2911]: Successfully configured all the available GPUs and NVSwitches to route NVLink traffic.
Jan 23 10:00:01 hgx1 systemd[1]: Started NVIDIA fabric manager service.
"""


def test_status_running_on_nvswitch_box():
    fm = parse_fabricmanager(STATUS_RUNNING)
    assert fm["state"] == "running" and fm["loaded"] == "loaded" and fm["errors"] == []
    assert fabricmanager_state(fm, parse_lspci_nvswitches(LSPCI))["class"] == "FABRIC_MANAGER_RUNNING"


def test_fm_log_version_and_error():
    text = ("[Jan 23 2024 10:00:00] [INFO] [tid 841] Fabric Manager version is : 535.104.05\n"
            "[Jan 23 2024 10:00:01] [ERROR] [tid 841] failed to open NVSwitch device "
            "[NV_ERR_OPERATING_SYSTEM]\n")
    fm = parse_fabricmanager(text)
    assert fm["version"] == "535.104.05"
    assert fm["tokens"] == ["NV_ERR_OPERATING_SYSTEM"]
    out = fabricmanager_state(dict(fm, state="failed"), parse_lspci_nvswitches(LSPCI))
    assert out["class"] == "FABRIC_MANAGER_FAILED"


def test_not_fabric_manager_output_is_an_error():
    with pytest.raises(ParseError, match="no line of systemctl"):
        parse_fabricmanager("hello\n")
    with pytest.raises(ParseError, match="line 1: a systemd message about the unit"):
        parse_fabricmanager("Jan 23 10:00:00 h systemd[1]: nvidia-fabricmanager.service: frobnicated\n")


def test_restart_loop_messages():
    text = ("Jan 23 10:00:00 h systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, status=1/FAILURE\n"
            "Jan 23 10:00:00 h systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.\n"
            "Jan 23 10:00:00 h systemd[1]: nvidia-fabricmanager.service: Consumed 1.2s CPU time.\n"
            "Jan 23 10:00:05 h systemd[1]: nvidia-fabricmanager.service: Scheduled restart job, restart counter is at 5.\n"
            "Jan 23 10:00:05 h systemd[1]: nvidia-fabricmanager.service: Start request repeated too quickly.\n")
    fm = parse_fabricmanager(text)
    assert fm["state"] == "failed" and fm["exit_status"] == 1
