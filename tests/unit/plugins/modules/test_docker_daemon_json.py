"""docker_daemon_json module: main() with patched module args on files under tmp_path.

Covers the end-to-end behaviour the fixtures ask for: C15 merged and kept (first run changes,
second run does not, backup of the original), C16 refused with its line number and the file
untouched, C17 a key set by a drop-in flag refused before writing, C19 a default runtime whose
binary is missing refused before writing; plus check mode, diff, mode and dockerd --validate.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.module_utils.daemon_json import load, render
from ansible_collections.gpucluster.cluster.plugins.modules import docker_daemon_json

from tests.conftest import fixture_text

D = "docker-daemon-json/"
C15 = D + "C15_daemon_json_existing_keys_must_be_preserved"
C16 = D + "C16_daemon_json_two_objects_smart_quotes_plus_dropin_runtime"
C17 = D + "C17_dockerd_flag_vs_daemon_json_conflict_dgx_dropin"
NVIDIA_RUNTIME = {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}}
# ExecStart of Debian 12's docker.io 20.10.24 unit (/lib/systemd/system/docker.service).
DEBIAN12_UNIT = (
    "[Service]\nType=notify\nEnvironmentFile=-/etc/default/docker\n"
    "ExecStart=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $DOCKER_OPTS\n"
)
TOOLKIT = "/usr/bin/nvidia-container-runtime"


def body(relpath):
    """The captured file below the `$ sudo cat <path>` prompt line."""
    return fixture_text(relpath).partition("\n")[2]


@pytest.fixture(autouse=True)
def no_real_dockerd(monkeypatch):
    """Never run the dockerd of the test machine; tests that need one fake it."""
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)


@pytest.fixture
def toolkit(monkeypatch):
    """The NVIDIA Container Toolkit's runtime binary counts as installed (absent on the test machine)."""
    real = shutil.which

    def which(name, mode=os.F_OK | os.X_OK, path=None):
        return name if name == TOOLKIT else real(name, mode=mode, path=path)

    monkeypatch.setattr(docker_daemon_json.shutil, "which", which)


@pytest.fixture
def run(tmp_path, capsys, monkeypatch):
    seen = []
    real_warn = AnsibleModule.warn

    def warn(self, warning, **kwargs):
        # Recorded here because ansible-core routes module warnings to the controller's display
        # instead of the result once any test in the session has loaded controller code.
        seen.append(warning)
        real_warn(self, warning, **kwargs)

    monkeypatch.setattr(AnsibleModule, "warn", warn)

    def _run(check_mode=False, diff=False, **args):
        del seen[:]
        args.setdefault("unit_paths", [])
        args.update(_ansible_check_mode=check_mode, _ansible_diff=diff,
                    _ansible_remote_tmp=str(tmp_path / "remote-tmp"), _ansible_keep_remote_files=False)
        with patch_module_args(args), pytest.raises(SystemExit) as ei:
            docker_daemon_json.main()
        result = json.loads(capsys.readouterr().out)
        assert (ei.value.code != 0) == bool(result.get("failed")), result
        result["warning_texts"] = list(seen)
        return result
    return _run


def backups(path):
    return sorted(p for p in os.listdir(path.parent) if p.startswith(path.name + ".") and p.endswith("~"))


def write(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_c15_first_run_merges_keeps_hosts_and_backs_up_then_rerun_changes_nothing(run, tmp_path, toolkit):
    original = fixture_text(C15 + ".1-daemon-json-before.txt")
    path = write(tmp_path / "etc/docker/daemon.json", original)

    first = run(path=str(path), settings=NVIDIA_RUNTIME)
    expected = load(fixture_text(C15 + ".3-daemon-json-expected-by-reporter.txt"))
    assert first["changed"] is True
    assert first["config"] == expected
    assert load(path.read_text()) == expected
    assert path.read_text() == render(expected)
    assert first["backup_file"] and os.path.basename(first["backup_file"]) in backups(path)
    with open(first["backup_file"], encoding="utf-8") as f:
        assert f.read() == original
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert first["validation"] == "module checks only: dockerd not found"

    written = path.read_bytes()
    second = run(path=str(path), settings=NVIDIA_RUNTIME)
    assert second["changed"] is False
    assert second["backup_file"] == ""
    assert path.read_bytes() == written
    assert len(backups(path)) == 1


def test_c15_hosts_vs_stock_unit_is_a_warning_or_with_option_a_failure(run, tmp_path, toolkit):
    path = write(tmp_path / "daemon.json", fixture_text(C15 + ".1-daemon-json-before.txt"))
    unit = write(tmp_path / "lib/systemd/system/docker.service", DEBIAN12_UNIT)

    strict = run(path=str(path), settings=NVIDIA_RUNTIME, unit_paths=[str(unit)],
                 fail_on_existing_conflicts=True)
    assert strict["failed"] is True
    assert "'hosts' is also set by the dockerd flag -H fd://" in strict["msg"]
    assert path.read_text() == fixture_text(C15 + ".1-daemon-json-before.txt")

    result = run(path=str(path), settings=NVIDIA_RUNTIME, unit_paths=[str(unit)])
    assert result["changed"] is True
    assert any("already had this before the run" in w and "-H fd://" in w and str(unit) in w
               for w in result["warning_texts"])
    assert result["dockerd_flags"][0] == {"name": "host", "key": "hosts", "value": "fd://",
                                          "source": str(unit), "text": "-H fd://"}


def test_check_mode_writes_nothing_and_shows_the_diff(run, tmp_path, toolkit):
    original = fixture_text(C15 + ".1-daemon-json-before.txt")
    path = write(tmp_path / "daemon.json", original)
    mtime = path.stat().st_mtime_ns

    result = run(check_mode=True, diff=True, path=str(path), settings=NVIDIA_RUNTIME)
    assert result["changed"] is True
    assert result["diff"]["before"] == original
    assert result["diff"]["after"] == render(result["config"])
    assert result["backup_file"] == ""
    assert path.read_text() == original and path.stat().st_mtime_ns == mtime
    assert os.listdir(tmp_path) == ["daemon.json"]


def test_check_mode_does_not_create_a_missing_file(run, tmp_path, toolkit):
    path = tmp_path / "etc/docker/daemon.json"
    result = run(check_mode=True, path=str(path), settings=NVIDIA_RUNTIME)
    assert result["changed"] is True
    assert not path.parent.exists()


def test_missing_file_is_created_with_mode(run, tmp_path, toolkit):
    path = tmp_path / "etc/docker/daemon.json"
    result = run(path=str(path), settings=NVIDIA_RUNTIME, mode="0640")
    assert result["changed"] is True and result["backup_file"] == ""
    assert load(path.read_text()) == NVIDIA_RUNTIME
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert run(path=str(path), settings=NVIDIA_RUNTIME, mode="0640")["changed"] is False


def test_mode_alone_is_a_change(run, tmp_path, toolkit):
    path = write(tmp_path / "daemon.json", render(NVIDIA_RUNTIME), mode=0o600)
    result = run(path=str(path), settings=NVIDIA_RUNTIME)
    assert result["changed"] is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == render(NVIDIA_RUNTIME)
    assert backups(path) == []


def test_formatting_only_difference_is_left_alone(run, tmp_path, toolkit):
    text = '{"runtimes":{"nvidia":{"runtimeArgs":[],"path":"/usr/bin/nvidia-container-runtime"}}}\n'
    path = write(tmp_path / "daemon.json", text)
    assert run(path=str(path), settings=NVIDIA_RUNTIME)["changed"] is False
    assert path.read_text() == text


def test_c16_invalid_json_refused_with_line_number_file_untouched(run, tmp_path):
    text = body(C16 + ".2-etc-docker-daemon-json.txt")
    path = write(tmp_path / "daemon.json", text)
    before = path.read_bytes()

    result = run(path=str(path), settings=NVIDIA_RUNTIME)
    assert result["failed"] is True
    assert (result["line"], result["column"]) == (9, 1)
    assert f"{path}: not valid JSON, refusing to edit it" in result["msg"]
    assert "line 9, column 1: a second JSON object" in result["msg"]
    assert "line 10, column 4: typographic" in result["msg"]
    assert [[p["line"], p["column"]] for p in result["problems"]] == [[9, 1], [10, 4]]
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["daemon.json"]  # no backup, no temp file


def test_c16_runtime_added_while_the_dropin_adds_it_too_is_refused(run, tmp_path, toolkit):
    dropin = write(tmp_path / "etc/systemd/system/docker.service.d/override.conf",
                   body(C16 + ".1-systemd-drop-in-override-conf.txt"))
    path = write(tmp_path / "daemon.json", '{"dns": ["192.0.2.53"]}\n')
    result = run(path=str(path), settings=NVIDIA_RUNTIME, unit_paths=[str(dropin.parent)])
    assert result["failed"] is True
    assert "runtime 'nvidia' is defined twice" in result["msg"]
    assert str(dropin) in result["msg"]
    assert path.read_text() == '{"dns": ["192.0.2.53"]}\n'


@pytest.mark.parametrize(("settings", "refused"), [
    (NVIDIA_RUNTIME, None),
    (dict(NVIDIA_RUNTIME, **{"default-runtime": "nvidia"}), None),
    ({"storage-driver": "overlay2"}, "storage-driver"),
    ({"default-shm-size": "1G"}, "default-shm-size"),
    ({"hosts": ["unix:///var/run/docker.sock"]}, "hosts"),
])
def test_c17_dgx_dropin_flags_refuse_their_keys_before_writing(run, tmp_path, settings, refused):
    dropin = write(tmp_path / "etc/systemd/system/docker.service.d/docker-override.conf",
                   body(C17 + ".2-dgx-os-docker-drop-in.txt"))
    path = write(tmp_path / "daemon.json", '{"log-driver": "json-file"}\n')
    runtime = tmp_path / "usr/bin/nvidia-container-runtime"
    write(runtime, "#!/bin/sh\n", mode=0o755)
    settings = json.loads(json.dumps(settings).replace("/usr/bin/nvidia-container-runtime", str(runtime)))

    result = run(path=str(path), settings=settings, unit_paths=[str(dropin.parent)])
    if refused is None:
        assert result["changed"] is True
        assert load(path.read_text()) == dict({"log-driver": "json-file"}, **settings)
    else:
        assert result["failed"] is True
        assert f"specified both as a flag and in the configuration file: {refused}" in result["msg"]
        assert f"the drop-in {dropin}" in result["msg"]
        assert path.read_text() == '{"log-driver": "json-file"}\n'
        assert backups(path) == []


def test_c19_default_runtime_without_binary_refused_before_writing(run, tmp_path):
    path = write(tmp_path / "daemon.json", '{"log-driver": "json-file"}\n')
    missing = tmp_path / "usr/bin/nvidia-container-runtime"
    settings = {"default-runtime": "nvidia",
                "runtimes": {"nvidia": {"path": str(missing), "runtimeArgs": []}}}

    result = run(path=str(path), settings=settings)
    assert result["failed"] is True
    assert "EVERY `docker run` fails" in result["msg"]
    assert f'exec: "{missing}": executable file not found in $PATH' in result["msg"]
    assert path.read_text() == '{"log-driver": "json-file"}\n'

    write(missing, "#!/bin/sh\n", mode=0o755)
    assert run(path=str(path), settings=settings)["changed"] is True

    unchecked = run(path=str(tmp_path / "other.json"), settings=dict(settings, **{"default-runtime": "x"}),
                    check_runtimes=False)
    assert unchecked["changed"] is True


def test_c19_rollback_removes_runtime_and_default(run, tmp_path):
    cfg = {"hosts": ["unix:///var/run/docker.sock"], "default-runtime": "nvidia",
           "runtimes": {"nvidia": {"path": "/nonexistent/nvidia-container-runtime"}}}
    path = write(tmp_path / "daemon.json", json.dumps(cfg))
    result = run(path=str(path), remove_keys=["default-runtime", "runtimes.nvidia"])
    assert result["changed"] is True
    assert load(path.read_text()) == {"hosts": ["unix:///var/run/docker.sock"]}


def test_dockerd_validate_is_used_when_dockerd_has_it(run, tmp_path, monkeypatch):
    path = write(tmp_path / "daemon.json", "{}\n")
    calls = []

    def run_command(self, args, **kwargs):
        calls.append(list(args))
        if args[1] == "--version":
            return 0, "Docker version 24.0.7, build 311b9ff\n", ""
        if args[1] == "--help":
            return 0, "      --validate    Validate daemon configuration and exit\n", ""
        with open(args[3], encoding="utf-8") as f:
            assert json.load(f) == {"log-level": "loud"}
        err = f"unable to configure the Docker daemon with file {args[3]}: invalid logging level: loud\n"
        return 1, "", err

    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/dockerd")
    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    result = run(path=str(path), settings={"log-level": "loud"})
    assert result["failed"] is True
    assert f"dockerd --validate rejected the merged {path}" in result["msg"]
    assert f"with file {path}: invalid logging level: loud" in result["msg"]
    assert [c[1] for c in calls] == ["--version", "--help", "--validate"]
    assert path.read_text() == "{}\n"


def test_dockerd_without_validate_relies_on_module_checks(run, tmp_path, monkeypatch):
    path = write(tmp_path / "daemon.json", "{}\n")
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/sbin/dockerd")
    help_20_10 = "  -H, --host list   Daemon socket(s) to connect to\n"
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, args, **kw: (0, help_20_10, ""))
    result = run(path=str(path), settings={"log-level": "warn"})
    assert result["changed"] is True
    assert result["validation"] == "module checks only: dockerd has no --validate (Docker < 23.0)"


# --- one owner: contributions, the record of managed keys, the restart marker, rollback -------

RDMA_ULIMITS = {"default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}}


@pytest.fixture(autouse=True)
def one_pid_per_run(monkeypatch):
    """Each module run is its own process on a node, so backup_local's <pid>.<time> names differ;
    here all runs share one pid within a second, which would make a later backup overwrite one
    the restart marker still points at."""
    import itertools
    counter = itertools.count(1000)
    monkeypatch.setattr(os, "getpid", lambda: next(counter))


def owner_args(tmp_path, **extra):
    gc = tmp_path / "etc/gpucluster"
    args = dict(path=str(tmp_path / "etc/docker/daemon.json"), contributions_dir=str(gc / "docker.d"),
                managed_file=str(gc / "daemon-json-managed.json"),
                pending_file=str(tmp_path / "run/gpucluster/docker-restart-pending.json"))
    args.update(extra)
    return args


def test_contribution_files_merge_and_a_dropped_one_leaves_the_file_user_keys_stay(run, tmp_path, toolkit):
    original = fixture_text(C15 + ".1-daemon-json-before.txt")
    path = write(tmp_path / "etc/docker/daemon.json", original)
    rdma = write(tmp_path / "etc/gpucluster/docker.d/rdma.json", json.dumps(RDMA_ULIMITS))
    write(tmp_path / "etc/gpucluster/docker.d/nvidia_container_toolkit.json", json.dumps(NVIDIA_RUNTIME))
    args = owner_args(tmp_path, settings={"log-driver": "json-file"})

    first = run(**args)
    cfg = load(path.read_text())
    assert first["changed"] and cfg["hosts"] == load(original)["hosts"]
    assert cfg["default-ulimits"] == RDMA_ULIMITS["default-ulimits"] and "nvidia" in cfg["runtimes"]
    record = json.loads((tmp_path / "etc/gpucluster/daemon-json-managed.json").read_text())
    assert record["managed"]["default-ulimits"] == RDMA_ULIMITS["default-ulimits"]
    pending = json.loads((tmp_path / "run/gpucluster/docker-restart-pending.json").read_text())
    assert first["restart_pending"] and pending["backup_file"] == first["backup_file"]
    assert set(pending["changed_keys"]) == {"default-ulimits", "runtimes", "log-driver"}

    rdma.unlink()
    second = run(**args)
    cfg2 = load(path.read_text())
    assert second["changed"] and "default-ulimits" not in cfg2 and cfg2["hosts"] == load(original)["hosts"]
    assert "default-ulimits.memlock.Soft" in second["removed_keys"]
    # the marker still points at the file dockerd runs (the original), keys accumulated
    pending2 = json.loads((tmp_path / "run/gpucluster/docker-restart-pending.json").read_text())
    assert pending2["backup_file"] == first["backup_file"] and "default-ulimits" in pending2["changed_keys"]

    (tmp_path / "run/gpucluster/docker-restart-pending.json").unlink()  # the verified restart
    third = run(**args)
    assert third["changed"] is False and third["restart_pending"] is False


def test_an_unknown_or_mistyped_managed_key_is_refused_before_anything_is_written(run, tmp_path):
    path = write(tmp_path / "etc/docker/daemon.json", '{"dns": ["192.0.2.53"]}\n')
    result = run(**owner_args(tmp_path, settings={"log-driver": "json-file", "insecure-registry": ["r:5000"]}))
    assert result["failed"] and result["invalid_keys"] == ["insecure-registry"]
    assert "Did you mean 'insecure-registries'" in result["msg"]
    assert path.read_text() == '{"dns": ["192.0.2.53"]}\n'
    assert not (tmp_path / "etc/gpucluster/daemon-json-managed.json").exists()
    assert not (tmp_path / "run/gpucluster").exists()


def test_two_sources_disagreeing_is_refused_naming_both(run, tmp_path):
    write(tmp_path / "etc/gpucluster/docker.d/rdma.json", json.dumps(RDMA_ULIMITS))
    result = run(**owner_args(tmp_path, settings={"default-ulimits": {"memlock": {
        "Name": "memlock", "Soft": 65536, "Hard": 65536}}}))
    assert result["failed"] and "rdma.json" in result["msg"] and "'settings'" in result["msg"]
    assert not (tmp_path / "etc/docker/daemon.json").exists()


def test_a_users_unknown_key_is_only_a_warning(run, tmp_path):
    # ip-forward-no-drop is a dockerd 28.0 flag (moby v28.3.2 cmd/dockerd/config_unix.go): unknown to 20.10.
    write(tmp_path / "etc/docker/daemon.json", '{"ip-forward-no-drop": true}\n')
    result = run(**owner_args(tmp_path, settings={"log-driver": "json-file"}, dockerd_version="20.10.24+dfsg1"))
    assert result["changed"] and any("ip-forward-no-drop" in w and "dockerd 20.10 does not know it" in w
                                     for w in result["warning_texts"])


def test_a_key_the_running_dockerd_knows_is_not_warned_about(run, tmp_path):
    write(tmp_path / "etc/docker/daemon.json", '{"ip-forward-no-drop": true}\n')
    result = run(**owner_args(tmp_path, settings={"log-driver": "json-file"}, dockerd_version="28.3.2"))
    assert result["changed"] and not any("ip-forward-no-drop" in w for w in result["warning_texts"])


# A UTF-8 byte order mark (Notepad's UTF-8): dockerd 23.0 and later skip it (moby d42495033e7a, backported
# to v23.0.0 as 0b2eecdc8a); 20.10 (Debian 12's docker.io) refuses to start with it.
BOM_FILE = b'\xef\xbb\xbf{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}\n'


def test_a_bom_file_is_merged_for_a_dockerd_that_skips_it_and_written_without_bom(run, tmp_path, monkeypatch):
    path = tmp_path / "etc/docker/daemon.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(BOM_FILE)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/dockerd")
    outputs = {"--version": "Docker version 26.1.3, build 26.1.3-0ubuntu1~24.04.1\n", "--help": ""}
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, args, **kw: (0, outputs[args[1]], ""))
    result = run(path=str(path), settings={"log-level": "warn"}, check_runtimes=False)
    assert result["changed"] is True and result["config"]["runtimes"]["nvidia"]["runtimeArgs"] == []
    assert path.read_bytes().startswith(b"{") and load(path.read_text()) == result["config"]


def test_a_bom_file_is_refused_for_dockerd_20_10_and_for_an_unknown_dockerd_naming_the_releases(run, tmp_path):
    path = tmp_path / "etc/docker/daemon.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(BOM_FILE)
    old = run(path=str(path), settings={"log-level": "warn"}, dockerd_version="20.10.24+dfsg1")
    assert old["failed"] and "dockerd 20.10 (older than 23.0)" in old["msg"]
    unknown = run(path=str(path), settings={"log-level": "warn"})
    assert unknown["failed"] and "dockerd older than 23.0" in unknown["msg"]
    assert "23.0 and later skip" in unknown["msg"] and "dockerd would refuse to start" not in unknown["msg"]
    assert path.read_bytes() == BOM_FILE


def test_keys_of_a_newer_dockerd_are_written_for_it_and_refused_for_20_10(run, tmp_path):
    settings = {"bip6": "fd00:1::1/64", "allow-direct-routing": False, "network-diagnostic-port": 2000}
    new = run(path=str(tmp_path / "daemon.json"), settings=settings, dockerd_version="28.3.2")
    assert new["changed"] is True and new["config"] == settings
    old = run(path=str(tmp_path / "old.json"), settings=settings, dockerd_version="20.10.24+dfsg1")
    assert old["failed"] and old["invalid_keys"] == ["bip6", "allow-direct-routing"]
    assert "only dockerd 28.2 and later do" in old["msg"]


def test_rollback_restores_the_file_and_the_record_the_marker_names(run, tmp_path):
    original = '{"dns": ["192.0.2.53"]}\n'
    path = write(tmp_path / "etc/docker/daemon.json", original)
    args = owner_args(tmp_path, settings={"log-driver": "json-file"})
    run(**args)
    args2 = owner_args(tmp_path, settings={"log-driver": "json-file", "data-root": "/proc/docker"})
    run(**args2)
    assert load(path.read_text())["data-root"] == "/proc/docker"
    back = run(state="rolled_back", **args2)
    assert back["changed"] and set(back["changed_keys"]) == {"log-driver", "data-root"}
    assert path.read_text() == original
    assert not (tmp_path / "etc/gpucluster/daemon-json-managed.json").exists()  # none before run 1


def test_rollback_of_a_file_that_did_not_exist_removes_it_and_without_marker_fails(run, tmp_path):
    args = owner_args(tmp_path, settings={"log-driver": "json-file"})
    run(**args)
    assert (tmp_path / "etc/docker/daemon.json").exists()
    back = run(state="rolled_back", **args)
    assert back["restored"].startswith("no file") and not (tmp_path / "etc/docker/daemon.json").exists()
    (tmp_path / "run/gpucluster/docker-restart-pending.json").unlink()
    again = run(state="rolled_back", **args)
    assert again["failed"] and "nothing to roll back" in again["msg"]


# --- contribute.yml's one run: keep a role's contribution file, merge where the engine's unit is loaded ---

NICE_RDMA = json.dumps(RDMA_ULIMITS, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


@pytest.fixture
def unit_state(monkeypatch):
    """docker.service's LoadState as systemctl would report it (``state["value"]``), and the units asked."""
    state = {"value": "loaded", "asked": []}

    def load_state(module, unit):
        state["asked"].append(unit)
        return state["value"]

    monkeypatch.setattr(docker_daemon_json, "_unit_load_state", load_state)
    return state


def contribute_args(tmp_path, name="rdma", settings=RDMA_ULIMITS, **extra):
    return owner_args(tmp_path, contribution_name=name, contribution=settings, only_if_unit_loaded="docker.service",
                      contributions=[{"name": "docker role", "settings": {"log-driver": "json-file"}}], **extra)


def test_contribution_file_is_written_as_to_nice_json_and_merged_then_a_rerun_changes_nothing(run, tmp_path,
                                                                                              unit_state):
    path = write(tmp_path / "etc/docker/daemon.json", '{"dns": ["192.0.2.53"]}\n')
    contrib = tmp_path / "etc/gpucluster/docker.d/rdma.json"
    first = run(**contribute_args(tmp_path))
    assert unit_state["asked"] == ["docker.service"]
    assert first["changed"] and first["merged"] and first["contribution_changed"]
    assert first["contribution_file"] == str(contrib)
    # the text ansible.builtin.copy wrote from `settings | to_nice_json` + newline
    assert contrib.read_text() == NICE_RDMA
    assert stat.S_IMODE(contrib.stat().st_mode) == 0o644
    assert stat.S_IMODE(contrib.parent.stat().st_mode) == 0o755
    cfg = load(path.read_text())
    assert cfg["default-ulimits"] == RDMA_ULIMITS["default-ulimits"] and cfg["dns"] == ["192.0.2.53"]
    assert first["restart_pending"] and set(first["changed_keys"]) == {"default-ulimits", "log-driver"}
    assert first["backup_file"]
    record = json.loads((tmp_path / "etc/gpucluster/daemon-json-managed.json").read_text())
    assert str(contrib) in record["sources"]

    (tmp_path / "run/gpucluster/docker-restart-pending.json").unlink()  # the verified restart
    written = (path.read_bytes(), contrib.read_bytes(), contrib.stat().st_mtime_ns)
    second = run(**contribute_args(tmp_path))
    assert second["changed"] is False and second["contribution_changed"] is False
    assert second["restart_pending"] is False and second["merged"] is True
    assert (path.read_bytes(), contrib.read_bytes(), contrib.stat().st_mtime_ns) == written


def test_a_file_the_copy_task_wrote_compares_equal(run, tmp_path, unit_state):
    """A converged node's file, written by the old copy task, is left alone (no change, same text)."""
    contrib = write(tmp_path / "etc/gpucluster/docker.d/rdma.json", NICE_RDMA)
    unit_state["value"] = "not-found"
    result = run(**contribute_args(tmp_path))
    assert result["changed"] is False and result["contribution_changed"] is False
    assert contrib.read_text() == NICE_RDMA


def test_withdrawing_deletes_the_file_and_takes_the_keys_out(run, tmp_path, unit_state):
    path = tmp_path / "etc/docker/daemon.json"
    contrib = tmp_path / "etc/gpucluster/docker.d/rdma.json"
    run(**contribute_args(tmp_path))
    assert "default-ulimits" in load(path.read_text())
    gone = run(**contribute_args(tmp_path, settings={}))
    assert gone["changed"] and gone["contribution_changed"] and not contrib.exists()
    assert "default-ulimits" not in load(path.read_text())
    assert "default-ulimits.memlock.Soft" in gone["removed_keys"]
    again = run(**contribute_args(tmp_path, settings={}))
    assert again["changed"] is False and again["contribution_changed"] is False


def test_check_mode_writes_nothing_and_reports_both_files(run, tmp_path, unit_state):
    path = write(tmp_path / "etc/docker/daemon.json", '{"dns": ["192.0.2.53"]}\n')
    result = run(check_mode=True, diff=True, **contribute_args(tmp_path))
    assert result["changed"] and result["contribution_changed"] and result["merged"]
    assert not (tmp_path / "etc/gpucluster").exists() and not (tmp_path / "run/gpucluster").exists()
    assert path.read_text() == '{"dns": ["192.0.2.53"]}\n'
    # the merge already sees the new contribution (the copy task's check mode left it out)
    assert result["config"]["default-ulimits"] == RDMA_ULIMITS["default-ulimits"]
    assert result["restart_pending"] is True
    contrib_diff, daemon_diff = result["diff"]
    assert contrib_diff["before"] == "" and contrib_diff["after"] == NICE_RDMA
    assert contrib_diff["after_header"].endswith("docker.d/rdma.json")
    assert "default-ulimits" in daemon_diff["after"] and daemon_diff["before"] == '{"dns": ["192.0.2.53"]}\n'


def test_check_mode_withdrawal_reports_without_deleting(run, tmp_path, unit_state):
    contrib = write(tmp_path / "etc/gpucluster/docker.d/rdma.json", NICE_RDMA)
    contrib.parent.chmod(0o755)
    unit_state["value"] = "not-found"
    result = run(check_mode=True, **contribute_args(tmp_path, settings={}))
    assert result["changed"] and result["contribution_changed"] and contrib.read_text() == NICE_RDMA


def test_unit_not_loaded_keeps_the_file_and_leaves_daemon_json_to_the_docker_stage(run, tmp_path, unit_state):
    unit_state["value"] = "not-found"
    user = write(tmp_path / "etc/docker/daemon.json", '{"dns": ["192.0.2.53"]}\n')
    result = run(diff=True, **contribute_args(tmp_path))
    assert result["changed"] and result["contribution_changed"] and result["merged"] is False
    assert result["restart_pending"] is False and result["backup_file"] == "" and result["changed_keys"] == []
    assert (tmp_path / "etc/gpucluster/docker.d/rdma.json").read_text() == NICE_RDMA
    assert user.read_text() == '{"dns": ["192.0.2.53"]}\n' and not backups(user)
    assert not (tmp_path / "etc/gpucluster/daemon-json-managed.json").exists()
    assert not (tmp_path / "run/gpucluster").exists()
    assert result["diff"] == [{"before": "", "after": NICE_RDMA, "before_header": result["contribution_file"],
                               "after_header": result["contribution_file"]}]
    again = run(**contribute_args(tmp_path))
    assert again["changed"] is False and again["merged"] is False


@pytest.mark.parametrize("load_state", ["loaded", "not-found"])
def test_a_bad_key_is_refused_before_the_contribution_file_is_written(run, tmp_path, unit_state, load_state):
    unit_state["value"] = load_state
    old = write(tmp_path / "etc/gpucluster/docker.d/rdma.json", NICE_RDMA)
    result = run(**contribute_args(tmp_path, settings={"default-ulimit": {"memlock": "-1"}}))
    assert result["failed"] and result["invalid_keys"] == ["default-ulimit"]
    assert "nothing changed" in result["msg"] and str(old) in result["msg"]
    assert old.read_text() == NICE_RDMA
    assert not (tmp_path / "etc/docker/daemon.json").exists()
    assert not (tmp_path / "run/gpucluster").exists()


def test_two_owners_of_one_key_are_refused_before_the_contribution_file_is_written(run, tmp_path, unit_state):
    unit_state["value"] = "not-found"
    write(tmp_path / "etc/gpucluster/docker.d/other.json", json.dumps({"default-ulimits": {"memlock": {
        "Name": "memlock", "Soft": 65536, "Hard": 65536}}}))
    result = run(**contribute_args(tmp_path))
    assert result["failed"] and "other.json" in result["msg"] and "rdma.json" in result["msg"]
    assert not (tmp_path / "etc/gpucluster/docker.d/rdma.json").exists()


def test_a_broken_old_contribution_file_is_replaced_not_read(run, tmp_path, unit_state):
    contrib = write(tmp_path / "etc/gpucluster/docker.d/rdma.json", '{"default-ulimits": ')
    result = run(**contribute_args(tmp_path))
    assert result["changed"] and contrib.read_text() == NICE_RDMA


def test_contribution_name_is_one_file_name(run, tmp_path, unit_state):
    result = run(**contribute_args(tmp_path, name="../docker/daemon"))
    assert result["failed"] and "contribution_name" in result["msg"]
    assert not (tmp_path / "etc").exists()


@pytest.fixture
def systemctl(monkeypatch):
    """systemctl on PATH (and nothing else of get_bin_path's), answering ``answer["reply"]``
    (rc, stdout, stderr); the argv it was asked with in ``answer["asked"]``."""
    answer = {"reply": (0, "", ""), "asked": []}
    monkeypatch.setattr(AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **k: "/usr/bin/systemctl" if name == "systemctl" else None)

    def run_command(self, args, **kw):
        answer["asked"].append(args)
        return answer["reply"]

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return answer


def test_the_unit_is_read_with_systemctl_show_loadstate(run, tmp_path, systemctl):
    systemctl["reply"] = (0, "LoadState=not-found\n", "")
    result = run(**contribute_args(tmp_path))
    assert systemctl["asked"] == [["/usr/bin/systemctl", "show", "-p", "LoadState", "docker.service"]]
    assert result["merged"] is False and result["contribution_changed"]
    assert "unit" not in result


def test_report_unit_returns_the_units_states_read_after_the_merge(run, tmp_path, systemctl):
    """The role skips its enable-and-start step where the engine is enabled and active already."""
    # systemctl prints the properties in its own order, whatever the order of -p
    systemctl["reply"] = (0, "ActiveState=inactive\nLoadState=loaded\nUnitFileState=enabled\n", "")
    result = run(**owner_args(tmp_path), report_unit="docker.service")
    assert result["merged"] is True and result["path"] == str(tmp_path / "etc/docker/daemon.json")
    assert result["unit"] == {"LoadState": "loaded", "UnitFileState": "enabled", "ActiveState": "inactive"}
    assert systemctl["asked"] == [["/usr/bin/systemctl", "show", "-p", "LoadState", "-p", "UnitFileState", "-p",
                                   "ActiveState", "docker.service"]]


def test_report_unit_fails_naming_the_unit_where_systemctl_fails(run, tmp_path, systemctl):
    systemctl["reply"] = (1, "", "Failed to connect to bus")
    result = run(**owner_args(tmp_path), report_unit="docker.service")
    assert result["failed"] and result["msg"] == "systemctl show docker.service failed: Failed to connect to bus"
