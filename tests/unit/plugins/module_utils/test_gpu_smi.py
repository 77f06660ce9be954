"""Tests for module_utils/gpu_smi.py: --query-gpu CSV (C09, C11, C13, C14) and nvidia-smi -q."""

from __future__ import annotations

import ast

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_smi import (
    GPU_QUERY_FIELDS,
    gpus_from_query,
    parse_query_gpu_csv,
    parse_smi_q,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import cut_text, fixture_text
from tests.unit.plugins.module_utils.gpu_cases import (
    C09_SMI,
    C11_NEW,
    C11_OLD,
    C11_UNITS,
    C13,
    c14_blocks,
    query_fields,
    smi_q,
    without_prompts,
)

# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu CSV (C11, C13, and C09's error text)
# --------------------------------------------------------------------------------------------

C11_BLOCK = {"memory.total": 2004, "memory.free": 2004, "memory.used": 0,
             "temperature.gpu": 44, "fan.speed": None, "utilization.gpu": 0,
             "utilization.memory": 0}

QUERY_CASES = [
    pytest.param(C11_NEW, [C11_BLOCK], id="C11-new-driver-N/A"),
    pytest.param(C11_OLD, [C11_BLOCK], id="C11-old-driver-Not-Supported"),
    pytest.param(C11_UNITS, [{
        "gpu_name": "GeForce GTX 770", "utilization.gpu": None, "utilization.memory": None,
        "temperature.gpu": 52, "power.draw": None, "power.limit": None, "fan.speed": 52,
        "pstate": "P0", "clocks.current.graphics": None, "clocks.current.memory": None,
        "power.max_limit": None, "power.default_limit": None}], id="C11-units-percent"),
]


@pytest.mark.parametrize(("path", "expected"), QUERY_CASES)
def test_query_gpu_csv_fixture(path, expected):
    text = fixture_text(path)
    rows = parse_query_gpu_csv(without_prompts(text), query_fields(text))
    assert rows == expected


def _c13():
    text = fixture_text(C13)
    raw_lines = ast.literal_eval(text.splitlines()[2])  # stdout split on newlines, as printed
    return "\n".join(raw_lines), query_fields(text)


def test_query_gpu_csv_c13_name_with_spaces():
    stdout, fields = _c13()
    assert len(fields) == 19
    rows = parse_query_gpu_csv(stdout, fields)
    assert len(rows) == 1
    row = rows[0]
    assert len(row) == 19
    assert row["name"] == "GeForce RTX 2080"
    assert row["gpu_uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert row["power.draw"] == 176.98
    assert row["temperature.gpu"] == 45
    assert row["temperature.memory"] is None  # bare N/A (driver 440.64)
    assert row["pstate"] == "P2"
    assert row["driver_version"] == "440.64"  # text, not the float 440.64
    assert row["vbios_version"] == "90.04.23.00.5F"
    assert row["power.limit"] == 200.0
    assert row["memory.total"] == 7979
    assert row["pcie.link.width.current"] == 8


def test_query_gpu_csv_c13_field_count_must_match_query():
    stdout, fields = _c13()
    with pytest.raises(ParseError, match=r"line 1: expected 18 comma-separated values .* got 19"):
        parse_query_gpu_csv(stdout, fields[:-1])
    with pytest.raises(ParseError, match=r"expected 19 comma-separated values"):
        parse_query_gpu_csv(cut_text(stdout), fields)


def test_query_gpu_csv_shifted_columns_are_an_error():
    # The whitespace-split bug of C13 shifts 'RTX' into gpu_uuid and '45' further right; a
    # numeric field that receives a word must fail instead of reading a wrong value.
    with pytest.raises(ParseError, match=r"'memory.total' should be a number"):
        parse_query_gpu_csv("GeForce, RTX 2080\n", ["name", "memory.total"])


def test_query_gpu_csv_c09_error_text_is_not_csv():
    with pytest.raises(ParseError, match="Driver/library version mismatch.*driver_state"):
        parse_query_gpu_csv(without_prompts(fixture_text(C09_SMI)), GPU_QUERY_FIELDS)


def test_query_gpu_csv_c14_no_devices_is_not_csv():
    smi, _log = c14_blocks()
    with pytest.raises(ParseError, match="No devices were found"):
        parse_query_gpu_csv(smi, GPU_QUERY_FIELDS)


def test_query_gpu_csv_unknown_error_sentinel_and_header():
    # i3pystatus PR #850: [Unknown Error]; --format=csv without noheader prints a header line.
    text = ("index, name, pci.bus_id, uuid, memory.total [MiB], persistence_mode, driver_version\n"
            "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, GPU-1, 81559 MiB, Enabled, 535.104.05\n"
            "1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, GPU-2, [Unknown Error], Disabled, "
            "535.104.05\n")
    rows = parse_query_gpu_csv(text, ",".join(GPU_QUERY_FIELDS))
    assert [r["memory.total"] for r in rows] == [81559, None]
    assert [r["persistence_mode"] for r in rows] == [True, False]
    gpus = gpus_from_query(rows)
    assert gpus[1] == {"index": 1, "name": "NVIDIA H100 80GB HBM3", "bus_id": "0000:2a:00.0",
                       "uuid": "GPU-2", "memory_total_mib": None, "persistence_mode": False,
                       "driver_version": "535.104.05"}


def test_query_gpu_csv_empty_output_is_no_gpu():
    assert parse_query_gpu_csv("", GPU_QUERY_FIELDS) == []


@pytest.mark.parametrize("text", ["garbage line without commas\n", "0, 1, 2\n",
                                  "\x00\x01, binary\n"])
def test_query_gpu_csv_rejects_garbage(text):
    with pytest.raises(ParseError, match=r"line 1: expected 7 comma-separated values"):
        parse_query_gpu_csv(text, GPU_QUERY_FIELDS)


def test_query_gpu_csv_needs_fields():
    with pytest.raises(ParseError, match="no field names"):
        parse_query_gpu_csv("1\n", "")



# --------------------------------------------------------------------------------------------
# nvidia-smi -q
# --------------------------------------------------------------------------------------------

H100 = "r535_h100_2gpu.txt"
V100 = "r418_v100.txt"


def test_smi_q_r535_healthy_and_broken_h100():
    q = parse_smi_q(smi_q(H100))
    assert (q["driver_version"], q["cuda_version"], q["attached_gpus"]) == ("535.104.05", "12.2", 2)
    assert q["complete"] is True and q["truncated"] is False
    ok, bad = q["gpus"]
    assert ok["bus_id"] == "0000:18:00.0" and bad["bus_id"] == "0000:2a:00.0"
    assert ok["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert ok["product_name"] == "NVIDIA H100 80GB HBM3"
    assert ok["persistence_mode"] is True and ok["minor_number"] == 0
    assert ok["pcie"] == {"gen_current": 5, "gen_max": 5, "gen_device_max": 5, "gen_host_max": 5,
                          "width_current": 16, "width_max": 16, "width_degraded": False}
    assert ok["ecc_mode"] == {"current": True, "pending": True}
    assert ok["ecc_errors"]["volatile"]["uncorrectable"] == 0
    assert ok["ecc_errors"]["aggregate"]["correctable"] == 177
    assert ok["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert ok["remapped_rows"] == {"correctable": 1, "uncorrectable": 0, "pending": True,
                                   "failure": False}
    assert ok["temperature_c"] == 30
    assert ok["clocks_event_reasons"]["Idle"] is True
    assert ok["active_clocks_event_reasons"] == []
    assert ok["reset_status"] == {"reset_required": False, "drain_and_reset_recommended": False}
    assert ok["missing"] == [] and ok["unrecognised"] == [] and ok["complete"] is True
    # the broken one: x8 link, uncorrectable ECC, remap failure, thermal slowdown, reset needed
    assert bad["pcie"]["width_current"] == 8 and bad["pcie"]["width_degraded"] is True
    assert bad["pcie"]["gen_current"] == 1
    assert bad["ecc_errors"]["volatile"] == {
        "correctable": 5, "uncorrectable": 3,
        "counters": {"SRAM Correctable": 0, "SRAM Uncorrectable": 2, "DRAM Correctable": 5,
                     "DRAM Uncorrectable": 1}}
    assert bad["remapped_rows"]["failure"] is True
    assert bad["active_clocks_event_reasons"] == ["HW Slowdown", "HW Thermal Slowdown"]
    assert bad["reset_status"]["reset_required"] is True
    assert bad["temperature_c"] == 87
    assert bad["complete"] is True  # ends with a Processes section listing a process


def test_smi_q_r418_v100_old_spellings():
    q = parse_smi_q(smi_q(V100))
    (gpu,) = q["gpus"]
    assert gpu["bus_id"] == "0000:3b:00.0" and gpu["persistence_mode"] is False
    assert gpu["ecc_mode"] == {"current": True, "pending": True}  # "Ecc Mode" in R418
    assert gpu["ecc_errors"]["volatile"]["correctable"] == 0
    assert gpu["ecc_errors"]["aggregate"]["correctable"] == 3
    assert gpu["ecc_errors"]["aggregate"]["uncorrectable"] == 1
    assert gpu["ecc_errors"]["aggregate"]["counters"] == {"Single Bit Total": 3, "Double Bit Total": 1}
    assert gpu["retired_pages"] == {"single_bit": 0, "double_bit": 1, "pending": False}
    assert gpu["remapped_rows"] is None  # no row remapper before Ampere
    assert gpu["reset_status"] is None
    assert gpu["clocks_event_reasons"]["Idle"] is True  # "Clocks Throttle Reasons"
    assert gpu["temperature_c"] == 34
    assert q["complete"] is True


def test_smi_q_lost_indentation_and_tabs_read_the_same():
    text = smi_q(H100)
    flat = "\n".join(line.strip() for line in text.splitlines()) + "\n"
    tabs = "\n".join("\t".join(line.split("    ")) for line in text.splitlines()) + "\n"
    assert parse_smi_q(flat) == parse_smi_q(text)
    assert parse_smi_q(tabs) == parse_smi_q(text)


def test_smi_q_cut_at_a_line_boundary_is_incomplete():
    text = smi_q(H100)
    cut = text[: text.index("    Temperature\n        GPU Current Temp                  : 87 C")]
    q = parse_smi_q(cut)
    assert q["complete"] is False
    assert "Processes (the end of the GPU block)" in q["gpus"][1]["missing"]
    first = text[: text.index("GPU 00000000:2A:00.0")]
    q = parse_smi_q(first)
    assert q["complete"] is False and len(q["gpus"]) == 1 and q["attached_gpus"] == 2


@pytest.mark.parametrize(("mutate", "message"), [
    pytest.param(lambda t: t.replace("Current                   : 16x", "Current                   : 1", 1),
                 r"line \d+: 'Current' should be a link width", id="cut-width"),
    pytest.param(lambda t: t.replace("GPU Current Temp                  : 30 C",
                                     "GPU Current Temp                  : 3", 1),
                 r"'GPU Current Temp' should be a temperature", id="cut-temp"),
    pytest.param(lambda t: t.replace("NVIDIA H100 80GB HBM3\n", "NVIDIA H100 80GB\nHBM3\n", 1),
                 r"line 11: 'HBM3' follows the value on line 10 without a ':'", id="wrapped"),
    pytest.param(lambda t: t[t.index("    Product Name"):], r"line 1: 'Product Name' before any",
                 id="starts-inside-a-block"),
    pytest.param(lambda t: t.replace("        Pending                           : Yes\n",
                                     "        Pending                           : Yes\n"
                                     "        Pending                           : No\n", 1),
                 r"'Pending' twice in Remapped Rows", id="duplicate-key"),
    pytest.param(lambda t: "Timestamp : now\n", r"no 'GPU <bus id>' block", id="no-gpu"),
    pytest.param(lambda t: t.replace("Persistence Mode                      : Enabled",
                                     "Persistence Mode                      : Enab", 1),
                 r"'Persistence Mode' should be Enabled or Disabled", id="cut-mode"),
])
def test_smi_q_rejects_cut_and_shuffled_input(mutate, message):
    with pytest.raises(ParseError, match=message):
        parse_smi_q(mutate(smi_q(H100)))


def test_smi_q_display_filtered_report():
    text = ("Attached GPUs : 1\nGPU 00000000:18:00.0\n    Remapped Rows\n"
            "        Correctable Error : 0\n        Uncorrectable Error : 0\n"
            "        Pending : No\n        Remapping Failure Occurred : No\n")
    q = parse_smi_q(text)
    assert q["gpus"][0]["display_filtered"] is True and q["complete"] is True
    assert q["gpus"][0]["remapped_rows"]["pending"] is False
    assert q["gpus"][0]["uuid"] is None


def test_smi_q_unknown_key_in_a_known_section_is_flagged():
    text = smi_q(H100).replace("        Pending                           : Yes\n",
                               "        Pending                           : Yes\n"
                               "        Frobnication                      : 3\n", 1)
    q = parse_smi_q(text)
    assert q["complete"] is False and q["gpus"][0]["unrecognised"]


MIG_DEVICES = """\
    MIG Devices
        MIG Device
            Index                         : 0
            GPU Instance ID               : 1
            Compute Instance ID           : 0
            Device Attributes
                Shared
                    Multiprocessor count  : 66
                    Copy Engine count     : 4
            ECC Errors
                Volatile
                    SRAM Uncorrectable    : 0
            FB Memory Usage
                Total                     : 40192 MiB
                Used                      : 13 MiB
                Free                      : 40179 MiB
            BAR1 Memory Usage
                Total                     : 65535 MiB
                Used                      : 0 MiB
                Free                      : 65535 MiB
"""


def test_smi_q_mig_devices_are_skipped():
    text = smi_q(H100)
    mig = text.replace("        Current                           : Disabled\n"
                       "        Pending                           : Disabled\n",
                       "        Current                           : Enabled\n"
                       "        Pending                           : Enabled\n" + MIG_DEVICES, 1)
    assert mig != text
    assert parse_smi_q(mig) == parse_smi_q(text)
    flat = "\n".join(line.strip() for line in mig.splitlines()) + "\n"
    assert parse_smi_q(flat) == parse_smi_q(text)


# --------------------------------------------------------------------------------------------
# NVIDIA vGPU reports (guest R535, host R525) and nvidia-smi exit code 14
# --------------------------------------------------------------------------------------------

# Guest of a V100D-8C vGPU, R535: verbatim from a public vGPU-worker guide on GitHub (trailing
# spaces dropped). "Attached vGPUs", and the licence section repeats "Product Name".
VGPU_GUEST = "r535_vgpu_guest.txt"

# vGPU host, R525: the header and the start of the GPU block, verbatim from akb486/vgpu
# (README.md); the excerpt ends before the GPU UUID.
VGPU_HOST = """\
==============NVSMI LOG==============

Timestamp                                 : Thu Nov 2 21:43:18 2025
Driver Version                            : 525.147.01
CUDA Version                              : Not Found
vGPU Driver Capability
        Heterogenous Multi-vGPU           : Supported

Attached GPUs                             : 1
GPU 00000000:01:00.0
    Product Name                          : NVIDIA GeForce RTX 4088
    Product Brand                         : GeForce
    Product Architecture                  : Ada Lovelace
    Display Mode                          : Enabled
    Display Active                        : Disabled
    Persistence Mode                      : Enabled
    vGPU Device Capability
        Fractional Multi-vGPU             : Supported
        Heterogeneous Time-Slice Profiles : Supported
        Heterogeneous Time-Slice Sizes    : Not Supported
    MIG Mode
        Current                           : N/A
        Pending                           : N/A
"""


def test_smi_q_vgpu_guest_r535_reads_the_gpu_not_the_licence():
    q = parse_smi_q(smi_q(VGPU_GUEST))
    assert (q["driver_version"], q["cuda_version"], q["attached_gpus"]) == ("535.216.01", "12.2", 1)
    [gpu] = q["gpus"]
    assert gpu["bus_id"] == "0000:02:00.0"
    assert gpu["uuid"] == "GPU-57abc772-1dd3-11b2-8fae-e31710b8f307"
    # The GPU's Product Name, not the licence's ("NVIDIA Virtual Compute Server").
    assert gpu["product_name"] == "GRID V100D-8C"
    assert gpu["ecc_errors"]["volatile"]["uncorrectable"] == 0
    assert gpu["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert gpu["complete"] is True and q["complete"] is True
    # Indentation lost: the licence section still keeps its Product Name.
    flat = "\n".join(line.strip() for line in smi_q(VGPU_GUEST).splitlines()) + "\n"
    assert parse_smi_q(flat) == q


def test_smi_q_vgpu_licence_product_name_twice_is_still_a_shuffle():
    text = smi_q(VGPU_GUEST).replace(
        "        License Status                    : Licensed (Expiry: 2025-3-19 7:29:4 GMT)\n",
        "        Product Name                      : NVIDIA Virtual Compute Server\n", 1)
    with pytest.raises(ParseError, match="'Product Name' twice in vGPU Software Licensed Product"):
        parse_smi_q(text)


def test_smi_q_vgpu_host_r525_header_section():
    q = parse_smi_q(VGPU_HOST)
    assert (q["driver_version"], q["cuda_version"], q["attached_gpus"]) == ("525.147.01", "Not Found", 1)
    [gpu] = q["gpus"]
    assert gpu["bus_id"] == "0000:01:00.0"
    assert gpu["product_name"] == "NVIDIA GeForce RTX 4088"
    assert gpu["persistence_mode"] is True
    # The excerpt stops early: the reading says so instead of inventing the rest.
    assert gpu["complete"] is False and "GPU UUID" in gpu["missing"]
    # A header section is known by name; an unknown one is still an error naming the line.
    with pytest.raises(ParseError, match="line 6: expected 'Key : Value' or 'GPU <bus id>'"):
        parse_smi_q(VGPU_HOST.replace("vGPU Driver Capability", "vGPU Something Else"))


# nvidia-smi exit code 14 (NVML_ERROR_CORRUPTED_INFOROM): the reading, then the warning. The
# warning line is the one NVIDIA's GPU Operator troubleshooting page shows (Tesla P100,
# 0000:0B:00.0); here it went to stdout with the CSV.
INFOROM_CSV = (
    "0, Tesla P100-PCIE-16GB, 00000000:0B:00.0, GPU-1f3c5d2e-8a9b-4c7d-9e0f-123456789abc, 16280, Enabled, 470.82.01\n"
    "WARNING: infoROM is corrupted at gpu 0000:0B:00.0\n"
)


def test_query_gpu_csv_skips_the_inforom_warning():
    gpus = gpus_from_query(parse_query_gpu_csv(INFOROM_CSV, GPU_QUERY_FIELDS))
    assert [(g["bus_id"], g["name"], g["memory_total_mib"]) for g in gpus] == [
        ("0000:0b:00.0", "Tesla P100-PCIE-16GB", 16280)]
    # Any other line of one cell is still a shifted / cut row.
    with pytest.raises(ParseError, match="line 2: expected 7 comma-separated values"):
        parse_query_gpu_csv(INFOROM_CSV.replace("infoROM is corrupted", "something else"),
                            GPU_QUERY_FIELDS)
