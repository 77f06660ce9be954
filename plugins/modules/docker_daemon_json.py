#!/usr/bin/python
# Copyright: gpucluster contributors
# Apache-2.0
"""Ansible module: merge settings into /etc/docker/daemon.json (thin shell over
module_utils/daemon_json.py, where the rules and their sources are documented)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_daemon_json
short_description: Merge settings into Docker's daemon.json, never overwrite it
description:
  - Reads C(/etc/docker/daemon.json), merges O(settings) into it and removes O(remove_keys); every
    key the user or another package put there is kept. Objects merge recursively, lists become the
    union (existing items first), scalars from O(settings) win.
  - Refuses a file that is not valid JSON and writes nothing; the message names the file, line and
    column and what is wrong (two objects in one file, typographic quotes, trailing commas,
    comments, single quotes, byte order mark) and how to fix it.
  - Before writing, reads the C(ExecStart) of C(docker.service) and its drop-ins (and the
    C(EnvironmentFile) they name) and fails if the result would set a key that dockerd also gets as
    a command-line flag there; dockerd refuses to start in that case ("the following directives are
    specified both as a flag and in the configuration file"). Such a conflict on a key the file
    already had and this run does not change is only a warning (see O(fail_on_existing_conflicts)).
  - With O(check_runtimes), fails if C(default-runtime) or a C(runtimes.<name>.path) points to a
    binary that is not on dockerd's PATH (every C(docker run) would fail), or if C(default-runtime)
    names a runtime that is not defined (dockerd would not start).
  - Writes atomically (temporary file in the same directory, then rename) and only when the merged
    settings differ from the file's; a file that already holds them is left byte-for-byte alone, so
    reruns report no change.
  - "Validation by dockerd itself: C(dockerd --validate --config-file) exists only in Docker >= 23.0
    (Debian 12 ships docker.io 20.10). When C(dockerd --help) lists C(--validate), the merged text is
    validated with it before it is moved into place and a rejection fails the task with dockerd's
    message. Otherwise only the checks of this module run (JSON syntax, flag conflicts, runtime
    binaries); the RV(validation) return value says which happened."
version_added: "0.1.0"
author:
  - gpucluster contributors
options:
  path:
    description: The daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  settings:
    description: Settings to merge into the file (daemon.json keys, e.g. C(runtimes), C(default-runtime)).
    type: dict
    default: {}
  remove_keys:
    description:
      - Keys to remove after the merge, as dotted paths (C(runtimes.nvidia), C(default-runtime)).
      - Runtime names that contain dots are matched longest-first. An object that a removal leaves
        empty is removed as well.
    type: list
    elements: str
    default: []
  backup:
    description: Keep a timestamped copy (C(<path>.<pid>.<date>@<time>~)) of the old file before changing it.
    type: bool
    default: true
  unit_paths:
    description:
      - Unit files, drop-in files and drop-in directories (all C(*.conf) inside) to read the dockerd
        command line from. Missing paths are skipped. Of several C(docker.service) files only the
        effective one counts (C(/etc) over C(/run) over C(/lib)); drop-ins apply in file-name order.
    type: list
    elements: path
    default:
      - /lib/systemd/system/docker.service
      - /etc/systemd/system/docker.service
      - /etc/systemd/system/docker.service.d
  check_runtimes:
    description: Fail if a runtime the configuration uses has no executable (see description).
    type: bool
    default: true
  fail_on_existing_conflicts:
    description:
      - Also fail when a key the file already had, unchanged by this run, conflicts with a dockerd flag.
        By default that is a warning, since the conflict predates this run.
    type: bool
    default: false
  mode:
    description: Permissions of the file (octal string like C('0644') or symbolic).
    type: raw
    default: '0644'
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The file's text before and after, as RV(diff).
  platform:
    platforms: posix
notes:
  - Supports check mode and diff mode. The dockerd service is not restarted; notify a handler on change.
  - Docker >= 18.09 merges C(--add-runtime) and C(runtimes) (moby/moby#37871); a runtime of the same name
    in both places is still reported as a conflict, since one definition silently shadows the other.
requirements:
  - Python >= 3.8 on the managed node.
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime, keep everything else in daemon.json
  gpucluster.cluster.docker_daemon_json:
    settings:
      runtimes:
        nvidia:
          path: /usr/bin/nvidia-container-runtime
          runtimeArgs: []
  notify: Restart Docker

- name: Make it the default runtime as well
  gpucluster.cluster.docker_daemon_json:
    settings:
      default-runtime: nvidia
  notify: Restart Docker

- name: Roll back (toolkit uninstalled)
  gpucluster.cluster.docker_daemon_json:
    remove_keys:
      - default-runtime
      - runtimes.nvidia
  notify: Restart Docker
"""

RETURN = r"""
changed:
  description: Whether the file content (or its mode) changed, or would change in check mode.
  returned: always
  type: bool
path:
  description: The file.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
config:
  description: The merged configuration (what the file holds after the run).
  returned: always
  type: dict
  sample:
    hosts: ["unix:///var/run/docker.sock"]
    runtimes: {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}
backup_file:
  description:
    - The backup of the old file.
    - Empty when none was made (no change, no old file, check mode, O(backup=false)).
  returned: always
  type: str
  sample: /etc/docker/daemon.json.2345.2026-01-31@12:00:00~
diff:
  description: Old and new file text.
  returned: in diff mode
  type: dict
  sample: {"before": "{}\n", "after": "{\n  \"default-runtime\": \"nvidia\"\n}\n"}
dockerd_flags:
  description: The dockerd flags found in the units (name, daemon.json key, value, file, flag as written).
  returned: always
  type: list
  elements: dict
  sample:
    - {"name": "host", "key": "hosts", "value": "fd://", "source": "/lib/systemd/system/docker.service",
       "text": "-H fd://"}
validation:
  description: How the new text was validated (C(dockerd --validate) or this module's checks only, and why).
  returned: always
  type: str
  sample: "module checks only: dockerd has no --validate (Docker < 23.0)"
"""

import functools
import glob
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.cluster.plugins.module_utils.daemon_json import (
    DaemonJsonError,
    conflicts,
    decode,
    dockerd_flags,
    environment_files,
    get_path,
    load,
    merge,
    missing_runtimes,
    order_unit_files,
    render,
)

# PATH systemd gives system services (systemd.exec(5), "Environment variables in spawned processes").
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

ARGUMENT_SPEC = dict(
    path=dict(type="path", default="/etc/docker/daemon.json"),
    settings=dict(type="dict", default={}),
    remove_keys=dict(type="list", elements="str", default=[]),
    backup=dict(type="bool", default=True),
    unit_paths=dict(type="list", elements="path", default=[
        "/lib/systemd/system/docker.service",
        "/etc/systemd/system/docker.service",
        "/etc/systemd/system/docker.service.d",
    ]),
    check_runtimes=dict(type="bool", default=True),
    fail_on_existing_conflicts=dict(type="bool", default=False),
    mode=dict(type="raw", default="0644"),
)


def _read_text(module, path):
    """File text, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}", path=path)
    return decode(data, path)


def _unit_texts(module, unit_paths):
    files = []
    for p in unit_paths:
        if os.path.isdir(p):
            files.extend(sorted(glob.glob(os.path.join(p, "*.conf"))))
        elif os.path.isfile(p):
            files.append(p)
    units = []
    for p in order_unit_files(files):
        try:
            units.append((p, _read_text(module, p) or ""))
        except DaemonJsonError as exc:
            module.warn(f"skipping {p}: {exc.problems[0].message}")
    env = {}
    for p in environment_files(units):
        try:
            text = _read_text(module, p)
        except DaemonJsonError as exc:
            module.warn(f"skipping {p}: {exc.problems[0].message}")
            continue
        if text is not None:
            env[p] = text
    return units, env


def _validate(module, path, text):
    """Run ``dockerd --validate`` on ``text`` where dockerd has it; fail on rejection."""
    dockerd = module.get_bin_path("dockerd")
    if not dockerd:
        return "module checks only: dockerd not found"
    rc, out, err = module.run_command([dockerd, "--help"])
    if "--validate" not in (out or "") + (err or ""):
        return "module checks only: dockerd has no --validate (Docker < 23.0)"
    fd, tmp = tempfile.mkstemp(prefix="daemon.json.", dir=module.tmpdir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        rc, out, err = module.run_command([dockerd, "--validate", "--config-file", tmp])
    finally:
        os.remove(tmp)
    if rc != 0:
        module.fail_json(
            msg=f"dockerd --validate rejected the merged {path} (nothing written): "
                f"{(err or out).strip().replace(tmp, path)}",
            path=path, rc=rc,
        )
    return "dockerd --validate"


def run(module, which=None):
    """The module's work on ``module.params``; ends in exit_json / fail_json."""
    p = module.params
    path = p["path"]
    which = which or functools.partial(shutil.which, path=SYSTEMD_PATH)

    try:
        before_text = _read_text(module, path)
        existing = load(before_text or "", path)
    except DaemonJsonError as exc:
        module.fail_json(msg=str(exc), path=path, line=exc.lineno, column=exc.colno,
                         problems=[dict(x._asdict()) for x in exc.problems])
    before_text = before_text or ""
    merged = merge(existing, p["settings"], p["remove_keys"])

    units, env = _unit_texts(module, p["unit_paths"])
    flags = dockerd_flags(units, env)
    errors = []
    for c in conflicts(merged, flags):
        before = get_path(existing, c.path)
        untouched = before is not None and before == get_path(merged, c.path)
        if untouched and not p["fail_on_existing_conflicts"]:
            module.warn(f"{path} already had this before the run: {c.message}")
        else:
            errors.append(c.message)
    if p["check_runtimes"]:
        for m in missing_runtimes(merged, which, flags):
            if m.source == "daemon.json" or m.default:
                errors.append(m.message)
            else:
                module.warn(m.message)
    if errors:
        module.fail_json(msg=f"not writing {path}:\n" + "\n".join(errors), path=path, errors=errors,
                         dockerd_flags=[dict(f._asdict()) for f in flags])

    content_changed = merged != existing
    after_text = render(merged) if content_changed else before_text
    validation = "unchanged, not validated"
    if content_changed:
        validation = _validate(module, path, after_text)

    backup_file = ""
    if content_changed and not module.check_mode:
        if p["backup"] and os.path.exists(path):
            backup_file = module.backup_local(path)
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        fd, tmp = tempfile.mkstemp(prefix=".daemon.json.", dir=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(after_text.encode("utf-8"))
        module.atomic_move(tmp, path)

    changed = content_changed
    if os.path.exists(path):
        changed = module.set_mode_if_different(path, p["mode"], changed)

    result = dict(
        changed=changed, path=path, config=merged, backup_file=backup_file,
        dockerd_flags=[dict(f._asdict()) for f in flags], validation=validation,
    )
    if module._diff:
        result["diff"] = dict(before=before_text, after=after_text,
                              before_header=path, after_header=path)
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run(module)


if __name__ == "__main__":
    main()
