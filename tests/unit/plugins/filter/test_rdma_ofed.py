"""plugins/filter/rdma.py, MLNX_OFED: does an unpacked MLNX_OFED tarball fit the node?"""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.filter import rdma as ofed

KERNEL = "5.15.0-91-generic"
PREBUILT = [
    "mlnx-ofed-kernel-utils_23.10.OFED.23.10.1.1.9.1-1_amd64.deb",
    f"mlnx-ofed-kernel-modules_23.10.OFED.23.10.1.1.9.1.kver.{KERNEL}_amd64.deb",
    f"knem-modules_1.1.4.90mlnx3-OFED.23.10.0.2.1.1.kver.{KERNEL}_amd64.deb",
]
DKMS = ["mlnx-ofed-kernel-dkms_23.10.OFED.23.10.1.1.9.1-1_all.deb",
        "mlnx-ofed-kernel-utils_23.10.OFED.23.10.1.1.9.1-1_amd64.deb"]


def test_a_tarball_for_this_kernel_and_distribution_fits():
    assert ofed.ofed_problems(PREBUILT, "ubuntu22.04\n", "ubuntu22.04", KERNEL, False) == []


def test_a_tarball_for_another_kernel_is_refused_with_the_rebuild_command():
    (p,) = ofed.ofed_problems(PREBUILT, "ubuntu22.04", "ubuntu22.04", "6.5.0-1015-azure", True)
    assert f"built for kernel {KERNEL}, this node runs 6.5.0-1015-azure" in p
    assert "mlnx_add_kernel_support.sh -m <dir> -k 6.5.0-1015-azure --make-tgz" in p


def test_a_tarball_for_another_distribution_is_refused():
    (p,) = ofed.ofed_problems(PREBUILT, "ubuntu20.04", "ubuntu22.04", KERNEL, True)
    assert "built for ubuntu20.04, this node runs ubuntu22.04" in p


@pytest.mark.parametrize(("built_for", "node", "fits"), [
    ("debian12.1", "debian12.5", True),
    ("debian12.1", "debian11.7", False),
    ("skip-distro-check", "debian12.5", True),
    ("ubuntu22.04", "ubuntu24.04", False),
])
def test_distribution_matching(built_for, node, fits):
    assert (ofed.ofed_problems(DKMS, built_for, node, KERNEL, True) == []) is fits


def test_dkms_sources_need_the_running_kernels_headers():
    assert ofed.ofed_problems(DKMS, "ubuntu22.04", "ubuntu22.04", KERNEL, True) == []
    (p,) = ofed.ofed_problems(DKMS, "ubuntu22.04", "ubuntu22.04", KERNEL, False)
    assert f"/lib/modules/{KERNEL}/build is missing" in p and f"linux-headers-{KERNEL}" in p


def test_something_else_is_not_an_ofed_tarball():
    problems = ofed.ofed_problems(["perftest_4.5_amd64.deb"], "", "debian12.5", KERNEL, True)
    assert len(problems) == 2
    assert "no 'distro' file" in problems[0] and "neither mlnx-ofed-kernel-modules" in problems[1]


def test_kernels_named_by_prebuilt_modules():
    assert ofed.ofed_kernels_of(PREBUILT) == [KERNEL]
    assert ofed.ofed_kernels_of(DKMS) == []


def test_releases():
    assert ofed.ofed_release("23.10-1.1.9.0\n") == "23.10-1.1.9.0"
    with pytest.raises(ValueError, match="not an MLNX_OFED_LINUX tarball"):
        ofed.ofed_release("\n")
    assert ofed.ofed_installed_release("MLNX_OFED_LINUX-23.10-1.1.9.0:\n") == "23.10-1.1.9.0"
    assert ofed.ofed_installed_release("") is None
    assert ofed.ofed_node_distro("Debian", "12.5") == "debian12.5"
    assert ofed.ofed_node_distro("Ubuntu", "22.04") == "ubuntu22.04"
