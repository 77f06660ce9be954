"""Tests for module_utils/gpu_driver.py: driver versions and driver state (C09, C14)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_driver import (
    DRIVER_STATES,
    driver_state,
    missing_gpus,
    nvidia_userspace_version,
    parse_dpkg_versions,
    parse_proc_driver_version,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_kernel import parse_kernel_log
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import parse_lspci_nn
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import cut_text, fixture_text
from tests.unit.plugins.module_utils.gpu_cases import (
    C09_SMI,
    C09_VERSIONS,
    LSPCI,
    N24,
    OPEN_GSP,
    RC_MISMATCH,
    RC_NOT_FOUND,
    RC_NOT_LOADED,
    c09_blocks,
    c14_blocks,
    without_prompts,
)

# --------------------------------------------------------------------------------------------
# Driver versions and driver state (C09, C14)
# --------------------------------------------------------------------------------------------


def test_proc_driver_version_c09():
    proc, _dpkg = c09_blocks()
    assert parse_proc_driver_version(proc) == "520.56.06"


def test_proc_driver_version_open_module_and_bare():
    text = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  "
            "(dvs-builder@U16-T02-35-3)  Thu Aug 31 2023\nGCC version:  gcc version 12.3.0\n")
    assert parse_proc_driver_version(text) == "535.104.05"
    assert parse_proc_driver_version("550.54.15\n") == "550.54.15"


@pytest.mark.parametrize("text", ["GCC version: gcc 12\n", "", cut_text("NVRM version: NVIDIA UNIX x86_64 Kern")])
def test_proc_driver_version_rejects_bad_input(text):
    with pytest.raises(ParseError, match="NVRM version"):
        parse_proc_driver_version(text)


def test_dpkg_versions_c09_dpkg_l_table():
    _proc, dpkg = c09_blocks()
    packages = parse_dpkg_versions(dpkg)
    assert packages == {"nvidia-smi": "525.85.12-1"}
    assert nvidia_userspace_version(packages) == "525.85.12"


def test_dpkg_query_format_and_preference():
    text = ("ii \tlibnvidia-compute-535\t535.104.05-0ubuntu0.22.04.1\n"
            "rc \tnvidia-utils-525\t525.125.06-0ubuntu1\n"
            "ii \tnvidia-utils-535\t535.104.05-0ubuntu0.22.04.1\n"
            "libnvidia-ml1:amd64\t\n")
    packages = parse_dpkg_versions(text)
    assert packages == {"libnvidia-compute-535": "535.104.05-0ubuntu0.22.04.1",
                        "nvidia-utils-535": "535.104.05-0ubuntu0.22.04.1"}
    assert nvidia_userspace_version(packages) == "535.104.05"
    assert nvidia_userspace_version({}) is None


def test_dpkg_versions_rejects_garbage():
    with pytest.raises(ParseError, match="dpkg line 1"):
        parse_dpkg_versions("this is not dpkg\n")


def test_driver_state_c09_mismatch():
    proc, dpkg = c09_blocks()
    userspace = nvidia_userspace_version(parse_dpkg_versions(dpkg))
    state = driver_state(RC_MISMATCH, without_prompts(fixture_text(C09_SMI)), proc, userspace)
    assert state["state"] == "installed-not-loaded"
    assert state["class"] == "DRIVER_LIBRARY_MISMATCH"
    assert state["kernel_version"] == "520.56.06"
    assert state["userspace_version"] == "525.85.12"
    assert "520.56.06" in state["reason"] and "525.85.12" in state["reason"]
    assert "Driver/library version mismatch" in state["reason"]
    assert "--fix-broken" in state["hint"]
    assert "reboot alone is not enough" in state["hint"]


def test_driver_state_mismatch_with_nvml_library_line():
    out = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.129\n"
    state = driver_state(RC_MISMATCH, out, "530.30.02\n")
    assert (state["kernel_version"], state["userspace_version"]) == ("530.30.02", "535.129")


def test_driver_state_c14_no_devices_rminitadapter():
    smi, log = c14_blocks()
    lspci = parse_lspci_nn("0000:01:00.0 VGA compatible controller [0300]: NVIDIA Corporation "
                           "Device [10de:2b85] (rev a1)\n")
    state = driver_state(RC_NOT_FOUND, smi, "580.65.06\n", None, lspci, log)
    assert state["state"] == "installed-not-loaded"
    assert state["class"] == "NO_DEVICES_INITIALISED"
    assert state["failed_bus_ids"] == ["0000:01:00.0"]
    assert state["pci_ids"] == ["10de:2b85"]
    assert "RmInitAdapter failed for 0000:01:00.0" in state["reason"]
    assert "lspci still lists 1 NVIDIA GPU" in state["reason"]
    assert "Above 4G Decoding" in state["hint"] and "Resizable BAR" in state["hint"]
    assert "do not reinstall the driver" in state["hint"]


def test_driver_state_c14_without_log_and_without_lspci_gpu():
    smi, _log = c14_blocks()
    state = driver_state(RC_NOT_FOUND, smi, None, None, [])
    assert state["class"] == "NO_DEVICES_INITIALISED"
    assert state["failed_bus_ids"] == [] and state["pci_ids"] == []
    assert "lspci lists no NVIDIA GPU" in state["reason"]
    assert "reseat" in state["hint"]


def test_driver_state_not_loaded():
    out = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
           "sure that the latest NVIDIA driver is installed and running.\n")
    state = driver_state(RC_NOT_LOADED, out, None, "535.104.05-0ubuntu1")
    assert state["state"] == "installed-not-loaded"
    assert state["class"] == "NOT_LOADED"
    assert "couldn't communicate with the NVIDIA driver" in state["reason"]
    assert state["userspace_version"] == "535.104.05"
    assert "modprobe nvidia" in state["hint"]


@pytest.mark.parametrize(("lspci", "hint"), [
    pytest.param(None, "run lspci", id="lspci-not-run"),
    pytest.param([], None, id="no-gpu"),
    pytest.param(parse_lspci_nn(LSPCI), "install the NVIDIA driver", id="gpu-without-driver"),
])
def test_driver_state_absent(lspci, hint):
    state = driver_state(None, None, None, None, lspci)
    assert state["state"] == "absent"
    assert state["class"] == "ABSENT"
    assert state["kernel_version"] is None and state["userspace_version"] is None
    if hint is None:
        assert state["hint"] is None
    else:
        assert hint in state["hint"]


def test_driver_state_userspace_missing_and_ready_and_other_errors():
    assert driver_state(127, "", "535.104.05\n")["class"] == "USERSPACE_MISSING"
    ready = driver_state(0, "0, NVIDIA H100, 00000000:18:00.0\n", "535.104.05\n", "535.104.05")
    assert ready["state"] == "ready" and ready["class"] == "READY" and ready["reason"] is None
    lost = driver_state(15, "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is "
                            "lost.  Reboot the system to recover this GPU\n")
    assert lost["class"] == "GPU_LOST" and "GPU is lost" in lost["reason"]
    other = driver_state(255, "Failed to initialize NVML: Unknown Error\n")
    assert other["class"] == "NVML_ERROR"
    assert other["reason"] == "nvidia-smi exited 255: Failed to initialize NVML: Unknown Error"
    assert set(DRIVER_STATES) == {"absent", "installed-not-loaded", "ready"}


def test_driver_state_rejects_unreadable_version_file():
    with pytest.raises(ParseError, match="NVRM version"):
        driver_state(0, "", "garbage\n")


def test_version_file_keeps_trailing_space():
    assert fixture_text(C09_VERSIONS).splitlines()[0].endswith("version ")


def test_driver_state_gpu_lost_names_the_bus_id_from_the_kernel_log_n24():
    out = ("Unable to determine the device handle for GPU0000:B3:00.0: Unknown Error\n"
           "GPU is lost.  Reboot the system to recover this GPU\n")
    state = driver_state(15, out, "570.158.01\n", None, None, fixture_text(N24))
    assert state["class"] == "GPU_LOST"
    assert state["failed_bus_ids"] == ["0000:b3:00.0"] and state["pci_ids"] == ["10de:26b5"]
    assert "0000:b3:00.0 fell off the bus" in state["reason"]
    assert "drain the node" in state["hint"] and "do not reinstall the driver" in state["hint"]
    assert driver_state(15, out)["failed_bus_ids"] == []


def test_missing_gpus_n24_names_the_bus_id_lspci_has_and_nvidia_smi_lacks():
    lspci = parse_lspci_nn(
        "0000:b3:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:26b5] (rev a1)\n"
        "0000:b4:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:26b5] (rev a1)\n"
        "0000:b5:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:26b5] (rev a1)\n")
    smi = [{"index": 0, "bus_id": "0000:b4:00.0"}]
    kernel = parse_kernel_log(fixture_text(N24))
    assert missing_gpus(lspci, smi, kernel) == [
        {"bus_id": "0000:b3:00.0", "pci_id": "10de:26b5", "reason": "fell off the bus",
         "action": "drain"},
        {"bus_id": "0000:b5:00.0", "pci_id": "10de:26b5", "reason": None, "action": None}]
    assert missing_gpus(lspci, smi + [{"bus_id": "0000:b3:00.0"}, {"bus_id": "0000:b5:00.0"}]) == []
    with pytest.raises(ParseError, match="without a PCI bus id"):
        missing_gpus(lspci, [{"index": 0, "name": "NVIDIA L40S"}])


# --------------------------------------------------------------------------------------------
# The driver refusing a GPU (open module without GSP), nvidia-smi exit code 14 (infoROM)
# --------------------------------------------------------------------------------------------

# NVIDIA/open-gpu-kernel-modules #587, verbatim: the refusal and the probe summary (gpu_cases).
OPEN_GSP_LOG = OPEN_GSP[OPEN_GSP.index("[  160.877997]"):]
RTX_4060TI = [{"bus_id": "0000:01:00.0", "pci_id": "10de:2331"}]


def test_driver_state_no_devices_open_module_without_gsp_blames_the_module_not_the_bios():
    state = driver_state(RC_NOT_FOUND, "No devices were found\n", None, "535.86.10", RTX_4060TI,
                         OPEN_GSP_LOG)
    assert state["class"] == "NO_DEVICES_INITIALISED"
    assert state["failed_bus_ids"] == ["0000:01:00.0"] and state["pci_ids"] == ["10de:2331"]
    assert "0000:01:00.0 not supported by the installed (open) driver" in state["reason"]
    assert "RmInitAdapter" not in state["reason"]
    assert "proprietary kernel module" in state["hint"]
    assert "Above 4G" not in state["hint"]


def test_driver_state_not_loaded_with_the_gsp_refusal_in_the_log():
    out = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
           "sure that the latest NVIDIA driver is installed and running.\n")
    state = driver_state(RC_NOT_LOADED, out, None, "535.86.10", RTX_4060TI, OPEN_GSP_LOG)
    assert state["class"] == "NOT_LOADED"
    assert state["failed_bus_ids"] == ["0000:01:00.0"] and state["pci_ids"] == ["10de:2331"]
    assert "not supported by the installed (open) driver" in state["reason"]
    assert "proprietary kernel module" in state["hint"] and "modprobe" not in state["hint"]
    # Without a kernel log, the old reading.
    assert "modprobe nvidia" in driver_state(RC_NOT_LOADED, out, None, "535.86.10")["hint"]


def test_missing_gpus_names_the_open_module_refusal():
    kernel = parse_kernel_log(OPEN_GSP_LOG)
    assert missing_gpus(RTX_4060TI, [], kernel) == [
        {"bus_id": "0000:01:00.0", "pci_id": "10de:2331",
         "reason": "not supported by the installed (open) driver", "action": "none"}]


# nvidia-smi exit code 14, as NVIDIA's GPU Operator troubleshooting page shows it (Tesla P100,
# driver 470.82.01): the reading is printed, the warning names the GPU.
INFOROM_OUT = (
    "0, Tesla P100-PCIE-16GB, 00000000:0B:00.0, GPU-1f3c5d2e-8a9b-4c7d-9e0f-123456789abc, 16280, Enabled, 470.82.01\n"
    "WARNING: infoROM is corrupted at gpu 0000:0B:00.0\n"
)
PROC_470 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Tue Oct 26 21:21:04 UTC 2021\n"
RC_INFOROM = 14  # nvidia-smi(1) RETURN VALUE: infoROM is corrupted


def test_driver_state_inforom_corrupted_is_loaded_and_names_the_board():
    state = driver_state(RC_INFOROM, INFOROM_OUT, PROC_470, "470.82.01-0ubuntu1",
                         [{"bus_id": "0000:0b:00.0", "pci_id": "10de:15f8"}])
    assert state["state"] == "ready"  # the driver is loaded and the GPUs can be read
    assert state["class"] == "INFOROM_CORRUPTED"
    assert state["failed_bus_ids"] == ["0000:0b:00.0"]
    assert state["reason"] == "nvidia-smi exited 14: infoROM is corrupted at 0000:0b:00.0"
    assert "replace the board" in state["hint"] and "contact the vendor" in state["hint"]
    assert state["kernel_version"] == "470.82.01"
    # The exit code alone (warning not captured) still reads INFOROM_CORRUPTED.
    bare = driver_state(RC_INFOROM, INFOROM_OUT.splitlines()[0] + "\n", PROC_470)
    assert bare["class"] == "INFOROM_CORRUPTED" and bare["failed_bus_ids"] == []
    assert "does not name" in bare["reason"]
    # NVML could not start at all (nvmlErrorString of NVML_ERROR_CORRUPTED_INFOROM): not ready.
    failed = driver_state(RC_INFOROM, "Failed to initialize NVML: Corrupted infoROM\n", PROC_470)
    assert failed["state"] == "installed-not-loaded" and failed["class"] == "INFOROM_CORRUPTED"


def test_driver_state_other_exit_codes_name_their_meaning():
    state = driver_state(4, "Failed to initialize NVML: Insufficient Permissions\n")
    assert state["class"] == "NVML_ERROR"
    assert state["reason"] == ("nvidia-smi exited 4 (no permission): Failed to initialize NVML: "
                               "Insufficient Permissions")
