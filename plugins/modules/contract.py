#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module: publish what one stage set up on the node, in the node contract."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: contract
short_description: Publish what one stage set up under ansible_local.gpucluster
description:
  - The node contract is what every gpucluster stage set up on a node, read by the later stages,
    validate, the benchmark, the runtime switch and C(gpucluster launch --inventory) instead of
    re-deriving it. Each stage owns one file, O(path)/<stage>.json, and only that stage writes it.
  - One executable local fact, O(facts_path)/gpucluster.fact (a POSIX sh script this module
    writes), shows all the stages' files to M(ansible.builtin.setup) as one namespace,
    C(ansible_local.gpucluster.<stage>).
  - The stage's file is written only when its content differs (sorted JSON), to a temporary file
    renamed over the old one. O(state=absent) removes it. O(remove_facts) removes a stage's
    older local fact files from O(facts_path) (what it published before the contract existed).
  - Returns the whole contract after the change (every stage's file); the collection's action
    plugin of the same name puts it into this run's C(ansible_local.gpucluster) (the node's other
    local facts kept), so later tasks read what was just published without gathering facts again.
version_added: "0.1.0"
author:
  - gpucluster contributors
options:
  stage:
    description: The stage's name in the contract (lower case letters, digits, C(_)).
    type: str
    required: true
  data:
    description: What the stage publishes (JSON-serialisable), with O(state=present).
    type: dict
    default: {}
  state:
    description: C(present) writes the stage's file, C(absent) removes it.
    type: str
    choices: [present, absent]
    default: present
  remove_facts:
    description: Names of older local fact files in O(facts_path) that this stage replaced; removed.
    type: list
    elements: str
    default: []
  path:
    description: The contract's directory (one file per stage).
    type: path
    default: /etc/gpucluster/contract.d
  facts_path:
    description: Ansible's local facts directory, where C(gpucluster.fact) goes.
    type: path
    default: /etc/ansible/facts.d
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The stage file's JSON before and after.
  facts:
    support: full
  platform:
    platforms: posix
seealso:
  - module: ansible.builtin.setup
"""

EXAMPLES = r"""
- name: Publish the NCCL settings (ansible_local.gpucluster.nccl)
  gpucluster.cluster.contract:
    stage: nccl
    data:
      container_env: {NCCL_SOCKET_IFNAME: "=eth1"}
      data_interfaces: [eth1]
    remove_facts: [gpucluster_nccl.fact]
"""

RETURN = r"""
path:
  description: The stage's file.
  returned: always
  type: str
  sample: /etc/gpucluster/contract.d/nccl.json
contract:
  description:
    - The whole node contract after this run, one key per stage with its data - what
      C(ansible_local.gpucluster) reads after the next fact gathering.
  returned: always
  type: dict
  sample: {"nccl": {"data_interfaces": ["eth1"]}, "runtime": {"runtime": "lightcc"}}
fact_files:
  description:
    - The local fact files (C(*.fact)) in O(facts_path) after the change, which tells a later
      publish in the run whether an O(remove_facts) name is there at all.
  returned: when the module ran on the node
  type: list
  elements: str
  sample: [gpucluster.fact]
on_node:
  description:
    - Whether the module ran on the node (set by the action plugin). The first publish on a node in
      a run always does; a later one in the same run whose O(data) this run's
      C(ansible_local.gpucluster) already holds for O(stage) at the same O(path) and O(facts_path),
      with O(state=present) and none of O(remove_facts) among the fact files the module last
      listed there (RV(fact_files)), answers from it (C(changed=false)).
  returned: always
  type: bool
ansible_facts:
  description:
    - C(ansible_local) with C(gpucluster) set to O(contract), and C(gpucluster_contract_read), the
      run and paths the module last read the contract at (by the action plugin, when the module ran).
  returned: when the module ran on the node
  type: dict
  sample: {"ansible_local": {"gpucluster": {"runtime": {"runtime": "lightcc"}}},
           "gpucluster_contract_read": {"run": "41230:8812345", "path": /etc/gpucluster/contract.d,
                                        "facts_path": /etc/ansible/facts.d, "fact_files": [gpucluster.fact]}}
"""

import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = {
    "stage": {"type": "str", "required": True},
    "data": {"type": "dict", "default": {}},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "remove_facts": {"type": "list", "elements": "str", "default": []},
    "path": {"type": "path", "default": "/etc/gpucluster/contract.d"},
    "facts_path": {"type": "path", "default": "/etc/ansible/facts.d"},
}

STAGE = re.compile(r"^[a-z][a-z0-9_]*$")
# The script names the directory unquoted in a glob: only plain path characters.
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
FACT_FILE = "gpucluster.fact"


def fact_script(path: str) -> str:
    """The executable local fact: every stage's file as one JSON object (empty when none)."""
    return (
        "#!/bin/sh\n"
        "# gpucluster's node contract, written by the gpucluster.cluster.contract module (do not edit):\n"
        f"# what each stage set up, one JSON file per stage in {path}, written by that stage only,\n"
        "# shown to Ansible's setup as ansible_local.gpucluster.<stage>.\n"
        "printf '{'\n"
        "sep=''\n"
        f"for f in {path}/*.json; do\n"
        "  [ -f \"$f\" ] || continue\n"
        "  printf '%s\"%s\": ' \"$sep\" \"$(basename \"$f\" .json)\"\n"
        "  cat \"$f\"\n"
        "  sep=', '\n"
        "done\n"
        "printf '}\\n'\n"
    )


def render(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def read_contract(path: str) -> dict:
    """Every stage's file, as the fact script shows them."""
    out = {}
    if not os.path.isdir(path):
        return out
    for name in sorted(os.listdir(path)):
        if name.endswith(".json") and os.path.isfile(os.path.join(path, name)):
            with open(os.path.join(path, name), encoding="utf-8") as f:
                out[name[:-5]] = json.load(f)
    return out


def fact_files(facts_path: str, removed: list[str]) -> list[str]:
    """The local fact files in ``facts_path`` after this run's change (``removed``: the paths it
    removed; in check mode nothing was)."""
    gone = {os.path.basename(f) for f in removed}
    try:
        names = os.listdir(facts_path)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith(".fact") and n not in gone)


def problems(params) -> list[str]:
    out = []
    if not STAGE.match(params["stage"]):
        out.append(f"stage {params['stage']!r}: use lower case letters, digits and _ (e.g. nccl)")
    for key in ("path", "facts_path"):
        if not SAFE_PATH.match(params[key]):
            out.append(f"{key} {params[key]!r}: give an absolute path of letters, digits and ._/-")
    for name in params["remove_facts"]:
        if "/" in name or not name.endswith(".fact") or name == FACT_FILE:
            out.append(f"remove_facts {name!r}: give a file name in facts_path ending in .fact, not {FACT_FILE}")
    try:
        json.dumps(params["data"])
    except (TypeError, ValueError) as e:
        out.append(f"data: not JSON-serialisable ({e})")
    return out


def _read(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write(module, path: str, text: str, mode: int) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        module.atomic_move(tmp, path, unsafe_writes=False)
        os.chmod(path, mode)  # atomic_move gives a new file the umask's mode
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def run(module) -> dict:
    p = module.params
    found = problems(p)
    if found:
        module.fail_json(msg="nothing was changed: " + "; ".join(found))
    stage_file = os.path.join(p["path"], f"{p['stage']}.json")
    script_file = os.path.join(p["facts_path"], FACT_FILE)
    have = _read(stage_file)
    want = render(p["data"]) if p["state"] == "present" else None
    script = fact_script(p["path"])
    script_stale = _read(script_file) != script or (os.stat(script_file).st_mode & 0o777) != 0o755
    old_facts = [os.path.join(p["facts_path"], n) for n in p["remove_facts"]
                 if os.path.lexists(os.path.join(p["facts_path"], n))]
    changed = have != want or script_stale or bool(old_facts)
    if not module.check_mode:
        if want is not None and have != want:
            _write(module, stage_file, want, 0o644)
        elif want is None and have is not None:
            os.unlink(stage_file)
        if script_stale:
            _write(module, script_file, script, 0o755)
        for f in old_facts:
            os.unlink(f)
    contract = read_contract(p["path"])
    if module.check_mode:
        if want is None:
            contract.pop(p["stage"], None)
        else:
            contract[p["stage"]] = json.loads(want)
    result = {"changed": changed, "path": stage_file, "contract": contract,
              "fact_files": fact_files(p["facts_path"], [] if module.check_mode else old_facts)}
    if module._diff:
        result["diff"] = {"before_header": stage_file, "after_header": stage_file,
                          "before": have or "", "after": want or ""}
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
