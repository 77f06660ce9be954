"""Processes on the controller, for the plugins that run there: which process is this run's
ansible-playbook, whether this is a task worker, and when a process started.

Used by the run lock's lookup (plugins/lookup/controller_run.py) and by the contract action
(plugins/action/contract.py), which keys what it keeps per run by ansible-playbook's pid and
start time.
"""

from __future__ import annotations

import multiprocessing
import os
import pathlib

PROC = "/proc"
GONE = "gone"


def process_start(pid: int, proc: str = PROC) -> str:
    """Field 22 (starttime) of ``/proc/<pid>/stat`` (proc(5)), or ``gone``. The fields are counted
    after the command name's last closing parenthesis (the name may hold spaces and parentheses):
    the first field after it is field 3, so starttime is the 20th."""
    try:
        text = pathlib.Path(f"{proc}/{int(pid)}/stat").read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return GONE
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 and fields[19].isdigit() else GONE


def in_worker(current=None) -> bool:
    """Whether this runs in a task worker (a fork of ansible-playbook), as every action does under
    Ansible's own strategies; mitogen_linear runs some in ansible-playbook itself."""
    from ansible.executor.process.worker import WorkerProcess

    current = multiprocessing.current_process() if current is None else current
    return isinstance(current, WorkerProcess)


def playbook_pid(current=None) -> int:
    """ansible-playbook's pid: a task worker's parent (workers are forks of it), else this process."""
    return os.getppid() if in_worker(current) else os.getpid()
