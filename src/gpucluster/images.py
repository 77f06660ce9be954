"""Local images for the test cluster, built without any container registry.

Three images, each tagged with a hash of its recipe so that a cached build is reused until
the recipe changes (``../shared/ENVIRONMENT.md``: base images cannot be pulled here):

- ``gpucluster/node:<hash>``: Debian 12 with systemd as PID 1, sshd and Python, made by
  ``debootstrap --variant=minbase`` and ``docker import``. The test cluster's nodes and every
  molecule scenario run on it.
- ``gpucluster/infra:<hash>``: the node image plus Debian's ``docker-registry`` (port 5000)
  and ``apt-cacher-ng`` (port 3142), the test cluster's local image registry and apt cache.
- ``gpucluster/train-cpu:<hash>``: the training image for the test cluster: Open MPI, sshd,
  Python, mpi4py and numpy from Debian. Pushed to the local registry and pulled by the nodes.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors

from gpucluster.locks import locked

SUITE = "bookworm"
NODE_REPO = "gpucluster/node"
INFRA_REPO = "gpucluster/infra"
TRAIN_REPO = "gpucluster/train-cpu"
# Bump when a step below changes in a way the hashed inputs do not show.
RECIPE_REVISION = "4"

# What a freshly installed Debian server has, and no more: python3-apt because Ansible's apt
# module needs it, pciutils for `lspci` (GPU detection), kmod for modprobe.
NODE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-apt",
    "openssh-server",
    "sudo",
    "iproute2",
    "ca-certificates",
    "gnupg",
    "pciutils",
    "kmod",
    "procps",
)

# Units that have no work in a container and only slow the boot or fail noisily.
MASKED_UNITS = (
    "getty.target",
    "console-getty.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-remount-fs.service",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
)

# Host keys must differ per node: delete the image's and make fresh ones on first boot.
SSH_KEYGEN_DROPIN = """[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
"""

INFRA_DOCKERFILE = """FROM {node}
ARG APT_PROXY=
RUN if [ -n "$APT_PROXY" ]; then echo "Acquire::http::Proxy \\"$APT_PROXY\\";" > /etc/apt/apt.conf.d/01proxy; fi \\
 && apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      docker-registry apt-cacher-ng apache2-utils \\
 && rm -rf /var/lib/apt/lists/* /etc/apt/apt.conf.d/01proxy \\
 && systemctl enable docker-registry apt-cacher-ng
"""

# The image every node pulls and runs as its training container. Its main process is sshd
# on the cluster's port (the container_ssh role mounts the keys and sshd_config);
# mpirun runs inside it. Root is the user, as in NVIDIA's and Horovod's images.
TRAIN_DOCKERFILE = """FROM {node}
ARG APT_PROXY=
RUN if [ -n "$APT_PROXY" ]; then echo "Acquire::http::Proxy \\"$APT_PROXY\\";" > /etc/apt/apt.conf.d/01proxy; fi \\
 && apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      openmpi-bin python3-mpi4py python3-numpy openssh-client openssh-server \\
 && rm -rf /var/lib/apt/lists/* /etc/apt/apt.conf.d/01proxy /etc/ssh/ssh_host_* \\
 && mkdir -p /run/sshd
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=ssh
CMD ["/usr/sbin/sshd", "-D", "-e"]
"""

Log = Callable[[str], None]


def _hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def node_image_tag() -> str:
    """``gpucluster/node:<12 hex>``: the hash covers suite, package list and post-steps."""
    return f"{NODE_REPO}:" + _hash(
        RECIPE_REVISION, SUITE, *NODE_PACKAGES, *MASKED_UNITS, SSH_KEYGEN_DROPIN
    )


def infra_image_tag() -> str:
    return f"{INFRA_REPO}:" + _hash(node_image_tag(), INFRA_DOCKERFILE)


def train_image_tag() -> str:
    return f"{TRAIN_REPO}:" + _hash(node_image_tag(), TRAIN_DOCKERFILE)


def host_debian_mirror(sources_dir: str = "/etc/apt") -> str:
    """The Debian archive URI this machine's own apt uses (deb822 or one-line format).

    ENVIRONMENT.md: copy the machine's source, never hard-code a mirror host.
    Raises RuntimeError when none is configured.
    """
    root = Path(sources_dir)
    candidates = sorted(root.glob("sources.list.d/*.sources")) + [root / "sources.list"]
    candidates += sorted(root.glob("sources.list.d/*.list"))
    for path in candidates:
        if not path.is_file():
            continue
        text = path.read_text()
        for block in re.split(r"\n\s*\n", text):
            if re.search(r"^Suites:.*\b" + SUITE + r"\b(?!-)", block, re.M) or re.search(
                r"^Suites:\s*" + SUITE + r"(\s|$)", block, re.M
            ):
                m = re.search(r"^URIs:\s*(\S+)", block, re.M)
                if m and "security" not in m.group(1):
                    return m.group(1)
        for line in text.splitlines():
            m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+" + SUITE + r"\s", line)
            if m and "security" not in m.group(1):
                return m.group(1)
    raise RuntimeError(
        f"no Debian '{SUITE}' archive found in {sources_dir}/sources.list(.d); "
        "pass --mirror URL (the Debian archive this machine may reach)"
    )


def _image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


@locked("images")
def ensure_node_image(client: docker.DockerClient, log: Log = print, mirror: str | None = None) -> str:
    """Build the node image with debootstrap + docker import unless the tagged one exists.

    Needs root and the ``debootstrap`` command. Takes about a minute. Returns the tag.
    """
    tag = node_image_tag()
    if _image_exists(client, tag):
        log(f"node image {tag} cached")
        _tag_latest(client, tag)
        return tag
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: apt-get install debootstrap (scripts/host-prereqs.sh)")
    mirror = mirror or host_debian_mirror()
    work = Path(tempfile.mkdtemp(prefix="gpucluster-rootfs-", dir=os.environ.get("TMPDIR", "/var/tmp")))
    rootfs = work / "rootfs"
    try:
        log(f"debootstrap {SUITE} from {mirror} (about a minute)")
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=" + ",".join(NODE_PACKAGES), SUITE, str(rootfs), mirror],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _post_configure(rootfs)
        log("importing the root filesystem into Docker")
        tarball = work / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        repo, _, version = tag.partition(":")
        with tarball.open("rb") as fh:
            client.api.import_image_from_data(
                fh, repository=repo, tag=version, changes=['CMD ["/lib/systemd/systemd"]']
            )
    except subprocess.CalledProcessError as exc:
        err = exc.stderr.decode(errors="replace")[-2000:] if exc.stderr else ""
        raise RuntimeError(f"node image build failed: {exc.cmd[0]}: {err}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _tag_latest(client, tag)
    return tag


def _tag_latest(client: docker.DockerClient, tag: str) -> None:
    repo, _, _ = tag.partition(":")
    client.images.get(tag).tag(repo, "latest")


def _post_configure(rootfs: Path) -> None:
    for key in rootfs.glob("etc/ssh/ssh_host_*"):
        key.unlink()
    dropin = rootfs / "etc/systemd/system/ssh.service.d"
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "gpucluster-hostkeys.conf").write_text(SSH_KEYGEN_DROPIN)
    for unit in MASKED_UNITS:
        link = rootfs / "etc/systemd/system" / unit
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to("/dev/null")
    # systemd creates a fresh machine-id per container when the file is empty.
    (rootfs / "etc/machine-id").write_text("")
    # No package lists, dated "never updated", so that the first `apt update` with
    # cache_valid_time really runs (Ansible's apt module reads the lists' mtime).
    shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    os.utime(rootfs / "var/lib/apt/lists/partial", (0, 0))
    os.utime(rootfs / "var/lib/apt/lists", (0, 0))
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


@locked("images")
def build_from_node(
    client: docker.DockerClient,
    tag: str,
    dockerfile_template: str,
    log: Log = print,
    apt_proxy: str = "",
    network: str | None = None,
) -> str:
    """Build ``tag`` from a Dockerfile template whose ``{node}`` is the node image."""
    if _image_exists(client, tag):
        log(f"image {tag} cached")
        return tag
    log(f"building {tag}")
    dockerfile = dockerfile_template.format(node=node_image_tag())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    repo, _, version = tag.partition(":")
    try:
        client.images.build(
            fileobj=buf,
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            buildargs={"APT_PROXY": apt_proxy},
            network_mode=network,
        )
    except docker.errors.BuildError as exc:
        tail = "".join(str(x.get("stream", x.get("error", ""))) for x in exc.build_log)[-2000:]
        raise RuntimeError(f"building {tag} failed: {exc.msg}\n{tail}") from exc
    client.images.get(tag).tag(repo, "latest")
    return tag
