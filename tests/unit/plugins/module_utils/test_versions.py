"""The version manifest's checks (plugins/module_utils/versions.py) and the manifest itself
(roles/versions/defaults/main.yml): every refusal names the variable, the value and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpucluster.cluster.plugins.module_utils import versions as v

ROOT = Path(__file__).resolve().parents[4]
MANIFEST = yaml.safe_load((ROOT / "roles/versions/defaults/main.yml").read_text())
NODE = {"distribution": "Ubuntu", "version": "22.04", "machine": "x86_64"}
# apt-cache madison nvidia-fabricmanager-535 against NVIDIA's CUDA repository (format of
# apt-cache(8): package | version | source), newest first.
CUDA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
FM_MADISON = (
    f"nvidia-fabricmanager-535 | 535.261.03-1 | {CUDA_REPO}  Packages\n"
    f"nvidia-fabricmanager-535 | 535.247.01-1 | {CUDA_REPO}  Packages\n"
)


def _manifest_versions():
    return {
        "nvidia_driver_branch": MANIFEST["versions_nvidia_driver_branch"],
        "nvidia_driver_version": MANIFEST["versions_nvidia_driver_version"],
        "nvidia_container_toolkit_version": MANIFEST["versions_nvidia_container_toolkit_version"],
        "gpudirect_nv_peer_mem_version": MANIFEST["versions_nv_peer_mem_version"],
    }


def test_the_shipped_manifest_passes_its_own_checks():
    assert v.version_problems(_manifest_versions(), MANIFEST["versions_known_bad"], NODE) == []


def test_every_known_bad_entry_has_a_component_and_a_reason():
    for component, releases in MANIFEST["versions_known_bad"].items():
        assert component in v.COMPONENT_VARIABLE
        for release, reason in releases.items():
            assert re.match(r"^\d+\.\d+", str(release)), release
            assert len(str(reason)) > 20, f"{component} {release}: the reason must say why"


def test_a_known_bad_release_is_refused_with_its_reason():
    known = {"nvidia_container_toolkit": {"1.17.3": "CVE-2025-23359: container escape"}}
    for value in ("1.17.3-1", "1.17.3"):
        problems = v.known_bad_problems({"nvidia_container_toolkit_version": value}, known)
        assert problems == [f"nvidia_container_toolkit_version: {value} is a known-bad release "
                            f"(CVE-2025-23359: container escape). Fix: another release, or remove it from "
                            f"versions_known_bad if the reason does not apply"]
    assert v.known_bad_problems({"nvidia_container_toolkit_version": "1.17.30-1"}, known) == []
    assert v.known_bad_problems({"nvidia_container_toolkit_version": ""}, known) == []


def test_the_shipped_known_bad_list_refuses_its_own_entries():
    bad = MANIFEST["versions_known_bad"]["nvidia_container_toolkit"]
    release = next(iter(bad))
    problems = v.version_problems({"nvidia_container_toolkit_version": f"{release}-1"}, MANIFEST["versions_known_bad"])
    assert len(problems) == 1 and bad[release] in problems[0]


@pytest.mark.parametrize("known", [["1.17.3"], {"cuda": {}}, {"nvidia_driver": ["535.1"]}])
def test_a_malformed_known_bad_list_is_an_error(known):
    with pytest.raises(ValueError, match="versions_known_bad"):
        v.known_bad_problems({}, known)


@pytest.mark.parametrize(("versions", "expect"), [
    ({"nvidia_container_toolkit_version": "1.17"}, "nvidia_container_toolkit_version: '1.17' is not"),
    ({"nvidia_container_toolkit_version": "v1.17.8-1"}, "e.g. 1.17.8-1"),
    ({"gpudirect_nv_peer_mem_version": "1.0"}, "gpudirect_nv_peer_mem_version: '1.0' is not"),
    ({"nvidia_driver_branch": 535, "nvidia_driver_version": "550.54.15"}, "550.54.15 is not of branch 535"),
    ({"nvidia_driver_branch": "r535"}, "'r535' is not a driver branch"),
    ({"nvidia_driver_branch": 535, "nvidia_driver_version": "535"}, "'535' is not an NVIDIA driver version"),
])
def test_malformed_or_inconsistent_versions_are_refused(versions, expect):
    problems = v.version_problems(versions)
    assert len(problems) == 1 and expect in problems[0], problems


def test_well_formed_versions_pass():
    assert v.version_problems({"nvidia_driver_branch": 570, "nvidia_driver_version": "570.172.08",
                               "nvidia_container_toolkit_version": "1.18.0~rc.1-1",
                               "gpudirect_nv_peer_mem_version": "1.3-0"}) == []
    assert v.version_problems({"nvidia_driver_branch": 535, "nvidia_driver_version": "",
                               "nvidia_container_toolkit_version": ""}) == []


def test_ofed_tarball_for_another_distribution_or_arch_is_refused_by_name():
    ofed = {"src": "https://example.invalid/MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu20.04-aarch64.tgz", "sha256": "0" * 64}
    problems = v.version_problems({"rdma_stack": "ofed", "rdma_ofed_tarball": ofed}, node=NODE)
    assert problems == [
        "rdma_ofed_tarball: MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu20.04-aarch64.tgz is built for ubuntu20.04, this node "
        "runs ubuntu22.04. Fix: download MLNX_OFED for ubuntu22.04",
        "rdma_ofed_tarball: MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu20.04-aarch64.tgz is built for aarch64, this node is "
        "x86_64. Fix: download MLNX_OFED for x86_64",
    ]
    fits = {"src": "/srv/MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu22.04-x86_64.tgz", "sha256": "0" * 64}
    assert v.version_problems({"rdma_stack": "ofed", "rdma_ofed_tarball": fits}, node=NODE) == []
    # Debian point releases share the rdma role's rule: debian12.1 installs on 12.5.
    deb = {"src": "/srv/MLNX_OFED_LINUX-24.10-1.1.4.0-debian12.1-x86_64.tgz", "sha256": "0" * 64}
    node = {"distribution": "Debian", "version": "12.5", "machine": "x86_64"}
    assert v.version_problems({"rdma_stack": "ofed", "rdma_ofed_tarball": deb}, node=node) == []
    # Only the stack in use is judged.
    assert v.version_problems({"rdma_stack": "inbox", "rdma_ofed_tarball": ofed}, node=NODE) == []


def test_doca_package_for_another_distribution_is_refused_by_name():
    doca = {"src": "/srv/doca-host_2.9.1-018000-24.10-debian12_amd64.deb", "sha256": "0" * 64}
    problems = v.version_problems({"rdma_stack": "doca", "rdma_doca_package": doca}, node=NODE)
    assert len(problems) == 1
    assert problems[0].startswith("rdma_doca_package: it is built for debian12, this node runs Ubuntu 22.04")
    node = {"distribution": "Debian", "version": "12.5", "machine": "x86_64"}
    assert v.version_problems({"rdma_stack": "doca", "rdma_doca_package": doca}, node=node) == []


def test_fabric_manager_must_exist_at_the_drivers_version():
    assert v.fabric_manager_problems(FM_MADISON, "535.261.03-1", "nvidia-fabricmanager-535") == []
    problems = v.fabric_manager_problems(FM_MADISON, "535.274.02-0ubuntu1", "nvidia-fabricmanager-535")
    assert len(problems) == 1
    assert "no Fabric Manager 535.274.02 (they have 535.261.03, 535.247.01)" in problems[0]
    assert "error 802" in problems[0] and "Fix: set nvidia_driver_version" in problems[0]
    assert "they have none" in v.fabric_manager_problems("", "535.261.03-1", "nvidia-fabricmanager-535")[0]


def test_blacklist_patterns_are_anchored_and_need_no_backslash():
    assert v.blacklist_patterns(["libcuda1", "nvidia-smi", "libcuda1", "libstdc++6", "cuda-drivers-535", ""]) == [
        "^cuda-drivers-535$", "^libcuda1$", "^libstdc[+][+]6$", "^nvidia-smi$"]
    for pattern in v.blacklist_patterns(["nvidia-fabricmanager-535", "firmware-nvidia-gsp"]):
        assert re.match(pattern, pattern.strip("^$"))
        assert "\\" not in pattern
    assert not re.match(v.blacklist_patterns(["libcuda1"])[0], "libcuda1-dbg")
    with pytest.raises(ValueError, match="not a Debian package name"):
        v.blacklist_patterns(["nvidia-*"])


# role variable -> the manifest entry its default must read (and no literal of its own)
READERS = {
    ("nvidia_driver", "nvidia_driver_branch"): "versions_nvidia_driver_branch",
    ("nvidia_driver", "nvidia_driver_version"): "versions_nvidia_driver_version",
    ("nvidia_container_toolkit", "nvidia_container_toolkit_version"): "versions_nvidia_container_toolkit_version",
    ("gpudirect", "gpudirect_nv_peer_mem_version"): "versions_nv_peer_mem_version",
}


@pytest.mark.parametrize(("role", "variable"), sorted(READERS))
def test_the_roles_version_defaults_read_the_manifest(role, variable):
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text())
    assert defaults[variable] == "{{ " + READERS[(role, variable)] + " }}"
    assert READERS[(role, variable)] in MANIFEST
    meta = yaml.safe_load((ROOT / "roles" / role / "meta/main.yml").read_text())
    # (its checks run once per run: test_roles.py, test_the_version_checks_run_once_per_run)
    assert "versions" in [d["role"] for d in meta["dependencies"]], f"{role} must load the manifest (meta dependency)"


def test_every_manifest_version_has_a_reader():
    entries = {k for k in MANIFEST if k != "versions_known_bad"}
    assert entries == set(READERS.values())
