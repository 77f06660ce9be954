"""Node health verdicts (plugins/module_utils/health.py) on real captured outputs where they exist.

Real captures: tests/fixtures/pcie/H01 (lspci -D -vv of this KVM machine, no PCIe capability),
nvidia-smi/C14 (a syslog with RmInitAdapter lines and no Xid), nvidia-smi/N24 (dmesg: a GPU
fallen off the bus without an Xid), mpi-containers/C36 (``ulimit -a`` with memlock 64 KiB).
Where no capture exists here (LnkSta of a real GPU, an Xid line, an AER line), the text is
written in the tool's documented grammar and says so; the ``nvidia-smi -q`` report is the GPU
component's own test report (tests/unit/plugins/module_utils/smi_q/).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import health
from ansible_collections.gpucluster.cluster.plugins.module_utils.diagnose import parse_ulimit_a

from tests.conftest import fixture_text

H01 = "pcie/H01_lspci_vv_kvm_virtio_no_pcie_capability.txt"
C14 = "nvidia-smi/C14_nvidia_smi_no_devices_found_rminitadapter.txt"
N24 = "nvidia-smi/N24_dmesg_gpu_fallen_off_bus_multiline_without_xid.txt"
N21_JOURNAL = "nvidia-smi/N21_fabricmanager_nv_warn_nothing_to_do_2x_a40_nvlink_bridge.2-journal-zh-locale.txt"
# systemctl status (systemd src/systemctl "Loaded:" / "Active:" lines); written, not captured.
FM_RUNNING = """\
* nvidia-fabricmanager.service - NVIDIA fabric manager service
     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled; vendor preset: enabled)
     Active: active (running) since Tue 2024-01-02 10:00:00 UTC; 1h ago
   Main PID: 1234 (nv-fabricmanage)
"""
FM_INACTIVE = FM_RUNNING.replace("active (running) since Tue 2024-01-02 10:00:00 UTC; 1h ago",
                                 "inactive (dead)").replace("   Main PID: 1234 (nv-fabricmanage)\n", "")
SMI_Q_H100 = Path(__file__).parent / "smi_q" / "r535_h100_2gpu.txt"
C36_ULIMIT = "mpi-containers/C36_memlock_ulimit_64k_ibv_create_cq_enomem.1-ulimit-a.txt"

# pciutils ls-caps.c grammar ("Speed %sGT/s%s, Width x%d%s", " (ok)" / " (downgraded)" in newer
# pciutils, none in older); written here, not captured: this machine has no PCIe device.
LSPCI_GPU_AND_NIC = """\
0000:17:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)
0000:2a:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)
0000:18:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 32GT/s, Width x16, TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-
"""

# NVRM line formats as NVIDIA's "XID Errors" document and public reports show them; written
# here, not captured.
KERNEL_LOG = """\
[ 1.0] NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
[ 2.0] NVRM: Xid (PCI:0000:17:00): 13, pid=99, name=python3, Graphics Exception: ESR 0x404600=0x80000002
[ 3.0] NVRM: Xid (PCI:0000:17:00): 48, pid=99, name=python3, An uncorrectable double bit error
[ 4.0] NVRM: Xid (PCI:0000:17:00): 92, pid=99, High single-bit ECC error rate
[ 5.0] NVRM: Xid (PCI:0000:17:00): 999, pid=99, something new
[ 6.0] pcieport 0000:00:01.0: AER: Corrected error received: 0000:18:00.0
[ 7.0] NVRM: GPU at PCI:0000:3b:00: GPU-00000000-0000-0000-0000-000000000001
[ 8.0] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
[ 9.0] pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: 0000:17:00.0
"""

H100_GPUS = {
    "driver": {"state": "ready", "class": "READY", "version": "535.183.01"},
    "pci_gpus": [{"bus_id": "0000:17:00.0"}, {"bus_id": "0000:2a:00.0"}],
    "gpus": [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "bus_id": "00000000:17:00.0", "persistence_mode": True},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "bus_id": "00000000:2A:00.0", "persistence_mode": False},
    ],
    "gpu_count": 2,
    "pci_gpu_count": 2,
    "topology": {"nvlink": True, "nvswitch": False},
}
NO_GPU_FACTS = {"driver": {"state": "absent"}, "pci_gpus": [], "gpus": [], "gpu_count": 0, "pci_gpu_count": 0}


def by(checks, name):
    return [c for c in checks if c["check"] == name]


def test_lspci_reads_the_real_kvm_capture_without_link_lines():
    devices = health.parse_lspci_vv(fixture_text(H01))
    assert sorted(devices) == [f"0000:00:0{i}.0" for i in range(6)]
    assert devices["0000:00:03.0"]["name"] == "Ethernet controller: Red Hat, Inc. Virtio 1.0 network device (rev 01)"
    assert all(d["cap"] is None and d["sta"] is None for d in devices.values())


def test_lspci_without_devices_is_an_error():
    with pytest.raises(ValueError, match="no device line"):
        health.parse_lspci_vv("lspci: Unable to load libkmod resources: error -2\n")


def test_virtio_nic_of_this_machine_resolves_to_its_pci_function_and_is_skipped():
    # readlink -f /sys/class/net/eth0/device on this machine; veth0 has no device link.
    devices, virtual = health.nic_pci_devices("eth0 /sys/devices/pci0000:00/0000:00:03.0/virtio2\nveth0 \n")
    assert devices == [{"bus_id": "0000:00:03.0", "subject": "eth0"}]
    assert virtual == ["veth0"]
    [c] = health.check_pcie_links(devices, health.parse_lspci_vv(fixture_text(H01)), "nic")
    assert (c["status"], c["subject"]) == ("skipped", "eth0")
    assert "no LnkCap/LnkSta" in c["cause"]


def test_pcie_link_downgrades_are_found_per_device():
    lspci = health.parse_lspci_vv(LSPCI_GPU_AND_NIC)
    assert lspci["0000:2a:00.0"]["sta"] == {"speed_gts": 16.0, "width": 8, "speed_downgraded": True,
                                            "width_downgraded": True}
    assert lspci["0000:18:00.0"]["sta"]["speed_downgraded"] is None  # old lspci: no (ok) marks
    checks = health.check_pcie_links([{"bus_id": b} for b in ("0000:17:00.0", "0000:2A:00.0", "0000:18:00.0",
                                                              "0000:99:00.0")], lspci, "gpu")
    assert [c["status"] for c in checks] == ["ok", "degraded", "ok", "failed"]
    assert "width x8 of x16, speed 16.0GT/s of 32.0GT/s" in checks[1]["cause"]
    assert health.check_pcie_links([{"bus_id": "0000:17:00.0"}], None, "gpu")[0]["status"] == "skipped"


def test_kernel_log_classifies_each_event():
    log = health.kernel_log(KERNEL_LOG)
    assert log["error"] is None
    events = log["events"]
    # NVRM records first, as gpu_kernel.parse_kernel_log reads them, then the AER lines.
    assert [(e["kind"], e.get("code"), e["action"]) for e in events] == [
        ("xid", 79, "drain"), ("xid", 13, "restart_app"), ("xid", 48, "reset"), ("xid", 92, "unknown"),
        ("xid", 999, "unknown"), ("gpu_lost", None, "drain"), ("aer", None, "watch"), ("aer", None, "replace")]
    assert events[0]["bus_id"] == "0000:2a:00.0"
    assert events[5]["bus_id"] == "0000:3b:00.0"
    assert [e["bus_id"] for e in events[6:]] == ["0000:18:00.0", "0000:17:00.0"]
    checks = health.check_kernel_log(H100_GPUS, log, ["0000:18:00.0"])
    # GPU 0000:3b fell off the bus, so gpu_facts no longer lists it: the node's own kernel log
    # still counts. AER lines count only for this node's GPUs and NICs.
    assert [c["status"] for c in checks] == ["failed", "ok", "failed", "degraded", "degraded", "failed",
                                             "degraded", "failed"]
    assert checks[0]["cause"] == "Xid 79: GPU has fallen off the bus (drain)"
    assert checks[3]["cause"] == "Xid 92: not in the Xid catalog (unknown)"
    assert checks[6]["subject"] == "0000:18:00.0" and "Corrected" in checks[6]["cause"]
    only_aer = {"events": [e for e in events if e["kind"] == "aer"], "error": None}
    assert [c["subject"] for c in health.check_kernel_log(H100_GPUS, only_aer, [])] == ["0000:17:00.0"]


def test_kernel_log_of_a_gpu_less_node_counts_aer_on_its_nics_only():
    log = health.kernel_log(KERNEL_LOG)
    [c] = health.check_kernel_log(NO_GPU_FACTS, log, [])
    assert (c["status"], c["cause"]) == ("skipped", "the node has no NVIDIA GPU")
    [c] = health.check_kernel_log(NO_GPU_FACTS, {"events": log["events"][6:7], "error": None}, ["0000:18:00.0"])
    assert c["status"] == "degraded"


def test_real_kernel_logs_read_by_gpu_kernel():
    # C14: syslog, RmInitAdapter failed for 0000:01:00.0, no Xid.
    checks = health.check_kernel_log(H100_GPUS, health.kernel_log(fixture_text(C14)), [])
    assert [(c["status"], c["subject"]) for c in checks] == [("failed", "0000:01:00.0")] * 2
    assert "RmInitAdapter failed! (0x22:0x56:884)" in checks[1]["cause"]
    # N24: a GPU fallen off the bus over three dmesg lines; the probe failure gives no check.
    [c] = health.check_kernel_log(H100_GPUS, health.kernel_log(fixture_text(N24)), [])
    assert (c["status"], c["subject"], c["cause"]) == ("failed", "0000:b3:00.0", "GPU has fallen off the bus (drain)")
    assert health.check_kernel_log(H100_GPUS, health.kernel_log(""), [])[0]["status"] == "ok"


def test_a_kernel_log_gpu_kernel_cannot_read_is_reported_not_raised():
    log = health.kernel_log("[ 1.0] NVRM: Xid (PCI:0000:17:00): 79\n")
    assert log["error"] and "Xid 79" in log["error"]
    [c] = health.check_kernel_log(H100_GPUS, log, [])
    assert c["status"] == "degraded" and c["cause"].startswith("the kernel log could not be read")
    [c] = health.check_kernel_log(NO_GPU_FACTS, log, [])
    assert (c["status"], c["cause"]) == ("skipped", "the node has no NVIDIA GPU")


def test_gpu_less_node_says_so_plainly_for_every_gpu_check():
    r = health.evaluate({"gpu": NO_GPU_FACTS, "data_interfaces": [], "container": {"name": "gpucluster-train",
                                                                                  "info": {"exists": False}}})
    for name in health.GPU_CHECKS:
        [c] = by(r["checks"], name)
        assert (c["status"], c["cause"]) == ("skipped", "the node has no NVIDIA GPU"), name
    assert r["verdict"] == "failed"
    assert r["cause"] == ["container gpucluster-train: training container gpucluster-train: it does not exist; "
                          "its limits cannot be read"]


def test_profile_on_a_gpu_less_node_fails_the_count():
    [count] = by(health.check_profile_gpus({"gpu_count": 8}, NO_GPU_FACTS), "gpu_count")
    assert count["status"] == "failed" and "expects 8 GPUs" in count["cause"]


def test_profile_against_gpu_facts():
    profile = {"gpu_count": 8, "gpu_model": "H100", "driver_branch": "550", "nvswitch": True}
    checks = {c["check"]: c for c in health.check_profile_gpus(profile, H100_GPUS)}
    assert checks["gpu_count"]["status"] == "failed" and "2 GPUs usable, 2 on the PCI bus, profile expects 8" in (
        checks["gpu_count"]["cause"])
    assert checks["gpu_model"]["status"] == "ok"
    assert checks["driver"]["status"] == "failed" and "not on branch 550" in checks["driver"]["cause"]
    assert checks["nvlink"]["status"] == "failed"
    assert "nvswitch absent, profile expects present" in checks["nvlink"]["cause"]
    ok = {c["check"]: c["status"] for c in health.check_profile_gpus(
        {"gpu_count": 2, "gpu_model": "h100", "driver_branch": "535", "nvlink": True}, H100_GPUS)}
    assert ok == {"driver": "ok", "gpu_count": "ok", "gpu_model": "ok", "nvlink": "ok"}
    # No profile: only the generic check that every GPU on the bus is usable.
    lost = dict(H100_GPUS, gpu_count=1, gpus=H100_GPUS["gpus"][:1])
    [count] = by(health.check_profile_gpus({}, lost), "gpu_count")
    assert count["status"] == "failed" and "sees 1 of the 2 GPUs" in count["cause"]


def test_persistence_and_fabric_manager_and_peer_memory():
    [p] = health.check_persistence(H100_GPUS)
    assert p["status"] == "degraded" and "GPU 1" in p["cause"]
    nvswitch = dict(H100_GPUS, nvswitches=[{"bus_id": "0000:c1:00.0", "pci_id": "10de:22a3", "name": "Device"}])
    [fm] = health.check_fabric_manager(nvswitch, {}, FM_INACTIVE)
    assert fm["status"] == "failed" and fm["cause"].startswith("FABRIC_MANAGER_NOT_RUNNING")
    assert "systemctl enable --now nvidia-fabricmanager" in fm["fix"]
    assert health.check_fabric_manager(nvswitch, {}, FM_RUNNING)[0]["status"] == "ok"
    # N21 (a real journal: NV_WARN_NOTHING_TO_DO) on a node whose lspci lists an NVSwitch.
    [fm] = health.check_fabric_manager(nvswitch, {}, fixture_text(N21_JOURNAL))
    assert (fm["status"], fm["cause"].split(":")[0]) == ("failed", "FABRIC_MANAGER_NVSWITCH_NOT_VISIBLE")
    no_switch = dict(H100_GPUS, nvswitches=[])
    [fm] = health.check_fabric_manager(no_switch, {}, "")
    assert (fm["status"], fm["cause"]) == ("skipped", "no NVSwitch known on this node (lspci lists no NVSwitch): "
                                                      "Fabric Manager does not apply")
    assert health.check_fabric_manager(no_switch, {"fabric_manager": True}, "")[0]["status"] == "failed"
    assert health.check_fabric_manager(nvswitch, {"fabric_manager": False}, "")[0]["status"] == "skipped"
    [fm] = health.check_fabric_manager(nvswitch, {}, "\n")
    assert fm["status"] == "degraded" and "could not be read" in fm["cause"]
    assert health.check_peer_memory(H100_GPUS, True, [])[0]["status"] == "failed"
    assert health.check_peer_memory(H100_GPUS, True, ["nvidia_peermem"])[0]["status"] == "ok"
    assert health.check_peer_memory(H100_GPUS, False, [])[0]["status"] == "skipped"


def test_ecc_rows_from_nvidia_smi_q():
    ecc = health.ecc_rows(SMI_Q_H100.read_text(encoding="utf-8"))
    assert ecc["error"] is None
    ok, bad = ecc["rows"]
    assert ok == {"bus_id": "0000:18:00.0", "ecc_mode": True, "uncorrected": 0, "corrected": 0, "pending": True,
                  "remap_failure": False}
    assert (bad["uncorrected"], bad["corrected"], bad["remap_failure"]) == (3, 5, True)
    checks = health.check_ecc(H100_GPUS, ecc)
    assert [(c["status"], c["subject"]) for c in checks] == [("degraded", "GPU 0000:18:00.0"),
                                                              ("failed", "GPU 0000:2a:00.0")]
    assert "row remapping pending" in checks[0]["cause"] and "no spare rows" in checks[1]["cause"]
    clean = {"rows": [dict(ok, pending=False, corrected=3)], "error": None}
    assert [c["status"] for c in health.check_ecc(H100_GPUS, clean, 2)] == ["degraded"]
    assert [c["status"] for c in health.check_ecc(H100_GPUS, clean, 3)] == ["ok"]
    assert health.check_ecc(H100_GPUS, {"rows": [dict(ok, ecc_mode=None)], "error": None})[0]["status"] == "skipped"
    assert health.check_ecc(H100_GPUS, None)[0]["status"] == "skipped"


def test_an_unreadable_nvidia_smi_q_is_reported_not_raised():
    ecc = health.ecc_rows("Failed to initialize NVML: Driver/library version mismatch\n")
    assert ecc["rows"] == [] and ecc["error"]
    [c] = health.check_ecc(H100_GPUS, ecc)
    assert c["status"] == "degraded" and "could not be read" in c["cause"]


def test_container_limits_of_the_real_64k_memlock_capture():
    limits = parse_ulimit_a(fixture_text(C36_ULIMIT))
    mounts = health.parse_hugetlbfs_mounts("hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n")
    want = {"memlock": -1, "nofile_min": 65536, "shm_bytes": "32g", "hugepages_path": "/dev/hugepages"}
    checks = {c["check"]: c for c in health.check_container_limits(limits, 67108864, mounts, want)}
    assert checks["container_memlock"]["status"] == "failed"
    assert "ulimit -l is 64 in the container, the contract says unlimited" in checks["container_memlock"]["cause"]
    assert checks["container_nofile"]["status"] == "degraded"
    assert checks["container_shm"]["status"] == "failed"
    assert "67108864 bytes < 34359738368" in checks["container_shm"]["cause"]
    assert checks["container_hugepages"]["status"] == "ok"
    good = health.check_container_limits({"memlock": 8192, "nofile": 1048576}, 2**30, [],
                                         {"memlock": 8388608, "nofile_min": 65536, "shm_bytes": "1g",
                                          "hugepages_path": ""})
    assert [c["status"] for c in good] == ["ok", "ok", "ok", "skipped"]


def test_df_bytes():
    assert health.parse_df_bytes("1B-blocks\n 67108864\n") == 67108864
    assert health.parse_df_bytes("df: /dev/shm: No such file or directory\n") is None


def test_data_nics_and_drift():
    facts = {"eth0": {"active": True, "ipv4": {"address": "172.18.0.3"}, "speed": -1},
             "data0": {"active": False, "ipv4": {"address": "198.18.5.11"}}}
    checks = health.check_data_nics(["eth0", "data0", "eth9"], facts, {"nic_rate_gbps": 100})
    assert [c["status"] for c in checks] == ["ok", "failed", "failed"]
    assert checks[2]["cause"] == "eth9 does not exist"
    slow = health.check_data_nics(["eth0"], {"eth0": dict(facts["eth0"], speed=10000)}, {"nic_rate_gbps": 100})
    assert slow[0]["status"] == "degraded"
    contract = {"container_env": {"NCCL_SOCKET_IFNAME": "=eth0,data0"}, "data_interfaces": ["eth0", "data0"]}
    items = health.drift(contract, ["NCCL_SOCKET_IFNAME==eth0", "PATH=/usr/bin"], facts)
    assert [(i["item"], i["status"]) for i in items] == [
        ("env NCCL_SOCKET_IFNAME", "drifted"), ("interface eth0", "same"), ("interface data0", "drifted")]
    assert items[0]["actual"] == "=eth0"
    assert health.drift_check(items)[0]["status"] == "degraded"
    assert health.drift({}, [], {})[0]["status"] == "not converged"
    assert health.drift_check(health.drift({}, [], {}))[0]["status"] == "skipped"


def test_rdma_ports_against_the_profile():
    rdma = {"hcas": [{"name": "mlx5_0", "ports": [{"port": 1, "state": "ACTIVE", "rate_gbps": 200}]},
                     {"name": "mlx5_1", "ports": [{"port": 1, "state": "DOWN", "rate_gbps": 400}]}]}
    checks = health.check_rdma_ports(rdma, {"nic_count": 2, "nic_rate_gbps": 400})
    assert [(c["subject"], c["status"]) for c in checks] == [("mlx5_0:1", "degraded"), ("mlx5_1:1", "failed"),
                                                             ("", "failed")]
    assert health.check_rdma_ports({}, {"nic_count": 4})[0]["status"] == "failed"


def test_verdict_orders_failed_first_and_skipped_never_counts():
    checks = [health.check("a", "degraded", "slow", "fix a"), health.check("b", "failed", "gone", "fix b"),
              health.check("c", "skipped", "n/a")]
    v = health.verdict(checks)
    assert v["verdict"] == "failed" and v["cause"] == ["b: gone", "a: slow"] and v["fix"] == ["fix b", "fix a"]
    assert health.verdict([checks[2]])["verdict"] == "healthy"
    assert health.verdict(checks[:1])["verdict"] == "degraded"
    with pytest.raises(ValueError, match="not one of"):
        health.check("x", "fine")


def test_profile_problems():
    assert health.profile_problems({}) == []
    assert health.profile_problems({"gpu_count": 8, "gpu_model": "H100", "driver_branch": 535, "nvswitch": True}) == []
    problems = health.profile_problems({"gpu_count": "8", "nvlink": "yes", "gpus": 8})
    assert problems == ["gpu_count='8' must be a whole number >= 0", "nvlink='yes' must be true or false",
                        "unknown key 'gpus' (known: driver_branch, fabric_manager, gpu_count, gpu_model, nic_count, "
                        "nic_rate_gbps, nvlink, nvswitch)"]
    assert health.profile_problems(["gpu_count"]) == ["must be a mapping, got list ['gpu_count']"]


def test_markdown_report_lists_every_node_check_and_drift():
    r = health.evaluate({"gpu": NO_GPU_FACTS, "container": {"name": "t", "info": {"exists": False}},
                         "contract": {"data_interfaces": ["eth0"]}, "interface_facts": {}})
    md = health.markdown({"generated": "20261201T000000Z", "nodes": {"node-1": r}})
    assert "| node-1 | **failed** |" in md
    assert "| gpu_count |  | skipped | the node has no NVIDIA GPU |  |" in md
    assert "| interface eth0 | up | absent | drifted |" in md


def test_dcgm_packages_from_the_drivers_cuda_major():
    h100 = SMI_Q_H100.read_text(encoding="utf-8")  # CUDA Version : 12.2
    assert health.dcgm_packages(h100) == ["datacenter-gpu-manager-4-cuda12"]
    assert health.dcgm_packages(h100, 3) == ["datacenter-gpu-manager"]
    v100 = (SMI_Q_H100.parent / "r418_v100.txt").read_text(encoding="utf-8")  # CUDA Version : 10.1
    assert health.dcgm_packages(v100, "4") == ["datacenter-gpu-manager-4-cuda10"]
    no_cuda = "\n".join(ln for ln in h100.splitlines() if not ln.startswith("CUDA Version")) + "\n"
    with pytest.raises(ValueError, match="reports CUDA Version None.*node_health_dcgm_major: 3"):
        health.dcgm_packages(no_cuda)
    with pytest.raises(ValueError, match="could not be read.*load the NVIDIA driver"):
        health.dcgm_packages("")
    with pytest.raises(ValueError, match="node_health_dcgm_major=5"):
        health.dcgm_packages(h100, 5)
