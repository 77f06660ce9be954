"""The runtime filters: profile values from the role, env file, runtime detection, the pip plan
of the runtime switch and its messages, the refusal to mix runtimes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.filter import runtime as rt
from ansible_collections.gpucluster.cluster.plugins.module_utils import runtime

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "runtime_profile"

# The role's defaults as vars/main.yml maps them to the variable names.
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
MAPPING = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__runtime_profile_values"]
VALUES = {name: DEFAULTS[ref.strip("{} ")] for name, ref in MAPPING.items()}

PIP_WHEEL = "/usr/share/python-wheels/pip-23.0.1-py3-none-any.whl"


def probe(light=None, hvd=None, pip=True, nvcc=None, nccl=None):
    return {"python": "3.11.2", "pip": pip, "packages": {"light-horovod": light, "horovod": hvd},
            "nvcc": nvcc, "nccl": nccl}


def cfg(**kw):
    base = {"host": "node-1", "container": "gpucluster-train", "pip": ["python3", "-m", "pip"], "pip_wheel": "",
            "pip_extra_args": [], "wheel_dir": "/opt/gpucluster/bin/wheels", "find_links": "",
            "horovod_version": "0.28.1", "horovod_build_env": {}, "horovod_index_url": "https://pypi.org/simple",
            "horovod_wheel": "", "lightcc_version": "", "lightcc_index_url": "", "lightcc_wheel": ""}
    base.update(kw)
    return base


# --- the role's values ------------------------------------------------------------------------


def test_role_defaults_are_the_vendor_defaults_of_runtime_py():
    assert set(MAPPING) == {v.name for v in runtime.LIGHTCC_VARIABLES + runtime.HOROVOD_VARIABLES}
    for var in runtime.LIGHTCC_VARIABLES + runtime.HOROVOD_VARIABLES:
        if var.name == "LIGHT_INTRA_SIZE":
            assert VALUES[var.name] == 0  # 0 = GPUs per node, runtime.py's default
        else:
            assert VALUES[var.name] == var.default, var.name


def test_lightcc_env_of_the_defaults_has_intra_size_of_the_gpus_and_no_horovod_knobs():
    env = rt.runtime_env(VALUES, "lightcc", 8)
    assert env == {"LIGHT_2D_ALLREDUCE": "0", "LIGHT_INTRA_SIZE": "8", "LIGHT_HIERARCHICAL_THRESHOLD": "1073741824",
                   "LIGHT_TOPK_ALLREDUCE": "0", "LIGHT_TOPK_RATIO": "0.01", "LIGHT_TOPK_THRESHOLD": "1048576",
                   "LIGHT_TOPK_FP16": "0"}


def test_lightcc_carries_a_horovod_knob_only_when_changed():
    env = rt.runtime_env({**VALUES, "HOROVOD_CYCLE_TIME": 3.5, "HOROVOD_FUSION_THRESHOLD": "134217728"}, "lightcc", 4)
    assert env["HOROVOD_CYCLE_TIME"] == "3.5"
    assert "HOROVOD_FUSION_THRESHOLD" not in env  # equal to Horovod's default


def test_horovod_env_has_no_light_variables_and_writes_every_default():
    env = rt.runtime_env({**VALUES, "LIGHT_TOPK_ALLREDUCE": 1}, "horovod", 8)
    assert env == {"HOROVOD_FUSION_THRESHOLD": "134217728", "HOROVOD_CYCLE_TIME": "1",
                   "HOROVOD_HIERARCHICAL_ALLREDUCE": "0", "HOROVOD_MPI_THREADS_DISABLE": "0"}


def test_values_as_ansible_hands_them_strings_and_floats():
    # vars/main.yml templating may hand numbers as text; the spec's float gives 1.0.
    values = {k: str(v) for k, v in VALUES.items()} | {"HOROVOD_CYCLE_TIME": 1.0, "LIGHT_TOPK_RATIO": "0.05"}
    assert rt.runtime_problems(values, "4") == []
    assert rt.runtime_env(values, "lightcc", "4")["LIGHT_TOPK_RATIO"] == "0.05"
    assert "HOROVOD_CYCLE_TIME" not in rt.runtime_env(values, "lightcc", 4)


@pytest.mark.parametrize(
    ("change", "gpus", "expect"),
    [
        ({"LIGHT_TOPK_RATIO": 0}, 8, "LIGHT_TOPK_RATIO=0 is out of range"),
        # -e runtime_profile_light_topk_ratio=2 arrives as a string: the message shows the number
        ({"LIGHT_TOPK_RATIO": "2"}, 8, "LIGHT_TOPK_RATIO=2 is out of range"),
        ({"LIGHT_TOPK_RATIO": 1.5}, 8, "must be in (0, 1]"),
        ({"LIGHT_INTRA_SIZE": 3}, 8, "LIGHT_INTRA_SIZE=3 does not divide the 8 GPUs per node: choose one of [1, 2, 4,"),
        ({"LIGHT_TOPK_THRESHOLD": -1}, 8, "LIGHT_TOPK_THRESHOLD=-1 is negative"),
        ({"HOROVOD_FUSION_THRESHOLD": -5}, 8, "HOROVOD_FUSION_THRESHOLD=-5 is negative"),
        ({"LIGHT_2D_ALLREDUCE": 2}, 8, "not a flag"),
        ({}, 0, "GPUs per node is 0"),
        ({}, "many", "is not a number"),
    ],
)
def test_problems_name_the_variable_and_the_fix(change, gpus, expect):
    problems = rt.runtime_problems({**VALUES, **change}, gpus)
    assert any(expect in p for p in problems), problems


def test_a_bad_light_value_is_a_problem_even_when_horovod_is_active():
    # Both profiles are checked, so a later switch to lightcc cannot trip on it.
    assert rt.runtime_problems({**VALUES, "LIGHT_TOPK_RATIO": 2}, 8)
    with pytest.raises(AnsibleFilterError, match="LIGHT_INTRA_SIZE=3 does not divide"):
        rt.runtime_env({**VALUES, "LIGHT_INTRA_SIZE": 3}, "lightcc", 8)


def test_problems_are_not_repeated_per_runtime():
    problems = rt.runtime_problems({**VALUES, "HOROVOD_FUSION_THRESHOLD": -5}, 8)
    assert len(problems) == 1


# --- env file and record ------------------------------------------------------------------------


def test_env_file_round_trip_with_header():
    env = rt.runtime_env(VALUES, "lightcc", 8)
    text = rt.runtime_env_file(env, "line one\nline two")
    assert text.startswith("# line one\n# line two\nLIGHT_2D_ALLREDUCE=0\n")
    assert rt.runtime_parse_env_file(text) == env


def test_env_file_refuses_a_newline_in_a_value():
    with pytest.raises(AnsibleFilterError, match="newline"):
        rt.runtime_env_file({"A": "1\n2"})


@pytest.mark.parametrize(
    ("text", "expect"),
    [("lightcc\n", "lightcc"), ("# comment\nhorovod\n", "horovod"), ("", None), ("mpich\n", None), (None, None)],
)
def test_recorded_runtime(text, expect):
    assert rt.runtime_recorded(text) == expect


def test_effective_runtime_keeps_the_record_only_when_asked():
    assert rt.runtime_effective("lightcc", "horovod\n", True) == "horovod"
    assert rt.runtime_effective("lightcc", "horovod\n", False) == "lightcc"
    assert rt.runtime_effective("horovod", "", True) == "horovod"
    assert rt.runtime_effective("lightcc", "garbage", True) == "lightcc"
    with pytest.raises(AnsibleFilterError, match="unknown"):
        rt.runtime_effective("nccl", "", True)


def test_mixed_runtimes_are_named_by_group():
    assert rt.runtime_mixed({"node-1": "lightcc", "node-2": "lightcc"}) == ""
    msg = rt.runtime_mixed({"node-1": "horovod", "node-2": "lightcc", "node-3": "lightcc", "node-4": None})
    assert "node-1 on horovod" in msg and "node-2, node-3 on lightcc" in msg and "node-4 on unknown" in msg
    assert "playbooks/runtime.yml" in msg


# --- detection and the pip plan ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "expect"),
    [(probe(light="0.2"), "lightcc"), (probe(hvd="0.28.1"), "horovod"), (probe(), "none"),
     (probe(light="0.2", hvd="0.28.1"), "both"), ({"packages": {"Light_Horovod": "1"}}, "lightcc")],
)
def test_detect(p, expect):
    assert rt.runtime_detect(p) == expect


def test_wheel_version_from_the_file_name():
    assert rt.runtime_wheel_version("/w/horovod-0.28.1-cp311-cp311-linux_x86_64.whl", "horovod") == "0.28.1"
    assert rt.runtime_wheel_version("light_horovod-0.1.0-1-py3-none-any.whl", "light-horovod") == "0.1.0"
    with pytest.raises(AnsibleFilterError, match="not a wheel"):
        rt.runtime_wheel_version("horovod.tar.gz", "horovod")
    with pytest.raises(AnsibleFilterError, match="not of horovod"):
        rt.runtime_wheel_version("torch-2.1.0-py3-none-any.whl", "horovod")


def test_switch_to_horovod_from_an_index_with_cuda_and_nccl():
    plan = rt.runtime_plan(probe(light="0.2.1", nvcc="/usr/local/cuda/bin/nvcc", nccl="libnccl.so.2"),
                           "horovod", cfg(horovod_build_env={"HOROVOD_WITH_PYTORCH": 1}))
    assert plan["error"] == "" and plan["now"] == "lightcc"
    assert plan["uninstall"] == ["light-horovod"]
    inst = plan["install"]
    assert inst["argv"] == ["python3", "-m", "pip", "install", "--no-cache-dir",
                            "--index-url", "https://pypi.org/simple", "horovod==0.28.1"]
    assert inst["env"] == {"HOROVOD_WITH_MPI": "1", "HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_WITH_PYTORCH": "1"}
    assert rt.runtime_pip_uninstall(plan, cfg()) == ["python3", "-m", "pip", "uninstall", "-y", "light-horovod"]


def test_gpu_build_of_horovod_without_cuda_fails_naming_package_source_and_variables():
    plan = rt.runtime_plan(probe(light="0.2.1"), "horovod", cfg())
    msg = plan["error"]
    assert plan["install"] is None
    assert msg.startswith(
        "node-1: cannot install horovod==0.28.1 (built with HOROVOD_WITH_MPI=1 HOROVOD_GPU_OPERATIONS=NCCL)")
    assert "from the index https://pypi.org/simple (runtime_horovod_index_url)" in msg
    assert "no nvcc (CUDA toolkit) and no libnccl (NCCL)" in msg
    assert "runtime_horovod_wheel" in msg


def test_light_horovod_without_a_source_fails_naming_package_and_variables():
    msg = rt.runtime_plan(probe(hvd="0.28.1"), "lightcc", cfg())["error"]
    assert "cannot install light-horovod in gpucluster-train" in msg
    assert "not on PyPI" in msg
    assert "runtime_lightcc_wheel" in msg and "runtime_lightcc_index_url" in msg


def test_no_pip_in_the_image_fails_unless_pip_runs_from_a_wheel():
    wheel = "/c/horovod-0.28.1-py3-none-any.whl"
    msg = rt.runtime_plan(probe(pip=False), "horovod", cfg(horovod_wheel=wheel))["error"]
    assert "has no pip" in msg and "runtime_pip_wheel" in msg
    plan = rt.runtime_plan(probe(pip=False), "horovod",
                           cfg(horovod_wheel=wheel, pip_wheel=PIP_WHEEL, pip_extra_args=["--break-system-packages"]))
    assert plan["error"] == ""
    assert plan["install"]["argv"] == [
        "python3", "/opt/gpucluster/bin/wheels/pip-23.0.1-py3-none-any.whl/pip", "install", "--no-cache-dir",
        "--break-system-packages", "/opt/gpucluster/bin/wheels/horovod-0.28.1-py3-none-any.whl"]
    assert plan["install"]["source"] == f"the wheel {wheel} (runtime_horovod_wheel)"


def test_already_on_the_target_plans_nothing():
    plan = rt.runtime_plan(probe(hvd="0.28.1"), "horovod", cfg())
    assert plan == {"now": "horovod", "target": "horovod", "package": "horovod", "uninstall": [], "install": None,
                    "error": ""}
    # light-horovod present, any version wanted: nothing either.
    assert rt.runtime_plan(probe(light="0.2.1"), "lightcc", cfg())["install"] is None


def test_another_version_is_installed_over_the_present_one():
    plan = rt.runtime_plan(probe(hvd="0.27.0", nvcc="/x", nccl="y"), "horovod", cfg())
    assert plan["install"]["spec"] == "horovod==0.28.1"


def test_both_installed_uninstalls_the_other_and_reinstalls_the_target():
    plan = rt.runtime_plan(probe(light="0.1.0", hvd="0.28.1"), "lightcc",
                           cfg(lightcc_wheel="/c/light_horovod-0.1.0-py3-none-any.whl"))
    assert plan["now"] == "both" and plan["uninstall"] == ["horovod"]
    assert plan["install"]["argv"][-3:] == ["--force-reinstall", "--no-deps",
                                            "/opt/gpucluster/bin/wheels/light_horovod-0.1.0-py3-none-any.whl"]


def test_find_links_installs_from_the_local_directory_without_an_index():
    plan = rt.runtime_plan(probe(), "lightcc", cfg(find_links="/opt/gpucluster/bin/wheels", lightcc_version="0.2.1"))
    assert plan["install"]["argv"][-4:] == ["--no-index", "--find-links", "/opt/gpucluster/bin/wheels",
                                            "light-horovod==0.2.1"]


def test_unknown_target():
    with pytest.raises(AnsibleFilterError, match="-e runtime=lightcc"):
        rt.runtime_plan(probe(), "mpich", cfg())


def _placement(in_place, aside):
    return {"plugin_path": "/p", "plugin_aside_path": "/p.disabled", "plugin_in_place": in_place,
            "plugin_aside": aside}


def test_table_line_per_node():
    rows = [{"host": "node-1", "runtime": "horovod", "recorded": "horovod", "packages": {"horovod": "0.28.1",
             "light-horovod": None}, **_placement(False, True)}]
    assert rt.runtime_table(rows) == [
        "node-1  runs horovod  (recorded horovod; horovod 0.28.1; NCCL net plugin moved aside to /p.disabled)"]


@pytest.mark.parametrize(("in_place", "aside", "words"), [
    (True, False, "in place at /p"),
    (False, True, "moved aside to /p.disabled"),
    (False, False, "absent (/p)"),
    (True, True, "in place at /p"),  # both: NCCL loads the one in place (check.yml refuses this before a switch)
])
def test_plugin_placement_in_words_from_the_data(in_place, aside, words):
    assert rt.runtime_plugin_placement(_placement(in_place, aside)) == words


# --- the container probe -------------------------------------------------------------------------


def test_probe_script_prints_what_this_python_has():
    out = subprocess.run([sys.executable, str(ROOT / "roles/runtime/files/runtime_probe.py")], capture_output=True,
                         text=True, check=True).stdout
    data = yaml.safe_load(out)
    assert set(data) == {"python", "pip", "packages", "nvcc", "nccl"}
    assert set(data["packages"]) == {"light-horovod", "horovod"}
    assert data["python"] == ".".join(map(str, sys.version_info[:3]))
    assert rt.runtime_detect(data) in {"none", "horovod", "lightcc", "both"}


def test_filter_names():
    names = rt.FilterModule().filters()
    assert all(n.startswith("gpucluster_runtime_") for n in names)
    assert {"gpucluster_runtime_env", "gpucluster_runtime_plan", "gpucluster_runtime_mixed"} <= set(names)


# --- where pip in the container can read wheels copied to the node ---------------------------------

TRAINING_VOLUMES = ["/sys:/sys", "/opt/gpucluster/tools:/opt/gpucluster/tools:ro",
                    "/etc/gpucluster/ssh/client:/root/.ssh:ro", "/opt/gpucluster/bin:/opt/gpucluster/bin:ro"]


@pytest.mark.parametrize("wheel_dir", ["/opt/gpucluster/bin/wheels", "/opt/gpucluster/bin/wheels/",
                                       "/opt/gpucluster/bin//wheels", "/opt/gpucluster/bin",
                                       "/opt/gpucluster/tools/wheels", "/sys/wheels"])
def test_a_wheel_dir_under_a_same_path_mount_is_accepted(wheel_dir):
    assert rt.runtime_wheel_dir_problem(TRAINING_VOLUMES, wheel_dir, "node-1", "gpucluster-train") == ""


@pytest.mark.parametrize("wheel_dir", [
    "/srv/wheels",                      # not mounted at all
    "/opt/gpucluster/binaries",         # a sibling whose name starts like a mount
    "/etc/gpucluster/ssh/client/w",     # mounted, but at another path (/root/.ssh)
    "/opt/gpucluster",                  # the parent of a mount
])
def test_a_wheel_dir_the_container_does_not_see_at_the_same_path_is_refused(wheel_dir):
    msg = rt.runtime_wheel_dir_problem(TRAINING_VOLUMES, wheel_dir, "node-1", "gpucluster-train")
    assert msg.startswith(f"node-1: runtime_wheel_dir is {wheel_dir!r}, which the training container gpucluster-train")
    assert "no mount of it holds" in msg and "/opt/gpucluster/bin:/opt/gpucluster/bin:ro" in msg
    assert "Fix: leave runtime_wheel_dir unset" in msg


@pytest.mark.parametrize("wheel_dir", ["wheels", "", "opt/gpucluster/bin/wheels"])
def test_a_relative_wheel_dir_is_refused(wheel_dir):
    msg = rt.runtime_wheel_dir_problem(TRAINING_VOLUMES, wheel_dir, "node-1", "gpucluster-train")
    assert msg.startswith(f"node-1: runtime_wheel_dir is {wheel_dir!r}, not an absolute path")
    assert "Fix: leave runtime_wheel_dir unset" in msg


@pytest.mark.parametrize("extra, wheel_dir, why", [
    # A deeper bind mount of another node directory: pip would read /srv/w, not the wheels.
    ("/srv/w:/opt/gpucluster/bin/wheels", "/opt/gpucluster/bin/wheels", "'/srv/w:/opt/gpucluster/bin/wheels'"),
    ("/srv/w:/opt/gpucluster/bin/wheels:ro", "/opt/gpucluster/bin/wheels/x", "shows another node directory"),
    ("//srv/w:/opt//gpucluster/bin/wheels/", "/opt/gpucluster/bin/wheels", "shows another node directory"),
    # A named volume: a directory in Docker's data root, not the node's.
    ("wheels:/opt/gpucluster/bin/wheels", "/opt/gpucluster/bin/wheels", "the named volume 'wheels:"),
])
def test_a_deeper_mount_that_hides_the_wheel_dir_is_refused(extra, wheel_dir, why):
    msg = rt.runtime_wheel_dir_problem(TRAINING_VOLUMES + [extra], wheel_dir, "node-1", "gpucluster-train")
    assert "which the training container gpucluster-train does not see at the same path" in msg
    assert why in msg


@pytest.mark.parametrize("volumes, wheel_dir", [
    # The deepest mount is the same node path again (mounted twice, deeper): fine.
    (TRAINING_VOLUMES + ["/opt/gpucluster/bin/wheels:/opt/gpucluster/bin/wheels"], "/opt/gpucluster/bin/wheels"),
    # Another directory deeper elsewhere does not matter.
    (TRAINING_VOLUMES + ["/srv/w:/opt/gpucluster/bin/other"], "/opt/gpucluster/bin/wheels"),
    # '//' spellings are one path.
    (["//opt/gpucluster/bin:/opt/gpucluster/bin/"], "//opt/gpucluster/bin/wheels"),
])
def test_the_deepest_mount_decides(volumes, wheel_dir):
    assert rt.runtime_wheel_dir_problem(volumes, wheel_dir, "node-1", "gpucluster-train") == ""


def test_a_contract_without_mounts_asks_for_a_converge():
    msg = rt.runtime_wheel_dir_problem(None, "/opt/gpucluster/bin/wheels", "node-1", "gpucluster-train")
    assert "node-1" in msg and "lists no mounts of gpucluster-train" in msg and "rerun site.yml" in msg
    # An empty list is a contract that says: no mounts.
    assert "its mounts: none" in rt.runtime_wheel_dir_problem([], "/opt/gpucluster/bin/wheels", "n", "c")


def test_the_roles_default_wheel_dir_is_one_the_training_container_mounts():
    """runtime_wheel_dir unset means wheels/ under the training contract's bin_dir, which the
    training_image role mounts at the same path (checked here, not assumed)."""
    assert yaml.safe_load((ROOT / "roles/runtime/defaults/main.yml").read_text())["runtime_wheel_dir"] == ""
    runtime_vars = yaml.safe_load((ROOT / "roles/runtime/vars/main.yml").read_text())
    assert "training.bin_dir ~ '/wheels'" in runtime_vars["__runtime_wheel_dir"]
    training = yaml.safe_load((ROOT / "roles/training_image/vars/main.yml").read_text())
    bin_dir = training["__training_image_bin_dir"]
    assert "[__training_image_bin_dir ~ ':' ~ __training_image_bin_dir ~ ':ro']" in training["__training_image_volumes"]
    mounts = TRAINING_VOLUMES[:-1] + [f"{bin_dir}:{bin_dir}:ro"]
    assert rt.runtime_wheel_dir_problem(mounts, f"{bin_dir}/wheels", "n", "c") == ""
