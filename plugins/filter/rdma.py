"""Jinja filters of the RDMA component: the GID table and GID index (``module_utils/rdma.py``,
the one GID model), and the rdma role's installer checks (DOCA-Host package, MLNX_OFED tarball).

Examples::

    {{ ibv_devinfo_v_text | gpucluster.cluster.nccl_gid_index('192.0.2.6') }}     -> 3
    {{ ibv_devinfo_v_text | gpucluster.cluster.rdma_check_gid_index(3) }}          -> [] (fine)
    {{ deb | gpucluster.cluster.rdma_doca_problems(distribution, version, machine) }}

Errors (ParseError and other ValueError) become AnsibleFilterError with the same message.

DOCA-Host
=========

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

MLNX_OFED
=========

What an MLNX_OFED_LINUX deb tarball holds and how its installer decides (Mellanox
``mlnx_add_kernel_support.sh``, ``mlnxofedinstall``):

- ``.mlnx`` (or ``mlnx``): the release, e.g. ``23.10-1.1.9.0``; ``ofed_info -s`` prints
  ``MLNX_OFED_LINUX-23.10-1.1.9.0:`` once it is installed;
- ``distro``: the distribution it was built for (``ubuntu22.04``, ``debian12.1``), or
  ``skip-distro-check`` for a tarball rebuilt with ``--skip-distro-check``;
- ``DEBS/``: the packages. Kernel modules come either prebuilt for named kernels,
  ``mlnx-ofed-kernel-modules*<kernel>_*.deb`` (the test mlnx_add_kernel_support.sh applies to
  decide whether a kernel "is already supported"), or as DKMS sources
  (``mlnx-ofed-kernel-dkms_*.deb``), built on the node for the running kernel, which then
  needs that kernel's headers.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils import peermem, perftest, rdma
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors

# ---- GID table and index (module_utils/rdma.py) ---------------------------------------------


def _gids(gids):
    return rdma.parse_gid_table(gids) if isinstance(gids, str) else gids


def gid_index(gids, ipv4=None):
    """``ibv_devinfo_v_text | nccl_gid_index('192.0.2.6')`` -> RoCE v2 IPv4 GID index or None."""
    return rdma.pick_roce_gid_index(_gids(gids), ipv4)


def check_gid_index(gids, index, ipv4=None):
    """``gid_table | rdma_check_gid_index(3, '192.0.2.6')`` -> problems with a configured index."""
    return rdma.check_gid_index(index, _gids(gids), ipv4)


# ---- DOCA-Host ------------------------------------------------------------------------------

DOCA_PACKAGE = "doca-host"
DOCA_EXAMPLE = "doca-host_3.2.1-044000-25.10-ubuntu2404_amd64.deb"
_DOCA_VERSION_RE = re.compile(
    r"^(?P<doca>\d+\.\d+\.\d+)-(?P<build>\d+)-(?P<ofed>\d+\.\d+)-(?P<distro>[a-z]+[0-9][0-9a-z.]*)$")
_DOCA_FILE_RE = re.compile(r"^doca-host_(?P<version>[^_/]+)_(?P<arch>[a-z0-9]+)\.deb$")
# Debian's dpkg architecture of a kernel machine name (ansible_facts.architecture).
_DPKG_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "amd64": "amd64", "arm64": "arm64"}


def _doca_version_fields(version, where):
    m = _DOCA_VERSION_RE.match(version or "")
    if not m:
        raise ValueError(f"{where}: version {version!r} is not DOCA-Host's <DOCA version>-<build>-<OFED "
                         f"release>-<distribution> (as in {DOCA_EXAMPLE})")
    return m.groupdict()


def doca_host_file(name):
    """Fields of a DOCA-Host package file name: version, doca, build, ofed, distro, arch.

    ValueError (naming the expected form) for a name that is not NVIDIA's.
    """
    base = os.path.basename(name or "")
    m = _DOCA_FILE_RE.match(base)
    if not m or not _DOCA_VERSION_RE.match(m.group("version")):
        raise ValueError(f"{base or name!r} is not a DOCA-Host local repository package name "
                         f"(doca-host_<DOCA version>-<build>-<OFED release>-<distribution>_<arch>.deb, "
                         f"as in {DOCA_EXAMPLE})")
    return {"version": m.group("version"), "arch": m.group("arch"),
            **_doca_version_fields(m.group("version"), base)}


def doca_host_control(fields):
    """The same fields from the package's control fields (``dpkg-deb -f``: Package, Version,
    Architecture, as a mapping or as ``Key: value`` text); ValueError when it is not doca-host."""
    if isinstance(fields, str):
        fields = dict(line.split(":", 1) for line in fields.splitlines() if ":" in line)
    fields = {str(k).strip().lower(): str(v).strip() for k, v in (fields or {}).items()}
    if fields.get("package") != DOCA_PACKAGE:
        raise ValueError(f"its control file says Package {fields.get('package') or 'nothing'!r}, not "
                         f"{DOCA_PACKAGE}: not a DOCA-Host local repository package")
    return {"version": fields.get("version", ""), "arch": fields.get("architecture", ""),
            **_doca_version_fields(fields.get("version", ""), "its control file")}


def doca_node_distro(distribution, version):
    """DOCA's name of the node's release: ``ubuntu2204`` (22.04), ``debian12`` (any 12.x)."""
    dist = str(distribution).lower()
    version = str(version)
    if dist == "ubuntu":
        return "ubuntu" + version.replace(".", "")
    if dist == "debian":
        return "debian" + version.split(".")[0]
    return dist + version


def doca_distro_fits(built_for, distribution, version):
    """Is a package built for ``built_for`` (``debian12``, ``debian125``, ``ubuntu2204``) made for
    this node's release? Debian: the same major release (DKMS builds for the point release's
    kernel); Ubuntu and anything else: the same release exactly."""
    node = doca_node_distro(distribution, version)
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
    node = doca_node_distro(distribution, version)
    node_arch = _DPKG_ARCH.get(str(machine), str(machine))
    try:
        info = doca_host_file(name)
    except ValueError as exc:
        return [f"{exc}. Fix: point rdma_doca_package.src at the file as NVIDIA names it on the DOCA "
                f"downloads page (DOCA-Host, deb local)"]
    if not doca_distro_fits(info["distro"], distribution, version):
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
                problems.append(f"its control file says {DOCA_PACKAGE} {inside['version']} {inside['arch']}, its "
                                f"name {info['version']} {info['arch']}: the file was renamed. Fix: use the "
                                f"DOCA-Host package for {node} under NVIDIA's name")
    return problems


# ---- MLNX_OFED ------------------------------------------------------------------------------

_KVER_RE = re.compile(r"^mlnx-ofed-kernel-modules[^_]*_(?P<version>[^_]+)_[^_]+\.deb$")
_KERNEL_IN_VERSION_RE = re.compile(r"(?:\.kver\.|-)(?P<kernel>\d+\.\d+\.\d+[^_]*)$")


def ofed_release(text):
    """Release in ``.mlnx`` (``23.10-1.1.9.0``); ValueError when the file is empty."""
    value = (text or "").strip().splitlines()
    if not value or not value[0].strip():
        raise ValueError("the tarball's .mlnx file is empty: not an MLNX_OFED_LINUX tarball")
    return value[0].strip()


def ofed_installed_release(ofed_info_s):
    """Release from ``ofed_info -s`` (``MLNX_OFED_LINUX-23.10-1.1.9.0:``), None when absent: the one
    ``ofed_info`` reader, ``peermem.ofed_release`` (MLNX_OFED and DOCA-OFED)."""
    return peermem.ofed_release(ofed_info_s)


def ofed_node_distro(distribution, version):
    """MLNX_OFED's name for a distribution: ``ubuntu22.04``, ``debian12.5``."""
    return f"{str(distribution).lower()}{version}"


def _ofed_distro_fits(built_for, node):
    if built_for in ("skip-distro-check", node):
        return True
    # Debian point releases: a tarball for debian12.1 installs on 12.5 (same ABI, same kernel series).
    m_built = re.match(r"^debian(\d+)(?:\.\d+)?$", built_for)
    m_node = re.match(r"^debian(\d+)(?:\.\d+)?$", node)
    return bool(m_built and m_node and m_built.group(1) == m_node.group(1))


def ofed_kernels_of(deb_names):
    """Kernels that prebuilt ``mlnx-ofed-kernel-modules`` packages are for (sorted, unique)."""
    out = set()
    for name in deb_names:
        m = _KVER_RE.match(name)
        if not m:
            continue
        k = _KERNEL_IN_VERSION_RE.search(m.group("version"))
        out.add(k.group("kernel") if k else m.group("version"))
    return sorted(out)


def ofed_problems(deb_names, distro_file, node, kernel, have_headers):
    """Why this tarball cannot be installed on this node; empty when it fits.

    ``deb_names``: file names in ``DEBS/``; ``distro_file``: text of the tarball's ``distro``;
    ``node``: :func:`ofed_node_distro` of the node; ``kernel``: ``uname -r``; ``have_headers``:
    ``/lib/modules/<kernel>/build`` exists (a DKMS build needs it).
    Each problem is one sentence with the fix.
    """
    problems = []
    built_for = (distro_file or "").strip()
    if not built_for:
        problems.append("the tarball has no 'distro' file: not an MLNX_OFED_LINUX tarball")
    elif not _ofed_distro_fits(built_for, node):
        problems.append(f"the tarball is built for {built_for}, this node runs {node}. Fix: download the "
                        f"MLNX_OFED_LINUX tarball for {node}")
    prebuilt = [n for n in deb_names if n.startswith("mlnx-ofed-kernel-modules")]
    dkms = [n for n in deb_names if n.startswith("mlnx-ofed-kernel-dkms")]
    if prebuilt:
        if not any(f"{kernel}_" in n for n in prebuilt):
            problems.append(
                f"its kernel modules are built for kernel {', '.join(ofed_kernels_of(prebuilt))}, this node runs "
                f"{kernel}. Fix: rebuild the tarball for this kernel (mlnx_add_kernel_support.sh -m <dir> -k "
                f"{kernel} --make-tgz) or use the one made for {kernel}")
    elif dkms:
        if not have_headers:
            problems.append(f"its kernel modules are DKMS sources, and /lib/modules/{kernel}/build is missing. "
                            f"Fix: install linux-headers-{kernel} first")
    else:
        problems.append("DEBS/ has neither mlnx-ofed-kernel-modules nor mlnx-ofed-kernel-dkms packages: "
                        "not an MLNX_OFED_LINUX deb tarball")
    return problems


# ---- ib_write_bw between nodes (module_utils/perftest.py) ------------------------------------


def write_bw_plan(hosts, facts, base_port=18515):
    """``ansible_play_hosts | perftest_write_bw_plan(their ansible_facts in the same order)``:
    each node's ``gpucluster_rdma`` facts and its ``default_ipv4`` address (where its servers
    listen), handed to ``perftest.write_bw_plan``."""
    hosts, facts = list(hosts), list(facts)
    if len(hosts) != len(facts):
        raise ValueError(f"perftest_write_bw_plan: {len(hosts)} hosts but {len(facts)} fact sets")
    nodes = [{"host": h, "address": (f.get("default_ipv4") or {}).get("address") or h,
              "rdma": f.get("gpucluster_rdma") or {}} for h, f in zip(hosts, facts, strict=True)]
    return perftest.write_bw_plan(nodes, int(base_port))


def write_bw_check(client_results, server_results=(), fraction=0.95):
    """The looped client tasks' ``results`` (each with the planned run as ``item``) and the
    servers' ``async_status`` results (``item.item`` is the run), judged by
    ``perftest.write_bw_check``."""
    servers = {}
    for r in server_results or []:
        run = (r.get("item") or {}).get("item") or {}
        servers[run.get("tcp_port")] = f"{r.get('stdout', '')}\n{r.get('stderr', '')}"
    results = [{"run": r["item"], "rc": r.get("rc"),
                "output": f"{r.get('stdout', '')}\n{r.get('stderr', '')}",
                "server_output": servers.get(r["item"].get("tcp_port"), "")}
               for r in client_results or []]
    return perftest.write_bw_check(results, fraction)


class FilterModule:
    """RDMA filters: GID table/index, DOCA-Host and MLNX_OFED package checks."""

    def filters(self):
        return {
            "perftest_write_bw_plan": value_errors(write_bw_plan),
            "perftest_write_bw_argv": value_errors(perftest.write_bw_argv),
            "perftest_write_bw_check": value_errors(write_bw_check),
            "perftest_bw_report": value_errors(perftest.parse_bw_report),
            "nccl_parse_gid_table": value_errors(rdma.parse_gid_table, named=True),
            "nccl_gid_index": value_errors(gid_index, named=True),
            "rdma_check_gid_index": value_errors(check_gid_index, named=True),
            "rdma_parse_ibv_devices": value_errors(rdma.parse_ibv_devices, named=True),
            "rdma_parse_link": value_errors(rdma.parse_rdma_link, named=True),
            "rdma_parse_lspci": value_errors(rdma.parse_lspci_rdma_functions, named=True),
            "rdma_device_coverage": value_errors(rdma.rdma_device_coverage, named=True),
            "rdma_no_devices_cause": value_errors(rdma.classify_no_devices, named=True),
            "rdma_doca_host_file": value_errors(doca_host_file),
            "rdma_doca_problems": value_errors(doca_problems),
            "rdma_doca_node_distro": value_errors(doca_node_distro),
            "rdma_ofed_problems": value_errors(ofed_problems),
            "rdma_ofed_release": value_errors(ofed_release),
            "rdma_ofed_installed_release": value_errors(ofed_installed_release),
            "rdma_ofed_node_distro": value_errors(ofed_node_distro),
        }
