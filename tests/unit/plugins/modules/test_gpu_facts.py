"""gpu_facts module: a fake node answers the commands; the facts must follow the fixtures."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import gpu_facts

from tests.conftest import fixture_text

C02 = "nvidia-smi-topo/C02_topo_a100_nvswitch_roce_nic_legend.txt"
C09_SMI = "nvidia-smi/C09_nvml_driver_library_mismatch_proc_version_vs_dpkg.1-nvidia-smi.txt"
C09_VERSIONS = "nvidia-smi/C09_nvml_driver_library_mismatch_proc_version_vs_dpkg.2-proc-driver-nvidia-version-dpkg-l-nvidia.txt"  # noqa: E501 - fixture name
C14 = "nvidia-smi/C14_nvidia_smi_no_devices_found_rminitadapter.txt"
N24 = "nvidia-smi/N24_dmesg_gpu_fallen_off_bus_multiline_without_xid.txt"

LSPCI_NO_GPU = (
    "0000:00:00.0 Host bridge [0600]: Intel Corporation Sky Lake-E DMI3 Registers [8086:2020] (rev 07)\n"
    "0000:3b:00.0 Ethernet controller [0200]: Mellanox Technologies MT27800 Family [ConnectX-5] [15b3:1017]\n"
)
BUS_IDS = ["07", "0f", "47", "4e", "87", "90", "b7", "bd"]
LSPCI_8GPU = "".join(
    f"0000:{b}:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)\n"
    for b in BUS_IDS) + "".join(
    f"0000:{b}:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)\n"
    for b in ("c1", "c2", "c3", "c4", "c5", "c6"))
QUERY_8GPU = "".join(
    f"{i}, NVIDIA A100-SXM4-80GB, 00000000:{b.upper()}:00.0, GPU-{i:08d}, 81920, Enabled, 525.105.17\n"
    for i, b in enumerate(BUS_IDS))


class FailJson(Exception):
    pass


class FakeModule:
    """The part of AnsibleModule that gpu_facts.collect uses, answering from a table."""

    def __init__(self, bins, answers, params=None):
        self.params = {"topology": True, "kernel_log": True}
        self.params.update(params or {})
        self.bins = bins
        self.answers = answers  # command-line prefix -> (rc, stdout, stderr)
        self.calls = []
        self.warnings = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return self.bins.get(name)

    def run_command(self, args, **kwargs):
        line = " ".join(args)
        self.calls.append((line, kwargs))
        for prefix, answer in self.answers.items():
            if line.startswith(prefix):
                return answer
        raise AssertionError(f"unexpected command {line!r}")

    def warn(self, msg):
        self.warnings.append(msg)

    def fail_json(self, **kwargs):
        raise FailJson(kwargs["msg"])


def _bins(*names):
    return {n: f"/usr/bin/{n}" for n in names}


def _files(mapping):
    return lambda path: mapping.get(path)


def _c09():
    proc, _, _dpkg = fixture_text(C09_VERSIONS).partition("$ dpkg -l nvidia-smi")
    smi = "\n".join(ln for ln in fixture_text(C09_SMI).splitlines() if "$ " not in ln)
    return proc, smi


# --------------------------------------------------------------------------------------------
# Paths through collect()
# --------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_sysfs(monkeypatch):
    """The machine running the tests keeps its own /sys out: a test that wants the sysfs
    fallback passes ``listdir`` (and the files through ``read``)."""
    monkeypatch.setattr(gpu_facts, "list_dir", lambda path: None)


def _sysfs(devices):
    """A fake /sys/bus/pci/devices: ``{slot: (vendor, device, class, revision)}`` as the kernel
    writes the files (0x-prefixed, newline-terminated)."""
    base = gpu_facts.SYSFS_PCI_DEVICES
    files = {}
    for slot, values in devices.items():
        for name, value in zip(("vendor", "device", "class", "revision"), values, strict=True):
            files[f"{base}/{slot}/{name}"] = value + "\n"
    return (lambda path: sorted(devices) if path == base else None), files


def test_without_lspci_the_pci_bus_is_read_from_sysfs():
    # The A100 HGX of LSPCI_8GPU as the kernel lists it: 8 GPUs, 6 NVSwitches, a NIC.
    devices = {f"0000:{b}:00.0": ("0x10de", "0x20b2", "0x030200", "0xa1") for b in BUS_IDS}
    switches = [f"0000:{b}:00.0" for b in ("c1", "c2", "c3", "c4", "c5", "c6")]
    devices.update({slot: ("0x10de", "0x1af1", "0x068000", "0xa1") for slot in switches})
    devices["0000:3b:00.0"] = ("0x15b3", "0x1017", "0x020000", "0x00")
    listdir, files = _sysfs(devices)
    facts = gpu_facts.collect(FakeModule({}, {}), read=_files(files), listdir=listdir)
    from_lspci = gpu_facts.parse_lspci_nn(LSPCI_8GPU)
    assert [{**g, "name": None} for g in from_lspci] == facts["pci_gpus"]
    assert [s["bus_id"] for s in facts["nvswitches"]] == switches
    assert facts["pci_gpu_count"] == 8 and facts["pci_source"] == "/sys/bus/pci/devices"
    # The driver's reasons say where the GPUs were seen, and the hint is to install it.
    assert facts["driver"]["class"] == "ABSENT"
    assert "/sys/bus/pci/devices lists 8 NVIDIA GPU(s)" in facts["driver"]["reason"]
    assert facts["driver"]["hint"] == "install the NVIDIA driver (role nvidia_driver)"


def test_lspci_wins_where_it_runs_and_sysfs_is_not_read():
    listdir, files = _sysfs({"0000:07:00.0": ("0x10de", "0x20b2", "0x030200", "0xa1")})
    module = FakeModule(_bins("lspci"), {"/usr/bin/lspci -Dnn": (0, LSPCI_NO_GPU, "")})
    facts = gpu_facts.collect(module, read=_files(files), listdir=listdir)
    assert facts["pci_gpus"] == [] and facts["pci_source"] == "lspci"


def test_neither_lspci_nor_sysfs():
    facts = gpu_facts.collect(FakeModule({}, {}), read=_files({}), listdir=lambda path: None)
    assert facts["pci_gpus"] == [] and facts["nvswitches"] is None and facts["pci_source"] is None
    assert "run lspci" in facts["driver"]["hint"]


def test_node_without_gpu():
    module = FakeModule(_bins("lspci", "dmesg"), {"/usr/bin/lspci -Dnn": (0, LSPCI_NO_GPU, "")})
    facts = gpu_facts.collect(module, read=_files({}))
    assert facts["driver"]["state"] == "absent"
    assert facts["driver"]["class"] == "ABSENT"
    assert facts["driver"]["version"] is None
    assert facts["driver"]["hint"] is None  # no GPU, nothing to install
    assert facts["gpus"] == [] and facts["pci_gpus"] == []
    assert facts["gpu_count"] == 0 and facts["pci_gpu_count"] == 0
    assert facts["nvswitches"] == []
    assert facts["topology"] is None and facts["gpu_nic_map"] == []
    assert facts["tools"] == {"lspci": True, "nvidia_smi": False, "dpkg_query": False,
                              "dmesg": True}
    assert [c for c, _ in module.calls] == ["/usr/bin/lspci -Dnn"]


def test_node_without_any_tool():
    facts = gpu_facts.collect(FakeModule({}, {}), read=_files({}))
    assert facts["driver"]["state"] == "absent"
    assert facts["nvswitches"] is None  # unknown without lspci
    assert "run lspci" in facts["driver"]["hint"]
    assert facts["pci_gpus"] == []


def test_installed_not_loaded_c09_mismatch():
    proc, smi = _c09()
    module = FakeModule(
        _bins("lspci", "nvidia-smi", "dpkg-query"),
        {"/usr/bin/lspci": (0, LSPCI_8GPU, ""),
         "/usr/bin/dpkg-query": (1, "ii \tnvidia-smi\t525.85.12-1\n",
                                 "dpkg-query: no packages found matching cuda-drivers\n"),
         "/usr/bin/nvidia-smi --query-gpu": (18, smi + "\n", "")})
    facts = gpu_facts.collect(module, read=_files({gpu_facts.PROC_VERSION: proc}))
    driver = facts["driver"]
    assert driver["state"] == "installed-not-loaded"
    assert driver["class"] == "DRIVER_LIBRARY_MISMATCH"
    assert driver["kernel_version"] == "520.56.06"
    assert driver["userspace_version"] == "525.85.12"
    assert driver["version"] == "520.56.06"
    assert "--fix-broken" in driver["hint"]
    assert facts["gpus"] == [] and facts["gpu_count"] == 0
    assert facts["pci_gpu_count"] == 8
    assert facts["topology"] is None
    assert not any(" topo " in c for c, _ in module.calls)
    # dpkg-query's format must reach the tool unexpanded.
    dpkg_call = next((c, kw) for c, kw in module.calls if c.startswith("/usr/bin/dpkg-query"))
    assert "${db:Status-Abbrev}\t${Package}\t${Version}\n" in dpkg_call[0]
    assert dpkg_call[1] == {"expand_user_and_vars": False}


def test_installed_not_loaded_driver_not_communicating():
    out = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
           "sure that the latest NVIDIA driver is installed and running.\n\n")
    module = FakeModule(_bins("nvidia-smi"), {"/usr/bin/nvidia-smi": (9, out, "")})
    facts = gpu_facts.collect(module, read=_files({}))
    assert facts["driver"]["state"] == "installed-not-loaded"
    assert facts["driver"]["class"] == "NOT_LOADED"
    assert facts["gpus"] == []


@pytest.mark.parametrize("kernel_log", [True, False])
def test_no_devices_c14_reads_dmesg(kernel_log):
    smi, _, log = fixture_text(C14).partition("# meanwhile, output in /var/log/syslog")
    smi = "\n".join(ln for ln in smi.splitlines() if not ln.startswith("#"))
    module = FakeModule(
        _bins("lspci", "nvidia-smi", "dmesg"),
        {"/usr/bin/lspci": (0, "0000:01:00.0 VGA compatible controller [0300]: NVIDIA "
                               "Corporation Device [10de:2b85] (rev a1)\n", ""),
         "/usr/bin/nvidia-smi": (6, smi, ""),
         "/usr/bin/dmesg": (0, log, "")},
        params={"kernel_log": kernel_log})
    facts = gpu_facts.collect(module, read=_files({gpu_facts.PROC_VERSION: "580.65.06\n"}))
    driver = facts["driver"]
    assert driver["class"] == "NO_DEVICES_INITIALISED"
    assert "Above 4G Decoding" in driver["hint"]
    assert facts["pci_gpus"][0]["pci_id"] == "10de:2b85"
    if kernel_log:
        assert driver["failed_bus_ids"] == ["0000:01:00.0"]
        assert driver["pci_ids"] == ["10de:2b85"]
    else:
        assert driver["failed_bus_ids"] == []
        assert not any("dmesg" in c for c, _ in module.calls)


def _ready_module(topo=None, params=None):
    return FakeModule(
        _bins("lspci", "nvidia-smi", "dpkg-query"),
        {"/usr/bin/lspci": (0, LSPCI_8GPU, ""),
         "/usr/bin/dpkg-query": (0, "ii \tnvidia-utils-525-server\t525.105.17-0ubuntu1\n", ""),
         "/usr/bin/nvidia-smi --query-gpu": (0, QUERY_8GPU, ""),
         "/usr/bin/nvidia-smi topo -m": (0, fixture_text(C02) if topo is None else topo, "")},
        params=params)


def test_ready_node_with_topology_c02():
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  525.105.17  Sat Mar 25 2023\n"
    module = _ready_module()
    facts = gpu_facts.collect(module, read=_files({gpu_facts.PROC_VERSION: proc}))
    assert facts["driver"]["state"] == "ready" and facts["driver"]["class"] == "READY"
    assert facts["driver"]["version"] == "525.105.17"
    assert facts["gpu_count"] == 8 and facts["pci_gpu_count"] == 8
    assert facts["gpus"][1] == {"index": 1, "name": "NVIDIA A100-SXM4-80GB",
                                "bus_id": "0000:0f:00.0", "uuid": "GPU-00000001",
                                "memory_total_mib": 81920, "persistence_mode": True,
                                "driver_version": "525.105.17"}
    assert [g["bus_id"] for g in facts["gpus"]] == [g["bus_id"] for g in facts["pci_gpus"]]
    assert facts["topology"]["nvswitch"] is True
    assert [n["bus_id"] for n in facts["nvswitches"]] == [f"0000:c{i}:00.0" for i in range(1, 7)]
    assert [m["nic"] for m in facts["gpu_nic_map"]] == [f"mlx5_{i}" for i in range(8)]
    query = next(c for c, _ in module.calls if "--query-gpu" in c)
    assert query == ("/usr/bin/nvidia-smi --query-gpu=index,name,pci.bus_id,uuid,memory.total,"
                     "persistence_mode,driver_version --format=csv,noheader,nounits")
    json.dumps(facts)  # facts must be plain JSON


def test_ready_node_topology_off():
    module = _ready_module(params={"topology": False})
    facts = gpu_facts.collect(module, read=_files({}))
    assert facts["topology"] is None and facts["gpu_nic_map"] == []
    assert not any(" topo " in c for c, _ in module.calls)


def test_ready_node_topology_command_fails_is_a_warning():
    module = _ready_module()
    module.answers["/usr/bin/nvidia-smi topo -m"] = (3, "", "topo not supported\n")
    facts = gpu_facts.collect(module, read=_files({}))
    assert facts["topology"] is None
    assert module.warnings == ["nvidia-smi topo -m exited 3: topo not supported"]


def test_unreadable_topology_fails_with_the_parser_message():
    text = fixture_text(C02)
    module = _ready_module(topo=text[: text.index("\nGPU5 ")])
    with pytest.raises(FailJson, match=r"cannot read the output of nvidia-smi topo -m: .*no row "
                                       r"for GPU5.*truncated"):
        gpu_facts.collect(module, read=_files({}))


def test_unreadable_query_output_fails():
    module = _ready_module()
    module.answers["/usr/bin/nvidia-smi --query-gpu"] = (0, QUERY_8GPU[:30], "")
    with pytest.raises(FailJson, match=r"nvidia-smi --query-gpu.*expected 7 comma-separated"):
        gpu_facts.collect(module, read=_files({}))


# --------------------------------------------------------------------------------------------
# The module as Ansible runs it
# --------------------------------------------------------------------------------------------


def _run_main(monkeypatch, capsys, args, bins, answers, files):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: bins.get(name))

    def run_command(self, args, **kwargs):
        line = " ".join(args)
        for prefix, answer in answers.items():
            if line.startswith(prefix):
                return answer
        raise AssertionError(f"unexpected command {line!r}")

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(gpu_facts, "read_file", _files(files))
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        gpu_facts.main()
    result = json.loads(capsys.readouterr().out)
    return exc.value.code, result


@pytest.mark.parametrize("check_mode", [False, True])
def test_main_no_gpu_node(monkeypatch, capsys, check_mode):
    code, result = _run_main(monkeypatch, capsys, {"_ansible_check_mode": check_mode},
                             _bins("lspci"), {"/usr/bin/lspci": (0, LSPCI_NO_GPU, "")}, {})
    assert code == 0
    assert result["changed"] is False
    facts = result["ansible_facts"]["gpucluster_gpu"]
    assert facts["driver"]["state"] == "absent"
    assert facts["gpus"] == [] and facts["pci_gpus"] == []


def test_main_installed_not_loaded(monkeypatch, capsys):
    proc, smi = _c09()
    code, result = _run_main(monkeypatch, capsys, {}, _bins("nvidia-smi"),
                             {"/usr/bin/nvidia-smi": (18, smi, "")},
                             {gpu_facts.PROC_VERSION: proc})
    assert code == 0
    driver = result["ansible_facts"]["gpucluster_gpu"]["driver"]
    assert driver["state"] == "installed-not-loaded"
    assert driver["class"] == "DRIVER_LIBRARY_MISMATCH"


def test_main_fails_on_unreadable_output(monkeypatch, capsys):
    code, result = _run_main(monkeypatch, capsys, {}, _bins("lspci"),
                             {"/usr/bin/lspci": (0, "garbage from a broken lspci\n", "")}, {})
    assert code == 1
    assert result["failed"] is True
    assert "gpu_facts: cannot read the output of lspci -Dnn: lspci -nn line 1" in result["msg"]


def test_main_rejects_unknown_option(monkeypatch, capsys):
    code, result = _run_main(monkeypatch, capsys, {"gpus": 8}, {}, {}, {})
    assert code == 1
    assert "gpus" in result["msg"]


def test_documentation_matches_argument_spec():
    doc = yaml.safe_load(gpu_facts.DOCUMENTATION)
    assert doc["module"] == "gpu_facts"
    options = doc["options"]
    assert set(options) == set(gpu_facts.ARGUMENT_SPEC)
    for name, spec in gpu_facts.ARGUMENT_SPEC.items():
        assert options[name]["type"] == spec["type"]
        assert options[name]["default"] == spec["default"]
    yaml.safe_load(gpu_facts.EXAMPLES)
    returned = yaml.safe_load(gpu_facts.RETURN)["ansible_facts"]["contains"]["gpucluster_gpu"]
    keys = set(returned["contains"])
    assert keys == {"driver", "pci_gpus", "gpus", "gpu_count", "pci_gpu_count", "nvswitches",
                    "pci_source", "secure_boot", "topology", "gpu_nic_map", "missing_gpus", "tools"}
    assert keys == set(gpu_facts.collect(FakeModule({}, {}), read=_files({})))


def test_module_source_is_read_only():
    source = Path(gpu_facts.__file__).read_text(encoding="utf-8")
    assert "supports_check_mode=True" in source
    assert not re.search(r"open\([^)]*['\"][wa]['\"]", source)
    assert os.path.basename(gpu_facts.__file__) == "gpu_facts.py"


def test_gpu_lost_reads_dmesg_n24():
    out = "Unable to determine the device handle for GPU0000:B3:00.0: Unknown Error\n"
    module = FakeModule(_bins("nvidia-smi", "dmesg"),
                        {"/usr/bin/nvidia-smi": (15, out, ""),
                         "/usr/bin/dmesg": (0, fixture_text(N24), "")})
    facts = gpu_facts.collect(module, read=_files({}))
    assert facts["driver"]["class"] == "GPU_LOST"
    assert facts["driver"]["failed_bus_ids"] == ["0000:b3:00.0"]
    assert facts["driver"]["pci_ids"] == ["10de:26b5"]


def test_ready_node_with_a_gpu_gone_from_nvidia_smi_n24():
    lspci = LSPCI_8GPU.replace("0000:bd:00.0", "0000:b3:00.0")
    query = "".join(ln for ln in QUERY_8GPU.splitlines(keepends=True) if ":BD:00.0" not in ln)
    module = FakeModule(
        _bins("lspci", "nvidia-smi", "dmesg"),
        {"/usr/bin/lspci": (0, lspci, ""),
         "/usr/bin/nvidia-smi --query-gpu": (0, query, ""),
         "/usr/bin/dmesg": (0, fixture_text(N24), "")},
        params={"topology": False})
    facts = gpu_facts.collect(module, read=_files({}))
    assert facts["driver"]["state"] == "ready"
    assert facts["gpu_count"] == 7 and facts["pci_gpu_count"] == 8
    assert facts["missing_gpus"] == [{"bus_id": "0000:b3:00.0", "pci_id": "10de:20b2",
                                      "reason": "fell off the bus", "action": "drain"}]
    ready = gpu_facts.collect(_ready_module(params={"topology": False}), read=_files({}))
    assert ready["missing_gpus"] == []


@pytest.mark.parametrize(("value", "want"), [(b"\x06\x00\x00\x00\x01", True), (b"\x06\x00\x00\x00\x00", False),
                                             (b"\x06\x00\x00", False)])
def test_secure_boot_is_the_efi_variables_fifth_byte(tmp_path, value, want):
    (tmp_path / "efivars").mkdir()
    (tmp_path / gpu_facts.SECURE_BOOT_VARIABLE).write_bytes(value)
    assert gpu_facts.secure_boot(str(tmp_path)) is want


def test_secure_boot_is_off_without_the_variable_and_unknown_without_uefi(tmp_path):
    (tmp_path / "efivars").mkdir()
    assert gpu_facts.secure_boot(str(tmp_path)) is False
    assert gpu_facts.secure_boot(str(tmp_path / "no-uefi")) is None


def test_an_unreadable_secure_boot_variable_raises(tmp_path):
    (tmp_path / "efivars").mkdir()
    (tmp_path / gpu_facts.SECURE_BOOT_VARIABLE).mkdir()  # there, but no file to read
    with pytest.raises(OSError):
        gpu_facts.secure_boot(str(tmp_path))
