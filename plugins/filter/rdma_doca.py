"""Jinja filters of the rdma role: does a DOCA-Host local repository package fit this node?

Pure functions, unit-tested in ``tests/unit/roles/test_rdma_doca.py``.

What NVIDIA ships and how it installs (DOCA documentation, "DOCA-Host Installation and
Upgrade" and "DOCA Profiles", DOCA 2.9 to 3.2; download links in public install scripts):

- one ``.deb`` per distribution release and architecture, named the Debian way
  (``<Package>_<Version>_<Architecture>.deb``) with the package ``doca-host``, e.g.
  ``doca-host_3.2.1-044000-25.10-ubuntu2404_amd64.deb``,
  ``doca-host_3.1.0-091000-25.07-ubuntu2204_amd64.deb``,
  ``doca-host_3.2.2-035000-25.10-debian13_amd64.deb``,
  ``doca-host_2.9.2-012101-24.10-ubuntu2204_arm64.deb``: the version is
  ``<DOCA version>-<build>-<OFED release yy.mm>-<distribution>``;
- ``dpkg -i`` of it adds a local apt repository (``/usr/share/doca-host-<version>/repo``) and
  its source; then ``apt-get update`` and ``apt-get install <profile>`` (doca-ofed,
  doca-roce, doca-networking, doca-all, doca-host-basic from 3.2, doca-ofed-userspace);
- the kernel modules are built by DKMS for the running kernel (only DKMS from DOCA 3.2),
  which needs that kernel's headers; from 3.2 there is one package per major release
  (``debian13``, ``rhel9``), earlier ones could name a minor release (``debian12.5`` style
  tokens ``debian125``); Ubuntu always names its release (``ubuntu2204`` is 22.04).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors

PACKAGE = "doca-host"
EXAMPLE = "doca-host_3.2.1-044000-25.10-ubuntu2404_amd64.deb"
_VERSION_RE = re.compile(
    r"^(?P<doca>\d+\.\d+\.\d+)-(?P<build>\d+)-(?P<ofed>\d+\.\d+)-(?P<distro>[a-z]+[0-9][0-9a-z.]*)$")
_FILE_RE = re.compile(r"^doca-host_(?P<version>[^_/]+)_(?P<arch>[a-z0-9]+)\.deb$")
# Debian's dpkg architecture of a kernel machine name (ansible_facts.architecture).
_DPKG_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "amd64": "amd64", "arm64": "arm64"}


def _version_fields(version, where):
    m = _VERSION_RE.match(version or "")
    if not m:
        raise ValueError(f"{where}: version {version!r} is not DOCA-Host's <DOCA version>-<build>-<OFED "
                         f"release>-<distribution> (as in {EXAMPLE})")
    return m.groupdict()


def doca_host_file(name):
    """Fields of a DOCA-Host package file name: version, doca, build, ofed, distro, arch.

    ValueError (naming the expected form) for a name that is not NVIDIA's.
    """
    base = os.path.basename(name or "")
    m = _FILE_RE.match(base)
    if not m or not _VERSION_RE.match(m.group("version")):
        raise ValueError(f"{base or name!r} is not a DOCA-Host local repository package name "
                         f"(doca-host_<DOCA version>-<build>-<OFED release>-<distribution>_<arch>.deb, "
                         f"as in {EXAMPLE})")
    return {"version": m.group("version"), "arch": m.group("arch"),
            **_version_fields(m.group("version"), base)}


def doca_host_control(fields):
    """The same fields from the package's control fields (``dpkg-deb -f``: Package, Version,
    Architecture, as a mapping or as ``Key: value`` text); ValueError when it is not doca-host."""
    if isinstance(fields, str):
        fields = dict(line.split(":", 1) for line in fields.splitlines() if ":" in line)
    fields = {str(k).strip().lower(): str(v).strip() for k, v in (fields or {}).items()}
    if fields.get("package") != PACKAGE:
        raise ValueError(f"its control file says Package {fields.get('package') or 'nothing'!r}, not "
                         f"{PACKAGE}: not a DOCA-Host local repository package")
    return {"version": fields.get("version", ""), "arch": fields.get("architecture", ""),
            **_version_fields(fields.get("version", ""), "its control file")}


def node_distro(distribution, version):
    """DOCA's name of the node's release: ``ubuntu2204`` (22.04), ``debian12`` (any 12.x)."""
    dist = str(distribution).lower()
    version = str(version)
    if dist == "ubuntu":
        return "ubuntu" + version.replace(".", "")
    if dist == "debian":
        return "debian" + version.split(".")[0]
    return dist + version


def distro_fits(built_for, distribution, version):
    """Is a package built for ``built_for`` (``debian12``, ``debian125``, ``ubuntu2204``) made for
    this node's release? Debian: the same major release (DKMS builds for the point release's
    kernel); Ubuntu and anything else: the same release exactly."""
    node = node_distro(distribution, version)
    m_built = re.match(r"^debian(1\d)\d*$", built_for or "")
    m_node = re.match(r"^debian(\d+)$", node)
    if m_built and m_node:
        return m_built.group(1) == m_node.group(1)
    return built_for == node


def doca_problems(name, distribution, version, machine, control=None):
    """Why this DOCA-Host package cannot be installed on this node; empty when it fits.

    ``name``: the package's file name (or URL/path); ``distribution``/``version``: the node's
    (``Debian``/``12.5``); ``machine``: ``ansible_facts.architecture``; ``control``: its control
    fields once it is on the node (``dpkg-deb -f``), to catch a renamed file. Each problem is
    one sentence with the fix.
    """
    problems = []
    node = node_distro(distribution, version)
    node_arch = _DPKG_ARCH.get(str(machine), str(machine))
    try:
        info = doca_host_file(name)
    except ValueError as exc:
        return [f"{exc}. Fix: point rdma_doca_package.src at the file as NVIDIA names it on the DOCA "
                f"downloads page (DOCA-Host, deb local)"]
    if not distro_fits(info["distro"], distribution, version):
        problems.append(f"it is built for {info['distro']}, this node runs {distribution} {version} ({node}). "
                        f"Fix: download the DOCA-Host package for {node}")
    if info["arch"] != node_arch:
        problems.append(f"it is built for {info['arch']}, this node is {node_arch}. Fix: download the "
                        f"DOCA-Host package for {node_arch}")
    if control is not None:
        try:
            inside = doca_host_control(control)
        except ValueError as exc:
            problems.append(f"{exc}. Fix: download it again from NVIDIA")
        else:
            if (inside["version"], inside["arch"]) != (info["version"], info["arch"]):
                problems.append(f"its control file says {PACKAGE} {inside['version']} {inside['arch']}, its "
                                f"name {info['version']} {info['arch']}: the file was renamed. Fix: use the "
                                f"DOCA-Host package for {node} under NVIDIA's name")
    return problems


class FilterModule:
    def filters(self):
        return {
            "rdma_doca_host_file": value_errors(doca_host_file),
            "rdma_doca_problems": value_errors(doca_problems),
            "rdma_doca_node_distro": value_errors(node_distro),
        }
