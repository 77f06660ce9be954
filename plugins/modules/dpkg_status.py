#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module: which of a stage's packages dpkg has installed, at which version (thin
shell over module_utils/dpkg.py, where dpkg-query's grammar is documented)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dpkg_status
short_description: Which of the named Debian packages are installed, without opening the apt cache
description:
  - Runs one C(dpkg-query -W) for the packages of O(name) and says which are installed, at which
    version, and which entries are not satisfied (RV(missing)).
  - Lets a stage skip its M(ansible.builtin.apt) task when everything is in place; the apt module
    opens the whole apt cache (python-apt) and checks the lists' age even when it has nothing to
    do, several seconds per task on a converged node.
  - An entry may carry apt's version syntax, C(name=version) (exact) or C(name=version*) (prefix),
    as the same list is given to M(ansible.builtin.apt). A package that is only unpacked, half
    installed or removed with its configuration files left counts as not installed.
  - Read-only; the same in check mode.
version_added: "0.1.0"
options:
  name:
    description: Packages, as given to M(ansible.builtin.apt) (C(name), C(name=version), C(name=version*)).
    type: list
    elements: str
    required: true
  admindir:
    description: dpkg's database directory (C(dpkg-query --admindir)); unset, dpkg's own.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpucluster.cluster.debian_reader
"""

EXAMPLES = r"""
- name: Read which RDMA packages are installed
  gpucluster.cluster.dpkg_status:
    name: "{{ rdma_packages }}"
  register: __rdma_dpkg

- name: Install the inbox RDMA stack
  when: __rdma_dpkg.missing | length > 0
  ansible.builtin.apt:
    name: "{{ rdma_packages }}"
"""

RETURN = r"""
installed:
  description: Installed packages among O(name), name to version (also under C(name:arch)).
  returned: always
  type: dict
  sample: {rdma-core: 44.0-2}
missing:
  description: The entries of O(name) that are not installed as asked, in their order.
  returned: always
  type: list
  elements: str
  sample: [perftest]
selections:
  description:
    - Every package instance of O(name) dpkg knows (installed or not) to its selection, the
      desired state C(dpkg --get-selections) prints (C(install), C(hold), C(deinstall), C(purge)),
      read from the same query (also under C(name:arch)).
  returned: always
  type: dict
  sample: {nvidia-driver: hold, rdma-core: install}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.cluster.plugins.module_utils.dpkg import (
    QUERY_FORMAT,
    command,
    parse_query,
    parse_wants,
    unsatisfied,
)

ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True},
    "admindir": {"type": "path"},
}


def run(module) -> dict:
    wanted = [n for n in module.params["name"] if n]
    if not wanted:
        return {"changed": False, "installed": {}, "missing": [], "selections": {}}
    argv = command(module.get_bin_path("dpkg-query", required=True), module.params.get("admindir"))
    names = list(dict.fromkeys(w.partition("=")[0] for w in wanted))
    rc, out, err = module.run_command([*argv, "-W", "-f", QUERY_FORMAT, *names])
    # rc 1: some name is unknown to dpkg (the others are still printed); anything else is a failure.
    if rc not in (0, 1) or (rc == 1 and "no packages found matching" not in err):
        module.fail_json(msg=f"dpkg-query -W failed (rc {rc}): {err.strip() or out.strip()}")
    installed = parse_query(out)
    return {"changed": False, "installed": installed, "missing": unsatisfied(installed, wanted),
            "selections": parse_wants(out)}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
