"""This ansible-playbook run as the run lock records it (roles/preflight/tasks/lock.yml), and
whether the run a lock names still runs on this controller.

The pid is ansible-playbook's own wherever the lookup is templated: in a task worker (a fork of
ansible-playbook, whose parent it is) or in ansible-playbook itself (the strategy templates some
tasks there). A shell's ``$PPID`` named the right process only in a worker.
"""

from __future__ import annotations

import os
import pwd
import uuid

from ansible import context
from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.controller_process import (
    PROC,
    playbook_pid,
    process_start,
)

DOCUMENTATION = """
name: controller_run
author: gpucluster
short_description: This ansible-playbook run (pid, start time, playbooks), or another process's start time
description:
  - Without terms, one dict describing this run on the controller - C(id) (a new UUID),
    C(controller) (the node name), C(user) (the effective user), C(pid) (ansible-playbook's pid, from a
    task worker or from ansible-playbook itself), C(pid_start) (that process's start time, field 22
    of /proc/<pid>/stat, clock ticks since boot) and C(playbook) (the playbooks it was given,
    space-separated; empty outside ansible-playbook).
  - With pids as terms, each process's start time on this controller (as C(pid_start)), or C(gone)
    where there is no such process. A pid with the start time a lock recorded is that run, not a later
    process that reuses the pid.
options:
  _terms:
    description: Pids of processes on the controller.
    required: false
  default_playbook:
    description: The C(playbook) to record where ansible-playbook was given none (outside ansible-playbook).
    type: str
    default: ""
"""

EXAMPLES = """
- name: Describe this run
  ansible.builtin.set_fact:
    run: "{{ lookup('gpucluster.cluster.controller_run') }}"
- name: Still running?
  ansible.builtin.debug:
    msg: "{{ lookup('gpucluster.cluster.controller_run', run.pid) != 'gone' }}"
"""

RETURN = """
_raw:
  description: The run's dict (no terms), else one start time or C(gone) per pid.
  type: raw
"""

def playbooks() -> list[str]:
    """The playbooks ansible-playbook was given (its parsed command line, which workers inherit)."""
    return [str(arg) for arg in context.CLIARGS.get("args") or ()]


def describe_run(proc: str = PROC, default_playbook: str = "") -> dict:
    """This run: a new id, the controller's node name (uname -n), the effective user (id -un),
    ansible-playbook's pid with its start time, and its playbook arguments (else default_playbook)."""
    pid = playbook_pid()
    return {"id": str(uuid.uuid4()), "controller": os.uname().nodename,
            "user": pwd.getpwuid(os.geteuid()).pw_name,
            "pid": pid, "pid_start": process_start(pid, proc),
            "playbook": " ".join(playbooks()) or default_playbook}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if not terms:
            return [describe_run(default_playbook=self.get_option("default_playbook") or "")]
        out = []
        for term in terms:
            try:
                out.append(process_start(int(term)))
            except (TypeError, ValueError) as exc:
                raise AnsibleLookupError(f"controller_run: {term!r} is not a pid") from exc
        return out
