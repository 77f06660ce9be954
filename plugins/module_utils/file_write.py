"""Writing a small file or a directory on the node as ansible.builtin.copy and ansible.builtin.file
do, for the modules that write files (file_set, docker_daemon_json's contribution file).

A file is written only when its bytes differ from the wanted ones, to a temporary file in the same
directory that is then renamed over the old one (``AnsibleModule.atomic_move``); owner, group and
mode are set where they differ (``set_fs_attributes_if_different``). A directory is made with its
missing parents, each given the same owner, group and mode. In check mode nothing is written and
the result says whether it would be. The calls take the module (``AnsibleModule``) for its check
mode, diff mode and attribute setters.
"""

from __future__ import annotations

import os
import tempfile

# ``current`` not given: ensure_file reads the file itself.
UNREAD = object()


def file_args(module, path, mode=None, owner=None, group=None) -> dict:
    """The attributes ``set_fs_attributes_if_different`` sets on ``path`` (None: left as it is)."""
    return module.load_file_common_arguments({"path": path, "mode": mode, "owner": owner, "group": group})


def current_bytes(module, path):
    """The file's bytes, or None where there is no file; an unreadable one fails the module."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}", path=path)


def diff_entry(path, before, after: str) -> dict:
    """One file's diff: ``before`` the old bytes (None: no file), ``after`` the new text."""
    return {"before_header": path, "after_header": path,
            "before": "" if before is None else before.decode("utf-8", "replace"), "after": after}


def write_atomic(module, path, data: bytes, mode=None, keep_dest_attrs=True) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it over ``path``; where ``mode``
    (an int) is given, ``path`` has it afterwards and is never wider while it has its name.

    ``atomic_move`` gives a new file 0666 minus the umask once it is renamed and, with
    ``keep_dest_attrs``, carries an old file's owner, group and mode over. So the move runs under
    a umask that leaves at most ``mode`` (a private key is never world-readable, not even between
    the rename and the chmod), and ``mode`` is set after it. Owner and group are the caller's."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is None:
            module.atomic_move(tmp, path, unsafe_writes=False, keep_dest_attrs=keep_dest_attrs)
        else:
            os.chmod(tmp, mode)
            umask = os.umask(0o777 & ~mode)
            try:
                module.atomic_move(tmp, path, unsafe_writes=False, keep_dest_attrs=keep_dest_attrs)
            finally:
                os.umask(umask)
            os.chmod(path, mode)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _octal(mode):
    """``mode`` as an int where it is one or an octal string ("0600"), else None (symbolic modes
    are left to set_fs_attributes_if_different)."""
    if isinstance(mode, int):
        return mode
    if isinstance(mode, str) and mode and set(mode) <= set("01234567"):
        return int(mode, 8)
    return None


def _missing(path) -> list:
    """``path`` and its parents that do not exist, deepest first."""
    missing = []
    cur = path
    while cur and not os.path.lexists(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    return missing


def ensure_directory(module, path, mode=None, owner=None, group=None, diffs=None) -> bool:
    """Make the directory ``path`` with its missing parents, each with these attributes, or set them
    where it exists. A creation is added to ``diffs`` (where given) as ``absent`` -> ``directory``.
    -> changed (or would be, in check mode)."""
    path = path.rstrip("/") or "/"
    missing = _missing(path)
    changed = bool(missing)
    if missing and diffs is not None:
        diffs.append({"before_header": path, "after_header": path, "before": "absent\n", "after": "directory\n"})
    if module.check_mode:
        if not missing:
            changed = module.set_fs_attributes_if_different(file_args(module, path, mode, owner, group), False)
        return changed
    for d in reversed(missing):
        os.mkdir(d)
        module.set_fs_attributes_if_different(file_args(module, d, mode, owner, group), True)
    return module.set_fs_attributes_if_different(file_args(module, path, mode, owner, group), changed)


def ensure_file(module, path, content: str, mode=None, owner=None, group=None, *, secret=False, diffs=None,
                current=UNREAD) -> bool:
    """Make the file ``path`` hold ``content`` (UTF-8) with these attributes; its directory must exist.

    ``current``: the file's bytes as the caller already read them (None: no file); read here when
    not given. Where the content changes and the module runs in diff mode, its diff is added to
    ``diffs`` (where given), except for a ``secret``, whose old and new text are never shown.
    A new file without ``mode`` gets the umask's, as with ansible.builtin.copy.
    -> changed (or would be, in check mode)."""
    want = content.encode("utf-8", "surrogateescape")
    have = current_bytes(module, path) if current is UNREAD else current
    changed = have != want
    if changed and diffs is not None and module._diff and not secret:
        diffs.append(diff_entry(path, have, content))
    if module.check_mode:
        if have is None:
            return True
        return module.set_fs_attributes_if_different(file_args(module, path, mode, owner, group), changed)
    if changed:
        tmp_mode = None
        if have is None:
            # A new file has the wanted mode from the moment it has its name (a secret is never
            # readable by others); without one, the umask's, as with ansible.builtin.copy
            # (mkstemp makes it 0600).
            tmp_mode = _octal(mode)
            if tmp_mode is None:
                umask = os.umask(0)
                os.umask(umask)
                tmp_mode = 0o666 & ~umask
        # An old file's owner, group and mode carry over (then the wanted ones are set where
        # given, below).
        write_atomic(module, path, want, tmp_mode, keep_dest_attrs=have is not None)
    return module.set_fs_attributes_if_different(file_args(module, path, mode, owner, group), changed)


def ensure_absent(module, path, diffs=None) -> bool:
    """Remove the file or link ``path`` (a dangling link too) where it is there, as
    ansible.builtin.file ``state=absent`` does for them; a directory is the caller's to refuse.
    The removal is added to ``diffs`` (where given) as ``file``/``link`` -> ``absent``.
    -> changed (or would be, in check mode)."""
    if not os.path.lexists(path):
        return False
    if diffs is not None:
        kind = "link" if os.path.islink(path) else "file"
        diffs.append({"before_header": path, "after_header": path, "before": f"{kind}\n", "after": "absent\n"})
    if not module.check_mode:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            module.fail_json(msg=f"cannot remove {path}: {exc}", path=path)
    return True
