"""module_utils/file_write.py on a real tree in tmp_path, through a real AnsibleModule: a new file
is written, the same bytes again change nothing, a mode alone is mended, check mode writes
nothing, a secret never reaches the diff, a directory is made with its parents."""

from __future__ import annotations

import os
import stat

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.module_utils import file_write as fw


def _module(check_mode=False, diff=False):
    with patch_module_args({"_ansible_check_mode": check_mode, "_ansible_diff": diff}):
        return AnsibleModule(argument_spec={}, supports_check_mode=True)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_file_is_written_with_its_mode_and_the_same_bytes_again_change_nothing(tmp_path):
    path = str(tmp_path / "f.json")
    diffs = []
    assert fw.ensure_file(_module(diff=True), path, "{}\n", "0640", diffs=diffs) is True
    assert (tmp_path / "f.json").read_bytes() == b"{}\n" and _mode(path) == 0o640
    assert diffs == [{"before_header": path, "after_header": path, "before": "", "after": "{}\n"}]
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temporary file left
    written = os.stat(path).st_mtime_ns
    diffs = []
    assert fw.ensure_file(_module(diff=True), path, "{}\n", "0640", diffs=diffs) is False
    assert diffs == [] and os.stat(path).st_mtime_ns == written


def test_new_content_replaces_the_file_and_its_diff_shows_both(tmp_path):
    path = tmp_path / "f"
    path.write_text("old\n")
    path.chmod(0o600)
    diffs = []
    assert fw.ensure_file(_module(diff=True), str(path), "new\n", diffs=diffs) is True
    assert path.read_text() == "new\n" and _mode(path) == 0o600  # no mode given: the old one carries over
    assert diffs == [{"before_header": str(path), "after_header": str(path), "before": "old\n", "after": "new\n"}]


def test_a_mode_alone_is_a_change_and_the_content_is_not_rewritten(tmp_path):
    path = tmp_path / "f"
    path.write_text("same\n")
    path.chmod(0o600)
    inode = path.stat().st_ino
    diffs = []
    assert fw.ensure_file(_module(diff=True), str(path), "same\n", "0644", diffs=diffs) is True
    assert _mode(path) == 0o644 and path.stat().st_ino == inode and diffs == []
    assert fw.ensure_file(_module(), str(path), "same\n", "0644") is False


def test_check_mode_reports_and_writes_nothing(tmp_path):
    module = _module(check_mode=True, diff=True)
    new, old = tmp_path / "new", tmp_path / "old"
    old.write_text("old\n")
    old.chmod(0o600)
    diffs = []
    assert fw.ensure_file(module, str(new), "x\n", "0644", diffs=diffs) is True
    assert fw.ensure_file(module, str(old), "new\n", "0600", diffs=diffs) is True
    assert fw.ensure_file(module, str(old), "old\n", "0644") is True  # the mode alone
    assert fw.ensure_file(module, str(old), "old\n", "0600") is False
    assert fw.ensure_directory(module, str(tmp_path / "a" / "b"), "0755", diffs=diffs) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]
    assert old.read_text() == "old\n" and _mode(old) == 0o600
    assert [d["after"] for d in diffs] == ["x\n", "new\n", "directory\n"]


def test_a_secret_is_written_but_never_in_the_diff(tmp_path):
    path = tmp_path / "key"
    path.write_text("old secret\n")
    diffs = []
    assert fw.ensure_file(_module(diff=True), str(path), "new secret\n", "0600", secret=True, diffs=diffs) is True
    assert path.read_text() == "new secret\n" and diffs == []


def test_the_bytes_the_caller_read_are_what_is_compared(tmp_path):
    path = tmp_path / "f"
    path.write_text("on disk\n")
    # The caller read the same text earlier: nothing to write.
    assert fw.ensure_file(_module(), str(path), "on disk\n", current=b"on disk\n") is False
    # The caller found no file: a new one, whatever is there now.
    assert fw.ensure_file(_module(check_mode=True), str(path), "on disk\n", current=None) is True


def test_a_new_file_without_mode_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        fw.ensure_file(_module(), str(tmp_path / "f"), "x\n")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "f") == 0o640


def test_a_directory_is_made_with_its_parents_each_with_the_mode(tmp_path):
    module = _module()
    top, leaf = tmp_path / "a", tmp_path / "a" / "b" / "c"
    diffs = []
    assert fw.ensure_directory(module, str(leaf) + "/", "0700", diffs=diffs) is True
    assert [_mode(d) for d in (top, top / "b", leaf)] == [0o700] * 3
    assert diffs == [{"before_header": str(leaf), "after_header": str(leaf),
                      "before": "absent\n", "after": "directory\n"}]
    assert fw.ensure_directory(module, str(leaf), "0700") is False
    leaf.chmod(0o755)
    assert fw.ensure_directory(module, str(leaf), "0700") is True and _mode(leaf) == 0o700


def test_a_failed_move_leaves_no_temporary_file(tmp_path, monkeypatch):
    module = _module()

    def refuse(*args, **kwargs):
        raise OSError("refused")

    monkeypatch.setattr(module, "atomic_move", refuse)
    with pytest.raises(OSError, match="refused"):
        fw.write_atomic(module, str(tmp_path / "f"), b"x")
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_file_fails_the_module_naming_it(tmp_path, monkeypatch):
    module = _module()
    (tmp_path / "d").mkdir()
    failed = {}

    def fail_json(**kwargs):
        failed.update(kwargs)
        raise SystemExit(1)

    monkeypatch.setattr(module, "fail_json", fail_json)
    with pytest.raises(SystemExit):
        fw.current_bytes(module, str(tmp_path / "d"))
    assert failed["msg"].startswith(f"cannot read {tmp_path / 'd'}:") and failed["path"] == str(tmp_path / "d")
    assert fw.current_bytes(module, str(tmp_path / "none")) is None


def test_a_new_secret_is_never_wider_than_its_mode_once_it_has_its_name(tmp_path, monkeypatch):
    """atomic_move gives a new file 0666 minus the umask right after the rename: a private key
    was 0644 under its real name until the chmod after it."""
    module = _module()
    real_move = module.atomic_move
    seen = []

    def move_and_look(src, dest, **kwargs):
        real_move(src, dest, **kwargs)
        seen.append(_mode(dest))

    monkeypatch.setattr(module, "atomic_move", move_and_look)
    old_umask = os.umask(0o022)
    try:
        path = str(tmp_path / "id_rsa")
        assert fw.ensure_file(module, path, "KEY\n", "0600", secret=True) is True
        assert os.umask(0o022) == 0o022  # the process umask is back as it was
    finally:
        os.umask(old_umask)
    assert seen == [0o600] and _mode(path) == 0o600


def test_a_mode_given_to_write_atomic_is_the_files_afterwards_new_or_old(tmp_path):
    """docker_daemon_json's restart marker (0600) and record (0644): an old file's mode used to
    carry over, and a new one got the umask's."""
    module = _module()
    old = tmp_path / "pending.json"
    old.write_text("{}\n")
    old.chmod(0o644)
    fw.write_atomic(module, str(old), b"{\"a\": 1}\n", 0o600)
    assert old.read_bytes() == b"{\"a\": 1}\n" and _mode(old) == 0o600
    umask = os.umask(0o002)
    try:
        fw.write_atomic(module, str(tmp_path / "record.json"), b"{}\n", 0o644)
    finally:
        os.umask(umask)
    assert _mode(tmp_path / "record.json") == 0o644
