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


# systemd 250+ names the unit before its description on stop too (modelled on its
# "<unit> - <description>" form; the reader already took Starting/Started/Failed to start).
STOP_NEW = """\
Nov 05 13:50:01 node1 systemd[1]: Stopping nvidia-fabricmanager.service - NVIDIA fabric manager service...
Nov 05 13:50:02 node1 systemd[1]: nvidia-fabricmanager.service: Deactivated successfully.
Nov 05 13:50:02 node1 systemd[1]: Stopped nvidia-fabricmanager.service - NVIDIA fabric manager service.
"""

# systemd 219 (RHEL/CentOS 7): lower-case "control process exited", then "Unit ... entered
# failed state." and "<unit> failed." (the form of esnet/oscars #137, for this unit).
RHEL7 = """\
Nov 15 14:15:47 gpu01 systemd[1]: Starting NVIDIA fabric manager service...
Nov 15 14:15:47 gpu01 nv-fabricmanager[4177]: request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]
Nov 15 14:15:47 gpu01 systemd[1]: nvidia-fabricmanager.service: control process exited, code=exited, status=1/FAILURE
Nov 15 14:15:47 gpu01 systemd[1]: Failed to start NVIDIA fabric manager service.
Nov 15 14:15:47 gpu01 systemd[1]: Unit nvidia-fabricmanager.service entered failed state.
Nov 15 14:15:47 gpu01 systemd[1]: nvidia-fabricmanager.service failed.
"""

# systemctl status with FM's version-mismatch message: the journal lines verbatim from
# akash-network/website #632 (the newer "doesn't match" wording), the status header modelled.
MISMATCH_STATUS = """\
× nvidia-fabricmanager.service - NVIDIA fabric manager service
     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled; preset: enabled)
     Active: failed (Result: exit-code) since Tue 2024-11-05 13:55:26 UTC; 5s ago
    Process: 104229 ExecStart=/usr/bin/nv-fabricmanager-start.sh (code=exited, status=1/FAILURE)
        CPU: 12ms

Nov 05 13:55:26 node1 systemd[1]: Starting nvidia-fabricmanager.service - NVIDIA fabric manager service...
Nov 05 13:55:26 node1 nv-fabricmanager[104230]: fabric manager NVIDIA GPU driver interface version 550.127.05 doesn't match with driver version 550.120. Please update with the matching NVIDIA driver package.
Nov 05 13:55:26 node1 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE
Nov 05 13:55:26 node1 systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.
Nov 05 13:55:26 node1 systemd[1]: Failed to start nvidia-fabricmanager.service - NVIDIA fabric manager service.
"""


def test_systemd_250_stop_lines_read_inactive():
    fm = parse_fabricmanager(STOP_NEW)
    assert fm["state"] == "inactive" and fm["errors"] == [] and fm["complete"] is True


def test_systemd_219_lower_case_exit_line():
    fm = parse_fabricmanager(RHEL7)
    assert fm["state"] == "failed" and fm["exit_status"] == 1
    assert fm["nothing_to_do"] is True and fm["pids"] == [4177]
    assert fabricmanager_state(fm, [])["class"] == "FABRIC_MANAGER_NOT_APPLICABLE"


def test_version_mismatch_message_gives_both_versions_and_an_error():
    fm = parse_fabricmanager(MISMATCH_STATUS)
    assert fm["state"] == "failed" and fm["exit_status"] == 1
    assert (fm["version"], fm["driver_version"], fm["version_mismatch"]) == ("550.127.05", "550.120", True)
    assert [(e["line"], e["pid"], e["token"]) for e in fm["errors"]] == [(8, 104230, None)]
    assert "doesn't match with driver version 550.120" in fm["errors"][0]["text"]
    switches = parse_lspci_nvswitches(LSPCI)
    for driver in (None, "550.120"):
        state = fabricmanager_state(fm, switches, driver)
        assert state["class"] == "FABRIC_MANAGER_FAILED" and state["version_mismatch"] is True
        assert "Fabric Manager 550.127.05 does not match driver 550.120" in state["reason"]
        assert "exact version (550.120)" in state["hint"]


@pytest.mark.parametrize("verb", ["don't", "don\u2019t"])
def test_version_mismatch_older_wording(verb):
    # NVIDIA/gpu-operator #544 (and NVIDIA/nvtrust #55 with a typographic apostrophe).
    line = (f"Jun 28 10:00:00 node1 nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver "
            f"interface version 530.30.02 {verb} match with driver version 530.41.03. Please "
            f"update with matching NVIDIA driver package.\n")
    fm = parse_fabricmanager(line)
    assert (fm["version"], fm["driver_version"], fm["version_mismatch"]) == ("530.30.02", "530.41.03", True)
    assert len(fm["errors"]) == 1
