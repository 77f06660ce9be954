"""``gpucluster hosts init``: SSH trust and an inventory for real hosts.

For each host: connect with the controller key (fabric over paramiko); when the key is not
yet trusted, ask for the password once (for all hosts) and append the controller's public
key to ``~/.ssh/authorized_keys`` there. Then gather what the inventory needs from the host
itself (hostname, OS, CPU count, memory, NVIDIA GPUs from ``lspci -nn``, default route NIC)
and write ``<inventory-dir>/hosts.yml``. Existing files are merged: hosts and variables a
user added are kept, a backup of the old file is kept beside it. A login user other than
root gets ``ansible_become: true`` (every stage changes the system). An inventory directory
without ``group_vars/`` gets a copy of ``inventory/sample/group_vars`` (every stage's
settings at their defaults; the wheel carries it as package data), with ``training_image_ref``
set from ``--image`` when given. ``<inventory-dir>/known_hosts`` is merged too: every host
already there keeps its key, a new host's key is added, and a host whose key changed is refused
(no silent re-trust).
"""

from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import hmac
import importlib.resources
import re
import shlex
import shutil
import time
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

import paramiko
import yaml
from fabric import Connection

NVIDIA_VENDOR = "10de"
# PCI classes of GPUs (lspci -nn prints [0300] VGA, [0302] 3D controller).
_GPU_LINE = re.compile(r"\[(0300|0302)\].*\[" + NVIDIA_VENDOR + r":[0-9a-f]{4}\]", re.I)


@dataclass
class HostFacts:
    address: str
    hostname: str
    os: str
    cpus: int
    mem_mib: int
    gpus: int
    default_nic: str
    #: The node's Python as Ansible's interpreter discovery would find it ("" when none).
    python: str = ""


def count_nvidia_gpus(lspci_nn: str) -> int:
    """NVIDIA display/3D controllers in ``lspci -nn`` output (audio/bridge functions excluded)."""
    return sum(1 for line in lspci_nn.splitlines() if _GPU_LINE.search(line))


def parse_facts(address: str, out: dict[str, str]) -> HostFacts:
    """Facts from the outputs of the probe commands (keys as in ``PROBES``)."""
    os_name = ""
    for line in out["os"].splitlines():
        if line.startswith("PRETTY_NAME="):
            os_name = line.split("=", 1)[1].strip().strip('"')
    mem_kib = 0
    for line in out["mem"].splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    route = out["route"].split()
    nic = route[route.index("dev") + 1] if "dev" in route else ""
    return HostFacts(
        address=address,
        hostname=out["hostname"].strip(),
        os=os_name,
        cpus=int(out["cpus"].strip() or 0),
        mem_mib=mem_kib // 1024,
        gpus=count_nvidia_gpus(out["lspci"]),
        default_nic=nic,
        python=next((line.strip() for line in out.get("python", "").splitlines() if line.startswith("/")), ""),
    )


def python_probe() -> str:
    """Ansible's own interpreter discovery as one shell line: the first of its
    ``INTERPRETER_PYTHON_FALLBACK`` list (this ansible-core's, not a copy) that ``command -v``
    finds. Written into the inventory as ``ansible_python_interpreter``, it spares every run the
    discovery, which under mitogen costs a second start of the node's Python (about 1 s per
    node and run, measured on the sandbox)."""
    from ansible import constants

    fallback = constants.config.get_config_value("INTERPRETER_PYTHON_FALLBACK")
    return " || ".join(f"command -v {shlex.quote(p)}" for p in fallback) + " || true"


PROBES = {
    "hostname": "hostname -s",
    "os": "cat /etc/os-release",
    "cpus": "nproc",
    "mem": "cat /proc/meminfo",
    "lspci": "lspci -nn 2>/dev/null || true",
    "route": "ip -4 route show default 2>/dev/null || true",
}


def _connect(host: str, user: str, key: Path, password: str | None = None, port: int = 22) -> Connection:
    kwargs: dict = {"key_filename": str(key), "look_for_keys": False, "allow_agent": False, "timeout": 15}
    if password is not None:
        kwargs = {"password": password, "look_for_keys": False, "allow_agent": False, "timeout": 15}
    c = Connection(host, user=user, port=port, connect_kwargs=kwargs)
    c.open()
    return c


def ensure_trust(hosts: list[str], user: str, key: Path, ask_password=getpass.getpass) -> dict[str, Connection]:
    """Connections to every host with the key, installing the key with one password if needed."""
    pub = Path(str(key) + ".pub").read_text().strip()
    conns: dict[str, Connection] = {}
    untrusted = []
    for h in hosts:
        try:
            conns[h] = _connect(h, user, key)
        except paramiko.AuthenticationException:
            untrusted.append(h)
        except (OSError, paramiko.SSHException) as exc:
            raise RuntimeError(
                f"{h}: cannot reach sshd as {user}: {exc}. Fix: check the address, port 22, firewall"
            ) from exc
    if untrusted:
        password = ask_password(f"SSH password for {user} on {', '.join(untrusted)} (asked once): ")
        for h in untrusted:
            try:
                c = _connect(h, user, key, password=password)
            except paramiko.AuthenticationException as exc:
                raise RuntimeError(f"{h}: neither the key {key} nor the password is accepted for {user}") from exc
            q = shlex.quote(pub)
            c.run(
                "umask 077 && mkdir -p ~/.ssh && touch ~/.ssh/authorized_keys && "
                f"(grep -qxF {q} ~/.ssh/authorized_keys || echo {q} >> ~/.ssh/authorized_keys)",
                hide=True,
                in_stream=False,
            )
            c.close()
            conns[h] = _connect(h, user, key)
    return conns


def gather(conn: Connection, address: str) -> HostFacts:
    probes = {**PROBES, "python": python_probe()}
    out = {k: conn.run(cmd, hide=True, warn=True, in_stream=False).stdout for k, cmd in probes.items()}
    return parse_facts(address, out)


def _known_host_matches(pattern: str, host: str) -> bool:
    """Whether one known_hosts host pattern names ``host`` (plain, ``[host]:port``, or hashed ``|1|salt|hash``)."""
    if pattern.startswith("|1|"):
        try:
            salt, digest = (base64.b64decode(p) for p in pattern[3:].split("|", 1))
        except (ValueError, binascii.Error):
            return False
        return hmac.compare_digest(hmac.new(salt, host.encode(), hashlib.sha1).digest(), digest)
    return pattern == host


def merge_known_hosts(existing: str, seen: list[tuple[str, str, str]], path: str = "known_hosts") -> str:
    """known_hosts text with every host of ``existing`` kept and the ``seen`` keys added.

    ``seen``: ``(host, key type, base64 key)`` from this contact. A host whose key of that type is
    already listed with the same key adds nothing; with another key it is refused (a reinstalled
    node, or a machine in the middle): strict host-key checking must not be undone silently.
    Lines that are comments, markers (``@cert-authority``, ``@revoked``) or not parseable are kept
    as they are.
    """
    lines = existing.splitlines()
    entries = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and not line.lstrip().startswith(("#", "@")):
            entries.append((fields[0].split(","), fields[1], fields[2]))
    added = []
    for host, ktype, key in seen:
        known = [k for patterns, t, k in entries if t == ktype and any(_known_host_matches(p, host) for p in patterns)]
        if key in known:
            continue
        if known:
            raise RuntimeError(
                f"{host}: its {ktype} host key is not the one {path} holds for it (the node was reinstalled, or "
                f"something in the middle answers for it); nothing was written. Fix: check the node's key "
                f"(ssh-keygen -lf /etc/ssh/ssh_host_{ktype.removeprefix('ssh-')}_key.pub on its console), then "
                f"ssh-keygen -R {host} -f {path} and rerun")
        added.append(f"{host} {ktype} {key}")
        entries.append(([host], ktype, key))
    return "\n".join(lines + added) + "\n" if lines or added else ""


def render_inventory(facts: list[HostFacts], user: str, key: Path, existing: dict | None = None) -> dict:
    """hosts.yml content: group gpu_nodes, one host per node named by its hostname.

    ``existing`` (a previous hosts.yml) is merged: its other groups, hosts and variables stay;
    only ansible_host/ansible_user and the gathered facts of these hosts are refreshed; the
    node's Python (``ansible_python_interpreter``) is added where the entry has none.
    """
    doc = existing or {}
    allg = doc.setdefault("all", {})
    children = allg.setdefault("children", {})
    group = children.setdefault("gpu_nodes", {})
    hosts = group.setdefault("hosts", {}) or {}
    group["hosts"] = hosts
    for f in facts:
        entry = hosts.get(f.hostname) or {}
        if user != "root":
            entry.setdefault("ansible_become", True)
        entry.update(
            {
                "ansible_ssh_common_args": "-o UserKnownHostsFile={{ inventory_dir }}/known_hosts "
                "-o StrictHostKeyChecking=yes",
                "ansible_host": f.address,
                "ansible_user": user,
                "ansible_ssh_private_key_file": str(key),
                "gpucluster_gathered": {"os": f.os, "cpus": f.cpus, "mem_mib": f.mem_mib, "gpus": f.gpus,
                                        "default_nic": f.default_nic},
            }
        )
        if f.python:
            # Kept where the inventory names one already (a virtualenv, say); delete it to rediscover.
            entry.setdefault("ansible_python_interpreter", f.python)
        hosts[f.hostname] = entry
    names = [f.hostname for f in facts]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise RuntimeError(f"hosts report the same hostname {sorted(dupes)}: give every node a unique hostname")
    return doc


#: Where the sample inventory is: ``inventory/sample`` of the checkout this module runs from,
#: else the wheel's package data ``gpucluster.sample_inventory`` (the same files, mapped in
#: pyproject.toml).
SAMPLE_PACKAGE = "gpucluster.sample_inventory"
SAMPLE_IMAGE_REF = "registry.example.com/team/horovod-lightcc:1.0"


def sample_inventory() -> Traversable | None:
    """The sample inventory directory (``hosts.yml``, ``group_vars/all/*.yml``), or None.

    Run from a checkout (``src/gpucluster`` beside ``galaxy.yml``: ``PYTHONPATH=src`` or an
    editable install), that checkout's ``inventory/sample``; installed from the wheel, its package
    data, read with :mod:`importlib.resources` (so no path outside the installed package)."""
    checkout = Path(__file__).resolve().parents[2]
    if Path(__file__).resolve().parent.parent.name == "src" and (checkout / "galaxy.yml").is_file():
        sample = checkout / "inventory" / "sample"
        return sample if sample.is_dir() else None
    try:
        files = importlib.resources.files(SAMPLE_PACKAGE)
    except ModuleNotFoundError:
        return None
    return files if files.joinpath("group_vars").is_dir() else None


def _copy_tree(src: Traversable, dest: Path) -> None:
    """``shutil.copytree`` for a :class:`~importlib.resources.abc.Traversable` (a directory of
    package data, which need not be a file system path)."""
    dest.mkdir(parents=True)
    for item in src.iterdir():
        if item.is_dir():
            _copy_tree(item, dest / item.name)
        elif item.name.endswith(".yml"):
            (dest / item.name).write_bytes(item.read_bytes())


def seed_group_vars(inventory_dir: Path, image: str | None = None, sample: Traversable | None = None) -> list[str]:
    """Give ``inventory_dir`` the sample's group_vars when it has none; returns what to do next.

    An existing ``group_vars/`` is the user's and is never touched. ``image`` replaces the
    sample's example ``training_image_ref`` (registry.example.com/...), which cannot be pulled.
    ``sample``: the sample inventory directory (default :func:`sample_inventory`).
    """
    dest = inventory_dir / "group_vars"
    if dest.exists():
        return []
    sample = sample if sample is not None else sample_inventory()
    if sample is None or not sample.joinpath("group_vars").is_dir():
        return [f"no {dest}: copy inventory/sample/group_vars there from a gpucluster checkout "
                f"(this installation has no package data {SAMPLE_PACKAGE})"]
    _copy_tree(sample.joinpath("group_vars"), dest)
    todo = [f"{dest} copied from the sample inventory (inventory/sample): every stage at its defaults; review it"]
    ref_file = dest / "all" / "training_image.yml"
    if image:
        text = ref_file.read_text()
        new = re.sub(r"(?m)^training_image_ref: .*$", lambda _m: f"training_image_ref: {image}", text)
        if new == text:
            raise RuntimeError(f"{ref_file} has no training_image_ref line to set")
        ref_file.write_text(new)
    else:
        todo.append(f"set training_image_ref in {ref_file} (now the example {SAMPLE_IMAGE_REF}), "
                    "or rerun with --image REF")
    return todo


def init(hosts: list[str], user: str, key: Path | None, inventory_dir: Path, ask_password=getpass.getpass,
         image: str | None = None) -> tuple[Path, list[str]]:
    if not hosts:
        raise ValueError("--hosts is empty: give a comma-separated list of addresses")
    key = key or Path.home() / ".ssh" / "id_ed25519"
    if not key.exists():
        import subprocess

        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    conns = ensure_trust(hosts, user, key, ask_password)
    facts = [gather(conns[h], h) for h in hosts]
    inventory_dir.mkdir(parents=True, exist_ok=True)
    # Host keys seen on first contact (trust on first use, as ssh's accept-new), so that
    # Ansible then connects with StrictHostKeyChecking=yes.
    # Merged into what is there, so the hosts of earlier runs keep their keys.
    seen = []
    for h, c in conns.items():
        k = c.client.get_transport().get_remote_server_key()
        seen.append((h, k.get_name(), k.get_base64()))
        c.close()
    known_path = inventory_dir / "known_hosts"
    known = merge_known_hosts(known_path.read_text() if known_path.exists() else "", seen, str(known_path))
    known_path.write_text(known)
    path = inventory_dir / "hosts.yml"
    existing = None
    if path.exists():
        existing = yaml.safe_load(path.read_text()) or {}
        shutil.copy2(path, path.with_name(f"hosts.yml.{time.strftime('%Y%m%dT%H%M%S')}.bak"))
    doc = render_inventory(facts, user, key.resolve(), existing)
    path.write_text("# Written by `gpucluster hosts init`; edit freely, reruns merge.\n---\n"
                    + yaml.safe_dump(doc, sort_keys=False))
    return path, seed_group_vars(inventory_dir, image)
