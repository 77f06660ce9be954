import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml

from gpucluster import hosts
from tests.conftest import ROOT

LSPCI = """00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 04)
17:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)
31:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)
65:00.0 VGA compatible controller [0300]: NVIDIA Corporation TU104GL [Tesla T4] [10de:1eb8] (rev a1)
65:00.1 Audio device [0403]: NVIDIA Corporation TU104 HD Audio Controller [10de:10f8] (rev a1)
c1:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)
"""


def test_only_display_and_3d_controllers_count_as_gpus():
    assert hosts.count_nvidia_gpus(LSPCI) == 3


def _facts(addr="192.0.2.11", name="gpu-1"):
    return hosts.parse_facts(addr, {
        "hostname": name + "\n",
        "os": 'NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n',
        "cpus": "96\n",
        "mem": "MemTotal:       2113510400 kB\nMemFree: 1 kB\n",
        "lspci": LSPCI,
        "route": "default via 192.0.2.1 dev ens3 proto dhcp src 192.0.2.11 metric 100\n",
        "python": "/usr/bin/python3.12\n",
    })


def test_parse_facts():
    f = _facts()
    assert (f.hostname, f.os, f.cpus, f.mem_mib, f.gpus, f.default_nic) == (
        "gpu-1", "Ubuntu 22.04.4 LTS", 96, 2063975, 3, "ens3")


def test_inventory_merges_and_keeps_user_entries():
    existing = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-1": {"my_var": 7}}},
                                     "monitoring": {"hosts": {"grafana": {}}}}}}
    doc = hosts.render_inventory([_facts(), _facts("192.0.2.12", "gpu-2")], "ubuntu", Path("/k"), existing)
    nodes = doc["all"]["children"]["gpu_nodes"]["hosts"]
    assert nodes["gpu-1"]["my_var"] == 7 and nodes["gpu-1"]["ansible_host"] == "192.0.2.11"
    assert nodes["gpu-2"]["gpucluster_gathered"]["gpus"] == 3
    assert "grafana" in doc["all"]["children"]["monitoring"]["hosts"]
    assert "StrictHostKeyChecking=yes" in nodes["gpu-2"]["ansible_ssh_common_args"]


def test_the_python_probe_is_ansibles_discovery_and_its_result_goes_to_the_inventory(tmp_path):
    import subprocess

    from ansible import constants

    probe = hosts.python_probe()
    fallback = constants.config.get_config_value("INTERPRETER_PYTHON_FALLBACK")
    assert fallback and all(f"command -v {p}" in probe or f"command -v '{p}'" in probe for p in fallback)
    # Run for real with a PATH holding only the last candidate's name and the first's: the first wins.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in (fallback[0], fallback[-1]):
        if name.startswith("/"):
            continue
        exe = bindir / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    out = subprocess.run(["/bin/sh", "-c", probe], capture_output=True, text=True, env={"PATH": str(bindir)}).stdout
    assert out.splitlines()[0] == str(bindir / fallback[0])

    doc = hosts.render_inventory([_facts()], "ubuntu", Path("/k"))
    assert doc["all"]["children"]["gpu_nodes"]["hosts"]["gpu-1"]["ansible_python_interpreter"] == "/usr/bin/python3.12"
    # A user's own interpreter stays; no probe result, no entry.
    own = {"ansible_python_interpreter": "/opt/venv/bin/python"}
    mine = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-1": own}}}}}
    doc = hosts.render_inventory([_facts()], "ubuntu", Path("/k"), mine)
    assert doc["all"]["children"]["gpu_nodes"]["hosts"]["gpu-1"]["ansible_python_interpreter"] == "/opt/venv/bin/python"
    bare = hosts.HostFacts("192.0.2.13", "gpu-3", "Debian 12", 8, 64000, 0, "eth0")
    assert "ansible_python_interpreter" not in hosts.render_inventory([bare], "u", Path("/k"))["all"]["children"][
        "gpu_nodes"]["hosts"]["gpu-3"]


def test_duplicate_hostnames_are_refused():
    with pytest.raises(RuntimeError, match="unique hostname"):
        hosts.render_inventory([_facts(), _facts("192.0.2.12")], "u", Path("/k"))


def test_a_login_user_other_than_root_becomes_root_unless_the_inventory_says_otherwise():
    existing = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-1": {"ansible_become": False}}}}}}
    doc = hosts.render_inventory([_facts(), _facts("192.0.2.12", "gpu-2")], "ubuntu", Path("/k"), existing)
    nodes = doc["all"]["children"]["gpu_nodes"]["hosts"]
    assert nodes["gpu-1"]["ansible_become"] is False and nodes["gpu-2"]["ansible_become"] is True
    root = hosts.render_inventory([_facts()], "root", Path("/k"))
    assert "ansible_become" not in root["all"]["children"]["gpu_nodes"]["hosts"]["gpu-1"]


def test_group_vars_come_from_the_sample_once_with_the_image(tmp_path):
    todo = hosts.seed_group_vars(tmp_path, "registry.test/team/train:2")
    ref = yaml.safe_load((tmp_path / "group_vars/all/training_image.yml").read_text())["training_image_ref"]
    assert ref == "registry.test/team/train:2"
    assert sorted(p.name for p in (tmp_path / "group_vars/all").iterdir()) == sorted(
        p.name for p in (hosts.sample_inventory() / "group_vars" / "all").iterdir())
    assert len(todo) == 1
    # An existing group_vars/ is the user's: never touched again.
    (tmp_path / "group_vars/all/training_image.yml").write_text("training_image_ref: mine/own:1\n")
    assert hosts.seed_group_vars(tmp_path, "other/image:3") == []
    assert (tmp_path / "group_vars/all/training_image.yml").read_text() == "training_image_ref: mine/own:1\n"


def test_without_an_image_the_example_reference_is_named_as_a_todo(tmp_path):
    todo = hosts.seed_group_vars(tmp_path)
    assert any("set training_image_ref" in t and hosts.SAMPLE_IMAGE_REF in t for t in todo)
    text = (tmp_path / "group_vars/all/training_image.yml").read_text()
    assert f"training_image_ref: {hosts.SAMPLE_IMAGE_REF}" in text


def test_cli_prints_error_messages_as_written(monkeypatch, capsys):
    # Messages carry "[...]" (host lists, YAML paths); Rich must not read them as markup.
    from gpucluster import cli

    def boom(hosts_, user, key, inventory_dir, image=None):
        raise RuntimeError("hosts report the same hostname ['gpu-1'] [bold]: give every node a unique hostname")

    monkeypatch.setattr(hosts, "init", boom)
    rc = cli.main(["hosts", "init", "--hosts", "a,b", "--user", "root"])
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())  # Rich wraps long lines
    assert rc == 1  # a check failed: exit status 1, not 2 (usage)
    assert "['gpu-1'] [bold]: give every node a unique hostname" in out


def test_in_a_checkout_the_sample_is_the_checkouts_inventory_sample():
    assert hosts.sample_inventory() == ROOT / "inventory" / "sample"


def _install_like_the_wheel(site: Path) -> list[str]:
    """Lay out the wheel's packages under ``site`` from pyproject's package-dir and package-data
    (what setuptools puts in the wheel); returns the sample inventory files placed."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    placed = []
    for package in cfg["packages"]:
        src = ROOT / cfg["package-dir"][package]
        dest = site.joinpath(*package.split("."))
        dest.mkdir(parents=True, exist_ok=True)
        for module in src.glob("*.py"):
            shutil.copy2(module, dest / module.name)
        for pattern in cfg["package-data"].get(package, []):
            for item in src.glob(pattern):
                if item.is_file():
                    (dest / item.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(item, dest / item.relative_to(src))
                    if package == hosts.SAMPLE_PACKAGE:
                        placed.append(str(item.relative_to(src)))
    return sorted(placed)


def test_the_wheel_carries_every_sample_inventory_file():
    """pyproject's package-data for gpucluster.sample_inventory covers all of inventory/sample,
    so a file added there is not silently missing from the wheel."""
    sample = ROOT / "inventory" / "sample"
    on_disk = sorted(str(p.relative_to(sample)) for p in sample.rglob("*") if p.is_file())
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"][hosts.SAMPLE_PACKAGE] == "inventory/sample"
    assert hosts.SAMPLE_PACKAGE in cfg["packages"]
    packaged = sorted({str(p.relative_to(sample)) for pattern in cfg["package-data"][hosts.SAMPLE_PACKAGE]
                       for p in sample.glob(pattern) if p.is_file()})
    assert packaged == on_disk and "group_vars/all/training_image.yml" in packaged


def test_hosts_init_seeds_group_vars_from_package_data_outside_a_checkout(tmp_path):
    """Installed (no checkout around it), the sample comes from the package data."""
    site = tmp_path / "site"
    placed = _install_like_the_wheel(site)
    assert "hosts.yml" in placed and "group_vars/all/cluster.yml" in placed
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = textwrap.dedent("""
        from pathlib import Path
        from gpucluster import hosts
        sample = hosts.sample_inventory()
        print(type(sample).__name__, "gpucluster/sample_inventory" in str(sample))
        for line in hosts.seed_group_vars(Path("inv"), "registry.test/train:9"):
            print(line)
    """)
    env = {"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "/usr/bin")}
    run = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].endswith(" True")
    copied = sorted(str(p.relative_to(work / "inv")) for p in (work / "inv").rglob("*.yml"))
    assert copied == sorted("group_vars/" + p.split("group_vars/", 1)[1] for p in placed if "group_vars/" in p)
    ref = yaml.safe_load((work / "inv/group_vars/all/training_image.yml").read_text())["training_image_ref"]
    assert ref == "registry.test/train:9"
    # --help of the installed CLI works there too.
    run = subprocess.run([sys.executable, "-m", "gpucluster.cli", "hosts", "init", "--help"], cwd=work, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "--inventory-dir" in run.stdout


def test_without_a_sample_the_todo_says_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(hosts, "sample_inventory", lambda: None)
    todo = hosts.seed_group_vars(tmp_path)
    assert todo and "copy inventory/sample/group_vars" in todo[0]
    assert not (tmp_path / "group_vars").exists()


KEY_A = "AAAAC3NzaC1lZDI1NTE5AAAAIAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
KEY_B = "AAAAC3NzaC1lZDI1NTE5AAAAIBbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
KEY_C = "AAAAC3NzaC1lZDI1NTE5AAAAICcccccccccccccccccccccccccccccccccccccccccc"


def test_known_hosts_keeps_every_existing_host_when_one_is_added():
    before = f"10.0.0.1 ssh-ed25519 {KEY_A}\n10.0.0.2 ssh-ed25519 {KEY_B}\n"
    after = hosts.merge_known_hosts(before, [("10.0.0.3", "ssh-ed25519", KEY_C)])
    assert after == before + f"10.0.0.3 ssh-ed25519 {KEY_C}\n"


def test_known_hosts_rerun_with_the_same_hosts_changes_nothing():
    before = f"# mine\n10.0.0.1 ssh-ed25519 {KEY_A}\n10.0.0.2,node-2 ssh-ed25519 {KEY_B}\n"
    seen = [("10.0.0.1", "ssh-ed25519", KEY_A), ("10.0.0.2", "ssh-ed25519", KEY_B)]
    assert hosts.merge_known_hosts(before, seen) == before


def test_known_hosts_recognises_hashed_entries():
    import base64
    import hashlib
    import hmac

    salt = b"0123456789abcdefghij"
    digest = hmac.new(salt, b"10.0.0.1", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()} ssh-ed25519 {KEY_A}\n"
    assert hosts.merge_known_hosts(hashed, [("10.0.0.1", "ssh-ed25519", KEY_A)]) == hashed
    with pytest.raises(RuntimeError, match="10.0.0.1: its ssh-ed25519 host key is not the one"):
        hosts.merge_known_hosts(hashed, [("10.0.0.1", "ssh-ed25519", KEY_B)])


def test_a_changed_host_key_is_refused_naming_host_and_fix():
    before = f"10.0.0.1 ssh-ed25519 {KEY_A}\n"
    with pytest.raises(RuntimeError) as err:
        hosts.merge_known_hosts(before, [("10.0.0.1", "ssh-ed25519", KEY_B)], "inv/known_hosts")
    assert "nothing was written" in str(err.value)
    assert "ssh-keygen -R 10.0.0.1 -f inv/known_hosts" in str(err.value)


def test_init_merges_known_hosts_with_the_earlier_hosts(tmp_path, monkeypatch):
    """Two runs of init, the second adding a host: the first host's key is still there."""
    keys = {"10.0.0.1": KEY_A, "10.0.0.2": KEY_B}

    class _Key:
        def __init__(self, b64):
            self.b64 = b64

        def get_name(self):
            return "ssh-ed25519"

        def get_base64(self):
            return self.b64

    class _Conn:
        def __init__(self, host):
            self.host = host
            self.client = self

        def get_transport(self):
            return self

        def get_remote_server_key(self):
            return _Key(keys[self.host])

        def close(self):
            pass

    def fake_gather(conn, address):
        return hosts.HostFacts(address, "node-" + address[-1], "Debian 12", 8, 64000, 0, "eth0")

    monkeypatch.setattr(hosts, "ensure_trust", lambda hs, *a, **k: {h: _Conn(h) for h in hs})
    monkeypatch.setattr(hosts, "gather", fake_gather)
    key = tmp_path / "id_ed25519"
    key.write_text("k")
    inv = tmp_path / "inv"
    hosts.init(["10.0.0.1"], "root", key, inv, image="r/i:1")
    hosts.init(["10.0.0.2"], "root", key, inv, image="r/i:1")
    lines = (inv / "known_hosts").read_text().splitlines()
    assert lines == [f"10.0.0.1 ssh-ed25519 {KEY_A}", f"10.0.0.2 ssh-ed25519 {KEY_B}"]
    doc = yaml.safe_load((inv / "hosts.yml").read_text())
    assert sorted(doc["all"]["children"]["gpu_nodes"]["hosts"]) == ["node-1", "node-2"]
