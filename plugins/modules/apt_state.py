#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module: the node's apt sources and the age of its package lists, in one read (no
apt cache opened)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_state
short_description: The node's apt source files and how old its package lists are, in one read
description:
  - Returns the text of every file apt reads its sources from (RV(sources)) and the age of the
    package lists (RV(lists_age)), without opening the apt cache.
  - The files are the ones apt itself reads (C(Dir::Etc::sourcelist) and C(Dir::Etc::sourceparts)
    at their defaults), that is C(/etc/apt/sources.list), and in C(/etc/apt/sources.list.d) the C(*.list)
    and C(*.sources) files whose names apt accepts (letters, digits, C(_), C(-) and C(.) only; apt
    ignores the others). A link is followed, as apt does; a dangling one is left out.
  - The lists' age is read as M(ansible.builtin.apt) reads it for its C(cache_valid_time), from the
    modification time of C(/var/lib/apt/periodic/update-success-stamp) where that exists, else of
    C(/var/lib/apt/lists). So a stage can skip the apt module (which opens the whole apt cache to
    decide it has nothing to do, a third of a second per node) when its lists are younger than its
    own cache_valid_time and its sources did not change.
  - Read-only; the same in check mode.
version_added: "0.1.0"
options:
  root:
    description:
      - Directory the paths above are read under (a chroot or a test tree); the keys of RV(sources)
        stay the node's paths.
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpucluster.cluster.debian_reader
"""

EXAMPLES = r"""
- name: Read the node's apt sources and the age of its package lists
  gpucluster.cluster.apt_state:
  register: __apt

- name: Refresh the apt cache when the lists are older than an hour
  when: __apt.lists_age is none or __apt.lists_age >= 3600
  ansible.builtin.apt:
    update_cache: true
"""

RETURN = r"""
sources:
  description: Path on the node to text, for every file apt reads its sources from.
  returned: always
  type: dict
  sample: {/etc/apt/sources.list.d/debian.sources: "Types: deb\nURIs: http://deb.debian.org/debian\n..."}
lists_age:
  description:
    - Seconds since the package lists were last refreshed (see the description); null when the node
      has no lists.
  returned: always
  type: int
  sample: 412
"""

import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

SOURCE_LIST = "etc/apt/sources.list"
SOURCE_PARTS = "etc/apt/sources.list.d"
# apt-pkg/contrib/fileutl.cc, GetListOfFilesInDir: a name with any other character is skipped.
PART_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.(?:list|sources)$")
# ansible.builtin.apt's own order (get_updated_cache_time).
LISTS_STAMPS = ("var/lib/apt/periodic/update-success-stamp", "var/lib/apt/lists")

ARGUMENT_SPEC = {"root": {"type": "path", "default": "/"}}


def source_files(root: str) -> list[str]:
    """The node paths (``/etc/apt/...``) of the source files apt reads under ``root``, sorted."""
    found = []
    if os.path.isfile(os.path.join(root, SOURCE_LIST)):
        found.append("/" + SOURCE_LIST)
    parts = os.path.join(root, SOURCE_PARTS)
    try:
        names = os.listdir(parts)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    found.extend(f"/{SOURCE_PARTS}/{n}" for n in sorted(names)
                 if PART_NAME.match(n) and os.path.isfile(os.path.join(parts, n)))
    return found


def lists_age(root: str, now: float) -> int | None:
    for rel in LISTS_STAMPS:
        try:
            return max(0, int(now - os.stat(os.path.join(root, rel)).st_mtime))
        except FileNotFoundError:
            continue
    return None


def run(module) -> dict:
    root = module.params["root"]
    sources = {}
    for path in source_files(root):
        try:
            with open(os.path.join(root, path.lstrip("/")), encoding="utf-8", errors="replace") as f:
                sources[path] = f.read()
        except OSError as exc:
            module.fail_json(msg=f"cannot read the apt source file {path}: {exc.strerror}")
    return {"changed": False, "sources": sources, "lists_age": lists_age(root, time.time())}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
