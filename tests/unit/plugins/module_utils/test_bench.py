"""Benchmark parsers on the captured outputs in tests/fixtures, and the scaling arithmetic.

Expected readings are those written in each case's ``.md``.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.bench import (
    BenchmarkParseError,
    algbw,
    busbw,
    check_bus_bandwidth,
    parse_horovod_synthetic,
    parse_nccl_tests,
    parse_tf_cnn_benchmarks,
    parse_throughput,
    scaling_efficiency,
    speedup,
)

from tests.conftest import fixture_text

BO = "benchmark-output/"
E08 = BO + "E08_nccl_tests_allreduce_2node_16x_h100_gcp_a3mega.txt"
E09 = BO + "E09_nccl_tests_allreduce_2node_16x_v100_k8s_sriov_roce_oldformat.txt"
E11 = BO + "E11_nccl_tests_allreduce_2node_errored_internal_error.txt"

# (fixture, GPUs, total, total +-, per GPU, per GPU +-, Iter lines, Iter mean, model, batch)
HOROVOD_CASES = [
    ("E01_horovod_pytorch_synth_1gpu_gloo_prefix.txt", 1, 124.7, 3.1, 124.7, 3.1, 10, 124.68, "resnet50", 32),
    ("E02_horovod_tf2_synth_8gpu_singlenode_horovodrun.txt", 8, 4800.1, 30.3, 600.0, 3.8, 10, 600.02,
     "ResNet50", 32),
    ("E04_horovod_synth_16gpu_k8s_sriov_roce_fragment.txt", 16, 3756.0, 672.7, 234.8, 42.0, 10, 234.74,
     None, None),
    ("E05_horovod_tf2_synth_32gpu_lumi_mi250x_rccl_fragment.txt", 32, 17411.4, 123.6, 544.1, 3.9, 10, 544.1,
     None, None),
]


@pytest.mark.parametrize(
    ("name", "gpus", "total", "total_ci", "per_gpu", "per_gpu_ci", "iters", "mean", "model", "batch"),
    HOROVOD_CASES,
    ids=[c[0][:3] for c in HOROVOD_CASES],
)
def test_horovod_synthetic_fixtures(
    name, gpus, total, total_ci, per_gpu, per_gpu_ci, iters, mean, model, batch
):
    result = parse_horovod_synthetic(fixture_text(BO + name))
    assert result.tool == "horovod_synthetic"
    assert result.gpus == gpus
    assert result.total == total
    assert result.total_ci == total_ci
    assert result.per_gpu == per_gpu
    assert result.per_gpu_ci == per_gpu_ci
    assert len(result.iterations) == iters
    assert result.iterations_mean == pytest.approx(mean, abs=0.005)
    assert result.model == model
    assert result.batch_size == batch
    assert result.unit == "img/sec"
    assert parse_throughput(fixture_text(BO + name)) == result


def test_e04_confidence_interval_is_about_18_percent():
    result = parse_horovod_synthetic(fixture_text(BO + "E04_horovod_synth_16gpu_k8s_sriov_roce_fragment.txt"))
    assert result.total_ci / result.total == pytest.approx(0.179, abs=0.0005)
    assert min(result.iterations) == 186.1  # the outlier iterations 0 and 6
    assert result.iterations[0] == 199.4


def test_e01_gloo_prefix_and_e02_mpi_prefix_are_stripped():
    e01 = fixture_text(BO + "E01_horovod_pytorch_synth_1gpu_gloo_prefix.txt")
    e02 = fixture_text(BO + "E02_horovod_tf2_synth_8gpu_singlenode_horovodrun.txt")
    assert "[0]<stdout>:Total img/sec" in e01 and "[1,0]<stdout>:Total img/sec" in e02
    assert parse_horovod_synthetic(e01).iterations[0] == 126.5
    assert parse_horovod_synthetic(e02).iterations[-1] == 602.8


def test_tf_cnn_benchmarks_e06():
    text = fixture_text(BO + "E06_tf_cnn_benchmarks_horovod_1gpu.txt")
    result = parse_tf_cnn_benchmarks(text)
    assert result.tool == "tf_cnn_benchmarks"
    assert result.total == 204.75
    assert result.rank_totals == (204.75,)
    assert len(result.iterations) == 11
    assert result.iterations[-1] == 204.8
    assert result.gpus is None
    assert parse_throughput(text) == result


def test_tf_cnn_benchmarks_keeps_one_total_per_rank():
    text = "\n".join(f"[1,{r}]<stdout>:total images/sec: {200 + r}.5" for r in range(8)) + "\n"
    result = parse_tf_cnn_benchmarks(text)
    assert result.rank_totals == tuple(200.5 + r for r in range(8))
    assert result.total == 200.5


@pytest.mark.parametrize("parser", [parse_horovod_synthetic, parse_tf_cnn_benchmarks, parse_throughput,
                                    parse_nccl_tests])
@pytest.mark.parametrize(
    "text", ["", "Segmentation fault (core dumped)\n", "Running benchmark...\nIter #0: 1"]
)
def test_unreadable_input_is_a_clear_error(parser, text):
    with pytest.raises(BenchmarkParseError):
        parser(text)


def test_non_text_input_is_a_clear_error():
    with pytest.raises(BenchmarkParseError, match="must be text"):
        parse_throughput(b"Total img/sec on 1 GPU(s): 1 +-0")


def test_horovod_without_total_line_says_the_run_did_not_finish():
    text = fixture_text(BO + "E01_horovod_pytorch_synth_1gpu_gloo_prefix.txt")
    cut = "\n".join(line for line in text.splitlines() if "Total img/sec" not in line)
    with pytest.raises(BenchmarkParseError, match="did not finish"):
        parse_horovod_synthetic(cut)


def test_horovod_two_runs_in_one_text_are_refused():
    e01 = fixture_text(BO + "E01_horovod_pytorch_synth_1gpu_gloo_prefix.txt")
    e02 = fixture_text(BO + "E02_horovod_tf2_synth_8gpu_singlenode_horovodrun.txt")
    with pytest.raises(BenchmarkParseError, match="2 'Total img/sec' lines"):
        parse_horovod_synthetic(e01 + e02)


def test_horovod_header_disagreeing_with_total_is_refused():
    text = fixture_text(BO + "E02_horovod_tf2_synth_8gpu_singlenode_horovodrun.txt")
    with pytest.raises(BenchmarkParseError, match="mixes two runs"):
        parse_horovod_synthetic(text.replace("Number of GPUs: 8", "Number of GPUs: 4"))


# ---------------------------------------------------------------- nccl-tests


def test_nccl_tests_e08_current_layout_header_without_hash():
    result = parse_nccl_tests(fixture_text(E08))
    assert result.layout == "current"
    assert len(result.rows) == 31
    assert result.rows[0].size == 8 and result.rows[-1].size == 8589934592
    assert result.avg_busbw == 70.742
    assert result.peak_busbw() == (338.82, 8589934592, "out-of-place")
    assert result.peak_busbw("in-place") == (337.35, 8589934592, "in-place")
    assert result.rows[-1].oop_algbw == 180.71
    assert result.rows[-1].root == -1
    assert all(r.oop_wrong == 0 and r.ip_wrong == 0 for r in result.rows)
    assert result.out_of_bounds == 0
    assert result.ok and result.reason is None
    assert len(result.ranks) == 16  # rank 0's line lost its '#'
    assert result.ranks[0].host == "gpu-node-0001" and result.ranks[0].name == "NVIDIA H100 80GB HBM3"
    assert result.hosts == {"gpu-node-0001": 8, "gpu-node-0002": 8}
    assert result.header["maxBytes"] == 8589934592 and result.header["nGpus"] == 1
    assert result.mean_busbw() == pytest.approx(70.7415, abs=5e-5)
    assert result.mean_busbw() == pytest.approx(result.avg_busbw, abs=1e-3)


def test_nccl_tests_e09_old_layout_error_column_is_a_magnitude():
    result = parse_nccl_tests(fixture_text(E09))
    assert result.layout == "old"
    assert len(result.rows) == 29
    assert result.rows[0].size == 8 and result.rows[-1].size == 2147483648
    assert result.avg_busbw == 7.76739
    assert result.peak_busbw() == (22.92, 2147483648, "out-of-place")
    assert result.peak_busbw("in-place")[0] == 22.90
    assert all(r.root is None and r.oop_wrong is None for r in result.rows)
    assert max(max(r.oop_error, r.ip_error) for r in result.rows) == 5e-07
    assert result.out_of_bounds == 0
    assert result.ok
    assert result.ranks == () and result.hosts == {}  # no device list in the document
    assert result.mean_busbw() == pytest.approx(result.avg_busbw, abs=1e-3)


def test_nccl_tests_e11_errored_run_is_a_failure_with_the_reason():
    result = parse_nccl_tests(fixture_text(E11))
    assert not result.ok
    assert result.rows == () and result.avg_busbw is None and result.out_of_bounds is None
    assert result.failure.host == "nodeb01"
    assert result.failure.pid == 3164639
    assert result.failure.locations == ("common.cu:959", "common.cu:844")
    assert result.failure.message.startswith("NCCL failure: internal error")
    assert result.reason.startswith("run failed on nodeb01 (pid 3164639) at common.cu:959")
    assert result.hosts == {"nodea-0416": 2, "nodeb01": 2}
    assert result.header["validation"] == 0
    with pytest.raises(BenchmarkParseError, match="no results table"):
        result.peak_busbw()


def test_nccl_log_without_table_or_failure_e12_is_unreadable():
    with pytest.raises(BenchmarkParseError, match="no nccl-tests results table and no failure message"):
        parse_nccl_tests(fixture_text("nccl-logs/E12_nccl_info_socket_no_ib_virbr0.txt"))


def test_nccl_tests_out_of_bounds_failure():
    text = fixture_text(E08).replace("Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED")
    result = parse_nccl_tests(text)
    assert result.out_of_bounds == 3
    assert not result.ok and "3 out-of-bounds values" in result.reason


def test_nccl_tests_wrong_count_is_a_failure():
    lines = fixture_text(E08).splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("1048576 "))
    lines[i] = lines[i][:-1] + "7"  # in-place #wrong = 7
    result = parse_nccl_tests("\n".join(lines))
    assert not result.ok and "first 1048576 bytes" in result.reason


def test_nccl_tests_na_wrong_cells_when_validation_is_off():
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n"
        "   134217728      33554432     float     sum      -1   1211.2  110.81  110.81      0"
        "   1211.8  110.76  110.76    N/A\n"
    )
    result = parse_nccl_tests(text)
    assert result.rows[0].ip_wrong is None and result.rows[0].oop_wrong == 0
    assert result.ok


def test_nccl_tests_truncated_row_names_the_line():
    text = fixture_text(E08).replace("47535  180.71  338.82      0    47743  179.92  337.35      0", "47535")
    with pytest.raises(BenchmarkParseError, match=r"line 54: 6 columns where the current layout has 13"):
        parse_nccl_tests(text)


# nccl-tests before the #wrong change (src/common.cu @8274cb4, 2022-05): the old table and a
# device list without "Group" (srun, 3 x Tesla T4). With -c 0 the error cells are "N/A"
# (PRINT("  %7s  %6.2f  %6.2f  %5s", ..., "N/A")).
OLD_NA = """\
# nThread 1 nGpus 1 minBytes 104857600 maxBytes 115343360 step: 1048576(bytes) warmup iters: 5 iters: 1 validation: 0
#
# Using devices
#   Rank  0 Pid  30938 on      gpu01 device  0 [0x00] Tesla T4
#   Rank  1 Pid  24859 on      gpu02 device  0 [0x00] Tesla T4
#   Rank  2 Pid  16393 on      gpu03 device  0 [0x00] Tesla T4
#
#                                                       out-of-place                       in-place
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   104857600      26214400     float     sum   202872    0.52    0.69    N/A   224616    0.47    0.62    N/A
   105906176      26476544     float     sum   249852    0.42    0.57    N/A   261420    0.41    0.54    N/A
   115343360      28835840     float     sum   305408    0.38    0.50    N/A   307126    0.38    0.50    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.58536
"""


def test_nccl_tests_old_layout_with_validation_off_reads_na_errors():
    result = parse_nccl_tests(OLD_NA)
    assert result.layout == "old" and len(result.rows) == 3
    assert all(r.oop_error is None and r.ip_error is None and r.oop_wrong is None for r in result.rows)
    assert result.rows[0].oop_time == 202872 and result.rows[-1].ip_busbw == 0.50
    assert result.header["validation"] == 0
    assert result.ok


def test_nccl_tests_device_list_without_group_pre_2022():
    result = parse_nccl_tests(OLD_NA.replace("    N/A", "  5e-07"))
    assert [(r.rank, r.pid, r.host, r.device, r.bus_id, r.name, r.group) for r in result.ranks] == [
        (0, 30938, "gpu01", 0, "0x00", "Tesla T4", None),
        (1, 24859, "gpu02", 0, "0x00", "Tesla T4", None),
        (2, 16393, "gpu03", 0, "0x00", "Tesla T4", None),
    ]
    assert result.hosts == {"gpu01": 1, "gpu02": 1, "gpu03": 1}
    assert all(r.oop_error == 5e-07 for r in result.rows)
    assert {r.group for r in parse_nccl_tests(fixture_text(E08)).ranks} == {0}


def test_nccl_tests_old_reduce_layout_with_root_column():
    # reduce_perf's old header and row (src/reduce.cu @8274cb4: "%12li  %12li  %8s  %6s  %6i").
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw  error"
        "     time   algbw   busbw  error\n"
        "     1048576        262144     float     sum       0    52.31   20.05   20.05  0e+00"
        "    51.90   20.20   20.20  0e+00\n"
    )
    row = parse_nccl_tests(text).rows[0]
    assert row.root == 0 and row.oop_error == 0 and row.ip_busbw == 20.20


# More than 1e6 wrong elements: #wrong is printed with %6g (src/util.cu writeBenchmarkLineBody;
# %5g in src/common.cu before 2025), so it reads 1.67772e+06.
WRONG_G = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
    "    33554432       8388608     float     sum      -1    372.4   90.10  157.68  838861"
    "    371.9   90.23  157.90  838861\n"
    "    67108864      16777216     float     sum      -1    690.1   97.25  170.19  1.67772e+06"
    "    689.5   97.33  170.33  1.67772e+06\n"
    "# Avg bus bandwidth    : 164.03\n"
)


def test_nccl_tests_wrong_count_in_exponent_form_fails_the_run():
    result = parse_nccl_tests(WRONG_G)
    assert [(r.oop_wrong, r.ip_wrong) for r in result.rows] == [(838861, 838861), (1677720, 1677720)]
    assert not result.ok and result.reason.startswith("#wrong > 0 at 2 sizes (first 33554432 bytes)")
    failed = parse_nccl_tests(WRONG_G + "# Out of bounds values : 4 FAILED\n")
    assert not failed.ok and failed.out_of_bounds == 4
    passed, message = check_bus_bandwidth(result, 100)
    assert not passed and "#wrong > 0" in message


@pytest.mark.parametrize("cell", ["-1", "2.5", "nan", "inf", "x"])
def test_nccl_tests_wrong_cell_that_is_not_a_count_names_the_line(cell):
    text = WRONG_G.replace("1.67772e+06    689.5", f"{cell}    689.5")
    with pytest.raises(BenchmarkParseError, match=r"line 4: unreadable nccl-tests row"):
        parse_nccl_tests(text)


# -S 1 (nccl-tests v2.17.6, commit a62c975): each row ends in "%21s" of "%Y-%m-%d %H:%M:%S".
TIMESTAMPS = (
    "# nThread 1 nGpus 8 minBytes 33554432 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0\n"
    "#\n"
    "# Using devices\n"
    "#  Rank  0 Group  0 Pid  12345 on     node01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
    "#\n"
    "#                                                              out-of-place"
    "                       in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
    " #wrong           timestamp\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
    "          %Y-%m-%d %H:%M:%S\n"
    "    33554432       8388608     float     sum      -1    372.4   90.10  157.68       0    371.9   90.23  157.90"
    "       0 2025-10-28 12:00:01\n"
    "    67108864      16777216     float     sum      -1    690.1   97.25  170.19       0    689.5   97.33  170.33"
    "       0 2025-10-28 12:00:02\n"
    "# Out of bounds values : 0 OK\n"
    "# Avg bus bandwidth    : 164.03 \n"
)


def test_nccl_tests_timestamp_suffix_is_read_apart_from_the_numbers():
    result = parse_nccl_tests(TIMESTAMPS)
    assert result.layout == "current" and len(result.rows) == 2
    assert [r.timestamp for r in result.rows] == ["2025-10-28 12:00:01", "2025-10-28 12:00:02"]
    assert result.rows[1].ip_wrong == 0 and result.rows[1].ip_busbw == 170.33
    assert result.ok and result.peak_busbw() == (170.33, 67108864, "in-place")
    assert result.hosts == {"node01": 1} and result.ranks[0].group == 0


def test_nccl_tests_timestamp_table_rejects_a_row_without_one():
    text = TIMESTAMPS.replace("       0 2025-10-28 12:00:02", "       0")
    with pytest.raises(BenchmarkParseError,
                       match=r"line 10: 13 columns where the current \(with timestamp\) layout has 15"):
        parse_nccl_tests(text)
    with pytest.raises(BenchmarkParseError, match=r"line 9: unreadable .* is not %Y-%m-%d %H:%M:%S"):
        parse_nccl_tests(TIMESTAMPS.replace("2025-10-28 12:00:01", "2025/10/28 12:00:01"))


# -I 1 (v2.19.1, commit 0fdb00a) with -S 1: modelled on src/util.cu @a0b82b2 writeResultHeader,
# writeBenchmarkLineBody + writePerIterReport ("  %7s  %7s  %7s  %7s") per placement, then the timestamp.
PER_ITER = (
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max"
    "    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp\n"
    "    33554432       8388608     float     sum      -1   372.40   90.10  157.68       0   368.10   380.20"
    "   380.20     0.85   371.90   90.23  157.90       0   367.90   379.80   379.80     0.80  2025-10-28 12:00:01\n"
)


def test_nccl_tests_per_iteration_columns():
    row = parse_nccl_tests(PER_ITER).rows[0]
    assert (row.oop_time, row.oop_busbw, row.oop_wrong) == (372.40, 157.68, 0)
    assert row.oop_per_iter == (368.10, 380.20, 380.20, 0.85)
    assert (row.ip_time, row.ip_busbw, row.ip_wrong) == (371.90, 157.90, 0)
    assert row.ip_per_iter == (367.90, 379.80, 379.80, 0.80)
    assert row.timestamp == "2025-10-28 12:00:01"
    without_ts = PER_ITER.replace("           timestamp", "").replace("  2025-10-28 12:00:01", "")
    assert parse_nccl_tests(without_ts).rows[0].timestamp is None


def test_nccl_tests_unknown_table_header_is_refused():
    # the short-lived side-work layout (copybw) is not one this reader knows
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw copybw #wrong"
        "     time   algbw   busbw copybw #wrong\n"
    )
    with pytest.raises(BenchmarkParseError, match="line 1: unknown nccl-tests table header"):
        parse_nccl_tests(text)


def test_bus_bandwidth_check_against_line_rate():
    e09 = parse_nccl_tests(fixture_text(E09))
    passed, message = check_bus_bandwidth(e09, 100)  # 0.8 x 100 Gbit/s = 10 GB/s
    assert passed and "22.92 GB/s" in message and "10.00 GB/s" in message
    passed, message = check_bus_bandwidth(e09, 400)  # 40 GB/s
    assert not passed and "too low" in message
    passed, message = check_bus_bandwidth(e09, 200, fraction=0.9)  # 22.5 GB/s
    assert passed
    passed, message = check_bus_bandwidth(parse_nccl_tests(fixture_text(E11)), 100)
    assert not passed and "internal error" in message
    with pytest.raises(ValueError, match="fraction"):
        check_bus_bandwidth(e09, 100, fraction=1.5)


# ---------------------------------------------------------------- arithmetic


def test_busbw_formula_reproduces_the_tables():
    """busbw = algbw x 2(n-1)/n with n = 16 ranks, within the tables' 2-decimal rounding."""
    assert busbw(180.71, 16) == pytest.approx(338.83, abs=0.005)
    for path in (E08, E09):
        for row in parse_nccl_tests(fixture_text(path)).rows:
            if row.oop_algbw >= 1:
                assert busbw(row.oop_algbw, 16) == pytest.approx(row.oop_busbw, abs=0.02)
                assert busbw(row.ip_algbw, 16) == pytest.approx(row.ip_busbw, abs=0.02)
    assert busbw(10, 1) == 0
    assert busbw(10, 2) == 10
    with pytest.raises(ValueError):
        busbw(1, 0)


def test_algbw_is_size_over_time():
    rows = parse_nccl_tests(fixture_text(E08)).rows
    assert algbw(8589934592, 47535) == pytest.approx(180.71, abs=0.005)
    for row in rows:
        if row.oop_time >= 1000:
            assert algbw(row.size, row.oop_time) == pytest.approx(row.oop_algbw, rel=2e-3)
    with pytest.raises(ValueError):
        algbw(8, 0)


def test_scaling_efficiency_and_speedup():
    throughput = {1: 100.0, 2: 190.0, 8: 720.0, 16: 1280.0}
    assert scaling_efficiency(throughput) == pytest.approx({1: 1.0, 2: 0.95, 8: 0.9, 16: 0.8})
    assert speedup(throughput) == pytest.approx({1: 1.0, 2: 1.9, 8: 7.2, 16: 12.8})


def test_scaling_from_fixture_readings():
    """1-GPU baseline E01 (124.7 img/s) against a made-up 8-GPU run on the same GPU."""
    base = parse_horovod_synthetic(fixture_text(BO + "E01_horovod_pytorch_synth_1gpu_gloo_prefix.txt"))
    eff = scaling_efficiency({1: base.total, 8: 897.84})
    assert eff[8] == pytest.approx(0.9, abs=1e-6)


@pytest.mark.parametrize(("data", "needle"), [
    ({8: 800.0}, "1-GPU throughput"),
    ({1: 0.0, 8: 10.0}, "is 0"),
    ({0: 1.0}, "positive integer"),
    ({1: -5.0}, "non-negative"),
])
def test_scaling_errors(data, needle):
    with pytest.raises(ValueError, match=needle):
        scaling_efficiency(data)
