"""Pure parts of the sandbox: capabilities from CapBnd, the Debian mirror, its inventory vars."""

from pathlib import Path

import pytest
import yaml

from gpucluster import images, sandbox


def test_capabilities_follow_the_bounding_set_without_sys_resource():
    # ENVIRONMENT.md: this machine's CapBnd is 000001fffeffffff (bit 24, SYS_RESOURCE, cleared)
    caps = sandbox.bounding_capabilities("Name:\tx\nCapBnd:\t000001fffeffffff\n")
    assert "SYS_RESOURCE" not in caps
    assert {"SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "AUDIT_READ"} <= set(caps)
    assert len(caps) == 37  # docker 20.10 knows 38 (0..37), minus SYS_RESOURCE


def test_capbnd_missing_is_an_error():
    with pytest.raises(ValueError, match="CapBnd"):
        sandbox.bounding_capabilities("Name:\tx\n")


def test_mirror_from_deb822(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://deb.example.org/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example.org/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n")
    assert images.host_debian_mirror(str(tmp_path)) == "http://mirror.example.org/debian"


def test_mirror_from_one_line_format(tmp_path):
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://ftp.example.org/debian bookworm main\n")
    assert images.host_debian_mirror(str(tmp_path)) == "http://ftp.example.org/debian"


def test_no_mirror_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="--mirror"):
        images.host_debian_mirror(str(tmp_path))


def test_image_tags_change_with_their_recipe(monkeypatch):
    before = (images.node_image_tag(), images.infra_image_tag(), images.train_image_tag())
    monkeypatch.setattr(images, "NODE_PACKAGES", images.NODE_PACKAGES + ("vim",))
    after = (images.node_image_tag(), images.infra_image_tag(), images.train_image_tag())
    assert all(a != b for a, b in zip(before, after, strict=True))


def test_sandbox_vars_state_the_limits_honestly():
    text = sandbox.SANDBOX_VARS.format(registry_ref="r:5000/a/b:1", registry="r:5000", user="u")
    v = yaml.safe_load(text)
    assert v["preflight_require_gpu"] is False
    assert v["training_image_privileged"] is False
    assert v["training_image_gpus"] == ""
    assert v["training_image_ulimit_memlock"] == 8388608  # the machine's hard limit
    assert v["training_image_ref"] == "r:5000/a/b:1"
    assert v["docker_insecure_registries"] == ["r:5000"]


class _NoDocker:
    """A Docker client with nothing labelled (down() then only removes files)."""

    class _List:
        def list(self, **_kw):
            return []

    containers = volumes = networks = _List()


def test_down_removes_the_cluster_key_the_training_stage_made(tmp_path):
    inv = tmp_path / "sandbox"
    (inv / ".cluster-key").mkdir(parents=True)
    (inv / ".cluster-key" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (inv / ".cluster-key" / "id_ed25519.pub").write_text("ssh-ed25519 AAAA gpucluster-cluster-key\n")
    (inv / "hosts.yml").write_text("all: {}\n")
    removed = sandbox.Sandbox(sandbox.SandboxConfig(inventory_dir=inv), client=_NoDocker()).down()
    assert f"file {inv / '.cluster-key' / 'id_ed25519'}" in removed
    assert f"file {inv / '.cluster-key' / 'id_ed25519.pub'}" in removed
    assert not inv.exists()


def test_down_keeps_what_it_did_not_make_beside_the_key(tmp_path):
    inv = tmp_path / "sandbox"
    (inv / ".cluster-key").mkdir(parents=True)
    (inv / ".cluster-key" / "id_ed25519").write_text("k\n")
    (inv / ".cluster-key" / "notes.txt").write_text("mine\n")
    sandbox.Sandbox(sandbox.SandboxConfig(inventory_dir=inv), client=_NoDocker()).down()
    assert not (inv / ".cluster-key" / "id_ed25519").exists()
    assert (inv / ".cluster-key" / "notes.txt").read_text() == "mine\n"


def test_the_cluster_key_path_is_the_container_ssh_roles_default():
    root = Path(__file__).resolve().parents[3]
    defaults = yaml.safe_load((root / "roles/container_ssh/defaults/main.yml").read_text())
    assert defaults["container_ssh_cluster_key"] == "{{ inventory_dir }}/" + sandbox.CLUSTER_KEY
