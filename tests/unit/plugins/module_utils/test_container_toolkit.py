"""Container-toolkit readers on tests/fixtures/container-toolkit (N04, N05, N06)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpucluster.cluster.plugins.module_utils import daemon_json
from ansible_collections.gpucluster.cluster.plugins.module_utils.container_toolkit import (
    cdi_missing_devices,
    cdi_spec_action,
    container_device_requests,
    gpu_request_plan,
    mode_problem,
    parse_cdi_list,
    parse_docker_info_runtimes,
    parse_nvidia_smi_list,
    read_toolkit_error,
    runtime_registration,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text

ROOT = Path(__file__).resolve().parents[4]
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



def test_docker_20_10_unknown_runtime_specified_is_runtime_not_registered():
    # Docker 19.03 / 20.10 wording (moby v20.10.24 daemon/daemon_unix.go:712); real outputs in
    # NVIDIA/nvidia-docker#838 and #1236, and what Debian 12's docker.io 20.10.24 prints.
    text = ("$ docker run --runtime=nvidia --rm nvidia/cuda nvidia-smi\n"
            "docker: Error response from daemon: Unknown runtime specified nvidia.\n"
            "See 'docker run --help'.\n")
    err = read_toolkit_error(text)
    assert err["class"] == "RUNTIME_NOT_REGISTERED" and err["runtime"] == "nvidia"


@pytest.mark.parametrize(("text", "device"), [
    # dockerd 25+ injects CDI devices itself (moby v26.1.0 daemon/cdi.go); the docker CLI adds the final ".".
    ("docker: Error response from daemon: CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=all.\n"
     "See 'docker run --help'.\n", "nvidia.com/gpu=all"),
    # several devices: tags.cncf.io CDI pkg/cdi/cache.go joins them with ", ".
    ("docker: Error response from daemon: CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=0, "
     "nvidia.com/gpu=1.\n", "nvidia.com/gpu=0,nvidia.com/gpu=1"),
    ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
     "runtime create failed: could not apply required modification to OCI specification: error modifying OCI spec: "
     "failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=all: unknown.\n", "nvidia.com/gpu=all"),
])
def test_cdi_device_names_lose_the_cli_full_stop(text, device):
    err = read_toolkit_error(text)
    assert err["class"] == "CDI_DEVICE_UNRESOLVABLE" and err["device"] == device and err["automatic"] is False


# --- CDI mode --------------------------------------------------------------------------------------

def _engine(text):
    return daemon_json.server_version(text)


@pytest.mark.parametrize(("text", "major", "minor", "patch"), [
    ("20.10.24+dfsg1\n", 20, 10, 24),      # Debian 12 docker.io (this sandbox's engine)
    ("26.1.3", 26, 1, 3),                   # Ubuntu 24.04 docker.io
    ("28.3.2", 28, 3, 2),                   # docker-ce
    ("17.03.2-ce", 17, 3, 2),               # old docker-ce
    ("25.0", 25, 0, 0),
])
def test_server_version_reads_packagers_versions(text, major, minor, patch):
    v = _engine(text)
    assert (v["major"], v["minor"], v["patch"]) == (major, minor, patch)
    assert v["version"] == text.strip()


@pytest.mark.parametrize(("text", "why"), [("", "did not answer"), ("dev", "not a release version"),
                                           ("Error response from daemon", "not a release version")])
def test_server_version_refuses_what_is_no_version(text, why):
    with pytest.raises(ValueError, match=why):
        _engine(text)


def test_legacy_mode_is_todays_path_on_every_engine():
    for text in ("20.10.24+dfsg1", "28.3.2"):
        plan = gpu_request_plan("legacy", _engine(text))
        assert plan["path"] == "legacy" and plan["daemon_settings"] == {} and plan["fallback"] is False


def test_cdi_mode_on_docker_20_10_falls_back_loudly_naming_version_and_fix():
    plan = gpu_request_plan("cdi", _engine("20.10.24+dfsg1"))
    assert plan["path"] == "legacy" and plan["fallback"] is True
    assert plan["daemon_settings"] == {}, "dockerd 20.10 gets no features.cdi"
    assert "Docker 20.10.24+dfsg1 is older than 25.0" in plan["message"]
    assert "docker_package_source: docker" in plan["message"]
    assert "nvidia_container_toolkit_mode: legacy" in plan["message"]


@pytest.mark.parametrize(("text", "note"), [("25.0.0", True), ("27.5.1", True), ("28.0.0", False), ("29.1.0", False)])
def test_cdi_mode_on_docker_25_and_newer_requests_by_cdi_name(text, note):
    plan = gpu_request_plan("cdi", _engine(text))
    assert plan["path"] == "cdi" and plan["fallback"] is False
    assert plan["daemon_settings"] == {"features": {"cdi": True}}
    assert ("features.cdi turned on" in plan["message"]) is note


def test_24_is_still_too_old_for_cdi():
    assert gpu_request_plan("cdi", _engine("24.0.9"))["path"] == "legacy"


@pytest.mark.parametrize("mode", ["CDI", "auto", "", None])
def test_unknown_mode_is_refused(mode):
    with pytest.raises(ValueError, match="nvidia_container_toolkit_mode"):
        gpu_request_plan(mode, _engine("28.3.2"))


@pytest.mark.parametrize("mode", ["CDI", "auto", "", None, "legacy ", ["cdi"]])
def test_mode_problem_is_the_one_check_of_a_mode(mode):
    # The two roles' asserts and preflight's stage check call this; only the modes the plan knows pass.
    assert repr(mode) in mode_problem(mode) and "cdi, legacy" in mode_problem(mode)
    assert mode_problem("cdi") == mode_problem("legacy") == ""


def test_device_requests_legacy_is_the_gpus_flag_as_before():
    assert container_device_requests("all", "legacy") == [{"driver": "nvidia", "capabilities": [["gpu"]], "count": -1}]
    assert container_device_requests("0,1", "legacy") == [
        {"driver": "nvidia", "capabilities": [["gpu"]], "device_ids": ["0", "1"]}]
    assert container_device_requests("", "legacy") == [] == container_device_requests("", "cdi")


def test_device_requests_cdi_names_each_gpu():
    assert container_device_requests("all", "cdi") == [
        {"driver": "cdi", "count": 0, "device_ids": ["nvidia.com/gpu=all"]}]
    uuid = "GPU-00000000-0000-0000-0000-000000000004"   # N05's zeroed UUID shape
    assert container_device_requests(f"0, {uuid}", "cdi") == [
        {"driver": "cdi", "count": 0, "device_ids": ["nvidia.com/gpu=0", f"nvidia.com/gpu={uuid}"]}]


@pytest.mark.parametrize(("gpus", "path", "match"), [("0;1", "cdi", "no GPU index"), ("all", "auto", "path"),
                                                     ("gpu0", "legacy", "no GPU index")])
def test_device_requests_refuse_bad_input(gpus, path, match):
    with pytest.raises(ValueError, match=match):
        container_device_requests(gpus, path)


# nvidia-ctk cdi list (cmd/nvidia-ctk/cdi/list): logrus line on stderr, then one name per line on
# stdout; the spec generate writes has index and UUID names and "all". N05's four GPUs.
N05_UUIDS = [f"GPU-00000000-0000-0000-0000-00000000000{i}" for i in range(1, 5)]
CDI_LIST = ('time="2025-08-07T10:00:00Z" level=info msg="Found 9 CDI devices"\n'
            + "".join(f"nvidia.com/gpu={i}\n" for i in range(4))
            + "".join(f"nvidia.com/gpu={u}\n" for u in N05_UUIDS) + "nvidia.com/gpu=all\n")


def test_cdi_list_reads_devices_and_count():
    listing = parse_cdi_list(CDI_LIST)
    assert listing["count"] == 9 and len(listing["devices"]) == 9 and listing["warnings"] == []
    wanted = container_device_requests("all", "cdi") + container_device_requests("0,1,2,3", "cdi")
    assert cdi_missing_devices(listing, wanted) == []


def test_cdi_list_on_a_terminal_and_with_registry_errors():
    text = ("INFO[0000] Found 0 CDI devices\n"
            "WARN[0000] The following registry errors were reported:\n"
            "WARN[0000] /etc/cdi/nvidia.yaml: failed to parse CDI Spec\n")
    listing = parse_cdi_list(text)
    assert listing["devices"] == [] and listing["count"] == 0 and len(listing["warnings"]) == 2
    # N06: a container asking for a name no spec has fails with "unresolvable CDI devices".
    assert cdi_missing_devices(listing, container_device_requests("all", "cdi")) == ["nvidia.com/gpu=all"]
    assert read_toolkit_error(fixture_text(N06))["class"] == "CDI_DEVICE_UNRESOLVABLE"


def test_cdi_list_cut_line_is_a_parse_error():
    with pytest.raises(ParseError, match="line 3"):
        parse_cdi_list("INFO[0000] Found 2 CDI devices\nnvidia.com/gpu=0\nnvidia.com/gpu\n")


READY = {"state": "ready", "version": "570.133.20"}   # N05's driver


def test_spec_action_generates_when_missing_or_driver_changed():
    assert cdi_spec_action(READY, 4, False, None)["generate"] is True
    changed = cdi_spec_action(READY, 4, True, "535.261.03")
    assert changed["generate"] is True and "535.261.03" in changed["reason"] and "570.133.20" in changed["reason"]
    assert cdi_spec_action(READY, 4, True, "570.133.20") == {"generate": False,
                                                           "reason": "CDI spec current (driver 570.133.20)"}


def test_spec_action_skips_a_node_without_gpu_saying_so():
    for driver, count in (({"state": "absent", "version": None}, 0), ({"state": "installed-not-loaded"}, 4),
                          (READY, 0), (None, 0)):
        action = cdi_spec_action(driver, count, False, None)
        assert action["generate"] is False and "no CDI spec generated" in action["reason"]


def test_n05_fix_is_the_roles_udev_rule():
    """N05's expected fix (create-dev-char-symlinks --create-all on driver bind) is what the role installs."""
    fix = read_toolkit_error(fixture_text(N05 + ".1-inside-container.txt"))["fix"]
    role_vars = yaml.safe_load((ROOT / "roles/nvidia_container_toolkit/vars/main.yml").read_text())
    args = " ".join(role_vars["__nvidia_container_toolkit_dev_char_args"])
    assert "nvidia-ctk " + args in fix
    assert role_vars["__nvidia_container_toolkit_udev_rule"].endswith("/71-nvidia-dev-char.rules")
    assert "71-nvidia-dev-char.rules" in fix
    tasks = (ROOT / "roles/nvidia_container_toolkit/tasks/cdi.yml").read_text()
    assert 'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+=' in tasks


# libnvidia-container before 1.3 printed the failed CUDA requirement without the ", please update
# your driver ..." tail, 1.0.0 betas with spaces around the operator; Docker 19.03 nests it in
# escaped quotes. Each is CUDA_REQUIREMENT_UNMET, the escapes are not part of the message.
@pytest.mark.parametrize(
    ("text", "requirement"),
    [
        # Xilinx/Vitis-AI issue #103 (libnvidia-container 1.0.x, Docker 19.03)
        (r'''docker: Error response from daemon: OCI runtime create failed: container_linux.go:345: starting container process caused "process_linux.go:430: container init caused \"process_linux.go:413: running prestart hook 0 caused \\\"error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: requirement error: unsatisfied condition: cuda>=10.0\\\\n\\\"\"": unknown.''',  # noqa: E501
         "cuda>=10.0"),
        # NVIDIA/nvidia-docker issue #688 (1.0.0 beta: "cuda >= 9.1")
        (r'''docker: Error response from daemon: OCI runtime create failed: container_linux.go:348: starting container process caused "process_linux.go:402: container init caused \"process_linux.go:385: running prestart hook 1 caused \\\"error running hook: exit status 1, stdout: , stderr: exec command: [/usr/bin/nvidia-container-cli --load-kmods --debug=/var/log/nvidia-container-runtime-hook.log configure --ldconfig=@/sbin/ldconfig --device=all --compute --utility --require=cuda>=9.1 --pid=11610 /var/lib/docker/overlay2/920386bc1cb31955efecd7e335a324cca61bc74709b8b03ff64228f76d197872/merged]\\\\nnvidia-container-cli: requirement error: unsatisfied condition: cuda >= 9.1\\\\n\\\"\"": unknown. ''',  # noqa: E501
         "cuda>=9.1"),
        # NVIDIA/nvidia-docker issue #543: the same, wrapped by the terminal inside "condition"
        ('container_linux.go:265: starting container process caused "process_linux.go:368: container init caused '
         '\\"process_linux.go:351: running p\nrestart hook 1 caused \\\\\\"error running hook: exit status 1, stdout: '
         ', stderr: exec command: [/usr/bin/nvidia-container-cli --load-kmods\n configure --ldconfig=@/sbin/ldconfig '
         '--device=all --compute --utility --require=cuda>=9.0 --pid=36229 /data/dockerdata/devicemapper/mnt\n'
         '/ab7fe7a46710e331a8dacffa0f1f3831244d383abf819014adf6a2ba950ee189/rootfs]\\\\\\\\nnvidia-container-cli: '
         'requirement error: unsatisfied condi\ntion: cuda >= 9.0\\\\\\\\n\\\\\\"\\""\n', "cuda>=9.0"),
        # NVIDIA/nvidia-docker issue #1442 (1.3+, Docker 20.10)
        ("docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: starting container "
         "process caused: process_linux.go:459: container init caused: Running hook #0:: error running hook: exit "
         "status 1, stdout: , stderr: nvidia-container-cli: requirement error: unsatisfied condition: cuda>=11.0, "
         "please update your driver to a newer version, or use an earlier cuda container: unknown.", "cuda>=11.0"),
    ],
)
def test_cuda_requirement_in_every_libnvidia_container_form(text, requirement):
    err = read_toolkit_error(text)
    assert err["class"] == "CUDA_REQUIREMENT_UNMET"
    assert err["requirement"] == requirement
    assert not err["message"].endswith("\\")
