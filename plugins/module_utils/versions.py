"""The version manifest's checks: every pinned version read together, before any stage changes a node.

The manifest is ``roles/versions/defaults/main.yml`` (role-defaults precedence: an inventory value of
a role's own variable, ``nvidia_driver_version`` say, or of the manifest entry, overrides it). Its
entries reach the roles through their defaults (``nvidia_driver_version: "{{
versions_nvidia_driver_version }}"``); preflight checks the values the roles will use:

- each version in its component's format (the formats below);
- the driver branch and exact version agree (``nvidia_driver.branch_problems``, the one owner);
- a version in the manifest's known-bad list (``versions_known_bad``: component -> release ->
  reason) is refused with its reason;
- an MLNX_OFED tarball or DOCA-Host package named for another distribution or architecture than
  the node's is refused from its file name (``rdma.doca_problems`` and the MLNX_OFED name below,
  with ``rdma``'s own distribution rule); the kernel its prebuilt modules are for is only known
  once it is unpacked, and the rdma role refuses that before installing (``rdma.ofed_problems``);
- Fabric Manager must exist at the driver's exact version: :func:`fabric_manager_problems` over
  ``apt-cache madison nvidia-fabricmanager-<branch>`` (NVIDIA's Fabric Manager user guide: the
  Fabric Manager and driver versions must match, else CUDA reports error 802,
  cudaErrorSystemNotReady).

Formats (Debian versions per deb-version(7), ``upstream[-revision]``):

- NVIDIA Container Toolkit: ``1.17.8-1`` (libnvidia-container's apt repository);
- nv_peer_mem (Mellanox/nv_peer_memory): ``1.0-9``;
- driver: ``<branch>.<minor>[.<patch>]`` (``nvidia_driver.branch_problems``).

Each problem is one sentence naming the variable, its value and the fix; the caller puts the host
in front.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpucluster.cluster.plugins.filter import nvidia_driver as _driver
from ansible_collections.gpucluster.cluster.plugins.filter import rdma as _rdma

# component -> (variable, regular expression, an example)
FORMATS = {
    "nvidia_container_toolkit": ("nvidia_container_toolkit_version", re.compile(r"^\d+\.\d+\.\d+(?:~rc\.\d+)?-\d+$"),
                                 "1.17.8-1"),
    "nv_peer_mem": ("gpudirect_nv_peer_mem_version", re.compile(r"^\d+\.\d+-\d+$"), "1.0-9"),
}
# component -> the variable whose value the known-bad list is matched against
COMPONENT_VARIABLE = {
    "nvidia_driver": "nvidia_driver_version",
    "nvidia_container_toolkit": "nvidia_container_toolkit_version",
    "nv_peer_mem": "gpudirect_nv_peer_mem_version",
}
# MLNX_OFED_LINUX-<release>-<distribution>-<arch>.tgz (NVIDIA's download page names).
_OFED_FILE_RE = re.compile(r"^MLNX_OFED_LINUX-(?P<release>\d+\.\d+-[\d.]+)-(?P<distro>[a-z]+[\d.]+)-"
                           r"(?P<arch>x86_64|aarch64|ppc64le)\.(?:tgz|tar\.gz)$")
_MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}


def _upstream(version):
    return _driver.upstream(version)


def known_bad_problems(versions, known_bad):
    """Versions in the known-bad list, each with its reason.

    ``versions``: variable -> value the roles will use; ``known_bad``: component -> {release: reason}.
    A release matches the exact value or its upstream part (``1.17.3`` matches ``1.17.3-1``).
    """
    problems = []
    if not isinstance(known_bad, dict):
        raise ValueError(f"versions_known_bad: {known_bad!r} is not a mapping of component -> release -> reason")
    for component, releases in known_bad.items():
        if component not in COMPONENT_VARIABLE:
            raise ValueError(f"versions_known_bad: unknown component {component!r}; known: "
                             f"{', '.join(sorted(COMPONENT_VARIABLE))}")
        if not isinstance(releases, dict):
            raise ValueError(f"versions_known_bad.{component}: {releases!r} is not a mapping of release -> reason")
        variable = COMPONENT_VARIABLE[component]
        value = str(versions.get(variable) or "")
        if not value:
            continue
        for release, reason in releases.items():
            if str(release) in (value, _upstream(value)):
                problems.append(f"{variable}: {value} is a known-bad release ({reason}). Fix: another release, "
                                f"or remove it from versions_known_bad if the reason does not apply")
    return problems


def format_problems(versions):
    """Malformed versions (empty means "the newest" and passes), plus the driver branch/version check."""
    problems = []
    if "nvidia_driver_branch" in versions:
        problems += _driver.branch_problems(versions["nvidia_driver_branch"],
                                            versions.get("nvidia_driver_version") or "")
    for variable, pattern, example in FORMATS.values():
        value = versions.get(variable)
        if value in (None, ""):
            continue
        if not pattern.match(str(value)):
            problems.append(f"{variable}: {value!r} is not a package version of that form. Fix: e.g. {example}")
    return problems


def ofed_file_problems(name, distribution, version, machine):
    """Why an MLNX_OFED tarball, by its file name, is not for this node; empty when it fits or the
    name is not NVIDIA's (then the rdma role judges the unpacked tarball)."""
    m = _OFED_FILE_RE.match(os.path.basename(name or ""))
    if not m:
        return []
    node = _rdma.ofed_node_distro(distribution, version)
    problems = []
    if not _rdma._ofed_distro_fits(m.group("distro"), node):  # noqa: SLF001 the rdma filter owns the rule
        problems.append(f"rdma_ofed_tarball: {os.path.basename(name)} is built for {m.group('distro')}, this node runs "
                        f"{node}. Fix: download MLNX_OFED for {node}")
    arch = _MACHINE.get(str(machine), str(machine))
    if m.group("arch") != arch:
        problems.append(f"rdma_ofed_tarball: {os.path.basename(name)} is built for {m.group('arch')}, this node is "
                        f"{arch}. Fix: download MLNX_OFED for {arch}")
    return problems


def rdma_problems(stack, ofed_tarball, doca_package, distribution, version, machine):
    """The RDMA stack's file, by its name, against the node (only for the stack in use)."""
    if stack == "ofed" and isinstance(ofed_tarball, dict) and ofed_tarball.get("src"):
        return ofed_file_problems(ofed_tarball["src"], distribution, version, machine)
    if stack == "doca" and isinstance(doca_package, dict) and doca_package.get("src"):
        return [f"rdma_doca_package: {p}" for p in
                _rdma.doca_problems(doca_package["src"], distribution, version, machine)]
    return []


def version_problems(versions, known_bad=None, node=None):
    """Everything wrong with the versions one node will get; empty when they go together.

    ``versions``: variable -> value (``nvidia_driver_branch``, ``nvidia_driver_version``,
    ``nvidia_container_toolkit_version``, ``gpudirect_nv_peer_mem_version``, ``rdma_stack``,
    ``rdma_ofed_tarball``, ``rdma_doca_package``; absent ones are not checked); ``known_bad``: the
    manifest's list; ``node``: ``{distribution, version, machine}`` from the node's facts.
    """
    problems = format_problems(versions)
    problems += known_bad_problems(versions, known_bad or {})
    if node:
        problems += rdma_problems(versions.get("rdma_stack"), versions.get("rdma_ofed_tarball"),
                                  versions.get("rdma_doca_package"), node.get("distribution"),
                                  node.get("version"), node.get("machine"))
    return problems


def fabric_manager_problems(madison_text, driver_package_version, package):
    """Fabric Manager must be offered at the driver's exact version; empty when it is.

    ``madison_text``: ``apt-cache madison <package>``; ``driver_package_version``: the driver
    version chosen and pinned (``535.261.03-1``); compared by upstream version (the Debian
    revision may differ between the two packages).
    """
    wanted = _upstream(driver_package_version)
    offered = [_upstream(v) for v in _driver.madison_versions(madison_text)]
    if wanted in offered:
        return []
    return [f"{package}: the apt sources offer no Fabric Manager {wanted} (they have "
            f"{', '.join(offered) or 'none'}), and Fabric Manager at another version than the driver leaves CUDA "
            f"failing with error 802 (system not yet initialized). Fix: set nvidia_driver_version to a release "
            f"both are offered at (one of {', '.join(offered) or 'none'}), or nvidia_driver_fabric_manager: disabled "
            f"on a node without NVSwitch"]


def blacklist_patterns(packages):
    """Unattended-Upgrade::Package-Blacklist entries for held packages: anchored regular expressions
    (unattended-upgrades matches each entry as a Python regular expression against the package
    name), ``.`` and ``+`` as one-character classes so that apt.conf's strings need no backslash;
    sorted, without duplicates. ``libcuda1`` -> ``^libcuda1$``."""
    out = set()
    for p in packages:
        name = str(p).strip()
        if not name:
            continue
        if not re.match(r"^[a-z0-9][a-z0-9.+-]*$", name):
            raise ValueError(f"{name!r} is not a Debian package name (deb-control(5): a-z, 0-9, '.', '+', '-')")
        out.add("^" + re.sub(r"([.+])", r"[\1]", name) + "$")
    return sorted(out)
