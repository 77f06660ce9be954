"""gpucluster_filter_utils: the import path every filter plugin file relies on, and the error mapping.

Ansible loads filter plugin files by path, with neither their folder, ``plugins/module_utils``
nor (without ``pip install .``) ``src`` importable: each case runs a fresh interpreter that loads
a filter file that way.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import gpucluster_filter_utils as fu
import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import ROOT


def _load_by_path(path, filter_name, arg, isolated=False):
    """Print ``filter_name(arg)`` of the filter file ``path``, loaded as Ansible loads it; with
    ``isolated``, site-packages is on the path but its .pth files are not read, so the editable
    ``gpucluster`` install is not importable."""
    code = (
        "import sys, importlib.util\n"
        + (f"sys.path.append({sysconfig.get_paths()['purelib']!r})\n" if isolated else "")
        + "import ansible.module_utils as mu\n"
        f"spec = importlib.util.spec_from_file_location('plugin_under_test', {str(path)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"print(m.FilterModule().filters()[{filter_name!r}]({arg!r}))\n"
        "print(any(p.endswith('plugins/module_utils') for p in mu.__path__))\n"
        "import gpucluster; print(gpucluster.__file__.startswith(" + repr(str(ROOT / "src")) + "))\n"
    )
    argv = [sys.executable, "-S", "-c", code] if isolated else [sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, cwd="/", check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[:3]


def test_role_filter_finds_the_helper_and_module_utils():
    path = ROOT / "roles/gpudirect/filter_plugins/gpudirect.py"
    assert _load_by_path(path, "gpudirect_loaded_modules", "nvidia_peermem 16384 0\n")[:2] == \
        ["['nvidia_peermem']", "True"]


@pytest.mark.skipif((Path(sysconfig.get_paths()["purelib"]) / "gpucluster").exists(),
                    reason="gpucluster is installed into site-packages, not editable")
def test_src_is_put_on_the_path_when_gpucluster_is_not_installed():
    path = ROOT / "plugins/filter/gpucluster_runtime.py"
    assert _load_by_path(path, "gpucluster_runtime_detect", {}, isolated=True) == ["none", "True", "True"]


def test_value_errors_keeps_the_message_and_the_name():
    def upstream(version):
        """Doc."""
        raise ValueError(f"bad version {version}")

    with pytest.raises(AnsibleFilterError, match=r"^bad version 1$"):
        fu.value_errors(upstream)(1)
    with pytest.raises(AnsibleFilterError, match=r"^upstream: bad version 2$"):
        fu.value_errors(upstream, named=True)(2)
    assert fu.value_errors(upstream).__name__ == "upstream"
    assert fu.value_errors(upstream).__doc__ == "Doc."


def test_helper_file_defines_no_filters():
    assert fu.FilterModule().filters() == {}
