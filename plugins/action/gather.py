# Copyright: gpucluster contributors
# Apache-2.0
"""Action plugin of gpucluster.cluster.gather: several fact modules, one after another, in one
task (one worker and one result per node instead of one per module). See the module's doc
(plugins/modules/gather.py) for why not ansible.builtin.gather_facts."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    """Run each of ``modules`` (name to its arguments) on the node in order, merge their
    ansible_facts; the first that fails fails the task with its own result, its name put first."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"modules"})
    # Each fact module runs in check mode as it would on its own (_execute_module passes it on).
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        modules = self._task.args.get("modules")
        if not isinstance(modules, dict) or not modules or not all(
                isinstance(k, str) and isinstance(v, (dict, type(None))) for k, v in modules.items()):
            raise AnsibleActionFail("modules must be a mapping of fact module names to their arguments "
                                    f"(a mapping, or null for none), not {modules!r}")
        facts, warnings, deprecations = {}, [], []
        for name, args in modules.items():
            res = self._execute_module(module_name=name, module_args=dict(args or {}), task_vars=task_vars)
            warnings.extend(res.pop("warnings", None) or [])
            deprecations.extend(res.pop("deprecations", None) or [])
            if res.get("failed"):
                res.pop("ansible_facts", None)
                result.update(res, msg=f"{name}: {res.get('msg', 'failed')}", failed_module=name)
                break
            facts.update(res.get("ansible_facts") or {})
            if res.get("_ansible_verbose_override"):  # setup's: -v does not print the facts
                result["_ansible_verbose_override"] = True
        else:
            result.update(changed=False, ansible_facts=facts)
        if warnings:
            result["warnings"] = warnings
        if deprecations:
            result["deprecations"] = deprecations
        return result
