"""Tests for module_utils/gpu_kernel.py: NVRM kernel log lines (N24, C14 and the Xid grammar)."""
# ruff: noqa: E501 - captured log lines are kept whole

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_kernel import (
    ACTIONS,
    XID_CATALOG,
    parse_kernel_log,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text
from tests.unit.plugins.module_utils.gpu_cases import N24, OPEN_GSP, c14_blocks


def test_n24_fallen_off_bus_three_lines_one_record():
    log = parse_kernel_log(fixture_text(N24))
    # 3 kernel records, not 5 lines: the unstamped lines join the record at 1843.308145.
    assert log["records"] == 3
    lost = [e for e in log["events"] if e["kind"] == "gpu_lost"]
    assert len(lost) == 1
    assert lost[0]["time"] == "1843.308145"
    assert lost[0]["bus_id"] == "0000:b3:00.0"
    assert lost[0]["pci_id"] == "10de:26b5"
    assert "fallen off the bus and is not responding to commands" in lost[0]["text"]
    assert lost[0]["action"] == "drain"
    # Xid-79 equivalent without an Xid token
    assert not [e for e in log["events"] if e["kind"] == "xid"]
    assert log["lost_bus_ids"] == ["0000:b3:00.0"]
    assert log["gpus"]["0000:b3:00.0"]["lost"] is True
    assert log["action"] == "drain"
    probe = [e for e in log["events"] if e["kind"] == "probe_failed"]
    assert [p["devices"] for p in probe] == [1]
    assert log["driver"] == {"version": "570.158.01", "arch": "x86_64", "open": True}
    assert log["complete"] is True


def test_n24_without_indentation_reads_the_same():
    text = "\n".join(line.strip() for line in fixture_text(N24).splitlines()) + "\n"
    assert parse_kernel_log(text)["events"] == parse_kernel_log(fixture_text(N24))["events"]


def test_c14_rminitadapter_and_cut_pci_id_line():
    _smi, log_text = c14_blocks()
    log = parse_kernel_log(log_text)
    assert [e["kind"] for e in log["events"]] == ["init_failed", "init_failed"]
    assert {e["bus_id"] for e in log["events"]} == {"0000:01:00.0"}
    assert log["events"][1]["text"] == "RmInitAdapter failed! (0x22:0x56:884)"
    assert log["events"][0]["time"] == "Jul 01 22:55:07"
    assert log["gpus"]["0000:01:00.0"]["pci_id"] == "10de:2b85"
    assert log["failed_bus_ids"] == ["0000:01:00.0"]
    # The source cut the last syslog line inside the "not supported" message: flagged.
    assert log["truncated"] is True and log["complete"] is False
    assert log["incomplete"] == [4]  # line 4 of the syslog block


XIDS = """\
[  100.000001] NVRM: GPU at PCI:0000:3b:00: GPU-00000000-0000-0000-0000-000000000001
[  100.000002] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.
[  100.000003] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
Jun 02 13:13:04 node7 kernel: NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
2025-06-02T13:13:05+0000 node7 kernel: NVRM: Xid (PCI:0000:0f:00): 64, pid=57530, name=python3, Row Remapper Error: (0x00000005d28c03a0) - All reserved rows for bank are remapped
kern  :warn  : [  200.5] NVRM: Xid (PCI:0000:2b:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address
NVRM: Xid (0000:01:00): 31, Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS
NVRM: Xid (PCI:0000:9a:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
NVRM: Xid (PCI:0000:9b:00): 150, pid=77, name=x, something new
nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 28 LTSSM Fault Up
usb 1-1: new high-speed USB device number 2 using xhci_hcd
"""


def test_xid_grammar_across_versions_and_prefixes():
    log = parse_kernel_log(XIDS)
    xids = [e for e in log["events"] if e["kind"] == "xid"]
    assert [(e["code"], e["bus_id"], e["action"]) for e in xids] == [
        (79, "0000:3b:00.0", "drain"), (63, "0000:10:1c.0", "reset"),
        (64, "0000:0f:00.0", "replace"), (13, "0000:2b:00.0", "restart_app"),
        (31, "0000:01:00.0", "restart_app"), (154, "0000:9a:00.0", "drain"),
        (150, "0000:9b:00.0", "unknown")]
    assert xids[1]["pid"] == 1896 and xids[1]["name"] is None
    assert xids[1]["text"].startswith("Row Remapper: New row marked")
    assert xids[2]["name"] == "python3"
    assert xids[3]["pid"] is None and xids[3]["name"] == "<unknown>"
    assert xids[4]["text"].startswith("Ch 00000010")
    assert xids[0]["meaning"] == "GPU has fallen off the bus"
    assert log["gpus"]["0000:3b:00.0"]["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert log["gpus"]["0000:3b:00.0"]["xids"] == [79]
    assert log["lost_bus_ids"] == ["0000:3b:00.0"]
    sxid = [e for e in log["events"] if e["kind"] == "sxid"]
    assert sxid[0]["fatal"] is True and sxid[0]["code"] == 20034 and sxid[0]["action"] == "drain"
    assert log["unknown_xids"] == [150]
    assert log["action"] == "replace"
    assert log["complete"] is True


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:3b:00): 79\n",
    "NVRM: Xid (PCI:0000:3b:00): 79, \n",
    "NVRM: Xid (PCI:0000:3b\n",
])
def test_xid_cut_is_an_error_naming_the_line(line):
    with pytest.raises(ParseError, match="kernel log line 2"):
        parse_kernel_log("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Thu\n"
                         + line)


def test_fragments_without_their_head_are_flagged():
    lines = fixture_text(N24).splitlines()
    shuffled = "\n".join([lines[1], lines[0], lines[2], lines[3]]) + "\n"
    log = parse_kernel_log(shuffled)
    assert log["complete"] is False
    assert not [e for e in log["events"] if e["kind"] == "gpu_lost"]


def test_no_nvidia_lines_is_an_empty_reading():
    log = parse_kernel_log("[ 0.0] Linux version 6.8.0\n")
    assert log["events"] == [] and log["action"] == "none" and log["complete"] is True
    with pytest.raises(ParseError, match="no input"):
        parse_kernel_log(None)


def test_catalogue_actions_are_known():
    assert all(a is None or a in ACTIONS for _m, a in XID_CATALOG.values())
    assert XID_CATALOG[94][1] == "restart_app" and XID_CATALOG[95][1] == "reset"


def test_syslog_gives_each_line_a_prefix_and_the_message_still_joins():
    stamp = "Jun 02 13:13:04 node7 kernel: "
    text = "".join(stamp + line.strip() + "\n" for line in fixture_text(N24).splitlines()[:3]
                   if line.strip()).replace("[ 1843.308145] ", "")
    log = parse_kernel_log(text)
    assert [(e["kind"], e["bus_id"], e["pci_id"], e["time"]) for e in log["events"]] == [
        ("gpu_lost", "0000:b3:00.0", "10de:26b5", "Jun 02 13:13:04")]
    assert log["events"][0]["end_line"] == 3 and log["complete"] is True


# The open kernel module refusing a GPU without GSP (RTX 4060 Ti, 10de:2331): verbatim dmesg

# R367 wording ("the <version> NVIDIA Linux driver release.  Please see 'Appendix" on one
# line), modelled on Bumblebee-Project/Bumblebee #810.
R367_UNSUPPORTED = """\
[   73.757880] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:13b0)
               NVRM: installed in this system is not supported by the 367.57
               NVRM: NVIDIA Linux driver release.  Please see 'Appendix
               NVRM: A - Supported NVIDIA GPU Products' in this release's
               NVRM: README, available on the Linux driver download page
               NVRM: at www.nvidia.com.
[   73.757890] NVRM: The NVIDIA probe routine failed for 1 device(s).
[   73.757891] NVRM: None of the NVIDIA devices were initialized.
"""

# dmesg -H / --reltime ("[  +0.000005]"), verbatim from NVIDIA/open-gpu-kernel-modules #393.
RELTIME_UNSUPPORTED = """\
[  +0.000005] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:25a0)
              NVRM: installed in this system is not supported by the
              NVRM: NVIDIA 520.56.06 driver release.
              NVRM: Please see 'Appendix A - Supported NVIDIA GPU Products'
              NVRM: in this release's README, available on the operating system
              NVRM: specific graphics driver download page at www.nvidia.com.
"""


def test_open_module_refusing_a_gpu_without_gsp_is_an_unsupported_gpu_event():
    log = parse_kernel_log(OPEN_GSP)
    assert [e["kind"] for e in log["events"]] == ["unsupported_gpu", "probe_failed"]
    event = log["events"][0]
    assert (event["bus_id"], event["pci_id"], event["module"]) == ("0000:01:00.0", "10de:2331", "open")
    assert (event["line"], event["end_line"]) == (4, 7)  # the "Please see" tail is not read
    assert event["text"].endswith("required GPU System Processor (GSP).")
    assert event["reason"] == "not supported by the installed (open) driver"
    assert "proprietary kernel module" in event["fix"] and "BIOS" in event["fix"]
    assert event["driver_version"] is None and event["action"] == "none"
    assert log["failed_bus_ids"] == ["0000:01:00.0"]
    assert log["incomplete"] == [] and log["complete"] is True


def test_r367_wording_with_the_next_sentence_on_the_same_line():
    log = parse_kernel_log(R367_UNSUPPORTED)
    event = log["events"][0]
    assert (event["kind"], event["bus_id"], event["pci_id"]) == ("unsupported_gpu", "0000:01:00.0", "10de:13b0")
    assert event["driver_version"] == "367.57" and event["module"] is None
    assert event["text"].endswith("367.57 NVIDIA Linux driver release.")
    assert "367.57 does not support PCI id 10de:13b0" in event["fix"]
    assert log["complete"] is True


def test_unsupported_gpu_message_cut_or_without_its_head_stays_incomplete():
    lines = OPEN_GSP.splitlines()
    cut = "\n".join(lines[:6]) + "\n"  # ends after "...the required GPU"
    log = parse_kernel_log(cut)
    assert not [e for e in log["events"] if e["kind"] == "unsupported_gpu"]
    assert log["incomplete"] == [4] and log["complete"] is False
    headless = "\n".join(lines[5:7]) + "\n"
    assert parse_kernel_log(headless)["complete"] is False


@pytest.mark.parametrize("prefix", ["[  +0.000012] ", "[Oct19 10:12] ", "kern  :err   : [  +0.000012] "])
def test_dmesg_reltime_prefixes_are_read(prefix):
    log = parse_kernel_log(prefix + "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n")
    assert [(e["kind"], e["code"], e["bus_id"]) for e in log["events"]] == [("xid", 79, "0000:3b:00.0")]
    assert log["lost_bus_ids"] == ["0000:3b:00.0"] and log["action"] == "drain"
    assert log["complete"] is True


def test_dmesg_reltime_multiline_message_verbatim_393():
    log = parse_kernel_log(RELTIME_UNSUPPORTED)
    [event] = log["events"]
    assert (event["kind"], event["bus_id"], event["pci_id"], event["time"]) == (
        "unsupported_gpu", "0000:01:00.0", "10de:25a0", "+0.000005")
    assert event["driver_version"] == "520.56.06"
    assert log["complete"] is True
    # Same message with a plain dmesg stamp: same event.
    plain = parse_kernel_log(RELTIME_UNSUPPORTED.replace("[  +0.000005]", "[ 1234.000005]"))
    assert [e["kind"] for e in plain["events"]] == ["unsupported_gpu"]


def test_nvrm_line_behind_an_unknown_prefix_is_not_a_clean_log():
    log = parse_kernel_log("[ 1.0] Linux version 6.8.0\n"
                           "<4>[ 5.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n")
    assert log["events"] == [] and log["unread"] == [2]
    assert log["complete"] is False
