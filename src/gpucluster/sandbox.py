"""The local multi-node test cluster ("sandbox"): real nodes on one machine.

Each node is a Debian 12 container running systemd as PID 1 with sshd, reached by Ansible
over SSH exactly like a real server, with its own ``/var/lib/docker`` volume so that the
docker role installs and runs a real, nested Docker engine. Beside the nodes runs one infra
container with a local image registry (Debian's ``docker-registry``) and an apt cache
(``apt-cacher-ng``). Everything ``up`` creates carries the label ``io.gpucluster.sandbox`` so
that ``down`` removes exactly that, and nothing else.

Limits (measured, ``../shared/ENVIRONMENT.md``): no GPU; the machine's root lacks
CAP_SYS_RESOURCE, so no container can be privileged and memlock is bounded at 8 MiB. The
inventory written here states those limits as variables; nothing pretends otherwise.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import yaml

from gpucluster import images

LABEL = "io.gpucluster.sandbox"
REGISTRY_PORT = 5000
REGISTRY_USER = "gpucluster"
APT_CACHE_PORT = 3142

# Linux capability numbers (include/uapi/linux/capability.h) that docker 20.10 knows.
# The machine's bounding set decides which of them a container may get.
CAPABILITIES = {
    0: "CHOWN", 1: "DAC_OVERRIDE", 2: "DAC_READ_SEARCH", 3: "FOWNER", 4: "FSETID", 5: "KILL",
    6: "SETGID", 7: "SETUID", 8: "SETPCAP", 9: "LINUX_IMMUTABLE", 10: "NET_BIND_SERVICE",
    11: "NET_BROADCAST", 12: "NET_ADMIN", 13: "NET_RAW", 14: "IPC_LOCK", 15: "IPC_OWNER",
    16: "SYS_MODULE", 17: "SYS_RAWIO", 18: "SYS_CHROOT", 19: "SYS_PTRACE", 20: "SYS_PACCT",
    21: "SYS_ADMIN", 22: "SYS_BOOT", 23: "SYS_NICE", 24: "SYS_RESOURCE", 25: "SYS_TIME",
    26: "SYS_TTY_CONFIG", 27: "MKNOD", 28: "LEASE", 29: "AUDIT_WRITE", 30: "AUDIT_CONTROL",
    31: "SETFCAP", 32: "MAC_OVERRIDE", 33: "MAC_ADMIN", 34: "SYSLOG", 35: "WAKE_ALARM",
    36: "BLOCK_SUSPEND", 37: "AUDIT_READ",
}


def bounding_capabilities(status_text: str) -> list[str]:
    """Capability names in the ``CapBnd`` line of ``/proc/self/status`` that docker knows.

    ``--privileged`` asks for every capability and fails when the machine's root lacks
    one (CAP_SYS_RESOURCE here); the explicit list of what is there works instead.
    """
    for line in status_text.splitlines():
        if line.startswith("CapBnd:"):
            mask = int(line.split()[1], 16)
            return [name for bit, name in sorted(CAPABILITIES.items()) if mask >> bit & 1]
    raise ValueError("no CapBnd line in /proc/self/status")


@dataclass
class SandboxConfig:
    """What ``gpucluster sandbox up`` builds. ``name`` prefixes every Docker object."""

    name: str = "gpucluster"
    nodes: int = 3
    inventory_dir: Path = Path("inventory/sandbox")
    mirror: str | None = None
    subnet: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def network(self) -> str:
        return self.name

    @property
    def infra(self) -> str:
        return f"{self.name}-infra"

    def node(self, i: int) -> str:
        return f"{self.name}-node-{i}"

    @property
    def label(self) -> dict[str, str]:
        return {LABEL: self.name}


# The cluster key pair the training stage makes for the sandbox's inventory: the container_ssh
# role's default container_ssh_cluster_key, "{{ inventory_dir }}/.cluster-key/id_ed25519"
# (a unit test keeps the two equal). `down` removes it with the inventory: a root login key
# for containers that no longer exist must not stay behind.
CLUSTER_KEY = ".cluster-key/id_ed25519"


class Sandbox:
    def __init__(self, cfg: SandboxConfig, client: docker.DockerClient | None = None, log=print):
        self.cfg = cfg
        self.client = client or docker.from_env(timeout=600)
        self.log = log

    # ---------------------------------------------------------------- up
    def up(self) -> dict:
        if self.cfg.nodes < 1:
            raise ValueError(f"--nodes must be at least 1, got {self.cfg.nodes}")
        node_tag = images.ensure_node_image(self.client, self.log, self.cfg.mirror)
        net = self._ensure_network()
        infra = self.ensure_infra()
        apt_proxy = f"http://{self.cfg.infra}:{APT_CACHE_PORT}"
        train_tag = images.build_from_node(
            self.client, images.train_image_tag(), images.TRAIN_DOCKERFILE, self.log, apt_proxy, net.name
        )
        registry_ref = self._push_to_registry(infra, train_tag)
        key = self._controller_key()
        nodes = []
        for i in range(1, self.cfg.nodes + 1):
            nodes.append(self._ensure_node(i, node_tag, key, apt_proxy))
        host_keys = {n.name: self._wait_for_sshd(n) for n in nodes}
        for stale in self._labelled_containers(role="node"):
            if stale.name not in {n.name for n in nodes}:
                self.log(f"removing {stale.name} (beyond --nodes {self.cfg.nodes})")
                self.remove_node(stale)
        inv = self._write_inventory(nodes, host_keys, registry_ref)
        self.log(f"inventory written: {inv}")
        return self.status()

    def _ensure_network(self):
        nets = self.client.networks.list(names=[self.cfg.network])
        for net in nets:
            if net.name == self.cfg.network:
                if net.attrs.get("Labels", {}).get(LABEL) != self.cfg.name:
                    raise RuntimeError(
                        f"Docker network {self.cfg.network!r} exists but was not made by gpucluster; "
                        "remove it or pass --name"
                    )
                return net
        ipam = None
        if self.cfg.subnet:
            ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=self.cfg.subnet)])
        self.log(f"creating network {self.cfg.network}")
        return self.client.networks.create(self.cfg.network, driver="bridge", labels=self.cfg.label, ipam=ipam)

    def _systemd_run_kwargs(self, name: str, hostname: str, role: str) -> dict:
        caps = bounding_capabilities(Path("/proc/self/status").read_text())
        return dict(
            name=name,
            hostname=hostname,
            detach=True,
            labels={**self.cfg.label, f"{LABEL}.role": role},
            cgroupns="host",
            volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"}},
            tmpfs={"/run": "", "/run/lock": ""},
            security_opt=["seccomp=unconfined", "apparmor=unconfined"],
            cap_add=caps,
            stop_signal="SIGRTMIN+3",
        )

    def ensure_infra(self):
        """Start (or reuse) the registry + apt cache container; returns it."""
        try:
            c = self.client.containers.get(self.cfg.infra)
            if images.infra_image_tag() not in (c.image.tags or []):
                self.log(f"{c.name} runs an older infra image: recreating")
                c.remove(force=True, v=True)
                raise docker.errors.NotFound(c.name)
            if c.status != "running":
                c.start()
            # The login is this inventory's (another checkout may have started the infra).
            self._exec(c, f"htpasswd -Bbc /srv/gpucluster/htpasswd {REGISTRY_USER} {self.registry_password()}",
                       wait_systemd=True)
            c.reload()
            return c
        except docker.errors.NotFound:
            pass
        images.ensure_node_image(self.client, self.log, self.cfg.mirror)
        net = self._ensure_network()
        tag = images.build_from_node(self.client, images.infra_image_tag(), images.INFRA_DOCKERFILE, self.log)
        vol = self._volume(f"{self.cfg.infra}-data")
        kw = self._systemd_run_kwargs(self.cfg.infra, "infra", "infra")
        kw["volumes"][vol.name] = {"bind": "/srv/gpucluster", "mode": "rw"}
        # The registry must be reachable from this machine's docker for `docker push`:
        # loopback only, a port the engine picks.
        kw["ports"] = {f"{REGISTRY_PORT}/tcp": ("127.0.0.1", None)}
        self.log("starting the infra container (registry :5000, apt cache :3142)")
        c = self.client.containers.create(tag, network=net.name, **kw)
        c.start()
        self._exec(c, "mkdir -p /srv/gpucluster/registry /srv/gpucluster/apt-cacher-ng "
                      "&& chown -R docker-registry /srv/gpucluster/registry "
                      "&& chown -R apt-cacher-ng /srv/gpucluster/apt-cacher-ng "
                      "&& sed -i 's#rootdirectory: .*#rootdirectory: /srv/gpucluster/registry#' "
                      "/etc/docker/registry/config.yml "
                      "&& sed -i 's#^\\(\\s*path:\\).*registry$#\\1 /srv/gpucluster/htpasswd#' "
                      "/etc/docker/registry/config.yml "
                      f"&& htpasswd -Bbc /srv/gpucluster/htpasswd {REGISTRY_USER} {self.registry_password()} "
                      "&& chown docker-registry /srv/gpucluster/htpasswd "
                      "&& sed -i 's#^CacheDir:.*#CacheDir: /srv/gpucluster/apt-cacher-ng#' "
                      "/etc/apt-cacher-ng/acng.conf "
                      "&& systemctl restart docker-registry apt-cacher-ng", wait_systemd=True)
        self._wait_port(c, REGISTRY_PORT)
        self._wait_port(c, APT_CACHE_PORT)
        c.reload()
        return c

    def registry_password(self) -> str:
        """The local registry's password, made once and kept beside the inventory (0600)."""
        path = self.cfg.inventory_dir / ".registry-password"
        if not path.exists():
            self.cfg.inventory_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(24))
            path.chmod(0o600)
        return path.read_text().strip()

    def remove_node(self, container) -> None:
        """Remove a node container and its /var/lib/docker volume (``<name>-docker``), so the node
        ``up`` makes again in its place starts as new."""
        name = container.name
        container.remove(force=True, v=True)
        with contextlib.suppress(docker.errors.NotFound):
            self.client.volumes.get(f"{name}-docker").remove(force=True)

    def _volume(self, name: str):
        try:
            return self.client.volumes.get(name)
        except docker.errors.NotFound:
            return self.client.volumes.create(name, labels=self.cfg.label)

    def _push_to_registry(self, infra, tag: str) -> str:
        """Push ``tag`` through the loopback port; returns the reference the nodes pull."""
        infra.reload()
        host_port = infra.ports[f"{REGISTRY_PORT}/tcp"][0]["HostPort"]
        repo, _, version = tag.partition(":")
        local = f"127.0.0.1:{host_port}/{repo}"
        self.client.images.get(tag).tag(local, version)
        self.client.login(REGISTRY_USER, self.registry_password(), registry=f"127.0.0.1:{host_port}")
        self.log(f"pushing {tag} to the local registry")
        for line in self.client.images.push(local, version, stream=True, decode=True):
            if "error" in line:
                raise RuntimeError(f"push of {tag} failed: {line['error']}")
        self.client.images.remove(f"{local}:{version}", noprune=True)
        return f"{self.cfg.infra}:{REGISTRY_PORT}/{repo}:{version}"

    def _controller_key(self) -> str:
        """The controller's key for the sandbox nodes (ed25519, made once, 0600)."""
        ssh_dir = self.cfg.inventory_dir / ".ssh"
        ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = ssh_dir / "id_ed25519"
        if not key.exists():
            import subprocess

            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.cfg.name}-controller", "-f", str(key)],
                check=True,
            )
        key.chmod(0o600)
        return (ssh_dir / "id_ed25519.pub").read_text().strip()

    def _ensure_node(self, i: int, tag: str, pubkey: str, apt_proxy: str):
        name = self.cfg.node(i)
        hostname = f"node-{i}"
        try:
            c = self.client.containers.get(name)
            if c.image.tags and tag not in c.image.tags:
                self.log(f"{name} runs an older node image: recreating")
                c.remove(force=True, v=True)
                raise docker.errors.NotFound(name)
            if c.status != "running":
                c.start()
            self.log(f"{name} ({hostname}) already up")
            self._seed_node(c, pubkey, apt_proxy)
            return c
        except docker.errors.NotFound:
            pass
        vol = self._volume(f"{name}-docker")
        kw = self._systemd_run_kwargs(name, hostname, "node")
        kw["volumes"][vol.name] = {"bind": "/var/lib/docker", "mode": "rw"}
        self.log(f"starting {name} ({hostname})")
        # The alias makes node-N resolve on the cluster network, as DNS would on a real one.
        c = self.client.containers.create(
            tag,
            network=self.cfg.network,
            networking_config={self.cfg.network: self.client.api.create_endpoint_config(aliases=[hostname])},
            **kw,
        )
        c.start()
        self._seed_node(c, pubkey, apt_proxy)
        return c

    @staticmethod
    def _seed_node(c, pubkey: str, apt_proxy: str) -> None:
        """What a cloud image brings: the controller's key for root, the provider's apt mirror."""
        _put_file(c, "/root/.ssh/authorized_keys", pubkey + "\n", 0o600, dir_mode=0o700)
        _put_file(c, "/etc/apt/apt.conf.d/01gpucluster-proxy", f'Acquire::http::Proxy "{apt_proxy}";\n', 0o644)

    def _exec(self, c, cmd: str, wait_systemd: bool = False) -> str:
        if wait_systemd:
            self._wait_systemd(c)
        rc, out = c.exec_run(["sh", "-c", cmd])
        if rc != 0:
            raise RuntimeError(f"{c.name}: `{cmd}` failed ({rc}): {out.decode(errors='replace')[-1000:]}")
        return out.decode()

    def _wait_systemd(self, c, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc, out = c.exec_run(["systemctl", "is-system-running"])
            state = out.decode().strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"{c.name}: systemd did not finish booting in {timeout:.0f}s (state {state!r})")

    def _wait_port(self, c, port: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc, _ = c.exec_run(["sh", "-c", f"ss -Hltn 'sport = :{port}' | grep -q LISTEN"])
            if rc == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{c.name}: nothing listens on port {port} after {timeout:.0f}s")

    def _wait_for_sshd(self, c) -> str:
        """Wait for sshd on the node; returns its ed25519 host public key (for known_hosts)."""
        self._wait_systemd(c)
        self._wait_port(c, 22)
        return self._exec(c, "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[0:2]

    def _write_inventory(self, nodes, host_keys, registry_ref: str) -> Path:
        inv = self.cfg.inventory_dir
        (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
        hosts = {}
        known = []
        for c in nodes:
            c.reload()
            ip = c.attrs["NetworkSettings"]["Networks"][self.cfg.network]["IPAddress"]
            ipaddress.ip_address(ip)
            hostname = c.attrs["Config"]["Hostname"]
            hosts[hostname] = {"ansible_host": ip}
            known.append(f"{ip} {' '.join(host_keys[c.name])}")
        (inv / ".ssh" / "known_hosts").write_text("\n".join(known) + "\n")
        doc = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}
        header = "# Written by `gpucluster sandbox up`; `gpucluster sandbox down` removes it.\n---\n"
        (inv / "hosts.yml").write_text(header + yaml.safe_dump(doc, sort_keys=False))
        (inv / "group_vars" / "all" / "sandbox.yml").write_text(
            header + SANDBOX_VARS.format(
                registry_ref=registry_ref, registry=f"{self.cfg.infra}:{REGISTRY_PORT}", user=REGISTRY_USER
            )
        )
        return inv / "hosts.yml"

    # ------------------------------------------------------------ status/down
    def _labelled_containers(self, role: str | None = None):
        filters = {"label": [f"{LABEL}={self.cfg.name}"]}
        if role:
            filters["label"].append(f"{LABEL}.role={role}")
        return self.client.containers.list(all=True, filters=filters)

    def status(self) -> dict:
        rows = []
        for c in sorted(self._labelled_containers(), key=lambda c: c.name):
            nets = c.attrs["NetworkSettings"]["Networks"]
            ip = nets.get(self.cfg.network, {}).get("IPAddress", "")
            rows.append(
                {"name": c.name, "hostname": c.attrs["Config"]["Hostname"], "role": c.labels.get(f"{LABEL}.role"),
                 "state": c.status, "ip": ip}
            )
        return {"name": self.cfg.name, "containers": rows, "inventory": str(self.cfg.inventory_dir / "hosts.yml")}

    def down(self, purge_images: bool = False) -> list[str]:
        """Remove the containers, volumes, network and inventory that ``up`` made."""
        removed = []
        flt = {"label": [f"{LABEL}={self.cfg.name}"]}
        for c in self.client.containers.list(all=True, filters=flt):
            c.remove(force=True, v=True)
            removed.append(f"container {c.name}")
        for v in self.client.volumes.list(filters=flt):
            v.remove(force=True)
            removed.append(f"volume {v.name}")
        for n in self.client.networks.list(filters=flt):
            n.remove()
            removed.append(f"network {n.name}")
        inv = self.cfg.inventory_dir
        key = inv / CLUSTER_KEY
        for f in (inv / "hosts.yml", inv / "group_vars/all/sandbox.yml", inv / ".ssh/known_hosts",
                  inv / ".ssh/id_ed25519", inv / ".ssh/id_ed25519.pub", inv / ".registry-password",
                  key, key.with_name(key.name + ".pub")):
            if f.exists():
                f.unlink()
                removed.append(f"file {f}")
        for d in (inv / "group_vars/all", inv / "group_vars", inv / ".ssh", key.parent, inv):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        if purge_images:
            for repo in (images.NODE_REPO, images.INFRA_REPO, images.TRAIN_REPO):
                for img in self.client.images.list(name=repo):
                    self.client.images.remove(img.id, force=True)
                    removed.append(f"image {img.tags}")
        return removed


SANDBOX_VARS = """# The sandbox's honest limits (../shared/ENVIRONMENT.md). Production defaults live in each
# role's defaults/main.yml; these override only what this machine cannot do.
ansible_user: root
ansible_ssh_private_key_file: "{{{{ inventory_dir }}}}/.ssh/id_ed25519"
ansible_ssh_common_args: >-
  -o UserKnownHostsFile={{{{ inventory_dir }}}}/.ssh/known_hosts -o StrictHostKeyChecking=yes
  -o ConnectTimeout=10
# The node image is built here (images.py: Debian with python3), so its Python is known: no
# interpreter discovery, which under mitogen starts the node's Python twice (about 1 s per
# node and run). `gpucluster hosts` writes the discovered one for real hosts the same way.
ansible_python_interpreter: /usr/bin/python3

# No GPU in the sandbox: said explicitly, or preflight fails on a GPU-less node.
preflight_require_gpu: false
gpucluster_slots_per_node: 1

# Nested Docker pulls from the sandbox's own registry over plain HTTP.
docker_insecure_registries:
  - "{registry}"

# The training image built by `gpucluster sandbox up` (Open MPI, sshd, mpi4py, numpy).
training_image_ref: "{registry_ref}"
# The local registry asks for a login (htpasswd). On a real cluster keep the password in
# ansible-vault; here it is a throwaway made by `sandbox up`, read from beside the inventory.
training_image_registry_username: {user}
training_image_registry_password: "{{{{ lookup('ansible.builtin.file', inventory_dir + '/.registry-password') }}}}"
# No GPU: no --gpus. The machine's root lacks CAP_SYS_RESOURCE, so no --privileged and
# memlock stays at the 8 MiB hard limit; CAP_SYS_PTRACE lets Open MPI's shared-memory
# transport use single-copy (CMA) between ranks on one node.
training_image_gpus: ""
training_image_privileged: false
training_image_capabilities:
  - SYS_PTRACE
training_image_ulimit_memlock: 8388608
# The training container does not bind /dev/hugepages: the nodes get no hugepages (the
# network stage's pages wait for a reboot that containers do not get).
training_image_bind_hugepages: false

# GPU and RDMA host stack (playbooks/host_stack.yml). The NVIDIA 535 driver installs for
# real from Debian non-free, but the nodes run the machine's kernel, for which Debian has
# no headers: DKMS builds nothing, the driver stays installed-not-loaded, and with no GPU
# on the PCI bus that is the expected state (no reboot is asked for).
nvidia_driver_install_headers: false
# Containers cannot reboot: a node that needed it would fail at the reboot point instead.
gpucluster_allow_reboot: false
# rdma-core and tools install for real; there is no RDMA device, so no port checks and
# GPUDirect RDMA (gpudirect_mode: auto) reports it has nothing to connect. Root lacks
# CAP_SYS_RESOURCE here, so no process can raise memlock above the 8 MiB hard limit:
# pam_limits could not apply an unlimited value at SSH logins, and dockerd could not
# start a container with it (ENVIRONMENT.md), so both stay at that limit.
rdma_memlock: "8192"
rdma_docker_memlock: 8388608
# NVIDIA's container toolkit repository is not reachable from this machine (its
# repository and key logic is tested by roles/nvidia_container_toolkit/molecule).
nvidia_container_toolkit_enabled: false

# Hugepages (playbooks/host_stack.yml). The nodes are containers that GRUB never boots:
# the hugepages drop-in is written (two 1 GiB pages: no GPU here, and the nodes share this
# machine's memory), no boot configuration is regenerated, no reboot is asked for, and the
# stage reports the pages as pending; /proc/sys is read-only in the nodes.
hugepages_count: 2
hugepages_bootloader_update: false
# No cloud API and no second NIC: no ENIs, no policy routing. No NCCL net plugin library
# exists here, so the plugin stays disabled (its molecule scenario builds a stand-in).
cloud_eni_provider: ""
multi_nic_interfaces: []
nccl_net_plugin_enabled: false

# The training image's python is Debian's, which refuses pip installs outside a venv
# (PEP 668, EXTERNALLY-MANAGED); playbooks/runtime.yml installs into it like a vendor image.
runtime_pip_extra_args:
  - --break-system-packages
"""


def _put_file(c, path: str, content: str, mode: int, dir_mode: int | None = None) -> None:
    buf = io.BytesIO()
    p = Path(path)
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if dir_mode is not None:
            d = tarfile.TarInfo(p.parent.name)
            d.type = tarfile.DIRTYPE
            d.mode = dir_mode
            tar.addfile(d)
            arc = f"{p.parent.name}/{p.name}"
            dest = str(p.parent.parent)
        else:
            arc, dest = p.name, str(p.parent)
        data = content.encode()
        info = tarfile.TarInfo(arc)
        info.size = len(data)
        info.mode = mode
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    if not c.put_archive(dest, buf.getvalue()):
        raise RuntimeError(f"{c.name}: could not write {path}")


def default_inventory_dir() -> Path:
    return Path(os.environ.get("GPUCLUSTER_SANDBOX_INVENTORY", "inventory/sandbox"))
