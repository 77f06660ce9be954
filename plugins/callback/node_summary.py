# Copyright: gpucluster contributors
# Apache-2.0
"""A closing summary per node (issue 11: output that helps): after the recap, one line per
node saying what the run changed there, stage by stage, or where it stopped and why.

The recap counts tasks; an operator wants to know which stage changed what on which node
(``node-2: changed 3: docker (Write daemon.json, Restart dockerd), container_ssh (Write the
files)``) and, for a node that failed, the task and the first line of its error without
scrolling back through the run. In check mode the changes are what the run would do."""

from __future__ import annotations

DOCUMENTATION = """
name: node_summary
type: aggregate
short_description: one closing line per node, what each stage changed or where the node stopped
description:
  - After the play recap, prints one line per node of the run - the tasks that changed it,
    grouped by stage (role), or the task at which it failed or became unreachable, with the
    first line of the error. In check mode it says "would change".
  - Enabled by this project's ansible.cfg (callbacks_enabled).
requirements:
  - enable in configuration (callbacks_enabled = gpucluster.cluster.node_summary)
author: gpucluster
options:
  names_per_stage:
    description: How many task names to show per stage before "+N more".
    type: int
    default: 3
    ini:
      - section: callback_node_summary
        key: names_per_stage
    env:
      - name: GPUCLUSTER_SUMMARY_NAMES_PER_STAGE
"""

from ansible import constants as C
from ansible import context
from ansible.plugins.callback import CallbackBase
from ansible_collections.gpucluster.cluster.plugins.module_utils import task_result

#: The stage of a task outside any role (a playbook's own task).
PLAYBOOK_STAGE = "playbook"


def _stage_and_name(task):
    role = getattr(task, "_role", None)
    stage = role.get_name(include_role_fqcn=False) if role else PLAYBOOK_STAGE
    return stage, task.name or task.action


def _first_line(result):
    """The line that says why: Ansible's own msg (``task_result.reason``), else a command's last
    stderr line, else its rc."""
    why = task_result.reason(result.get("msg"))
    if why:
        return why
    stderr = [ln.strip() for ln in str(result.get("stderr") or "").splitlines() if ln.strip()]
    if stderr:
        return stderr[-1]
    return f"rc={result['rc']}" if "rc" in result else "no message"


class NodeRecord:
    def __init__(self):
        self.changed: dict[str, list[str]] = {}  # stage -> task names, in run order
        self.stopped: tuple[str, str, str] | None = None  # (how, "stage : task", why)

    def change(self, stage, name):
        names = self.changed.setdefault(stage, [])
        if name not in names:
            names.append(name)


def summary_lines(records, check_mode=False, names_per_stage=3):
    """The closing lines, one per node in name order (a pure function: the unit tests call it)."""
    verb = "would change" if check_mode else "changed"
    lines = []
    for host in sorted(records):
        rec = records[host]
        count = sum(len(v) for v in rec.changed.values())
        parts = []
        for stage, names in rec.changed.items():
            shown = ", ".join(names[:names_per_stage])
            more = f", +{len(names) - names_per_stage} more" if len(names) > names_per_stage else ""
            parts.append(f"{stage} ({shown}{more})")
        done = f"{verb} {count}: " + ", ".join(parts) if count else f"{verb} nothing"
        if rec.stopped:
            how, where, why = rec.stopped
            lines.append((host, f"{host}: {how.upper()} at {where}: {why} (before that: {done})", how))
        else:
            lines.append((host, f"{host}: {done}", "changed" if count else "ok"))
    return lines


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpucluster.cluster.node_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._records: dict[str, NodeRecord] = {}

    def _record(self, result):
        return self._records.setdefault(result._host.get_name(), NodeRecord())

    def v2_runner_on_ok(self, result):
        rec = self._record(result)
        if result._result.get("changed", False):
            rec.change(*_stage_and_name(result._task))

    def v2_runner_on_failed(self, result, ignore_errors=False):
        rec = self._record(result)
        if ignore_errors:
            return
        stage, name = _stage_and_name(result._task)
        rec.stopped = ("failed", f"{stage} : {name}", _first_line(result._result))

    def v2_runner_on_unreachable(self, result):
        rec = self._record(result)
        if result._task.ignore_unreachable:
            return
        stage, name = _stage_and_name(result._task)
        rec.stopped = ("unreachable", f"{stage} : {name}", _first_line(result._result))

    def v2_runner_on_skipped(self, result):
        self._record(result)

    def v2_playbook_on_stats(self, stats):
        if not self._records:
            return
        colors = {"failed": C.COLOR_ERROR, "unreachable": C.COLOR_UNREACHABLE, "changed": C.COLOR_CHANGED,
                  "ok": C.COLOR_OK}
        self._display.banner("NODE SUMMARY")
        check = bool(context.CLIARGS.get("check", False))
        for _host, line, state in summary_lines(self._records, check, self.get_option("names_per_stage")):
            self._display.display(line, color=colors[state])
        self._display.display("")
