"""plugins/filter/rdma.py, DOCA-Host: does a DOCA-Host local repository package fit the node?

The file names are NVIDIA's, as published download links show them
(https://www.mellanox.com/downloads/DOCA/DOCA_v<version>/host/<file>).
"""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.filter import rdma as doca

URL = "https://www.mellanox.com/downloads/DOCA/DOCA_v3.2.1/host/doca-host_3.2.1-044000-25.10-ubuntu2404_amd64.deb"


@pytest.mark.parametrize(("name", "fields"), [
    ("doca-host_3.2.1-044000-25.10-ubuntu2404_amd64.deb",
     {"doca": "3.2.1", "build": "044000", "ofed": "25.10", "distro": "ubuntu2404", "arch": "amd64"}),
    ("doca-host_3.1.0-091000-25.07-ubuntu2204_amd64.deb",
     {"doca": "3.1.0", "build": "091000", "ofed": "25.07", "distro": "ubuntu2204", "arch": "amd64"}),
    ("doca-host_3.1.0-091000-25.07-ubuntu2004_amd64.deb",
     {"doca": "3.1.0", "build": "091000", "ofed": "25.07", "distro": "ubuntu2004", "arch": "amd64"}),
    ("doca-host_3.2.2-035000-25.10-debian13_amd64.deb",
     {"doca": "3.2.2", "build": "035000", "ofed": "25.10", "distro": "debian13", "arch": "amd64"}),
    ("doca-host_3.3.0-088000-26.01-debian13_amd64.deb",
     {"doca": "3.3.0", "build": "088000", "ofed": "26.01", "distro": "debian13", "arch": "amd64"}),
    ("doca-host_2.9.2-012101-24.10-ubuntu2204_arm64.deb",
     {"doca": "2.9.2", "build": "012101", "ofed": "24.10", "distro": "ubuntu2204", "arch": "arm64"}),
    ("doca-host_2.10.0-093000-25.01-ubuntu2204_amd64.deb",
     {"doca": "2.10.0", "build": "093000", "ofed": "25.01", "distro": "ubuntu2204", "arch": "amd64"}),
    (URL, {"doca": "3.2.1", "build": "044000", "ofed": "25.10", "distro": "ubuntu2404", "arch": "amd64"}),
])
def test_nvidias_file_names_are_parsed(name, fields):
    info = doca.doca_host_file(name)
    assert {k: info[k] for k in fields} == fields
    assert info["version"] == "-".join([info["doca"], info["build"], info["ofed"], info["distro"]])


@pytest.mark.parametrize("name", [
    "doca-host-3.1.0-091000_25.07_ol96.x86_64.rpm",  # the RPM of the same release
    "MLNX_OFED_LINUX-24.10-1.1.4.0-ubuntu22.04-x86_64.tgz",
    "doca-host.deb",  # renamed on download
    "doca-host_3.2.1_amd64.deb",
    "",
])
def test_other_files_are_not_doca_host_packages(name):
    with pytest.raises(ValueError, match="not a DOCA-Host local repository package name"):
        doca.doca_host_file(name)


@pytest.mark.parametrize(("distribution", "version", "token"), [
    ("Ubuntu", "22.04", "ubuntu2204"),
    ("Ubuntu", "24.04", "ubuntu2404"),
    ("Debian", "12.5", "debian12"),
    ("Debian", "13", "debian13"),
])
def test_node_distro(distribution, version, token):
    assert doca.doca_node_distro(distribution, version) == token


@pytest.mark.parametrize(("built_for", "distribution", "version", "fits"), [
    ("ubuntu2204", "Ubuntu", "22.04", True),
    ("ubuntu2204", "Ubuntu", "24.04", False),
    ("ubuntu2404", "Debian", "12.5", False),
    ("debian12", "Debian", "12.5", True),
    ("debian125", "Debian", "12.8", True),  # a pre-3.2 package for a point release: same major, DKMS
    ("debian13", "Debian", "12.5", False),
    ("debian1013", "Debian", "10.13", True),
    ("debian1013", "Debian", "11.3", False),
])
def test_distribution_matching(built_for, distribution, version, fits):
    assert doca.doca_distro_fits(built_for, distribution, version) is fits


def test_a_package_for_this_release_and_architecture_fits():
    assert doca.doca_problems(URL, "Ubuntu", "24.04", "x86_64") == []
    assert doca.doca_problems("doca-host_3.2.2-035000-25.10-debian13_amd64.deb", "Debian", "13.1", "x86_64") == []
    assert doca.doca_problems("doca-host_2.9.2-012101-24.10-ubuntu2204_arm64.deb", "Ubuntu", "22.04", "aarch64") == []


def test_a_package_for_another_distribution_is_refused_with_the_fix():
    (p,) = doca.doca_problems("doca-host_3.1.0-091000-25.07-ubuntu2204_amd64.deb", "Debian", "12.5", "x86_64")
    assert "built for ubuntu2204, this node runs Debian 12.5 (debian12)" in p
    assert "Fix: download the DOCA-Host package for debian12" in p


def test_a_package_for_another_architecture_is_refused():
    (p,) = doca.doca_problems("doca-host_2.9.2-012101-24.10-ubuntu2204_arm64.deb", "Ubuntu", "22.04", "x86_64")
    assert "built for arm64, this node is amd64" in p


def test_a_name_that_is_not_nvidias_is_refused_with_the_fix():
    (p,) = doca.doca_problems("file:///srv/doca.deb", "Debian", "12.5", "x86_64")
    assert "'doca.deb' is not a DOCA-Host local repository package name" in p
    assert "doca-host_<DOCA version>-<build>-<OFED release>-<distribution>_<arch>.deb" in p
    assert "Fix: point rdma_doca_package.src at the file as NVIDIA names it" in p


NAME = "doca-host_3.2.1-044000-25.10-debian12_amd64.deb"


def test_control_fields_that_match_the_name_fit():
    control = "Package: doca-host\nVersion: 3.2.1-044000-25.10-debian12\nArchitecture: amd64\n"
    assert doca.doca_problems(NAME, "Debian", "12.5", "x86_64", control) == []
    assert doca.doca_host_control(control)["distro"] == "debian12"
    assert doca.doca_host_control({"Package": "doca-host", "Version": "3.2.1-044000-25.10-debian12",
                                   "Architecture": "amd64"})["ofed"] == "25.10"


def test_a_renamed_package_is_refused_by_its_control_fields():
    control = "Package: doca-host\nVersion: 3.1.0-091000-25.07-ubuntu2204\nArchitecture: amd64\n"
    (p,) = doca.doca_problems(NAME, "Debian", "12.5", "x86_64", control)
    assert "its control file says doca-host 3.1.0-091000-25.07-ubuntu2204 amd64" in p
    assert "the file was renamed" in p


def test_another_package_under_a_doca_host_name_is_refused():
    (p,) = doca.doca_problems(NAME, "Debian", "12.5", "x86_64", "Package: cuda-keyring\nVersion: 1.1-1\n")
    assert "Package 'cuda-keyring', not doca-host" in p
    with pytest.raises(ValueError, match="not DOCA-Host's"):
        doca.doca_host_control("Package: doca-host\nVersion: 1.1-1\nArchitecture: all\n")


def test_the_filters_are_registered():
    assert {"rdma_doca_host_file", "rdma_doca_problems", "rdma_doca_node_distro"} <= set(doca.FilterModule().filters())
