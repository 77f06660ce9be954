#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module: hold or release many packages in one dpkg call (thin shell over
module_utils/dpkg.py, where dpkg's grammar is documented)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dpkg_holds
short_description: Hold or release many Debian packages in one dpkg call
description:
  - Reads the selections of every package of O(name) with one C(dpkg --get-selections) and
    writes the ones that differ with one C(dpkg --set-selections), where
    M(ansible.builtin.dpkg_selections) takes one package per call (a loop of 20 held driver
    packages is 20 module runs).
  - Refuses, before changing anything, to hold a package that dpkg does not know (not installed
    and not available), because dpkg would skip it with a warning and the package would stay
    unheld. Releasing (O(selection=install)) such a package needs nothing.
  - Names may carry an architecture (C(libnvidia-compute-550:amd64)); a bare name also matches
    the architecture-qualified name dpkg prints for Multi-Arch same packages.
version_added: "0.1.0"
author:
  - gpucluster contributors
options:
  name:
    description: Packages to hold or release.
    type: list
    elements: str
    required: true
  selection:
    description: C(hold) keeps apt from upgrading or removing the packages; C(install) releases them.
    type: str
    choices: [hold, install]
    default: hold
  admindir:
    description:
      - dpkg's database directory (C(dpkg --admindir)); unset, dpkg's own (C(/var/lib/dpkg)).
      - For a chroot or image tree, and for tests against a private database.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The selections of the named packages before and after, one C(name selection) line each.
  platform:
    platforms: debian
seealso:
  - module: ansible.builtin.dpkg_selections
"""

EXAMPLES = r"""
- name: Hold the driver packages
  gpucluster.cluster.dpkg_holds:
    name: [nvidia-driver-550, libnvidia-compute-550]
    selection: hold
"""

RETURN = r"""
changed_packages:
  description: The packages whose selection this run changed (or would change in check mode).
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver-550]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.cluster.plugins.module_utils.dpkg import (
    command,
    parse_selections,
    plan_selections,
    render,
    set_selections_input,
)

ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True},
    "selection": {"type": "str", "choices": ["hold", "install"], "default": "hold"},
    "admindir": {"type": "path"},
}


def run(module) -> dict:
    names = [n for n in module.params["name"] if n]
    selection = module.params["selection"]
    if not names:
        return {"changed": False, "changed_packages": []}
    dpkg = command(module.get_bin_path("dpkg", required=True), module.params.get("admindir"))
    rc, out, err = module.run_command([*dpkg, "--get-selections", *names])
    if rc != 0:
        module.fail_json(msg=f"dpkg --get-selections failed (rc {rc}): {err.strip() or out.strip()}")
    current = parse_selections(out)
    plan = plan_selections(names, selection, current)
    if plan["missing"]:
        module.fail_json(
            msg=(f"cannot hold {', '.join(plan['missing'])}: dpkg knows no such package (not installed, "
                 "not available), so dpkg --set-selections would skip it and it would stay unheld; "
                 "install it first or take it out of the list"),
            missing=plan["missing"])
    changes = plan["changes"]
    result = {"changed": bool(changes), "changed_packages": [c[0] for c in changes]}
    if module._diff:
        after = dict(current)
        after.update({c[0]: c[2] for c in changes})
        result["diff"] = {"before": render(current, names), "after": render(after, names),
                          "before_header": "dpkg selections", "after_header": "dpkg selections"}
    if changes and not module.check_mode:
        rc, out, err = module.run_command([*dpkg, "--set-selections"], data=set_selections_input(changes))
        if rc != 0:
            module.fail_json(msg=f"dpkg --set-selections failed (rc {rc}): {err.strip() or out.strip()}")
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
