"""The run lock (roles/preflight/tasks/lock.yml, unlock.yml), run for real on this machine
(connection local) with the lock file under tmp_path: a second run is refused naming the
first, a lock whose run is gone or too old is taken over with a warning, force takes any lock,
and a run releases only its own lock."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import run_tool


def _play(tmp_path, *, unlock=False, **extra):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    book = tmp_path / "lock.yml"
    tasks = [{"name": "Lock", "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "lock.yml"}}]
    if unlock:
        tasks.append({"name": "Unlock", "ansible.builtin.include_role": {"name": "preflight",
                                                                         "tasks_from": "unlock.yml"}})
    book.write_text(yaml.safe_dump([{"name": "Lock test", "hosts": "gpu_nodes", "gather_facts": False,
                                     "tasks": tasks}]))
    extra.setdefault("preflight_lock_path", str(tmp_path / "gpucluster/run.lock"))
    ev = tmp_path / "extra.yml"
    ev.write_text(yaml.safe_dump(extra))
    r = run_tool("ansible-playbook", "-i", inv, "-e", f"@{ev}", book, home=tmp_path)
    return r, r.stdout + r.stderr


def _lock(tmp_path):
    return tmp_path / "gpucluster/run.lock"


def _hold(tmp_path, **holder):
    base = {"id": "other-run", "controller": os.uname().nodename, "user": "alice", "pid": os.getpid(),
            "started": "2026-12-01T10:00:00Z", "epoch": int(time.time()), "playbook": "site.yml", "node": "node-x"}
    base.update(holder)
    _lock(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    _lock(tmp_path).write_text(json.dumps(base) + "\n")
    return base


def test_a_run_takes_the_lock_naming_itself_and_releases_it(tmp_path):
    r, out = _play(tmp_path)
    assert r.returncode == 0, out
    held = json.loads(_lock(tmp_path).read_text())
    assert held["controller"] == os.uname().nodename and held["node"] == "node-x"
    assert held["pid"] > 1 and held["user"] and held["started"].endswith("Z") and held["epoch"] > 0
    assert str(tmp_path / "lock.yml") in held["playbook"]
    # that ansible-playbook is gone: the next run takes the lock over, with a warning, and releases it
    r, out = _play(tmp_path, unlock=True)
    assert r.returncode == 0, out
    assert "WARNING node-x: taking over" in out and "its ansible-playbook process is gone" in out
    assert not _lock(tmp_path).exists()


def test_a_second_run_is_refused_naming_the_first_and_changes_nothing(tmp_path):
    holder = _hold(tmp_path)  # pid = this pytest process: alive
    before = _lock(tmp_path).read_text()
    r, out = _play(tmp_path, unlock=True)
    assert r.returncode != 0, out
    assert f"another gpucluster run holds {_lock(tmp_path)}: alice@{holder['controller']} pid {os.getpid()}" in out
    assert "started 2026-12-01T10:00:00Z" in out and "site.yml" in out
    assert "preflight_lock_force=true" in out
    assert _lock(tmp_path).read_text() == before


def _starttime(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat (proc(5)), read after the command name's parenthesis."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]


def test_a_reused_pid_does_not_keep_a_dead_runs_lock(tmp_path):
    """CI, 2026-12-02: a failed run's lock named pid 10273; 9 minutes later another process had
    that pid (pid_max 32768 on a busy controller) and the next site.yml was refused as if the
    dead run still held the lock. The lock records the process's start time as well."""
    r, out = _play(tmp_path, unlock=False)
    assert r.returncode == 0, out
    mine = json.loads(_lock(tmp_path).read_text())
    assert mine["pid_start"].isdigit(), mine
    # The same pid as a live process (this pytest), started at another time: the run is gone.
    _hold(tmp_path, pid=os.getpid(), pid_start=str(int(_starttime(os.getpid())) - 1))
    r, out = _play(tmp_path, unlock=True)
    assert r.returncode == 0, out
    assert "WARNING node-x: taking over" in out and "its ansible-playbook process is gone" in out
    # The same pid and its start time: that run still runs, and the lock is refused.
    _hold(tmp_path, pid=os.getpid(), pid_start=_starttime(os.getpid()))
    r, out = _play(tmp_path)
    assert r.returncode != 0 and f"pid {os.getpid()}" in out, out


def test_another_controllers_lock_is_refused_until_it_is_stale_or_forced(tmp_path):
    _hold(tmp_path, controller="ctl-b", pid=1)
    r, out = _play(tmp_path)
    assert r.returncode != 0 and "alice@ctl-b pid 1" in out, out
    r, out = _play(tmp_path, preflight_lock_force=True)
    assert r.returncode == 0 and "preflight_lock_force is true" in out, out
    assert json.loads(_lock(tmp_path).read_text())["controller"] == os.uname().nodename

    _hold(tmp_path, controller="ctl-b", pid=1, epoch=int(time.time()) - 13 * 3600)
    r, out = _play(tmp_path, unlock=True)
    assert r.returncode == 0 and "older than 12 h" in out, out
    assert not _lock(tmp_path).exists()


def test_unlock_never_removes_another_runs_lock(tmp_path):
    # The lock is another run's (held, so this run fails at Lock and never gets to Unlock);
    # unlock alone, as the last play of a run that did not take it, leaves it too.
    _hold(tmp_path)
    book = tmp_path / "unlock.yml"
    book.write_text(yaml.safe_dump([{"name": "Unlock only", "hosts": "gpu_nodes", "gather_facts": False,
                                     "tasks": [{"name": "Unlock", "ansible.builtin.include_role": {
                                         "name": "preflight", "tasks_from": "unlock.yml"}}]}]))
    _play(tmp_path)  # writes the inventory; refused
    r = run_tool("ansible-playbook", "-i", tmp_path / "hosts.yml", "-e", f"preflight_lock_path={_lock(tmp_path)}",
                 book, home=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(_lock(tmp_path).read_text())["id"] == "other-run"


def test_an_empty_lock_is_another_run_taking_it_this_moment_and_is_refused(tmp_path):
    """The take and the read are one command: a lock file that is there but still empty was just
    created by another run (noclobber), which is writing it. It is neither taken over nor
    overwritten."""
    _lock(tmp_path).parent.mkdir(parents=True)
    _lock(tmp_path).write_text("")
    r, out = _play(tmp_path)
    assert r.returncode != 0, out
    assert f"could not take {_lock(tmp_path)}: another gpucluster run took it at the same moment" in out
    assert _lock(tmp_path).read_text() == ""


def test_a_lock_path_that_cannot_be_made_is_refused_naming_it_and_the_fix(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the lock's directory should be\n")
    path = blocker / "run.lock"
    r, out = _play(tmp_path, preflight_lock_path=str(path))
    assert r.returncode != 0, out
    assert f"node-x: could not take or read {path} (rc 3" in out and "Fix preflight_lock_path" in out
    assert blocker.read_text().startswith("a file")


def test_check_mode_reads_the_lock_and_takes_nothing(tmp_path):
    inv = tmp_path / "hosts.yml"
    _play(tmp_path)  # writes the inventory and the playbook, and takes the lock
    _lock(tmp_path).unlink()
    r = run_tool("ansible-playbook", "--check", "-i", inv, "-e", f"preflight_lock_path={_lock(tmp_path)}",
                 tmp_path / "lock.yml", home=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not _lock(tmp_path).exists()
    holder = _hold(tmp_path)  # alive: check mode is refused by a running run as well
    r = run_tool("ansible-playbook", "--check", "-i", inv, "-e", f"preflight_lock_path={_lock(tmp_path)}",
                 tmp_path / "lock.yml", home=tmp_path)
    assert r.returncode != 0 and f"alice@{holder['controller']}" in r.stdout + r.stderr
