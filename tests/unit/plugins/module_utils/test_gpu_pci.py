"""Tests for module_utils/gpu_pci.py: lspci -nn and PCI bus ids."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import (
    normalize_bus_id,
    parse_lspci_nn,
    parse_lspci_nvswitches,
    parse_sysfs_pci,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.unit.plugins.module_utils.gpu_cases import LSPCI

# --------------------------------------------------------------------------------------------
# lspci -nn
# --------------------------------------------------------------------------------------------


def test_lspci_lists_only_nvidia_display_functions():
    gpus = parse_lspci_nn(LSPCI)
    assert [g["bus_id"] for g in gpus] == ["0000:07:00.0", "0000:0f:00.0", "0000:21:00.0",
                                           "0000:47:00.0", "0000:4e:00.0"]
    assert gpus[0] == {"bus_id": "0000:07:00.0", "vendor_id": "10de", "device_id": "20b2",
                       "pci_id": "10de:20b2", "class_id": "0302",
                       "name": "GA100 [A100 SXM4 80GB]", "rev": "a1"}
    consumer = gpus[2]
    assert consumer["class_id"] == "0300"
    assert consumer["name"] == "TU102 [GeForce RTX 2080 Ti]"


def test_lspci_without_domain_and_without_rev():
    text = "01:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2b85]\n"
    assert parse_lspci_nn(text) == [{"bus_id": "0000:01:00.0", "vendor_id": "10de",
                                     "device_id": "2b85", "pci_id": "10de:2b85",
                                     "class_id": "0302", "name": "Device", "rev": None}]


def test_lspci_no_gpu_is_empty():
    assert parse_lspci_nn(LSPCI.splitlines()[0] + "\n") == []
    assert parse_lspci_nn("") == []


@pytest.mark.parametrize("text", [
    pytest.param(LSPCI[: LSPCI.index("[10de:20b2]")], id="cut-mid-line"),
    pytest.param("Tesla V100 is here\n", id="garbage"),
    pytest.param("0000:07:00.0 3D controller: NVIDIA Corporation GA100\n", id="no-nn"),
])
def test_lspci_rejects_bad_input(text):
    with pytest.raises(ParseError, match=r"lspci -nn line \d+: expected"):
        parse_lspci_nn(text)



def test_lspci_nvswitches():
    assert parse_lspci_nvswitches(LSPCI) == [
        {"bus_id": "0000:c1:00.0", "pci_id": "10de:1af1", "name": "Device"},
        {"bus_id": "0000:c2:00.0", "pci_id": "10de:1af1", "name": "Device"}]
    assert parse_lspci_nvswitches(LSPCI.replace("Bridge [0680]", "Bridge [0604]")) == []
    with pytest.raises(ParseError, match=r"lspci -nn line 1: expected"):
        parse_lspci_nvswitches("NVSwitch somewhere\n")


def test_bus_id():
    assert normalize_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert normalize_bus_id("17:00.0") == "0000:17:00.0"
    with pytest.raises(ParseError, match="PCI bus id"):
        normalize_bus_id("00000000:1A:00")
    with pytest.raises(ParseError, match="no input"):
        parse_lspci_nn(None)


def _this_machines_sysfs():
    from pathlib import Path

    base = Path("/sys/bus/pci/devices")
    if not base.is_dir():
        pytest.skip("no /sys/bus/pci/devices here")
    out = {}
    for d in sorted(base.iterdir()):
        out[d.name] = {n: (d / n).read_text() if (d / n).exists() else None
                       for n in ("vendor", "device", "class", "revision")}
    return out


def test_sysfs_reader_takes_the_kernels_own_files():
    # This machine's real /sys/bus/pci/devices (no NVIDIA device): read without an error.
    devices = _this_machines_sysfs()
    assert devices and parse_sysfs_pci(devices) == ([], [])
    # The same files with an NVIDIA 3D controller and an NVSwitch among them.
    devices["0000:17:00.0"] = {"vendor": "0x10de\n", "device": "0x2330\n", "class": "0x030200\n",
                               "revision": "0xa1\n"}
    devices["0000:c1:00.0"] = {"vendor": "0x10de\n", "device": "0x22a3\n", "class": "0x068000\n",
                               "revision": None}
    gpus, switches = parse_sysfs_pci(devices)
    assert gpus == [{"bus_id": "0000:17:00.0", "vendor_id": "10de", "device_id": "2330", "pci_id": "10de:2330",
                     "class_id": "0302", "name": None, "rev": "a1"}]
    assert switches == [{"bus_id": "0000:c1:00.0", "pci_id": "10de:22a3", "name": None}]


def test_sysfs_reader_refuses_what_the_kernel_would_not_write():
    bad = {"0000:17:00.0": {"vendor": "0x10de\n", "device": "0x2330\n", "class": "0x0302\n", "revision": None}}
    with pytest.raises(ParseError, match=r"/sys/bus/pci/devices/0000:17:00.0/class: expected 0x and 6 hex digits"):
        parse_sysfs_pci(bad)
