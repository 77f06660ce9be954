#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Documentation of the action plugin gpucluster.cluster.gather (plugins/action/gather.py); the
action runs the fact modules it is given, there is no module code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gather
short_description: Several fact modules in one task, one after another
description:
  - Runs each module of O(modules) on the node, in the order given, with its arguments, and
    returns their C(ansible_facts) merged (a later module's fact of the same name wins). Each
    task costs the controller a worker and a result per node, so a stage that gathers the
    node's interfaces, its GPUs and its RDMA devices does it with one task instead of three.
  - The first module that fails fails the task with that module's own result, its message
    prefixed with the module's name (RV(failed_module)); the modules after it do not run.
  - Not M(ansible.builtin.gather_facts) with C(ansible_facts_modules), which does the same
    for the modules it is configured with, because it gives every module the task's own
    arguments (it warns about each C(gather_subset) it does not pass on, on every run), and
    its failure is one message naming the modules, each one's own message under
    C(failed_modules).
  - Runs on the node as each module does, in check mode too (fact modules change nothing).
version_added: "0.1.0"
options:
  modules:
    description: Fact module (its full name) to its arguments (a mapping, or null for none).
    type: dict
    required: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - gpucluster.cluster.node_facts
"""

EXAMPLES = r"""
- name: Gather the node's interfaces and local facts, its GPUs and its RDMA devices
  gpucluster.cluster.gather:
    modules:
      ansible.builtin.setup: {gather_subset: [min, network, local]}
      gpucluster.cluster.gpu_facts: {kernel_log: false}
      gpucluster.cluster.rdma_facts:
"""

RETURN = r"""
ansible_facts:
  description: The facts of every module, merged in order.
  returned: success
  type: dict
failed_module:
  description: The module that failed.
  returned: failure
  type: str
  sample: gpucluster.cluster.gpu_facts
"""
