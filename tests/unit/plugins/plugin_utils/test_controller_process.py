"""plugin_utils/controller_process: a process's start time from /proc/<pid>/stat whatever its
command name holds, `gone` for a process that is not there, and ansible-playbook's pid from a
task worker or from ansible-playbook itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ansible.executor.process.worker import WorkerProcess
from ansible_collections.gpucluster.cluster.plugins.plugin_utils import controller_process as cp

# A /proc/<pid>/stat line (proc(5)): pid, (comm), state, then fields 4..52; starttime is field 22.
FIELDS = [str(n) for n in range(4, 53)]
FIELDS[22 - 4] = "987654"


def _proc(tmp_path, pid, comm, fields=FIELDS):
    d = tmp_path / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S " + " ".join(fields) + "\n")
    return str(tmp_path)


@pytest.mark.parametrize("comm", ["ansible-playboo", "a b", "x) 1 2 3 (y", ") S 9", "(("])
def test_the_start_time_is_field_22_whatever_the_command_name_holds(tmp_path, comm):
    assert cp.process_start(4242, _proc(tmp_path, 4242, comm)) == "987654"


def test_a_missing_or_unreadable_process_is_gone(tmp_path):
    proc = _proc(tmp_path, 7, "short", fields=["1", "2"])
    assert cp.process_start(7, proc) == "gone"  # too few fields
    assert cp.process_start(8, proc) == "gone"  # no such process
    assert cp.process_start("x", proc) == "gone"


def test_this_process_has_a_start_time_and_it_is_its_own():
    mine = cp.process_start(os.getpid())
    assert mine.isdigit()
    # a child started later has a start time not before this one's
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert int(cp.process_start(child.pid)) >= int(mine)
    finally:
        child.kill()
        child.wait()
    assert cp.process_start(child.pid) == "gone"


def test_the_playbook_pid_is_the_workers_parent_in_a_worker_and_this_process_elsewhere():
    worker = WorkerProcess.__new__(WorkerProcess)
    assert cp.in_worker() is False and cp.in_worker(worker) is True
    assert cp.playbook_pid() == os.getpid()
    assert cp.playbook_pid(worker) == os.getppid()
