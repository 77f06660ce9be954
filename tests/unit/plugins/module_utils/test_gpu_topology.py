"""Tests for module_utils/gpu_topology.py on the nvidia-smi-topo fixtures (C02, C04)."""
# ruff: noqa: E501 - captured matrix lines are kept whole

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_topology import (
    TopologyError,
    gpu_nic_map,
    parse_cpu_list,
    parse_topo_matrix,
    parse_topo_p2p,
    pick_gpu_subset,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import cut_text, fixture_text
from tests.unit.plugins.module_utils.gpu_cases import C02, C04_M, C04_P2P, C09_SMI

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



def test_cpu_list():
    assert parse_cpu_list("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpu_list("N/A") is None
    with pytest.raises(ParseError, match="cpu list"):
        parse_cpu_list("0-")
    with pytest.raises(ParseError, match="runs backwards"):
        parse_cpu_list("5-2")


def test_topo_input_must_be_text():
    with pytest.raises(ParseError, match="expected text"):
        parse_topo_matrix(b"GPU0")


def test_fixture_inputs_are_untouched():
    # The .txt inputs are kept exactly as captured: the parsers meet tabs and trailing spaces.
    assert "\t\tN/A" in fixture_text(C04_M)


# GB200 NVL72 compute tray: 4 GPUs, every pair NV18 through the NVLink switch trays. GPU rows
# from sgl-project/sglang #11208; the GPU3 row, the NIC rows and the NIC legend are modelled
# (the excerpt was cut).
GB200_TRAY = """\
        GPU0    GPU1    GPU2    GPU3    NIC0    NIC1    NIC2    NIC3    NIC4    NIC5    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-71\t0,3-9,11-17\t\t2
GPU1\tNV18\t X \tNV18\tNV18\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-71\t0,3-9,11-17\t\t10
GPU2\tNV18\tNV18\t X \tNV18\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t72-143\t1,19-25,27-33\t\t18
GPU3\tNV18\tNV18\tNV18\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t72-143\t1,19-25,27-33\t\t26
NIC0\tSYS\tSYS\tSYS\tSYS\tX\tPIX\tNODE\tSYS\tSYS\tSYS
NIC1\tSYS\tSYS\tSYS\tSYS\tPIX\tX\tNODE\tSYS\tSYS\tSYS
NIC2\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tX\tPIX\tSYS\tSYS
NIC3\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\tX\tNODE\tNODE
NIC4\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tNODE\tX\tPIX
NIC5\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tNODE\tPIX\tX

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
  NIC4: mlx5_4
  NIC5: mlx5_5
"""


def test_gb200_tray_four_gpus_nv18_is_nvswitch():
    topo = parse_topo_matrix(GB200_TRAY)
    assert topo["gpu_count"] == 4 and topo["nvlink"] is True
    # 3 peers x 18 links = 54, a GPU has 18: only a switch gives each peer all 18.
    assert topo["nvswitch"] is True
    assert [g["gpu_numa_id"] for g in topo["gpus"]] == [2, 10, 18, 26]


def _all_pairs(n, link):
    names = [f"GPU{i}" for i in range(n)]
    rows = ["\t" + "\t".join(names)]
    rows += [f"GPU{i}\t" + "\t".join(" X " if i == j else link for j in range(n)) for i in range(n)]
    return "\n".join(rows) + "\n\nLegend:\n"


@pytest.mark.parametrize(("n", "link", "nvswitch"), [
    pytest.param(2, "NV18", False, id="2-gpus-18-links-fit-one-gpu"),
    pytest.param(3, "NV18", True, id="3-gpu-subset-of-hgx-h100"),
    pytest.param(4, "NV4", False, id="hgx-a100-4gpu-direct"),
    pytest.param(4, "NV12", True, id="4-gpu-subset-of-hgx-a100"),
    pytest.param(4, "NV6", False, id="4x6-links-fit-18"),
    pytest.param(8, "NV2", True, id="more-than-four-all-to-all"),
    pytest.param(8, "SYS", False, id="no-nvlink"),
])
def test_nvswitch_rule_for_any_gpu_count(n, link, nvswitch):
    assert parse_topo_matrix(_all_pairs(n, link))["nvswitch"] is nvswitch
