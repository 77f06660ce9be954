"""apt_state module on a private tree (``root``): the files apt reads its sources from (and not
the ones it skips), and the lists' age as ansible.builtin.apt reads it for cache_valid_time."""

from __future__ import annotations

import json
import os
import time

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import apt_state

DEBIAN = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"


def _run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        apt_state.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def root(tmp_path):
    parts = tmp_path / "etc/apt/sources.list.d"
    parts.mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list").write_text("deb http://archive.ubuntu.com/ubuntu jammy main\n")
    (parts / "debian.sources").write_text(DEBIAN)
    (parts / "docker.list").write_text("deb https://download.docker.com/linux/debian bookworm stable\n")
    # apt skips these (apt-pkg GetListOfFilesInDir): other extensions, names with other characters.
    (parts / "old.list.save").write_text("deb http://old/ x main\n")
    (parts / "my source.list").write_text("deb http://space/ x main\n")
    (parts / "disabled.sources.dpkg-dist").write_text(DEBIAN)
    (parts / "nested.list").mkdir()
    # A link is followed as apt follows it; a dangling one is nothing apt could read.
    (tmp_path / "elsewhere.list").write_text("deb http://linked/ x main\n")
    os.symlink(tmp_path / "elsewhere.list", parts / "linked.list")
    os.symlink(tmp_path / "gone.list", parts / "dangling.list")
    return tmp_path


def test_reads_the_files_apt_reads_and_no_other(root, capsys):
    rc, result = _run(capsys, root=str(root))
    assert rc == 0 and result["changed"] is False
    assert sorted(result["sources"]) == [
        "/etc/apt/sources.list",
        "/etc/apt/sources.list.d/debian.sources",
        "/etc/apt/sources.list.d/docker.list",
        "/etc/apt/sources.list.d/linked.list",
    ]
    assert result["sources"]["/etc/apt/sources.list.d/debian.sources"] == DEBIAN
    assert result["sources"]["/etc/apt/sources.list.d/linked.list"] == "deb http://linked/ x main\n"


def test_lists_age_prefers_the_success_stamp_as_the_apt_module_does(root, capsys):
    lists = root / "var/lib/apt/lists"
    lists.mkdir(parents=True)
    now = time.time()
    os.utime(lists, (now - 7200, now - 7200))
    rc, result = _run(capsys, root=str(root))
    assert rc == 0 and 7199 <= result["lists_age"] <= 7260

    stamp = root / "var/lib/apt/periodic/update-success-stamp"
    stamp.parent.mkdir(parents=True)
    stamp.write_text("")
    os.utime(stamp, (now - 60, now - 60))
    rc, result = _run(capsys, root=str(root))
    assert rc == 0 and 59 <= result["lists_age"] <= 120


def test_a_node_without_sources_or_lists(tmp_path, capsys):
    rc, result = _run(capsys, root=str(tmp_path))
    assert rc == 0 and result["sources"] == {} and result["lists_age"] is None


def test_an_unreadable_source_file_fails_naming_it(root, capsys, monkeypatch):
    real_open = open

    def refuse(path, *args, **kwargs):
        if str(path).endswith("docker.list"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(apt_state, "open", refuse, raising=False)
    rc, result = _run(capsys, root=str(root))
    assert rc == 1
    assert result["msg"] == "cannot read the apt source file /etc/apt/sources.list.d/docker.list: Permission denied"
