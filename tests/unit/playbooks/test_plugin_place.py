"""The one mechanism that moves the NCCL net plugin (roles/nccl_net_plugin/tasks/place.yml), run
for real on this machine (connection local) under tmp_path: the role's install step and
playbooks/runtime.yml's switch both run it. horovod (or a disabled plugin) puts the library
aside in <dir>/disabled/, lightcc puts it back; a second run changes nothing; a node without the
library is left alone."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from tests.conftest import run_tool

LIB = "libnccl-net-harp.so"


def _place(tmp_path, **extra):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    book = tmp_path / "place.yml"
    book.write_text(yaml.safe_dump([{"name": "Place test", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "Place", "ansible.builtin.include_role": {"name": "nccl_net_plugin", "tasks_from": "place.yml"}}]}]))
    extra = {"nccl_net_plugin_dir": str(tmp_path / "nccl-net"), "nccl_net_plugin_name": "harp",
             **extra}
    ev = tmp_path / "extra.yml"
    ev.write_text(yaml.safe_dump(extra))
    r = run_tool("ansible-playbook", "-i", inv, "-e", f"@{ev}", book, home=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    m = re.search(r"node-x\s*:\s*ok=\d+\s+changed=(\d+)", out)
    assert m, out
    return int(m.group(1)), out


def _state(tmp_path):
    d = tmp_path / "nccl-net"
    return (d / LIB).exists(), (d / "disabled" / LIB).exists()


@pytest.fixture
def library(tmp_path):
    d = tmp_path / "nccl-net"
    d.mkdir()
    (d / LIB).write_bytes(b"\x7fELF the vendor's plugin")
    return d


def test_horovod_puts_it_aside_lightcc_puts_it_back_and_reruns_change_nothing(tmp_path, library):
    on = {"nccl_net_plugin_enabled": True}
    changed, out = _place(tmp_path, nccl_net_plugin_runtime="horovod", **on)
    assert changed >= 1 and _state(tmp_path) == (False, True), out
    assert (library / "disabled" / LIB).read_bytes() == b"\x7fELF the vendor's plugin"
    assert _place(tmp_path, nccl_net_plugin_runtime="horovod", **on)[0] == 0
    assert _state(tmp_path) == (False, True)

    changed, out = _place(tmp_path, nccl_net_plugin_runtime="lightcc", **on)
    assert changed >= 1 and _state(tmp_path) == (True, False), out
    assert (library / LIB).read_bytes() == b"\x7fELF the vendor's plugin"
    assert _place(tmp_path, nccl_net_plugin_runtime="lightcc", **on)[0] == 0


def test_a_disabled_plugin_goes_aside_whatever_the_runtime(tmp_path, library):
    changed, out = _place(tmp_path, nccl_net_plugin_enabled=False, nccl_net_plugin_runtime="lightcc")
    assert changed >= 1 and _state(tmp_path) == (False, True), out


def test_no_library_is_left_alone(tmp_path):
    for runtime in ("horovod", "lightcc"):
        changed, out = _place(tmp_path, nccl_net_plugin_enabled=True, nccl_net_plugin_runtime=runtime)
        assert changed == 0 and _state(tmp_path) == (False, False), out
    assert not (tmp_path / "nccl-net").exists()


def test_a_dangling_link_counts_as_there_and_moves_as_the_library_would(tmp_path):
    """node_read's lexists: a link where NCCL loads, to a library gone, is in the way; it goes aside
    for horovod and comes back for lightcc, as a file would."""
    d = tmp_path / "nccl-net"
    d.mkdir()
    (d / LIB).symlink_to(tmp_path / "gone.so")
    on = {"nccl_net_plugin_enabled": True}
    changed, out = _place(tmp_path, nccl_net_plugin_runtime="horovod", **on)
    assert changed >= 1 and not (d / LIB).is_symlink() and (d / "disabled" / LIB).is_symlink(), out
    changed, out = _place(tmp_path, nccl_net_plugin_runtime="lightcc", **on)
    assert changed >= 1 and (d / LIB).is_symlink() and not (d / "disabled" / LIB).is_symlink(), out
    assert _place(tmp_path, nccl_net_plugin_runtime="lightcc", **on)[0] == 0
