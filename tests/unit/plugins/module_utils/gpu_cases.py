"""Inputs shared by the GPU tests: fixture paths, helpers that split the pasted captures.

Every case of tests/fixtures/nvidia-smi and tests/fixtures/nvidia-smi-topo is read by one of
the test_gpu_<part>.py modules and checked against the "Expected reading" of its .md file;
test_gpu.py keeps COVERED in step with the fixtures.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import fixture_text

SMI = "nvidia-smi/"
TOPO = "nvidia-smi-topo/"
C02 = TOPO + "C02_topo_a100_nvswitch_roce_nic_legend.txt"
C04_M = TOPO + "C04_topo_2gpu_tabs_gpu_numa_id_na_plus_p2p.1-nvidia-smi-topo-m.txt"
C04_P2P = TOPO + "C04_topo_2gpu_tabs_gpu_numa_id_na_plus_p2p.2-nvidia-smi-topo-p2p-rw.txt"
C09_SMI = SMI + "C09_nvml_driver_library_mismatch_proc_version_vs_dpkg.1-nvidia-smi.txt"
C09_VERSIONS = SMI + "C09_nvml_driver_library_mismatch_proc_version_vs_dpkg.2-proc-driver-nvidia-version-dpkg-l-nvidia.txt"  # noqa: E501 - fixture name
C11_NEW = SMI + "C11_query_gpu_csv_na_not_supported_units.1-new-driver-nounits.txt"
C11_OLD = SMI + "C11_query_gpu_csv_na_not_supported_units.2-old-driver-nounits-as-quoted.txt"
C11_UNITS = SMI + "C11_query_gpu_csv_na_not_supported_units.3-no-nounits-windows-build-gtx-770.txt"
C13 = SMI + "C13_query_gpu_csv_name_with_spaces_whitespace_split_bug.txt"
C14 = SMI + "C14_nvidia_smi_no_devices_found_rminitadapter.txt"

N21_START = SMI + "N21_fabricmanager_nv_warn_nothing_to_do_2x_a40_nvlink_bridge.1-systemctl-start.txt"
N21_JOURNAL = SMI + "N21_fabricmanager_nv_warn_nothing_to_do_2x_a40_nvlink_bridge.2-journal-zh-locale.txt"
N24 = SMI + "N24_dmesg_gpu_fallen_off_bus_multiline_without_xid.txt"

# Case ids the GPU tests read; test_every_case_is_covered keeps it in step with the fixtures.
COVERED = {"C02", "C04", "C09", "C11", "C13", "C14", "N21", "N24"}

# nvidia-smi exit codes (nvidia-smi manual, RETURN VALUE): 6 = no devices, 9 = driver not
# loaded, 18 = NVML library / kernel module version mismatch (NVML_ERROR_LIB_RM_VERSION_MISMATCH).
RC_NOT_FOUND, RC_NOT_LOADED, RC_MISMATCH = 6, 9, 18

# A representative `lspci -Dnn` of an HGX A100 node (no lspci capture is among the fixtures):
# four GPUs, two NVSwitch bridges, two ConnectX-6, plus a consumer card's audio function.
LSPCI = """\
0000:00:00.0 Host bridge [0600]: Advanced Micro Devices, Inc. [AMD] Starship/Matisse Root Complex [1022:1480]
0000:07:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)
0000:0f:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)
0000:c1:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)
0000:c2:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)
0000:47:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)
0000:4e:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)
0000:0c:00.0 Infiniband controller [0207]: Mellanox Technologies MT28908 Family [ConnectX-6] [15b3:101b]
0000:0d:00.0 Ethernet controller [0200]: Mellanox Technologies MT28908 Family [ConnectX-6] [15b3:101b]
0000:21:00.0 VGA compatible controller [0300]: NVIDIA Corporation TU102 [GeForce RTX 2080 Ti] [10de:1e07] (rev a1)
0000:21:00.1 Audio device [0403]: NVIDIA Corporation TU102 High Definition Audio Controller [10de:10f7] (rev a1)
0000:21:00.2 USB controller [0c03]: NVIDIA Corporation TU102 USB 3.1 Host Controller [10de:1ad6] (rev a1)
"""


def without_prompts(text):
    """Drop the shell prompt / command lines the reporters pasted above the output."""
    return "\n".join(ln for ln in text.splitlines()
                     if not re.match(r"^(\$ |<user>@|#\s|\./nvidia-smi|/usr/bin/nvidia-smi|gpu=)", ln))


def query_fields(text):
    return re.search(r"gpu=(\S+)", text.splitlines()[0]).group(1).split(",")


def c09_blocks():
    text = fixture_text(C09_VERSIONS)
    proc, _, dpkg = text.partition("$ dpkg -l nvidia-smi")
    return proc, dpkg.split("\n", 1)[1]


def c14_blocks():
    smi, _, log = fixture_text(C14).partition("# meanwhile, output in /var/log/syslog")
    return without_prompts(smi), log



# ``nvidia-smi -q`` reports (no capture is among the shared fixtures): composed from the report
# layout of the nvidia-smi manual and public reports of R535 (H100, A100) and R418 (V100)
# drivers, see gpu_smi.parse_smi_q. Two H100s, the second one unhealthy.
SMI_Q_DIR = Path(__file__).parent / "smi_q"


def smi_q(name):
    return (SMI_Q_DIR / name).read_text(encoding="utf-8")


# The open kernel module refusing a GPU without GSP (test_gpu_kernel, test_gpu_driver), from
# NVIDIA/open-gpu-kernel-modules #587 (same text in #696, #322); rm_is_supported_device() prints
# the message with the continuation lines unstamped.
OPEN_GSP = """\
[  160.822054] nvidia: loading out-of-tree module taints kernel.
[  160.825258] nvidia: module verification failed: signature and/or required key missing - tainting kernel
[  160.877989] nvidia-nvlink: Nvlink Core is being initialized, major device number 236
[  160.877997] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2331)
               NVRM: installed in this system is not supported by open
               NVRM: nvidia.ko because it does not include the required GPU
               NVRM: System Processor (GSP).
               NVRM: Please see the 'Open Linux Kernel Modules' and 'GSP
               NVRM: Firmware' sections in the driver README, available on
               NVRM: the Linux graphics driver download page at
               NVRM: www.nvidia.com.
[  166.261422] nvidia: probe of 0000:01:00.0 failed with error -1
[  166.261517] NVRM: The NVIDIA probe routine failed for 1 device(s).
[  166.261520] NVRM: None of the NVIDIA devices were initialized.
"""

