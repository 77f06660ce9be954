"""Tests for module_utils/peermem.py on tests/fixtures/peer-memory (C24, C26)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.peermem import (
    NV_PEER_MEM_VERSION,
    ParseError,
    classify_peermem_error,
    driver_major,
    loaded_peer_memory_modules,
    ofed_release,
    peer_memory_api_present,
    peer_memory_module,
)

from tests.conftest import FIXTURES, fixture_text

PM = "peer-memory/"
C24_MODPROBE = PM + "C24_nv_peer_mem_unknown_symbol_ib_register_peer_memory_client.1-modprobe-dmesg.txt"
C24_DEPMOD = PM + "C24_nv_peer_mem_unknown_symbol_ib_register_peer_memory_client.2-depmod-warning-after-ofed-reinstall.txt"  # noqa: E501 - fixture name
C26_DPKG = PM + "C26_nv_peer_mem_dkms_builds_for_wrong_kernel_no_nvidia_modules.1-dpkg-i-output.txt"
C26_MAKELOG = PM + "C26_nv_peer_mem_dkms_builds_for_wrong_kernel_no_nvidia_modules.2-var-lib-dkms-make-log.txt"

COVERED = {"C24", "C26"}


def test_every_case_is_covered():
    assert {p.name.split("_")[0] for p in (FIXTURES / "peer-memory").glob("*.md")} == COVERED


@pytest.mark.parametrize("path", [pytest.param(C24_MODPROBE, id="C24-modprobe-dmesg"),
                                  pytest.param(C24_DEPMOD, id="C24-depmod-after-ofed-reinstall")])
def test_c24_peer_memory_api_missing(path):
    result = classify_peermem_error(fixture_text(path))
    assert result["class"] == "PEER_MEM_API_MISSING"
    assert result["module"] == "nv_peer_mem"
    assert result["kernel"] == "3.10.0-1127.19.1.el7.x86_64"
    message = result["message"]
    assert "grep -w ib_register_peer_memory_client /proc/kallsyms" in message
    assert "MLNX_OFED -> NVIDIA driver -> peer-memory module" in message
    assert "rebuild the module after any OFED change" in message
    assert "nvidia-peermem" in message


def test_c26_nvidia_modules_missing_for_target_kernel():
    text = fixture_text(C26_DPKG) + fixture_text(C26_MAKELOG)
    result = classify_peermem_error(text)
    assert result["class"] == "NVIDIA_MODULES_MISSING_FOR_KERNEL"
    assert result["module"] == "nv_peer_mem"
    assert result["kernel"] == "4.15.0-137-generic"
    assert result["host_kernel"] == "5.4.0-47-generic"
    message = result["message"]
    assert "modinfo -k 4.15.0-137-generic nvidia" in message
    assert "dkms status" in message
    assert "dkms install -k 4.15.0-137-generic" in message  # explicit target kernel
    assert "use the bundled nvidia-peermem" in message


def test_c26_make_log_alone():
    result = classify_peermem_error(fixture_text(C26_MAKELOG))
    assert result["class"] == "NVIDIA_MODULES_MISSING_FOR_KERNEL"
    assert result["kernel"] == "4.15.0-137-generic"
    assert result["host_kernel"] is None


def test_c26_dpkg_output_alone_points_to_make_log():
    result = classify_peermem_error(fixture_text(C26_DPKG))
    assert result["class"] == "DKMS_BUILD_FAILED"
    assert result["kernel"] == "4.15.0-137-generic"
    assert "/var/lib/dkms/nv_peer_mem/1.1.0/build/make.log" in result["message"]
    assert "chroot" in result["message"]


@pytest.mark.parametrize(("text", "klass", "module"), [
    pytest.param("nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client\n",
                 "PEER_MEM_SYMBOL_VERSION_MISMATCH", "nvidia_peermem", id="symbol-version"),
    pytest.param("modprobe: FATAL: Module nvidia-peermem not found in directory "
                 "/lib/modules/5.15.0-91-generic\n", "MODULE_NOT_FOUND", "nvidia_peermem",
                 id="not-found"),
    pytest.param("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n",
                 "UNKNOWN", "nvidia_peermem", id="unknown"),
])
def test_other_peermem_errors(text, klass, module):
    result = classify_peermem_error(text)
    assert result["class"] == klass
    assert result["module"] == module
    if klass == "UNKNOWN":
        assert "could not insert 'nvidia_peermem': Invalid argument" in result["message"]
    if klass == "MODULE_NOT_FOUND":
        assert result["kernel"] == "5.15.0-91-generic"


@pytest.mark.parametrize("text", ["", "   \n", None])
def test_classify_needs_text(text):
    with pytest.raises(ParseError, match="empty"):
        classify_peermem_error(text)


@pytest.mark.parametrize(("version", "available", "module", "package_version"), [
    pytest.param("470.57.02", None, "nvidia_peermem", None, id="470-first-with-peermem"),
    pytest.param("535.104.05", None, "nvidia_peermem", None, id="535"),
    pytest.param("465.19.01", None, "nv_peer_mem", NV_PEER_MEM_VERSION, id="465-older"),
    pytest.param("460.91.03", True, "nvidia_peermem", None, id="modinfo-says-present"),
    pytest.param("535.104.05", False, "nv_peer_mem", NV_PEER_MEM_VERSION, id="modinfo-says-missing"),
])
def test_peer_memory_module_choice(version, available, module, package_version):
    choice = peer_memory_module(version, available)
    assert choice["module"] == module
    assert choice["package_version"] == package_version
    assert choice["modprobe"] == ("nvidia-peermem" if module == "nvidia_peermem" else "nv_peer_mem")
    assert version in choice["reason"]
    assert NV_PEER_MEM_VERSION == "1.0-9"


def test_driver_major_rejects_garbage():
    assert driver_major("525.85.12") == 525
    with pytest.raises(ParseError, match="535.104.05"):
        driver_major("latest")


def test_lsmod_and_kallsyms():
    lsmod = ("Module                  Size  Used by\n"
             "nvidia_peermem         16384  0\n"
             "ib_core               421888  9 rdma_cm,ib_ipoib,nvidia_peermem,iw_cm,ib_umad\n"
             "nvidia              56107008  1 nvidia_peermem\n")
    assert loaded_peer_memory_modules(lsmod) == ["nvidia_peermem"]
    assert loaded_peer_memory_modules(lsmod.replace("nvidia_peermem         16384", "x 1")) == []
    with pytest.raises(ParseError, match="lsmod line 2"):
        loaded_peer_memory_modules(lsmod[:60])
    kallsyms = ("ffffffffc0a1b2c0 T ib_register_peer_memory_client\t[ib_core]\n"
                "ffffffffc0a1b300 T ib_unregister_peer_memory_client\t[ib_core]\n")
    assert peer_memory_api_present(kallsyms) is True
    assert peer_memory_api_present(kallsyms.splitlines()[1]) is False
    assert peer_memory_api_present("") is False


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("MLNX_OFED_LINUX-24.10-1.1.4.0:\n", "24.10-1.1.4.0"),
        ("OFED-internal-24.07-0.3.5.0.110:\n", "24.07-0.3.5.0.110"),  # DOCA-OFED (lshca issue #102)
        ("", None),
        ("/bin/sh: 1: ofed_info: not found\n", None),
        (None, None),
    ],
)
def test_ofed_release_of_mlnx_ofed_and_doca_ofed(text, release):
    assert ofed_release(text) == release
