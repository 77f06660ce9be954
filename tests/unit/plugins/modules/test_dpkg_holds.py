"""dpkg_holds module against the real dpkg, on a private database (``--admindir``) in tmp_path:
one read, one write, check mode writes nothing, an unknown package is refused before any change."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import dpkg_holds

pytestmark = pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg (Debian/Ubuntu)")

STATUS = """\
Package: nvidia-driver-550
Status: install ok installed
Version: 550.127.05-0ubuntu1
Architecture: amd64
Maintainer: x <x@example.org>
Description: driver

Package: libnvidia-compute-550
Status: install ok installed
Version: 550.127.05-0ubuntu1
Architecture: amd64
Multi-Arch: same
Maintainer: x <x@example.org>
Description: compute

Package: nvidia-fabricmanager-550
Status: hold ok installed
Version: 550.127.05-1
Architecture: amd64
Maintainer: x <x@example.org>
Description: fm

"""
NAMES = ["nvidia-driver-550", "libnvidia-compute-550", "nvidia-fabricmanager-550"]


@pytest.fixture
def admindir(tmp_path):
    d = tmp_path / "dpkg"
    (d / "updates").mkdir(parents=True)
    (d / "info").mkdir()
    (d / "status").write_text(STATUS)
    (d / "available").write_text("")
    return d


def _selections(d):
    out = subprocess.run(["dpkg", f"--admindir={d}", "--get-selections"], capture_output=True, text=True,
                         check=True).stdout
    return dict(line.split() for line in out.splitlines())


def _run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        dpkg_holds.main()
    result = json.loads(capsys.readouterr().out)
    return exc.value.code, result


def test_holds_in_one_write_then_reports_no_change(admindir, capsys):
    rc, result = _run(capsys, name=NAMES, selection="hold", admindir=str(admindir))
    assert rc == 0 and result["changed"] is True
    assert result["changed_packages"] == ["nvidia-driver-550", "libnvidia-compute-550"]
    assert _selections(admindir) == {"nvidia-driver-550": "hold", "libnvidia-compute-550:amd64": "hold",
                                     "nvidia-fabricmanager-550": "hold"}
    rc, again = _run(capsys, name=NAMES, selection="hold", admindir=str(admindir))
    assert rc == 0 and again["changed"] is False and again["changed_packages"] == []


def test_check_mode_and_diff_change_nothing(admindir, capsys):
    rc, result = _run(capsys, name=NAMES, selection="install", admindir=str(admindir),
                      _ansible_check_mode=True, _ansible_diff=True)
    assert rc == 0 and result["changed"] is True and result["changed_packages"] == ["nvidia-fabricmanager-550"]
    assert "nvidia-fabricmanager-550 hold" in result["diff"]["before"]
    assert "nvidia-fabricmanager-550 install" in result["diff"]["after"]
    assert _selections(admindir)["nvidia-fabricmanager-550"] == "hold"


def test_unknown_package_is_refused_before_any_change(admindir, capsys):
    rc, result = _run(capsys, name=["nvidia-driver-550", "nvidia-driver-55O"], selection="hold",
                      admindir=str(admindir))
    assert rc == 1 and result["failed"] is True
    assert "nvidia-driver-55O" in result["msg"] and "install it first" in result["msg"]
    assert _selections(admindir)["nvidia-driver-550"] == "install"


def test_dpkg_status_says_what_is_missing_from_the_real_dpkg_query(admindir, capsys):
    from ansible_collections.gpucluster.cluster.plugins.modules import dpkg_status

    args = {"name": ["nvidia-driver-550=550.127.05-0ubuntu1", "libnvidia-compute-550=550.90*",
                     "nvidia-fabricmanager-550", "cuda-drivers-550"], "admindir": str(admindir)}
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        dpkg_status.main()
    result = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0 and result["changed"] is False
    assert result["missing"] == ["libnvidia-compute-550=550.90*", "cuda-drivers-550"]
    assert result["installed"]["libnvidia-compute-550"] == "550.127.05-0ubuntu1"
