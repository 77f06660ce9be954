"""node_read module on this machine's real files and commands in tmp_path: every kind of read in
one run, missing things reported (not failed), alternatives, and a shell string refused."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import node_read


def _run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        node_read.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "hugepages-2048kB").mkdir()
    (tmp_path / "dir" / "hugepages-1048576kB").mkdir()
    (tmp_path / "file").write_bytes(b"MemTotal: 1 kB\n\xff\n")
    (tmp_path / "file").chmod(0o640)
    os.symlink(tmp_path / "dir", tmp_path / "link")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    return tmp_path


def test_every_kind_of_read_in_one_run(tree, capsys):
    rc, r = _run(
        capsys,
        commands={"echo": ["printf", "a\\nb\\n"], "fails": ["sh", "-c", "echo err >&2; exit 3"]},
        files=[str(tree / "file"), str(tree / "nothing")],
        stat=[str(tree / "file"), str(tree / "link"), str(tree / "dangling"), str(tree / "nothing")],
        glob=[str(tree / "dir" / "hugepages-*")],
        find=[str(tree / "*")],
        which=["sh", "surely-no-such-tool-here"],
        realpath=[str(tree / "link"), str(tree / "dangling")],
    )
    assert rc == 0 and r["changed"] is False
    assert r["commands"]["echo"] == {"rc": 0, "stdout": "a\nb", "stderr": "", "stdout_lines": ["a", "b"],
                                     "cmd": ["printf", "a\\nb\\n"]}
    assert r["commands"]["fails"]["rc"] == 3 and r["commands"]["fails"]["stderr"] == "err"
    assert r["files"] == {str(tree / "file"): "MemTotal: 1 kB\n\ufffd\n", str(tree / "nothing"): None}
    assert r["stat"][str(tree / "file")] == {"exists": True, "lexists": True, "isdir": False, "isreg": True,
                                             "islnk": False, "size": 17, "mode": "0640",
                                             "uid": os.getuid(), "gid": os.getgid()}
    assert r["stat"][str(tree / "link")]["isdir"] is True and r["stat"][str(tree / "link")]["islnk"] is True
    assert r["stat"][str(tree / "dangling")] == {"exists": False, "lexists": True, "islnk": True}
    assert r["stat"][str(tree / "nothing")] == {"exists": False, "lexists": False}
    assert r["glob"] == {str(tree / "dir" / "hugepages-*"): [str(tree / "dir" / "hugepages-1048576kB"),
                                                            str(tree / "dir" / "hugepages-2048kB")]}
    # find lists regular files only: not the directory, the link to it, nor the dangling link
    assert r["find"] == {str(tree / "*"): [str(tree / "file")]}
    assert r["which"]["sh"].endswith("/sh") and r["which"]["surely-no-such-tool-here"] is None
    assert r["realpath"] == {str(tree / "link"): str(tree / "dir"), str(tree / "dangling"): None}


@pytest.mark.parametrize(("name", "exists", "lexists", "islnk"), [
    ("file", True, True, False),
    ("dangling", False, True, True),
    ("filelink", True, True, True),
    ("nothing", False, False, None),
])
def test_lexists_is_os_path_lexists_in_every_stat_entry(tree, capsys, name, exists, lexists, islnk):
    """lexists: the path or a link at it is there, dangling or not; exists follows the link."""
    os.symlink(tree / "file", tree / "filelink")
    path = str(tree / name)
    rc, r = _run(capsys, stat=[path])
    assert rc == 0
    entry = r["stat"][path]
    assert entry["lexists"] is lexists is os.path.lexists(path)
    assert entry["exists"] is exists is os.path.exists(path)
    assert entry.get("islnk") is islnk


def test_a_missing_command_is_rc_127_and_alternatives_run_the_first_the_node_has(capsys):
    rc, r = _run(capsys, commands={
        "missing": ["surely-no-such-tool-here", "-k"],
        "log": [["surely-no-such-tool-here", "-k"], ["echo", "from", "the", "second"]],
        "none": [["surely-no-such-tool-here"], ["nor-this-one"]],
    })
    assert rc == 0
    assert r["commands"]["missing"]["rc"] == 127 and "not found" in r["commands"]["missing"]["stderr"]
    assert r["commands"]["log"]["stdout"] == "from the second" and r["commands"]["log"]["cmd"][0] == "echo"
    assert r["commands"]["none"]["rc"] == 127 and r["commands"]["none"]["cmd"] == ["surely-no-such-tool-here"]


def test_output_is_cut_at_max_bytes(tree, capsys):
    rc, r = _run(capsys, files=[str(tree / "file")], commands={"y": ["printf", "%s", "x" * 100]}, max_bytes=4)
    assert rc == 0 and r["files"][str(tree / "file")] == "MemT" and r["commands"]["y"]["stdout"] == "xxxx"


@pytest.mark.parametrize("spec", ["ofed_info -s", [], [["ofed_info"], "dmesg"], [["ofed_info", ["-s"]]], {"a": 1}])
def test_a_command_that_is_no_argv_list_is_refused_with_its_name(spec, capsys):
    rc, r = _run(capsys, commands={"ofed": spec})
    assert rc == 1 and r["failed"] is True
    assert r["msg"].startswith("commands.ofed") and "argv list" in r["msg"]


def test_check_mode_reads_the_same(tree, capsys):
    rc, r = _run(capsys, files=[str(tree / "file")], commands={"t": ["true"]}, _ansible_check_mode=True)
    assert rc == 0 and r["changed"] is False and r["commands"]["t"]["rc"] == 0
    assert r["files"][str(tree / "file")].startswith("MemTotal")
