"""Runtime profiles: defaults, validation messages and the env file."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.runtime import (
    ProfileError,
    build_profile,
    format_value,
    parse_env_file,
    render_env_file,
)

LIGHTCC_DEFAULT_ENV = {
    "LIGHT_2D_ALLREDUCE": "0",
    "LIGHT_INTRA_SIZE": "8",
    "LIGHT_HIERARCHICAL_THRESHOLD": "1073741824",
    "LIGHT_TOPK_ALLREDUCE": "0",
    "LIGHT_TOPK_RATIO": "0.01",
    "LIGHT_TOPK_THRESHOLD": "1048576",
    "LIGHT_TOPK_FP16": "0",
}


def test_lightcc_defaults_are_the_vendor_documented_ones_in_order():
    env = build_profile("lightcc").env()
    assert env == LIGHTCC_DEFAULT_ENV
    assert list(env) == list(LIGHTCC_DEFAULT_ENV)


@pytest.mark.parametrize("gpus", [1, 2, 4, 16])
def test_lightcc_intra_size_defaults_to_gpus_per_node(gpus):
    profile = build_profile("lightcc", gpus_per_node=gpus)
    assert profile.values["LIGHT_INTRA_SIZE"] == gpus
    assert profile.env()["LIGHT_INTRA_SIZE"] == str(gpus)


def test_horovod_defaults_follow_current_horovod_source():
    env = build_profile("horovod").env()
    assert env == {
        "HOROVOD_FUSION_THRESHOLD": "134217728",  # 128 MiB
        "HOROVOD_CYCLE_TIME": "1",  # ms
        "HOROVOD_HIERARCHICAL_ALLREDUCE": "0",
        "HOROVOD_MPI_THREADS_DISABLE": "0",
    }


def test_overrides_accept_any_case_booleans_and_digit_strings():
    profile = build_profile(
        "lightcc",
        {"light_topk_allreduce": True, "LIGHT_TOPK_RATIO": "0.05", "LIGHT_TOPK_THRESHOLD": "2097152",
         "LIGHT_INTRA_SIZE": 4},
    )
    env = profile.env()
    assert env["LIGHT_TOPK_ALLREDUCE"] == "1"
    assert env["LIGHT_TOPK_RATIO"] == "0.05"
    assert env["LIGHT_TOPK_THRESHOLD"] == "2097152"
    assert env["LIGHT_INTRA_SIZE"] == "4"


def test_ratio_of_one_is_allowed():
    assert build_profile("lightcc", {"LIGHT_TOPK_RATIO": 1}).env()["LIGHT_TOPK_RATIO"] == "1"


def test_horovod_variables_ride_along_in_lightcc_only_when_set():
    assert not any(k.startswith("HOROVOD_") for k in build_profile("lightcc").env())
    env = build_profile("lightcc", {"HOROVOD_FUSION_THRESHOLD": 33554432}).env()
    assert env["HOROVOD_FUSION_THRESHOLD"] == "33554432"
    assert "HOROVOD_CYCLE_TIME" not in env


def test_cycle_time_takes_fractional_milliseconds():
    assert build_profile("horovod", {"HOROVOD_CYCLE_TIME": 3.5}).env()["HOROVOD_CYCLE_TIME"] == "3.5"


@pytest.mark.parametrize(
    ("runtime", "overrides", "expected"),
    [
        ("lightcc", {"LIGHT_TOPK_RATIO": 0}, ["LIGHT_TOPK_RATIO=0", "(0, 1]"]),
        ("lightcc", {"LIGHT_TOPK_RATIO": 1.5}, ["LIGHT_TOPK_RATIO=1.5", "(0, 1]"]),
        ("lightcc", {"LIGHT_TOPK_RATIO": -0.1}, ["LIGHT_TOPK_RATIO=-0.1", "(0, 1]"]),
        ("lightcc", {"LIGHT_TOPK_RATIO": "lots"}, ["LIGHT_TOPK_RATIO='lots'", "not a number"]),
        ("lightcc", {"LIGHT_TOPK_THRESHOLD": -1}, ["LIGHT_TOPK_THRESHOLD=-1", "negative"]),
        ("lightcc", {"LIGHT_TOPK_THRESHOLD": 1.5}, ["LIGHT_TOPK_THRESHOLD=1.5", "whole number of bytes"]),
        ("lightcc", {"LIGHT_HIERARCHICAL_THRESHOLD": "1GiB"},
         ["LIGHT_HIERARCHICAL_THRESHOLD='1GiB'", "bytes"]),
        ("lightcc", {"LIGHT_2D_ALLREDUCE": 2}, ["LIGHT_2D_ALLREDUCE=2", "0 (off) or 1 (on)"]),
        ("lightcc", {"LIGHT_TOPK_FP16": "yes"}, ["LIGHT_TOPK_FP16='yes'", "0 (off) or 1 (on)"]),
        ("lightcc", {"LIGHT_INTRA_SIZE": 3},
         ["LIGHT_INTRA_SIZE=3", "does not divide the 8 GPUs", "[1, 2, 4, 8]"]),
        ("lightcc", {"LIGHT_INTRA_SIZE": 0}, ["LIGHT_INTRA_SIZE=0", "positive integer"]),
        ("horovod", {"HOROVOD_FUSION_THRESHOLD": -5}, ["HOROVOD_FUSION_THRESHOLD=-5", "negative"]),
        ("horovod", {"HOROVOD_CYCLE_TIME": -1}, ["HOROVOD_CYCLE_TIME=-1", "milliseconds"]),
        ("horovod", {"HOROVOD_HIERARCHICAL_ALLREDUCE": 3}, ["HOROVOD_HIERARCHICAL_ALLREDUCE=3", "flag"]),
        ("horovod", {"LIGHT_TOPK_RATIO": 0.1}, ["LIGHT_TOPK_RATIO", "only by LightCC", "runtime: lightcc"]),
        ("horovod", {"HOROVOD_FUSION": 1}, ["HOROVOD_FUSION is not a horovod profile variable", "env"]),
        ("nccl", {}, ["runtime='nccl'", "lightcc", "horovod"]),
    ],
)
def test_invalid_values_name_the_variable_and_the_fix(runtime, overrides, expected):
    with pytest.raises(ProfileError) as info:
        build_profile(runtime, overrides)
    for text in expected:
        assert text in str(info.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ProfileError) as info:
        build_profile("lightcc", {"LIGHT_TOPK_RATIO": 2, "LIGHT_INTRA_SIZE": 5, "LIGHT_TOPK_FP16": 7})
    assert len(info.value.problems) == 3


def test_same_variable_in_two_spellings_is_refused():
    with pytest.raises(ProfileError, match="given twice"):
        build_profile("lightcc", {"LIGHT_TOPK_RATIO": 0.1, "light_topk_ratio": 0.2})


@pytest.mark.parametrize("gpus", [0, -8, True, "8"])
def test_gpus_per_node_must_be_a_positive_integer(gpus):
    with pytest.raises(ProfileError, match="gpus_per_node"):
        build_profile("lightcc", gpus_per_node=gpus)


def test_format_value():
    assert format_value(0.01) == "0.01"
    assert format_value(1.0) == "1"
    assert format_value(1073741824) == "1073741824"


def test_env_file_is_key_value_lines_in_order_and_reads_back():
    env = build_profile("lightcc", {"LIGHT_TOPK_ALLREDUCE": 1}).env()
    text = render_env_file(env, header="gpucluster runtime lightcc")
    lines = text.splitlines()
    assert lines[0] == "# gpucluster runtime lightcc"
    assert lines[1:] == [f"{k}={v}" for k, v in env.items()]
    assert text.endswith("\n")
    assert parse_env_file(text) == env
    assert render_env_file(env, header="gpucluster runtime lightcc") == text  # deterministic


def test_env_file_keeps_values_verbatim():
    env = {"NCCL_SOCKET_IFNAME": "^docker0,lo", "MSG": "a b=c"}
    assert render_env_file(env) == "NCCL_SOCKET_IFNAME=^docker0,lo\nMSG=a b=c\n"
    assert parse_env_file(render_env_file(env)) == env


@pytest.mark.parametrize(("env", "message"), [
    ({"BAD NAME": "1"}, "not a valid identifier"),
    ({"X": "two\nlines"}, "X: value contains a newline"),
])
def test_env_file_refuses_what_it_cannot_hold(env, message):
    with pytest.raises(ValueError, match=message):
        render_env_file(env)


def test_parse_env_file_names_the_bad_line():
    with pytest.raises(ValueError, match="line 2"):
        parse_env_file("A=1\nnot a pair\n")
