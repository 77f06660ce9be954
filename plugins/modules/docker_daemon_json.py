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
    comments, single quotes, byte order mark) and how to fix it. A byte order mark is refused only
    for dockerd older than 23.0 (or an unknown version); 23.0 and later skip it, see O(dockerd_version).
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
  contributions_dir:
    description:
      - Directory of other roles' contributions (C(<name>.json), one JSON object each; debops-style
        dependent configuration). They are merged, in file-name order, before O(contributions) and
        O(settings). Two sources giving one key different values is refused, naming both.
      - Missing directory = no contributions.
    type: path
  contributions:
    description: Further named contributions (C(name), C(settings)), merged after O(contributions_dir).
    type: list
    elements: dict
    default: []
  managed_file:
    description:
      - Record of the keys gpucluster manages (what it wanted on the last run). A key in the record
        that this run does not want any more is removed from the file (if it still holds the value
        gpucluster wrote); every other key is the user's and is never touched.
      - Without it nothing is recorded and nothing is removed except O(remove_keys).
    type: path
  pending_file:
    description:
      - "Restart marker: written before the file changes, holding the changed keys and how to
        restore the previous file; the caller deletes it after dockerd's verified restart. A marker
        left by an interrupted run means the running dockerd is older than its configuration."
      - With O(state=rolled_back), the marker says what to restore.
    type: path
  check_keys:
    description:
      - Refuse a managed key that dockerd does not know or whose value has the wrong JSON type
        (the keys of O(dockerd_version), 20.10 to 28.5; the table is in module_utils/daemon_json.py).
        Unknown keys the user put there are only warned about.
    type: bool
    default: true
  dockerd_version:
    description:
      - The dockerd release that will read the file (e.g. C(20.10.24+dfsg1), C(28.3.2)). The keys dockerd
        accepts, and whether it skips a byte order mark, depend on the release.
      - Default is the C(dockerd --version) of the dockerd on PATH. Without either, only what every
        release from 20.10 to 28.5 refuses is refused, and the messages name the releases.
    type: str
  contribution_name:
    description:
      - Keep one role's contribution, O(contribution), as C(<contributions_dir>/<name>.json) in the same
        run (the docker role's C(tasks/contribute.yml)). The file is written (C(0644), its directory
        C(0755), both C(root)) with the text Ansible's C(to_nice_json) gives, plus a newline, and
        only when that text differs from the file's. An empty O(contribution) withdraws it (the
        file is deleted).
      - The merge then uses O(contribution) in place of the file's old text. Everything the merge
        refuses (a key dockerd does not know or with the wrong JSON type, two sources giving one key
        different values, a flag conflict, a missing runtime binary, C(dockerd --validate)) is
        refused before the contribution file or anything else is written.
      - Requires O(contributions_dir) and O(contribution).
    type: str
  contribution:
    description:
      - The daemon.json keys of O(contribution_name); C({}) withdraws them.
    type: dict
  report_unit:
    description:
      - After the merge, read this systemd unit's C(LoadState), C(UnitFileState) and C(ActiveState)
        (C(systemctl show)) and return them as RV(unit), so the role's enable-and-start step is
        skipped where the engine is enabled and running already (a step that finds nothing to do
        still costs a worker per node every run). Read-only.
    type: str
  only_if_unit_loaded:
    description:
      - Merge only where this systemd unit (C(docker.service)) is loaded, as
        C(systemctl show -p LoadState --value) reports it. Elsewhere (the engine is not installed
        yet) the merge is left to a later run, and only the O(contribution_name) file is written, after
        the keys of all sources are checked as the merge would check them (O(check_keys); one owner
        per key), RV(merged) and RV(restart_pending) are false and daemon.json is not read.
    type: str
  state:
    description:
      - C(merged) merges (the default). C(rolled_back) puts back the file (and record) the
        O(pending_file) marker names, after a failed restart; fails when there is no marker.
    type: str
    choices: [merged, rolled_back]
    default: merged
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

- name: Keep the rdma role's keys and merge them where the engine is installed
  gpucluster.cluster.docker_daemon_json:
    contributions_dir: /etc/gpucluster/docker.d
    contribution_name: rdma
    contribution:
      default-ulimits:
        memlock: {Name: memlock, Soft: -1, Hard: -1}
    only_if_unit_loaded: docker.service
    managed_file: /etc/gpucluster/daemon-json-managed.json
    pending_file: /run/gpucluster/docker-restart-pending.json

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
changed_keys:
  description: Top-level keys whose value this run changed (for a rollback, the keys it undid).
  returned: always
  type: list
  elements: str
removed_keys:
  description: Managed keys (dotted) taken out because no source wants them any more.
  returned: always
  type: list
  elements: str
restart_pending:
  description: Whether dockerd still has to be restarted to run this file (marker present).
    Always false where RV(merged) is false.
  returned: always
  type: bool
merged:
  description: Whether daemon.json was merged (false where O(only_if_unit_loaded) is not loaded).
  returned: always
  type: bool
unit:
  description: O(report_unit)'s C(LoadState), C(UnitFileState) and C(ActiveState), read after the merge.
  returned: when O(report_unit) is given and daemon.json was merged
  type: dict
  sample: {LoadState: loaded, UnitFileState: enabled, ActiveState: active}
contribution_file:
  description: The file of O(contribution_name).
  returned: when O(contribution_name) is given
  type: str
  sample: /etc/gpucluster/docker.d/rdma.json
contribution_changed:
  description: Whether the contribution file (or its directory) was, or in check mode would be, written or removed.
  returned: when O(contribution_name) is given
  type: bool
validation:
  description: How the new text was validated (C(dockerd --validate) or this module's checks only, and why).
  returned: always
  type: str
  sample: "module checks only: dockerd has no --validate (Docker < 23.0)"
"""

import functools
import glob
import json
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.cluster.plugins.module_utils.daemon_json import (
    DaemonJsonError,
    check_keys,
    conflicts,
    decode,
    dockerd_flags,
    environment_files,
    get_path,
    known_keys,
    load,
    merge_contributions,
    missing_runtimes,
    order_unit_files,
    own,
    render,
    server_version,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.file_write import (
    current_bytes,
    diff_entry,
    ensure_absent,
    ensure_directory,
    ensure_file,
    write_atomic,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.systemd import parse_show

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
    contributions_dir=dict(type="path"),
    contributions=dict(type="list", elements="dict", default=[]),
    managed_file=dict(type="path"),
    pending_file=dict(type="path"),
    check_keys=dict(type="bool", default=True),
    dockerd_version=dict(type="str"),
    contribution_name=dict(type="str"),
    contribution=dict(type="dict"),
    only_if_unit_loaded=dict(type="str"),
    report_unit=dict(type="str"),
    state=dict(type="str", choices=["merged", "rolled_back"], default="merged"),
)


def _read_text(module, path, version=None):
    """File text, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}", path=path)
    return decode(data, path, version)


def _dockerd_version(module):
    """O(dockerd_version), else the release of the dockerd binary on PATH (the one a restart runs:
    ``Docker version 20.10.24+dfsg1, build 297e128``), else None."""
    if module.params["dockerd_version"]:
        try:
            return server_version(module.params["dockerd_version"])
        except ValueError as exc:
            module.fail_json(msg=f"dockerd_version: {exc}")
    dockerd = module.get_bin_path("dockerd")
    if not dockerd:
        return None
    rc, out, _ = module.run_command([dockerd, "--version"])
    m = re.search(r"\bversion\s+([0-9][^\s,]*)", out or "")
    try:
        return server_version(m.group(1)) if rc == 0 and m else None
    except ValueError:
        return None


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


def _write_atomic(module, dest, text, mode):
    directory = os.path.dirname(dest) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    write_atomic(module, dest, text.encode("utf-8"), mode)


def _contributions(module, p, mine=None):
    """[(name, settings)]: the directory's files in name order, then ``contributions``, then ``settings``.
    ``mine`` (``_own_contribution``): its file counts with its new settings, or not at all when withdrawn."""
    out = []
    d = p["contributions_dir"]
    files = sorted(glob.glob(os.path.join(d, "*.json"))) if d and os.path.isdir(d) else []
    if mine is not None:
        files = sorted({f for f in files if f != mine["path"]} | ({mine["path"]} if mine["settings"] else set()))
    for f in files:
        if mine is not None and f == mine["path"]:
            out.append((f, mine["settings"]))
            continue
        try:
            cfg = load(_read_text(module, f) or "", f)
        except DaemonJsonError as exc:
            module.fail_json(msg=f"not writing {p['path']}: contribution {exc}", path=p["path"])
        out.append((f, cfg))
    for c in p["contributions"]:
        if not isinstance(c.get("settings"), dict) or not c.get("name"):
            module.fail_json(msg=f"contributions: each item needs 'name' and a dict 'settings', got {c!r}")
        out.append((c["name"], c["settings"]))
    if p["settings"]:
        out.append(("settings", p["settings"]))
    return out


def _read_pending(module, pending_file):
    if not pending_file:
        return None
    text = _read_text(module, pending_file)
    if text is None:
        return None
    try:
        pending = json.loads(text)
        pending["changed_keys"] = list(pending.get("changed_keys", []))
        return pending
    except (ValueError, AttributeError, TypeError):
        module.warn(f"{pending_file}: not a restart marker; treated as a restart owed with nothing to roll back")
        return dict(backup_file="", existed_before=True, managed_before=None, changed_keys=[])


def rollback(module):
    """Put back the daemon.json (and record) the marker names; the caller restarts dockerd."""
    p = module.params
    path = p["path"]
    pending = _read_pending(module, p["pending_file"]) if p["pending_file"] else None
    if pending is None:
        module.fail_json(msg=f"no restart marker at {p['pending_file']}: nothing to roll back", path=path)
    restored = "nothing (no backup recorded)"
    if not module.check_mode:
        backup = pending.get("backup_file") or ""
        if backup and os.path.exists(backup):
            with open(backup, "rb") as f:
                _write_atomic(module, path, f.read().decode("utf-8"), None)
            restored = backup
        elif not pending.get("existed_before", True) and os.path.exists(path):
            os.remove(path)
            restored = "no file (there was none before)"
        if p["managed_file"]:
            before = pending.get("managed_before")
            if before:
                _write_atomic(module, p["managed_file"], before, 0o644)
            elif os.path.exists(p["managed_file"]):
                os.remove(p["managed_file"])
    module.exit_json(changed=True, path=path, restored=restored, changed_keys=pending["changed_keys"],
                     removed_keys=[], restart_pending=True, backup_file=pending.get("backup_file") or "")


def _nice_json(settings):
    """The text Ansible's ``to_nice_json`` gives (json.dumps, indent 4, sorted keys), plus a newline:
    what the contribution files have always held, so a converged node's file compares equal."""
    return json.dumps(settings, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def _own_contribution(module, p):
    """O(contribution_name)'s file: ``{"path", "settings", "text"}`` (``text`` None: withdrawn), with
    ``before`` (the file's bytes, None when absent); None without O(contribution_name)."""
    name = p["contribution_name"]
    if name is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        module.fail_json(msg=f"contribution_name {name!r}: a role's name (letters, digits, '_', '.', '-'), "
                             "which names its file in contributions_dir")
    path = os.path.join(p["contributions_dir"], name + ".json")
    settings = p["contribution"] or {}
    return dict(path=path, settings=settings, text=_nice_json(settings) if settings else None,
                before=current_bytes(module, path))


def _contribution_diff(mine):
    return diff_entry(mine["path"], mine["before"], mine["text"] or "")


def _keep_contribution(module, mine):
    """Write (or delete) O(contribution_name)'s file (C(0644) C(root)), creating its directory
    (C(0755) C(root)) as the file task did; in check mode only says whether it would. -> changed."""
    changed = ensure_directory(module, os.path.dirname(mine["path"]), 0o755, "root", "root")
    if mine["text"] is None:
        return ensure_absent(module, mine["path"]) or changed
    file_changed = ensure_file(module, mine["path"], mine["text"], 0o644, "root", "root", current=mine["before"])
    return changed or file_changed


UNIT_STATES = ("LoadState", "UnitFileState", "ActiveState")


def _unit_states(module, unit, states=UNIT_STATES, note=""):
    """``systemctl show -p <state> ... <unit>`` as a dict: LoadState ``loaded``, ``not-found``,
    ``masked``...; UnitFileState ``enabled``, ``disabled``...; ActiveState ``active``, ``inactive``...
    ``note`` ends the failure's message."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        module.fail_json(msg=f"cannot read the state of {unit}: systemctl not found{note}")
    argv = [systemctl, "show"] + [a for state in states for a in ("-p", state)] + [unit]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed{note}: {(err or out).strip()}", rc=rc)
    return parse_show(out, states)


def _unit_load_state(module, unit):
    """The unit's LoadState (_unit_states), before anything is written."""
    return _unit_states(module, unit, ("LoadState",), " (nothing written)")["LoadState"]


def _keep_only(module, mine, sources, version):
    """The engine's unit is not loaded: check every source's keys as the merge will, keep the
    contribution file, leave daemon.json to the merge of a later run."""
    p = module.params
    what = mine["path"] if mine else "anything"
    if mine:
        try:
            desired = merge_contributions(sources)
        except ValueError as exc:
            module.fail_json(msg=f"not writing {what}: {exc}", path=mine["path"])
        bad = check_keys(desired, version=version) if p["check_keys"] else []
        if bad:
            module.fail_json(msg=f"not writing {what} (nothing changed): " + " ".join(b.message for b in bad),
                             path=mine["path"], invalid_keys=[b.key for b in bad])
    changed = _keep_contribution(module, mine) if mine else False
    result = dict(
        changed=changed, path=p["path"], config={}, backup_file="", dockerd_flags=[],
        validation=f"not merged: {p['only_if_unit_loaded']} is not loaded", changed_keys=[], removed_keys=[],
        restart_pending=False, merged=False,
    )
    if mine:
        result.update(contribution_file=mine["path"], contribution_changed=changed)
        if module._diff:
            result["diff"] = [_contribution_diff(mine)]
    module.exit_json(**result)


def run(module, which=None):
    """The module's work on ``module.params``; ends in exit_json / fail_json."""
    p = module.params
    path = p["path"]
    which = which or functools.partial(shutil.which, path=SYSTEMD_PATH)
    if p["state"] == "rolled_back":
        rollback(module)

    mine = _own_contribution(module, p)
    version = _dockerd_version(module)
    if p["only_if_unit_loaded"] and _unit_load_state(module, p["only_if_unit_loaded"]) != "loaded":
        _keep_only(module, mine, _contributions(module, p, mine), version)
    # What a refusal names: nothing is written before every check passed.
    what = f"{mine['path']} or {path}" if mine else path
    try:
        before_text = _read_text(module, path, version)
        existing = load(before_text or "", path, version)
    except DaemonJsonError as exc:
        module.fail_json(msg=str(exc), path=path, line=exc.lineno, column=exc.colno,
                         problems=[dict(x._asdict()) for x in exc.problems])
    before_text = before_text or ""
    sources = _contributions(module, p, mine)
    try:
        desired = merge_contributions(sources)
    except ValueError as exc:
        module.fail_json(msg=f"not writing {what}: {exc}", path=path)
    if p["check_keys"]:
        bad = check_keys(desired, version=version)
        if bad:
            module.fail_json(
                msg=f"not writing {what} (nothing changed): " + " ".join(b.message for b in bad),
                path=path, invalid_keys=[b.key for b in bad])
        known = known_keys(version)
        for b in check_keys(existing, [k for k in existing if k not in known and k not in desired], version=version):
            module.warn(f"{path} (a key not managed by gpucluster, left as it is): {b.message}")
    previous, managed_before_text = {}, None
    if p["managed_file"]:
        managed_before_text = _read_text(module, p["managed_file"])
        try:
            previous = json.loads(managed_before_text).get("managed", {}) if managed_before_text else {}
        except (ValueError, AttributeError):
            module.warn(f"{p['managed_file']} is not a gpucluster record; starting a new one (nothing removed)")
    plan = own(existing, desired, previous, p["remove_keys"])
    merged = plan.config
    for key in plan.kept:
        module.warn(f"{path}: '{key}' was set by gpucluster and is not wanted any more, but its value was "
                    "changed by hand since; left as it is (remove it by hand, or via remove_keys).")
    for key, old, new in plan.taken_over:
        module.warn(f"{path}: '{key}' was {json.dumps(old)} (not set by gpucluster), now {json.dumps(new)}; "
                    "the old file is kept in the backup.")

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
        module.fail_json(msg=f"not writing {what}:\n" + "\n".join(errors), path=path, errors=errors,
                         dockerd_flags=[dict(f._asdict()) for f in flags])

    content_changed = merged != existing
    after_text = render(merged) if content_changed else before_text
    validation = "unchanged, not validated"
    if content_changed:
        validation = _validate(module, path, after_text)

    # Every check passed: the contribution file first (as its copy task did), then daemon.json.
    mine_changed = _keep_contribution(module, mine) if mine else False
    backup_file = ""
    pending = _read_pending(module, p["pending_file"])
    if content_changed and not module.check_mode:
        existed = os.path.exists(path)
        if existed and (p["backup"] or p["pending_file"]):
            backup_file = module.backup_local(path)
        if p["pending_file"]:
            # Before the file changes: an interruption from here on leaves the marker, so the next
            # run restarts dockerd. A marker already there keeps the state dockerd still runs.
            if pending is None:
                pending = dict(backup_file=backup_file, existed_before=existed,
                               managed_before=managed_before_text, changed_keys=[])
            pending["changed_keys"] = list(dict.fromkeys(pending["changed_keys"] + plan.changed))
            _write_atomic(module, p["pending_file"], json.dumps(pending, indent=2) + "\n", 0o600)
        _write_atomic(module, path, after_text, None)

    changed = content_changed or mine_changed
    if os.path.exists(path):
        changed = module.set_mode_if_different(path, p["mode"], changed)
    if p["managed_file"]:
        record = json.dumps(dict(managed=desired, sources=[n for n, _ in sources]), indent=2,
                            sort_keys=True) + "\n"
        if record != (managed_before_text or ""):
            changed = True
            if not module.check_mode:
                _write_atomic(module, p["managed_file"], record, 0o644)

    result = dict(
        changed=changed, path=path, config=merged, backup_file=backup_file,
        dockerd_flags=[dict(f._asdict()) for f in flags], validation=validation,
        changed_keys=plan.changed, removed_keys=plan.removed,
        restart_pending=pending is not None or (module.check_mode and content_changed), merged=True,
    )
    if module._diff:
        result["diff"] = dict(before=before_text, after=after_text,
                              before_header=path, after_header=path)
    if mine:
        result.update(contribution_file=mine["path"], contribution_changed=mine_changed)
        if module._diff:
            result["diff"] = [_contribution_diff(mine), result["diff"]]
    if p["report_unit"]:
        result["unit"] = _unit_states(module, p["report_unit"])
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_by=dict(contribution_name=("contributions_dir", "contribution")),
                           required_together=[("contribution_name", "contribution")])
    run(module)


if __name__ == "__main__":
    main()
