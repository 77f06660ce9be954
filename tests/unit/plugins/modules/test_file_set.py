"""file_set module on a real tree in tmp_path: one run writes directories and files, a rerun
changes nothing, a changed content or mode is mended, check mode writes nothing, a bad entry
refuses the whole set first."""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import file_set

OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def _run(capsys, files, **extra):
    with patch_module_args({"files": files, **extra}), pytest.raises(SystemExit) as exc:
        file_set.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def _set(root):
    return [
        {"path": str(root / "ssh"), "state": "directory", "owner": OWNER, "group": GROUP, "mode": "0700"},
        {"path": str(root / "ssh" / "server"), "state": "directory", "mode": "0700"},
        {"path": str(root / "ssh" / "server" / "authorized_keys"), "content": "ssh-ed25519 AAAA key\n",
         "owner": OWNER, "group": GROUP, "mode": "0600"},
        {"path": str(root / "hostfile"), "content": "node-1 slots=8\n", "mode": "0644"},
    ]


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_one_run_writes_everything_and_a_rerun_changes_nothing(tmp_path, capsys):
    rc, result = _run(capsys, _set(tmp_path))
    assert rc == 0 and result["changed"] is True
    assert result["changed_paths"] == [e["path"] for e in _set(tmp_path)]
    assert (tmp_path / "ssh" / "server" / "authorized_keys").read_text() == "ssh-ed25519 AAAA key\n"
    assert _mode(tmp_path / "ssh") == 0o700 and _mode(tmp_path / "ssh" / "server") == 0o700
    assert _mode(tmp_path / "ssh" / "server" / "authorized_keys") == 0o600
    assert _mode(tmp_path / "hostfile") == 0o644
    rc, again = _run(capsys, _set(tmp_path))
    assert rc == 0 and again["changed"] is False and again["changed_paths"] == []
    assert not [p for p in (tmp_path / "ssh" / "server").iterdir() if p.name.startswith(".")]  # no temp left


def test_content_and_mode_drift_are_mended_with_a_diff(tmp_path, capsys):
    _run(capsys, _set(tmp_path))
    (tmp_path / "hostfile").write_text("node-1 slots=1\n")
    os.chmod(tmp_path / "ssh" / "server" / "authorized_keys", 0o644)
    rc, result = _run(capsys, _set(tmp_path), _ansible_diff=True)
    assert rc == 0 and result["changed_paths"] == [str(tmp_path / "ssh" / "server" / "authorized_keys"),
                                                   str(tmp_path / "hostfile")]
    assert (tmp_path / "hostfile").read_text() == "node-1 slots=8\n"
    assert _mode(tmp_path / "ssh" / "server" / "authorized_keys") == 0o600
    assert result["diff"] == [{"before_header": str(tmp_path / "hostfile"), "after_header": str(tmp_path / "hostfile"),
                               "before": "node-1 slots=1\n", "after": "node-1 slots=8\n"}]


def test_check_mode_reports_and_writes_nothing(tmp_path, capsys):
    rc, result = _run(capsys, _set(tmp_path), _ansible_check_mode=True)
    assert rc == 0 and result["changed"] is True and len(result["changed_paths"]) == 4
    assert list(tmp_path.iterdir()) == []


def test_a_bad_entry_refuses_the_whole_set_before_any_change(tmp_path, capsys):
    (tmp_path / "hostfile").mkdir()
    rc, result = _run(capsys, _set(tmp_path))
    assert rc == 1 and "hostfile: is a directory" in result["msg"] and "nothing was changed" in result["msg"]
    assert not (tmp_path / "ssh").exists()
    rc, result = _run(capsys, [{"path": "relative/file", "content": "x"}])
    assert rc == 1 and "relative/file: give an absolute path" in result["msg"]


def test_new_file_without_mode_gets_the_umask_mode(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        _run(capsys, [{"path": str(tmp_path / "f"), "content": "x\n"}])
    finally:
        os.umask(old)
    assert _mode(tmp_path / "f") == 0o644


def test_a_secret_is_written_but_never_shown(tmp_path, capsys):
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    files = [{"path": str(tmp_path / "id_ed25519"), "secret_content": key, "mode": "0600"},
             {"path": str(tmp_path / "id_ed25519.pub"), "content": "ssh-ed25519 AAAA key\n", "mode": "0644"}]
    old = "-----BEGIN OPENSSH PRIVATE KEY-----\nold\n-----END OPENSSH PRIVATE KEY-----\n"
    (tmp_path / "id_ed25519").write_text(old, encoding="utf-8")
    rc, result = _run(capsys, files, _ansible_diff=True)
    assert rc == 0 and result["changed_paths"] == [str(tmp_path / "id_ed25519"), str(tmp_path / "id_ed25519.pub")]
    assert (tmp_path / "id_ed25519").read_text() == key and _mode(tmp_path / "id_ed25519") == 0o600
    # The public file's diff only: neither the old nor the new secret is in the output.
    assert [d["after_header"] for d in result["diff"]] == [str(tmp_path / "id_ed25519.pub")]
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in json.dumps(result) and "old" not in json.dumps(result["diff"])
    rc, again = _run(capsys, files)
    assert rc == 0 and again["changed"] is False


def test_content_and_secret_content_together_are_refused(tmp_path, capsys):
    rc, result = _run(capsys, [{"path": str(tmp_path / "k"), "content": "a", "secret_content": "PRIVATE KEY"}])
    assert rc == 1 and "give content or secret_content, not both" in result["msg"]
    assert not (tmp_path / "k").exists()


def test_an_absent_entry_removes_a_file_or_a_link_and_a_rerun_changes_nothing(tmp_path, capsys):
    (tmp_path / "old.list").write_text("deb http://example.org/ x main\n")
    (tmp_path / "target").write_text("kept\n")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    files = [{"path": str(tmp_path / name), "state": "absent"} for name in ("old.list", "link", "dangling", "missing")]
    rc, result = _run(capsys, files, _ansible_check_mode=True, _ansible_diff=True)
    assert rc == 0 and result["changed_paths"] == [str(tmp_path / n) for n in ("old.list", "link", "dangling")]
    assert (tmp_path / "old.list").exists() and os.path.lexists(tmp_path / "dangling")  # check mode: nothing removed
    assert [d["before"] for d in result["diff"]] == ["file\n", "link\n", "link\n"]
    assert {d["after"] for d in result["diff"]} == {"absent\n"}
    rc, result = _run(capsys, files)
    assert rc == 0 and result["changed"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # a link's target stays
    rc, again = _run(capsys, files)
    assert rc == 0 and again["changed"] is False and again["changed_paths"] == []


def test_an_absent_entry_at_a_directory_or_with_content_refuses_the_whole_set(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x\n")
    rc, result = _run(capsys, [{"path": str(tmp_path / "f"), "state": "absent"},
                               {"path": str(tmp_path / "d"), "state": "absent"}])
    assert rc == 1 and f"{tmp_path / 'd'}: is a directory; state=absent removes a file or a link" in result["msg"]
    assert (tmp_path / "f").exists()  # nothing was changed
    rc, result = _run(capsys, [{"path": str(tmp_path / "f"), "state": "absent", "content": "x"}])
    assert rc == 1 and "give no content for state=absent" in result["msg"] and (tmp_path / "f").exists()
