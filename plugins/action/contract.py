# Copyright: gpucluster contributors
# Apache-2.0
"""Action plugin of gpucluster.cluster.contract: runs the module on the node, then brings this
run's ``ansible_local.gpucluster`` up to date with the contract the module returns, so the
stages after it (and validate in the same run) read what was just published without gathering
facts again. The node's other local facts are kept as they are.

The first publish on a node in a run always runs the module (it also mends the fact script).
From then on this run's ``ansible_local.gpucluster`` is the node's contract as the module read
it, kept up to date by every publish, so a later publish whose data is already there (a rerun on
a converged node) answers from it without a module run: each module run costs the controller a
worker and a result per node. The collection's strategy (mitogen_linear) runs this action in
ansible-playbook itself first, so such a publish forks no worker at all; where the module has to
run, the action asks for a worker instead."""

from __future__ import annotations

import json

from ansible.plugins.action import ActionBase
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.controller_process import (
    in_worker,
    playbook_pid,
    process_start,
)

DEFAULT_PATH = "/etc/gpucluster/contract.d"
DEFAULT_FACTS_PATH = "/etc/ansible/facts.d"
CHECKED = "gpucluster_contract_read"
# The strategy's marker (plugins/strategy/mitogen_linear.py, NEEDS_WORKER) for "run me in a worker".
NEEDS_WORKER = "_gpucluster_needs_worker"


def run_key() -> str:
    """This ansible-playbook run: its pid and that process's start time (a later run differs)."""
    pid = playbook_pid()
    return f"{pid}:{process_start(pid)}"


def _plain(data):
    """``data`` as the module receives it (JSON), or None where it is not JSON."""
    try:
        return json.loads(json.dumps(data, sort_keys=True))
    except (TypeError, ValueError):
        return None


def already_there(args: dict, facts: dict, local: dict, run: str) -> bool:
    """True where this run's module already read the node's contract at these paths and the
    stage's data is in it as asked, with nothing else for the module to do (no older fact file
    to remove: none of ``remove_facts`` among the fact files it listed)."""
    mark = facts.get(CHECKED)
    contract = local.get("gpucluster")
    if not (isinstance(mark, dict) and isinstance(contract, dict)):
        return False
    where = {"run": run, "path": args.get("path", DEFAULT_PATH),
             "facts_path": args.get("facts_path", DEFAULT_FACTS_PATH)}
    if {k: mark.get(k) for k in where} != where:
        return False
    old_facts = set(args.get("remove_facts") or []) & set(mark.get("fact_files", []))
    if args.get("state", "present") != "present" or old_facts:
        return False
    stage = args.get("stage")
    data = _plain(args.get("data", {}))
    return isinstance(stage, str) and data is not None and stage in contract and contract[stage] == data


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        facts = task_vars.get("ansible_facts") or {}
        local = facts.get("local", task_vars.get("ansible_local"))
        local = dict(local) if isinstance(local, dict) else {}
        run = run_key()
        args = self._task.args
        if already_there(args, facts, local, run):
            result.update(changed=False, on_node=False, contract=local["gpucluster"],
                          path=f"{args.get('path', DEFAULT_PATH)}/{args['stage']}.json")
            return result
        if not in_worker():
            # The strategy tried this task in its own process first (mitogen_linear's
            # CONTROLLER_FIRST_ACTIONS); the node is needed, so a worker runs it.
            return {NEEDS_WORKER: True}
        result.update(self._execute_module(module_name="gpucluster.cluster.contract",
                                           module_args=args, task_vars=task_vars))
        if result.get("failed") or "contract" not in result:
            return result
        local["gpucluster"] = result["contract"]
        result["on_node"] = True
        result["ansible_facts"] = {
            "ansible_local": local,
            CHECKED: {"run": run, "path": args.get("path", DEFAULT_PATH),
                      "facts_path": args.get("facts_path", DEFAULT_FACTS_PATH),
                      "fact_files": result.get("fact_files", [])},
        }
        return result
