#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module: several small files and directories of one stage in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_set
short_description: Write several small files and directories in one module run
description:
  - Brings every entry of O(files) to its wanted state in one module run, in the order given
    (a directory before the files in it) - what a loop of M(ansible.builtin.file),
    M(ansible.builtin.copy) or M(ansible.builtin.template) tasks does with one module run (one
    SSH round trip) per item.
  - A file is written only when its content differs, to a temporary file in the same directory
    and then renamed over the old one (atomic); owner, group and mode are set where they differ.
    A directory is created with its missing parents, each with the entry's owner, group and mode.
    An C(absent) entry's file or link is removed where it is there.
  - Render templates on the controller into O(files[].content) with
    C(lookup('ansible.builtin.template', ...)).
  - Refuses the whole set before changing anything when an entry's path is relative, a file's
    path is an existing directory or a directory's path an existing file, a file is given both
    O(files[].content) and O(files[].secret_content), or an C(absent) entry's path is a directory
    or is given content.
version_added: "0.1.0"
author:
  - gpucluster contributors
options:
  files:
    description: The files and directories, in the order they are brought to their state.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      state:
        description:
          - C(file) writes O(files[].content); C(directory) makes the directory; C(absent) removes the
            file or link (not a directory).
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description: The file's whole content (C(state=file)).
        type: str
        default: ""
      secret_content:
        description:
          - The whole content of a file that is a secret (a private key), instead of O(files[].content).
          - Never shown, so the task needs no C(no_log) that would hide the other entries' results and
            refusals too - masked in the module's logged arguments and in its output, and left out of the diff.
        type: str
      mode:
        description: Permissions, as for M(ansible.builtin.file) (C("0644"), C(u=rw,g=r,o=r)).
        type: raw
      owner:
        description: Owner name or uid.
        type: str
      group:
        description: Group name or gid.
        type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: One diff per file whose content changes; directories report their creation, removed files their removal.
  platform:
    platforms: posix
seealso:
  - module: ansible.builtin.copy
  - module: ansible.builtin.file
"""

EXAMPLES = r"""
- name: Write the runtime files
  gpucluster.cluster.file_set:
    files:
      - {path: /etc/gpucluster, state: directory, owner: root, group: root, mode: "0755"}
      - path: /etc/gpucluster/runtime.env
        content: "{{ lookup('ansible.builtin.template', 'runtime.env.j2') }}"
        owner: root
        group: root
        mode: "0644"
"""

RETURN = r"""
changed_paths:
  description: The paths this run created, wrote, changed the attributes of or removed (or would, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/etc/gpucluster/runtime.env]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.cluster.plugins.module_utils.file_write import (
    ensure_absent,
    ensure_directory,
    ensure_file,
)

ARGUMENT_SPEC = {
    "files": {
        "type": "list", "elements": "dict", "required": True,
        "options": {
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["file", "directory", "absent"], "default": "file"},
            "content": {"type": "str", "default": "", "no_log": False},
            "secret_content": {"type": "str", "no_log": True},
            "mode": {"type": "raw"},
            "owner": {"type": "str"},
            "group": {"type": "str"},
        },
    },
}


def problems(entries) -> list[str]:
    """What makes the set impossible, before anything is changed."""
    out = []
    for e in entries:
        path = e["path"]
        if not os.path.isabs(path):
            out.append(f"{path}: give an absolute path")
        elif e["state"] == "file" and os.path.isdir(path):
            out.append(f"{path}: is a directory, not a file")
        elif e["state"] == "directory" and os.path.lexists(path) and not os.path.isdir(path):
            out.append(f"{path}: exists and is not a directory")
        elif e["state"] == "absent" and os.path.isdir(path) and not os.path.islink(path):
            out.append(f"{path}: is a directory; state=absent removes a file or a link")
        elif e["state"] == "absent" and (e["content"] or e["secret_content"] is not None):
            out.append(f"{path}: give no content for state=absent")
        elif e["secret_content"] is not None and e["content"]:
            out.append(f"{path}: give content or secret_content, not both")
    return out


def ensure_entry(module, entry, diffs) -> bool:
    """Bring one entry to its state (module_utils/file_write.py) -> changed."""
    if entry["state"] == "directory":
        return ensure_directory(module, entry["path"], entry["mode"], entry["owner"], entry["group"], diffs)
    if entry["state"] == "absent":
        return ensure_absent(module, entry["path"], diffs)
    secret = entry["secret_content"] is not None
    content = entry["secret_content"] if secret else entry["content"]
    return ensure_file(module, entry["path"], content, entry["mode"], entry["owner"], entry["group"],
                       secret=secret, diffs=diffs)


def run(module) -> dict:
    entries = module.params["files"]
    found = problems(entries)
    if found:
        module.fail_json(msg="nothing was changed: " + "; ".join(found))
    changed_paths, diffs = [], []
    for entry in entries:
        if ensure_entry(module, entry, diffs):
            changed_paths.append(entry["path"])
    result = {"changed": bool(changed_paths), "changed_paths": changed_paths}
    if module._diff:
        result["diff"] = diffs
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
