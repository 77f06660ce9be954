"""Tests for module_utils/gpu_smi.py: --query-gpu CSV (C09, C11, C13, C14) and nvidia-smi -q."""

from __future__ import annotations

import ast

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_smi import (
    GPU_QUERY_FIELDS,
    gpus_from_query,
    parse_query_gpu_csv,
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

