"""Tests for module_utils/gpu.py on the captured outputs in tests/fixtures.

Every case of tests/fixtures/nvidia-smi and tests/fixtures/nvidia-smi-topo is read here and
checked against the "Expected reading" of its .md file.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import gpu
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu import (
    GPU_QUERY_FIELDS,
    ParseError,
    TopologyError,
    driver_state,
    gpu_nic_map,
    gpus_from_query,
    normalize_bus_id,
    nvidia_userspace_version,
    parse_cpu_list,
    parse_dpkg_versions,
    parse_lspci_nn,
    parse_proc_driver_version,
    parse_query_gpu_csv,
    parse_topo_matrix,
    parse_topo_p2p,
    pick_gpu_subset,
)

from tests.conftest import FIXTURES, ROOT, cut_text, fixture_text

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

# Case ids this module reads; test_every_case_is_covered keeps it in step with the fixtures.
COVERED = {"C02", "C04", "C09", "C11", "C13", "C14"}

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


def _without_prompts(text):
    """Drop the shell prompt / command lines the reporters pasted above the output."""
    return "\n".join(ln for ln in text.splitlines()
                     if not re.match(r"^(\$ |<user>@|#\s|\./nvidia-smi|/usr/bin/nvidia-smi|gpu=)", ln))


def _query_fields(text):
    return re.search(r"gpu=(\S+)", text.splitlines()[0]).group(1).split(",")


def _c09_blocks():
    text = fixture_text(C09_VERSIONS)
    proc, _, dpkg = text.partition("$ dpkg -l nvidia-smi")
    return proc, dpkg.split("\n", 1)[1]


def _c14_blocks():
    smi, _, log = fixture_text(C14).partition("# meanwhile, output in /var/log/syslog")
    return _without_prompts(smi), log


# --------------------------------------------------------------------------------------------
# Fixture coverage and Python 3.8 compatibility
# --------------------------------------------------------------------------------------------


def test_every_case_is_covered():
    ids = {p.name.split("_")[0] for kind in ("nvidia-smi", "nvidia-smi-topo")
           for p in (FIXTURES / kind).glob("*.md")}
    assert ids == COVERED


@pytest.mark.parametrize("name", ["gpu.py", "rdma.py", "peermem.py", "parsing.py", "facts.py"])
def test_module_utils_parse_as_python_38(name):
    source = (ROOT / "plugins/module_utils" / name).read_text()
    ast.parse(source, feature_version=(3, 8))
    assert "from __future__ import annotations" in source


def _python38():
    """A Python 3.8 interpreter that really runs (a pyenv shim may not), or None."""
    candidates = sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))
    candidates += [c for c in [shutil.which("python3.8")] if c]
    for candidate in candidates:
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 8)":
            return candidate
    return None


PY38 = _python38()


@pytest.mark.skipif(PY38 is None, reason="no python3.8 interpreter on this machine")
def test_parsers_run_on_python_38():
    """The managed node may only have Python 3.8: run the parsers there on the fixtures."""
    script = f"""
import sys
sys.path.insert(0, {str(ROOT / "collections")!r})  # the checkout as the collection, no ansible needed
from ansible_collections.gpucluster.cluster.plugins.module_utils import gpu, rdma, peermem
F = {str(FIXTURES)!r} + "/"
topo = gpu.parse_topo_matrix(open(F + {C02!r}).read())
assert gpu.gpu_nic_map(topo)[1]["nic"] == "mlx5_1"
assert gpu.pick_gpu_subset(topo, 4) == [0, 1, 2, 3]
assert gpu.parse_topo_matrix(open(F + {C04_M!r}).read())["gpu_count"] == 2
ports = rdma.parse_ibstatus(open(F + "rdma/C06_ibstatus_roce_8x100g_ethernet_link_layer.txt").read())
assert len(ports) == 8
assert peermem.peer_memory_module("535.104.05")["module"] == "nvidia_peermem"
print("ok", sys.version_info[:2])
"""
    out = subprocess.run([PY38, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "ok (3, 8)" in out.stdout


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m (C02, C04)
# --------------------------------------------------------------------------------------------

TOPO_CASES = [
    pytest.param(C02, {
        "gpu_count": 8,
        "nics": [f"mlx5_{i}" for i in range(8)],
        "nic_labels": {f"NIC{i}": f"mlx5_{i}" for i in range(8)},
        "numa": {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1},
        "cpu_affinity": {0: "0-31,64-95", 7: "32-63,96-127"},
        "gpu_numa_id": {i: None for i in range(8)},
        "all_gpu_pairs": "NV12",
        "sample_links": {("GPU0", "mlx5_0"): "PXB", ("GPU0", "mlx5_2"): "NODE",
                         ("GPU0", "mlx5_4"): "SYS", ("GPU7", "mlx5_7"): "PXB",
                         ("mlx5_0", "mlx5_1"): "PIX", ("mlx5_2", "mlx5_3"): "PIX",
                         ("mlx5_4", "mlx5_5"): "PIX", ("mlx5_6", "mlx5_7"): "PIX",
                         ("mlx5_0", "mlx5_2"): "NODE"},
        "nvlink": True, "nvswitch": True,
    }, id="C02-a100-nvswitch-nic-legend"),
    pytest.param(C04_M, {
        "gpu_count": 2,
        "nics": [],
        "nic_labels": {},
        "numa": {0: 0, 1: 0},
        "cpu_affinity": {0: "0-63", 1: "0-63"},
        "gpu_numa_id": {0: None, 1: None},
        "all_gpu_pairs": "PHB",
        "sample_links": {("GPU0", "GPU1"): "PHB", ("GPU1", "GPU0"): "PHB"},
        "nvlink": False, "nvswitch": False,
    }, id="C04-2gpu-tabs-gpu-numa-id"),
]


@pytest.mark.parametrize(("path", "exp"), TOPO_CASES)
def test_topo_matrix_reads_fixture(path, exp):
    topo = parse_topo_matrix(fixture_text(path))
    assert topo["gpu_count"] == exp["gpu_count"]
    assert [g["index"] for g in topo["gpus"]] == list(range(exp["gpu_count"]))
    assert [n["name"] for n in topo["nics"]] == exp["nics"]
    assert {n["label"]: n["name"] for n in topo["nics"]} == exp["nic_labels"]
    by_index = {g["index"]: g for g in topo["gpus"]}
    assert {i: g["numa_node"] for i, g in by_index.items()} == exp["numa"]
    for i, cpus in exp["cpu_affinity"].items():
        assert by_index[i]["cpu_affinity"] == cpus
    assert {i: g["gpu_numa_id"] for i, g in by_index.items()} == exp["gpu_numa_id"]
    names = [g["name"] for g in topo["gpus"]]
    pairs = [topo["links"][a][b] for a in names for b in names if a != b]
    assert len(pairs) == exp["gpu_count"] * (exp["gpu_count"] - 1)
    assert set(pairs) == {exp["all_gpu_pairs"]}
    for (a, b), link in exp["sample_links"].items():
        assert topo["links"][a][b] == link
    assert all(topo["links"][n][n] == "X" for n in topo["links"])
    assert topo["nvlink"] is exp["nvlink"]
    assert topo["nvswitch"] is exp["nvswitch"]


def test_topo_c02_has_28_nvlink_pairs():
    topo = parse_topo_matrix(fixture_text(C02))
    names = [g["name"] for g in topo["gpus"]]
    pairs = {(a, b) for a in names for b in names if a < b}
    assert len(pairs) == 28
    assert {topo["links"][a][b] for a, b in pairs} == {"NV12"}


def test_topo_c04_empty_cell_does_not_shift_columns():
    topo = parse_topo_matrix(fixture_text(C04_M))
    # "0-63 <TAB> 0 <TAB><TAB> N/A": NUMA stays 0, GPU NUMA ID stays N/A -> None.
    assert topo["gpus"][0]["numa_affinity"] == "0"
    assert topo["gpus"][0]["gpu_numa_id"] is None
    assert topo["gpus"][1]["cpu_affinity"] == "0-63"


@pytest.mark.parametrize(("path", "expected"), [
    pytest.param(C02, [(0, "mlx5_0"), (1, "mlx5_1"), (2, "mlx5_2"), (3, "mlx5_3"),
                       (4, "mlx5_4"), (5, "mlx5_5"), (6, "mlx5_6"), (7, "mlx5_7")], id="C02"),
    pytest.param(C04_M, [], id="C04-no-nic"),
])
def test_gpu_nic_map_fixture(path, expected):
    mapping = gpu_nic_map(parse_topo_matrix(fixture_text(path)))
    assert [(m["gpu"], m["nic"]) for m in mapping] == expected
    assert all(m["link"] == "PXB" for m in mapping)


@pytest.mark.parametrize(("path", "count", "expected"), [
    pytest.param(C02, 4, [0, 1, 2, 3], id="C02-4-of-8-numa0"),
    pytest.param(C02, 8, list(range(8)), id="C02-all"),
    pytest.param(C04_M, 2, [0, 1], id="C04-both"),
])
def test_pick_gpu_subset_fixture(path, count, expected):
    assert pick_gpu_subset(parse_topo_matrix(fixture_text(path)), count) == expected


def test_pick_gpu_subset_c04_not_enough_gpus():
    with pytest.raises(TopologyError, match="not enough GPUs: 4 requested, the node has 2"):
        pick_gpu_subset(parse_topo_matrix(fixture_text(C04_M)), 4)


def test_topo_p2p_c04_gns_both_ways():
    p2p = parse_topo_p2p(fixture_text(C04_P2P))
    assert p2p["gpus"] == ["GPU0", "GPU1"]
    assert p2p["status"]["GPU0"]["GPU1"] == "GNS"
    assert p2p["status"]["GPU1"]["GPU0"] == "GNS"
    assert p2p["supported"] is False


def test_topo_p2p_ok_is_supported():
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n\nLegend:\n\n  X    = Self\n"
    assert parse_topo_p2p(text)["supported"] is True


# Older and other layouts --------------------------------------------------------------------

# Pre-2017 driver (SOC, mlx5 columns named directly, CPU Affinity only), tab separated.
OLD_TOPO = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tmlx5_1\tCPU Affinity\n"
    "GPU0\t X \tPIX\tSOC\tSOC\tPIX\tSOC\t0-11,24-35\n"
    "GPU1\tPIX\t X \tSOC\tSOC\tPIX\tSOC\t0-11,24-35\n"
    "GPU2\tSOC\tSOC\t X \tPIX\tSOC\tPIX\t12-23,36-47\n"
    "GPU3\tSOC\tSOC\tPIX\t X \tSOC\tPIX\t12-23,36-47\n"
    "mlx5_0\tPIX\tPIX\tSOC\tSOC\t X \tSOC\t\n"
    "mlx5_1\tSOC\tSOC\tPIX\tPIX\tSOC\t X \t\n"
    "\nLegend:\n\n  X   = Self\n  SOC  = Connection traversing PCIe as well as the SMP link\n"
)


def test_topo_old_driver_soc_named_nics_no_numa_column():
    topo = parse_topo_matrix(OLD_TOPO)
    assert topo["gpu_count"] == 4
    assert [n["name"] for n in topo["nics"]] == ["mlx5_0", "mlx5_1"]
    assert topo["gpus"][2]["cpu_affinity"] == "12-23,36-47"
    assert topo["gpus"][0]["numa_affinity"] is None
    assert topo["gpus"][0]["numa_node"] is None
    assert topo["links"]["GPU0"]["GPU2"] == "SOC"
    assert topo["nvlink"] is False and topo["nvswitch"] is False
    # Ties (GPU0 and GPU1 both PIX to mlx5_0 only) keep the closest NIC; SOC ranks as SYS.
    assert [(m["gpu"], m["nic"]) for m in gpu_nic_map(topo)] == [
        (0, "mlx5_0"), (1, "mlx5_0"), (2, "mlx5_1"), (3, "mlx5_1")]


def test_topo_numa_range_and_four_gpu_all_nvlink_is_not_nvswitch():
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tNV4\tNV4\t0-63\t0-1\n"
        "GPU1\tNV4\t X \tNV4\tNV4\t0-63\t0-1\n"
        "GPU2\tNV4\tNV4\t X \tNV4\t0-63\tN/A\n"
        "GPU3\tNV4\tNV4\tNV4\t X \t0-63\t1\n"
        "\nLegend:\n"
    )
    topo = parse_topo_matrix(text)
    assert topo["gpus"][0]["numa_affinity"] == "0-1"
    assert topo["gpus"][0]["numa_node"] is None
    assert topo["gpus"][2]["numa_affinity"] is None
    assert topo["gpus"][3]["numa_node"] == 1
    assert topo["nvlink"] is True
    assert topo["nvswitch"] is False  # HGX A100 4-GPU: direct NVLink, no NVSwitch


def test_gpu_nic_map_round_robin_and_filter():
    topo = parse_topo_matrix(fixture_text(C02))
    # Only the even NICs: GPU0/GPU1 share mlx5_0 (PXB), GPU2/3 share mlx5_2 ...
    mapping = gpu_nic_map(topo, nics=["mlx5_0", "mlx5_2", "mlx5_4", "mlx5_6"])
    assert [m["nic"] for m in mapping] == ["mlx5_0", "mlx5_0", "mlx5_2", "mlx5_2",
                                            "mlx5_4", "mlx5_4", "mlx5_6", "mlx5_6"]
    # NUMA 0 NICs only: GPU4-7 reach them over SYS and are dealt round-robin over the two.
    mapping = gpu_nic_map(topo, nics=["mlx5_0", "mlx5_1"])
    assert [(m["nic"], m["link"]) for m in mapping] == [
        ("mlx5_0", "PXB"), ("mlx5_1", "PXB"), ("mlx5_0", "NODE"), ("mlx5_1", "NODE"),
        ("mlx5_0", "SYS"), ("mlx5_1", "SYS"), ("mlx5_0", "SYS"), ("mlx5_1", "SYS")]
    assert gpu_nic_map(topo) == gpu_nic_map(parse_topo_matrix(fixture_text(C02)))


# Malformed and truncated -------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    pytest.param(cut_text(fixture_text(C02)), r"no row for GPU\d|truncated", id="C02-half"),
    pytest.param(cut_text(fixture_text(C02), 0.9), r"NIC Legend", id="C02-legend-cut"),
    pytest.param(fixture_text(C04_M).split("\n")[0] + "\n" + fixture_text(C04_M).split("\n")[1],
                 r"no row for GPU1", id="C04-one-row"),
    pytest.param(fixture_text(C04_M).split("\nLegend:")[0], r"Legend:.*missing", id="C04-no-legend"),
    pytest.param(fixture_text(C02).replace("NV12    PXB", "PXB", 1),
                 r"line 2: row GPU0 column NIC7: '0-31,64-95' is not a link type", id="C02-short-row"),
    pytest.param(fixture_text(C02).replace("SYS     SYS     SYS     SYS     0-31,64-95      0",
                                           "SYS     SYS     SYS     SYS", 1),
                 r"line 2: row GPU0 lacks the columns CPU Affinity, NUMA Affinity", id="C02-no-affinity"),
    pytest.param(fixture_text(C02).replace("NV12", "XYZ", 1), r"'XYZ' is not a link type",
                 id="C02-unknown-link"),
    pytest.param("hello world\n", r"line 1: expected the header", id="garbage"),
    pytest.param("", r"empty output", id="empty"),
    pytest.param(fixture_text(C09_SMI), r"expected the header", id="nvml-error-text"),
])
def test_topo_matrix_rejects_bad_input(text, message):
    with pytest.raises(ParseError, match=message):
        parse_topo_matrix(text)


def test_topo_matrix_diagonal_must_be_x():
    text = fixture_text(C04_M).replace("GPU1\tPHB\t X ", "GPU1\tPHB\tPHB", 1)
    with pytest.raises(ParseError, match="diagonal"):
        parse_topo_matrix(text)


@pytest.mark.parametrize("text", ["\n".join(fixture_text(C04_P2P).splitlines()[:2]), "GPU0 nonsense\n",
                                  fixture_text(C04_P2P).replace("GNS", "ZZZ", 1)])
def test_topo_p2p_rejects_bad_input(text):
    with pytest.raises(ParseError, match="topo -p2p"):
        parse_topo_p2p(text)


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
    rows = parse_query_gpu_csv(_without_prompts(text), _query_fields(text))
    assert rows == expected


def _c13():
    text = fixture_text(C13)
    raw_lines = ast.literal_eval(text.splitlines()[2])  # stdout split on newlines, as printed
    return "\n".join(raw_lines), _query_fields(text)


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
        parse_query_gpu_csv(_without_prompts(fixture_text(C09_SMI)), GPU_QUERY_FIELDS)


def test_query_gpu_csv_c14_no_devices_is_not_csv():
    smi, _log = _c14_blocks()
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


# --------------------------------------------------------------------------------------------
# Driver versions and driver state (C09, C14)
# --------------------------------------------------------------------------------------------


def test_proc_driver_version_c09():
    proc, _dpkg = _c09_blocks()
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
    _proc, dpkg = _c09_blocks()
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
    proc, dpkg = _c09_blocks()
    userspace = nvidia_userspace_version(parse_dpkg_versions(dpkg))
    state = driver_state(RC_MISMATCH, _without_prompts(fixture_text(C09_SMI)), proc, userspace)
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
    smi, log = _c14_blocks()
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
    smi, _log = _c14_blocks()
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
    assert set(gpu.DRIVER_STATES) == {"absent", "installed-not-loaded", "ready"}


def test_driver_state_rejects_unreadable_version_file():
    with pytest.raises(ParseError, match="NVRM version"):
        driver_state(0, "", "garbage\n")


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def test_bus_id_and_cpu_list():
    assert normalize_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert normalize_bus_id("17:00.0") == "0000:17:00.0"
    with pytest.raises(ParseError, match="PCI bus id"):
        normalize_bus_id("00000000:1A:00")
    assert parse_cpu_list("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpu_list("N/A") is None
    with pytest.raises(ParseError, match="cpu list"):
        parse_cpu_list("0-")
    with pytest.raises(ParseError, match="runs backwards"):
        parse_cpu_list("5-2")


def test_inputs_must_be_text():
    with pytest.raises(ParseError, match="expected text"):
        parse_topo_matrix(b"GPU0")
    with pytest.raises(ParseError, match="no input"):
        parse_lspci_nn(None)


def test_fixture_inputs_are_untouched():
    # The .txt inputs are kept exactly as captured: the parsers meet tabs and trailing spaces.
    assert "\t\tN/A" in fixture_text(C04_M)
    assert fixture_text(C09_VERSIONS).splitlines()[0].endswith("version ")
    assert sys.version_info >= (3, 8)
