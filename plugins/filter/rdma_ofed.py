"""Jinja filters of the rdma role: does an unpacked MLNX_OFED tarball fit this node?

Pure functions, unit-tested in ``tests/unit/roles/test_rdma_ofed.py``.

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

import re

from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors

_KVER_RE = re.compile(r"^mlnx-ofed-kernel-modules[^_]*_(?P<version>[^_]+)_[^_]+\.deb$")
_KERNEL_IN_VERSION_RE = re.compile(r"(?:\.kver\.|-)(?P<kernel>\d+\.\d+\.\d+[^_]*)$")


def ofed_release(text):
    """Release in ``.mlnx`` (``23.10-1.1.9.0``); ValueError when the file is empty."""
    value = (text or "").strip().splitlines()
    if not value or not value[0].strip():
        raise ValueError("the tarball's .mlnx file is empty: not an MLNX_OFED_LINUX tarball")
    return value[0].strip()


def installed_release(ofed_info_s):
    """Release from ``ofed_info -s`` (``MLNX_OFED_LINUX-23.10-1.1.9.0:``), None when absent."""
    m = re.search(r"MLNX_OFED_LINUX-([^\s:]+)", ofed_info_s or "")
    return m.group(1) if m else None


def node_distro(distribution, version):
    """MLNX_OFED's name for a distribution: ``ubuntu22.04``, ``debian12.5``."""
    return f"{str(distribution).lower()}{version}"


def _distro_fits(built_for, node):
    if built_for in ("skip-distro-check", node):
        return True
    # Debian point releases: a tarball for debian12.1 installs on 12.5 (same ABI, same kernel series).
    m_built = re.match(r"^debian(\d+)(?:\.\d+)?$", built_for)
    m_node = re.match(r"^debian(\d+)(?:\.\d+)?$", node)
    return bool(m_built and m_node and m_built.group(1) == m_node.group(1))


def kernels_of(deb_names):
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
    ``node``: :func:`node_distro` of the node; ``kernel``: ``uname -r``; ``have_headers``:
    ``/lib/modules/<kernel>/build`` exists (a DKMS build needs it).
    Each problem is one sentence with the fix.
    """
    problems = []
    built_for = (distro_file or "").strip()
    if not built_for:
        problems.append("the tarball has no 'distro' file: not an MLNX_OFED_LINUX tarball")
    elif not _distro_fits(built_for, node):
        problems.append(f"the tarball is built for {built_for}, this node runs {node}. Fix: download the "
                        f"MLNX_OFED_LINUX tarball for {node}")
    prebuilt = [n for n in deb_names if n.startswith("mlnx-ofed-kernel-modules")]
    dkms = [n for n in deb_names if n.startswith("mlnx-ofed-kernel-dkms")]
    if prebuilt:
        if not any(f"{kernel}_" in n for n in prebuilt):
            problems.append(
                f"its kernel modules are built for kernel {', '.join(kernels_of(prebuilt))}, this node runs "
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


class FilterModule:
    def filters(self):
        return {
            "rdma_ofed_problems": value_errors(ofed_problems),
            "rdma_ofed_release": value_errors(ofed_release),
            "rdma_ofed_installed_release": value_errors(installed_release),
            "rdma_ofed_node_distro": value_errors(node_distro),
        }
