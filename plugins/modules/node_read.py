#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module: a stage's read-only look at its node (commands, files, stats, globs, tools) in
one module run, instead of one task per read."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_read
short_description: Read several things of a node in one module run (commands, files, stats, globs, tools)
description:
  - Runs a stage's read-only probes of its node in one module run and returns each under the name
    or path it was asked by. Every task costs the controller a worker and a result whatever it
    does, so a stage that reads five things before it decides pays for five tasks; with this
    module it pays for one.
  - Commands run without a shell, one after the other, in the order given, and never fail the
    task; their exit status is part of the result (a missing executable is exit status 127).
  - Parsing stays with the readers (filters and module_utils); this module returns raw text.
  - Read-only; the same in check mode.
version_added: "0.1.0"
options:
  commands:
    description:
      - Name to command. A command is an argv list (C([ofed_info, -s])), or a list of argv
        lists, alternatives of which the first whose executable the node has runs
        (C([[journalctl, -k, -b], [dmesg]])).
    type: dict
    default: {}
  files:
    description: Files to read whole, as text (UTF-8; undecodable bytes replaced).
    type: list
    elements: path
    default: []
  stat:
    description:
      - Paths to stat. Symbolic links are followed (M(ansible.builtin.stat) follows none by default);
        RV(stat.islnk) says whether the path itself is a link, and a dangling link reads C(exists=false),
        C(islnk=true).
      - RV(stat.lexists) is whether anything is at the path, a link counting whether or not its target
        exists (Python's C(os.path.lexists), as C(exists) of M(ansible.builtin.stat) without C(follow)
        reads it). It is the test for a path that is taken, where a dangling link is in the way as much
        as a file is.
    type: list
    elements: path
    default: []
  glob:
    description: Shell patterns to expand (Python's C(glob)), for example C(/sys/kernel/mm/hugepages/hugepages-*).
    type: list
    elements: str
    default: []
  find:
    description:
      - Shell patterns of which to list the regular files only (no directories, no symbolic links,
        as M(ansible.builtin.find) with its default C(file_type=file) lists them), for example the
        units a stage wrote and may have to remove, where a link (a user's C(/dev/null) mask) is not one of them.
    type: list
    elements: str
    default: []
  which:
    description: Executables to look for in the node's C(PATH) and the system directories.
    type: list
    elements: str
    default: []
  realpath:
    description: Paths to resolve through every symbolic link (C(readlink -e)).
    type: list
    elements: path
    default: []
  max_bytes:
    description: Read at most this many bytes of each file of O(files) and of each command's output.
    type: int
    default: 16777216
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - gpucluster contributors
"""

EXAMPLES = r"""
- name: Read what GPUDirect RDMA depends on
  gpucluster.cluster.node_read:
    commands:
      ofed_info: [ofed_info, -s]
      modules: [cat, /proc/modules]
    stat: [/sys/module/ib_core]
  register: __gpudirect_read

- name: Decide
  ansible.builtin.set_fact:
    ofed: "{{ __gpudirect_read.commands.ofed_info.stdout }}"
    ib_core: "{{ __gpudirect_read.stat['/sys/module/ib_core'].exists }}"
"""

RETURN = r"""
commands:
  description:
    - Name to C(rc), C(stdout), C(stderr), C(stdout_lines) and C(cmd) (the argv that ran, or the
      first alternative where none could).
  returned: always
  type: dict
  sample:
    ofed_info: {rc: 0, stdout: "MLNX_OFED_LINUX-5.8-3.0.7.0", stderr: "",
                stdout_lines: ["MLNX_OFED_LINUX-5.8-3.0.7.0"], cmd: [ofed_info, -s]}
files:
  description: Path to the file's text, or null where it does not exist or cannot be read.
  returned: always
  type: dict
  sample: {/proc/meminfo: "MemTotal: 16318496 kB\n"}
stat:
  description:
    - Path to C(exists) and C(lexists), and where the path exists (links followed) C(isdir), C(isreg),
      C(islnk), C(size), C(mode) (octal, as M(ansible.builtin.stat) prints it), C(uid) and C(gid).
    - C(exists) follows links; C(lexists) is true where the path or a link at it exists, dangling or
      not (C(os.path.lexists)). Every entry has both.
    - "A dangling link is C({exists: false, lexists: true, islnk: true}); a missing path is
      C({exists: false, lexists: false})."
  returned: always
  type: dict
  sample: {/sys/module/ib_core: {exists: true, lexists: true, isdir: true, isreg: false, islnk: false, size: 0,
                                 mode: "0755", uid: 0, gid: 0}}
glob:
  description: Pattern to its sorted matches.
  returned: always
  type: dict
  sample: {"/sys/kernel/mm/hugepages/hugepages-*": [/sys/kernel/mm/hugepages/hugepages-1048576kB]}
find:
  description: Pattern to its sorted regular files.
  returned: always
  type: dict
  sample: {"/etc/systemd/network/70-gpucluster-*.network": [/etc/systemd/network/70-gpucluster-eth1.network]}
which:
  description: Executable to its path, or null where the node has none.
  returned: always
  type: dict
  sample: {lspci: /usr/bin/lspci, dcgmi: null}
realpath:
  description: Path to the path it resolves to, or null where it (or a link on the way) does not exist.
  returned: always
  type: dict
  sample: {/sys/class/net/eth1/device: /sys/devices/pci0000:00/0000:00:05.0}
"""

import glob as globmod
import os
import stat as statmod

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = {
    "commands": {"type": "dict", "default": {}},
    "files": {"type": "list", "elements": "path", "default": []},
    "stat": {"type": "list", "elements": "path", "default": []},
    "glob": {"type": "list", "elements": "str", "default": []},
    "find": {"type": "list", "elements": "str", "default": []},
    "which": {"type": "list", "elements": "str", "default": []},
    "realpath": {"type": "list", "elements": "path", "default": []},
    "max_bytes": {"type": "int", "default": 16 * 1024 * 1024},
}


def alternatives(name: str, spec) -> list[list[str]]:
    """The argv lists of one O(commands) entry: one argv, or a list of alternatives."""
    if isinstance(spec, list) and spec and all(isinstance(a, list) for a in spec):
        alts = spec
    elif isinstance(spec, list) and spec and all(isinstance(a, (str, int, float)) for a in spec):
        alts = [spec]
    else:
        raise ValueError(
            f"commands.{name} is {spec!r}: give an argv list ([ofed_info, -s]) or a list of argv lists "
            "([[journalctl, -k], [dmesg]]), not a shell string"
        )
    for argv in alts:
        if not argv or not all(isinstance(a, (str, int, float)) for a in argv):
            raise ValueError(f"commands.{name}: {argv!r} is not an argv list of strings")
    return [[str(a) for a in argv] for argv in alts]


def _text(data: bytes, limit: int) -> str:
    """A command's output (bytes: run_command with encoding=None) as text, cut at ``limit`` bytes."""
    return data[:limit].decode("utf-8", errors="replace")


def run_command(module, name: str, spec, limit: int) -> dict:
    alts = alternatives(name, spec)
    for argv in alts:
        exe = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0])
        if exe and os.access(exe, os.X_OK):
            rc, out, err = module.run_command([exe, *argv[1:]], encoding=None)
            stdout = _text(out, limit)
            return {"rc": rc, "stdout": stdout.rstrip("\n"), "stderr": _text(err, limit).rstrip("\n"),
                    "stdout_lines": stdout.splitlines(), "cmd": argv}
    return {"rc": 127, "stdout": "", "stderr": f"{alts[0][0]}: command not found", "stdout_lines": [],
            "cmd": alts[0]}


def read_file(path: str, limit: int):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def stat_path(path: str) -> dict:
    """``exists`` follows links; ``lexists`` is os.path.lexists: the path or a link at it, dangling or not."""
    try:
        islnk = statmod.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return {"exists": False, "lexists": False}
    try:
        st = os.stat(path)
    except OSError:  # a dangling link
        return {"exists": False, "lexists": True, "islnk": islnk}
    return {"exists": True, "lexists": True, "isdir": statmod.S_ISDIR(st.st_mode),
            "isreg": statmod.S_ISREG(st.st_mode), "islnk": islnk, "size": st.st_size,
            "mode": f"{statmod.S_IMODE(st.st_mode):04o}", "uid": st.st_uid, "gid": st.st_gid}


def regular_files(pattern: str) -> list[str]:
    out = []
    for path in sorted(globmod.glob(pattern)):
        try:
            if statmod.S_ISREG(os.lstat(path).st_mode):
                out.append(path)
        except OSError:
            pass
    return out


def resolve(path: str):
    real = os.path.realpath(path)
    return real if os.path.exists(real) else None


def run(module) -> dict:
    p = module.params
    limit = p["max_bytes"]
    try:
        for name, spec in p["commands"].items():
            alternatives(name, spec)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    return {
        "changed": False,
        "which": {name: module.get_bin_path(name) for name in p["which"]},
        "stat": {path: stat_path(path) for path in p["stat"]},
        "glob": {pattern: sorted(globmod.glob(pattern)) for pattern in p["glob"]},
        "find": {pattern: regular_files(pattern) for pattern in p["find"]},
        "realpath": {path: resolve(path) for path in p["realpath"]},
        "files": {path: read_file(path, limit) for path in p["files"]},
        "commands": {name: run_command(module, name, spec, limit) for name, spec in p["commands"].items()},
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
