# Copyright: gpucluster contributors
# Apache-2.0
"""Action plugin of gpucluster.cluster.contract: runs the module on the node, then brings this
run's ``ansible_local.gpucluster`` up to date with the contract the module returns, so the
stages after it (and validate in the same run) read what was just published without gathering
facts again. The node's other local facts are kept as they are."""

from __future__ import annotations

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result.update(self._execute_module(module_name="gpucluster.cluster.contract",
                                           module_args=self._task.args, task_vars=task_vars))
        if result.get("failed") or "contract" not in result:
            return result
        facts = task_vars.get("ansible_facts") or {}
        local = facts.get("local", task_vars.get("ansible_local"))
        local = dict(local) if isinstance(local, dict) else {}
        local["gpucluster"] = result["contract"]
        result["ansible_facts"] = {"ansible_local": local}
        return result
