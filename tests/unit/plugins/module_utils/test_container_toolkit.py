"""Container-toolkit readers on tests/fixtures/container-toolkit (N04, N05, N06)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import daemon_json
from ansible_collections.gpucluster.cluster.plugins.module_utils.container_toolkit import (
    parse_docker_info_runtimes,
    parse_nvidia_smi_list,
    read_toolkit_error,
    runtime_registration,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text

N04 = "container-toolkit/N04_unknown_runtime_nvidia_daemon_json_edited_dockerd_not_restarted"
N05 = "container-toolkit/N05_container_nvml_unknown_error_after_systemctl_daemon_reload"
N06 = "container-toolkit/N06_cdi_unresolvable_runtime_nvidia_gpu_all_auto_spec_generation_failed.txt"


def test_n04_runtime_not_registered_and_daemon_config_not_applied():
    err = read_toolkit_error(fixture_text(N04 + ".1-docker-compose-up.txt"))
    assert err["class"] == "RUNTIME_NOT_REGISTERED" and err["runtime"] == "nvidia"
    info = parse_docker_info_runtimes(fixture_text(N04 + ".3-docker-info-grep-runtime.txt"))
    # the five WARNING lines are docker info's stderr, not runtimes
    assert info == {"runtimes": ["io.containerd.runc.v2", "runc"], "default_runtime": "runc"}
    cfg = daemon_json.load(fixture_text(N04 + ".2-daemon-json-as-pasted.txt"))  # leading space is fine
    assert cfg["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "runtimeArgs": []}
    verdict = runtime_registration(cfg, info, wanted=err["runtime"])
    assert verdict["class"] == "DAEMON_CONFIG_NOT_APPLIED"
    assert verdict["missing_in_daemon"] == ["nvidia"]
    assert "restart docker" in verdict["fix"] and "nvidia-container-runtime" in verdict["fix"]
    assert "not reloaded" in verdict["cause"]


def test_runtime_registration_applied_and_never_configured():
    info = {"runtimes": ["io.containerd.runc.v2", "nvidia", "runc"], "default_runtime": "nvidia"}
    cfg = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "default-runtime": "nvidia"}
    assert runtime_registration(cfg, info)["class"] == "DAEMON_CONFIG_APPLIED"
    bare = {"runtimes": ["runc"], "default_runtime": "runc"}
    assert runtime_registration({}, bare, wanted="nvidia")["class"] == "RUNTIME_NOT_REGISTERED"


def test_n05_container_lost_gpu_access_with_host_listing_four_mixed_gpus():
    err = read_toolkit_error(fixture_text(N05 + ".1-inside-container.txt"))
    assert err["class"] == "CONTAINER_LOST_GPU_ACCESS"
    assert "daemon-reload" in err["cause"] and "create-dev-char-symlinks" in err["fix"]
    gpus = parse_nvidia_smi_list(fixture_text(N05 + ".2-on-host.txt"))
    assert [g["name"] for g in gpus] == ["NVIDIA A10", "NVIDIA A10", "Tesla T4", "Tesla T4"]
    assert gpus[3]["uuid"] == "GPU-00000000-0000-0000-0000-000000000004"


def test_n06_cdi_automatic_spec_with_a_terminal_wrap_inside_the_word():
    err = read_toolkit_error(fixture_text(N06))
    assert err["class"] == "CDI_DEVICE_UNRESOLVABLE"
    assert err["device"] == "runtime.nvidia.com/gpu=all"
    assert err["automatic"] is True
    assert "nvidia-ctk cdi generate" in err["fix"]


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
         "NO_GPU_DEVICE_DRIVER"),
        ("stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.",
         "NVML_DRIVER_NOT_LOADED"),
        ("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
         "object file: no such file or directory: unknown.", "NVML_LIBRARY_MISSING"),
        ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.2, please update your driver to a "
         "newer version, or use an earlier cuda container: unknown.", "CUDA_REQUIREMENT_UNMET"),
        ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
         "runtime create failed: unable to retrieve OCI runtime error: fork/exec /usr/bin/nvidia-container-runtime: "
         "no such file or directory: unknown.", "RUNTIME_BINARY_MISSING"),
        ("Error: failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=0: unknown",
         "CDI_DEVICE_UNRESOLVABLE"),
    ],
)
def test_toolkit_error_classes(text, cls):
    assert read_toolkit_error(text)["class"] == cls


def test_no_toolkit_error_and_cut_lines_are_parse_errors():
    with pytest.raises(ParseError):
        read_toolkit_error("hello world\n")
    with pytest.raises(ParseError, match="Runtimes"):
        parse_docker_info_runtimes(" Default Runtime: runc\n")
    with pytest.raises(ParseError, match="line 2"):
        parse_nvidia_smi_list("GPU 0: NVIDIA A10 (UUID: GPU-00000000-0000-0000-0000-000000000001)\nGPU 1: NVIDIA A1\n")
