import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import allreduce

BENCH = {
    "ranks": 3,
    "hosts": ["node-1", "node-2", "node-3"],
    "op": "sum",
    "results": [
        {"bytes": 1024, "count": 256, "iters": 100, "time_s": 1e-4, "wrong_elements": 0},
        {"bytes": 64 * 1024 * 1024, "count": 16777216, "iters": 5, "time_s": 0.5, "wrong_elements": 0},
    ],
}


def test_algbw_is_bytes_over_seconds_in_gb_per_s():
    assert allreduce.algbw_gbps(10**9, 2.0) == pytest.approx(0.5)


@pytest.mark.parametrize(("ranks", "factor"), [(1, 0.0), (2, 1.0), (3, 4 / 3), (8, 1.75)])
def test_busbw_is_algbw_times_2_n_minus_1_over_n(ranks, factor):
    # nccl-tests PERFORMANCE.md: allreduce busbw = algbw * 2(n-1)/n
    assert allreduce.busbw_gbps(10.0, ranks) == pytest.approx(10.0 * factor)


@pytest.mark.parametrize("bad", [0, -1.0])
def test_nonpositive_time_is_refused(bad):
    with pytest.raises(ValueError, match="positive"):
        allreduce.algbw_gbps(1024, bad)


def test_report_rows_and_correctness():
    rep = allreduce.report(BENCH)
    assert rep["all_correct"] is True
    last = rep["rows"][-1]
    assert last["algbw_gbps"] == pytest.approx(64 * 1024 * 1024 / 0.5 / 1e9)
    assert last["busbw_gbps"] == pytest.approx(last["algbw_gbps"] * 4 / 3)
    assert last["time_us"] == pytest.approx(5e5)
    assert rep["max_busbw_gbps"] == pytest.approx(last["busbw_gbps"])


def test_a_wrong_element_marks_the_size_wrong():
    bad = {**BENCH, "results": [dict(BENCH["results"][0], wrong_elements=3)]}
    rep = allreduce.report(bad)
    assert rep["all_correct"] is False
    assert "WRONG" in allreduce.table(bad)


def test_table_sizes_are_binary_units():
    text = allreduce.table(BENCH)
    assert "on 3 ranks: node-1, node-2, node-3" in text
    assert "     1 KiB" in text and "    64 MiB" in text
    assert allreduce.human_bytes(512) == "512 B"
