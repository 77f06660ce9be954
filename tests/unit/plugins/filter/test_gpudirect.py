"""plugins/filter/gpudirect.py: the node-level GPUDirect RDMA decision."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.filter import gpudirect as gd

from tests.conftest import fixture_text

READY_535 = {"state": "ready", "version": "535.183.01", "userspace_version": "535.183.01", "reason": None}
NOT_LOADED_535 = {"state": "installed-not-loaded", "version": None, "userspace_version": "535.261.03",
                  "reason": "nvidia-smi couldn't communicate with the NVIDIA driver"}
READY_460 = {"state": "ready", "version": "460.106.00", "userspace_version": "460.106.00", "reason": None}
ABSENT = {"state": "absent", "version": None, "userspace_version": None, "reason": "no driver"}
HCAS = ["mlx5_0", "mlx5_1"]


def plan(mode="auto", module="auto", driver=READY_535, gpus=8, hcas=HCAS, ofed="23.10-1.1.9.0", api=True,
         nvidia_ok=True, peermem_ok=True, loaded=()):
    return gd.plan(mode, module, driver, gpus, hcas, ofed, api, nvidia_ok, peermem_ok, list(loaded))


def test_everything_fits_nvidia_peermem_from_the_driver():
    p = plan()
    assert p["action"] == "configure" and p["problems"] == []
    assert (p["module"], p["modprobe"], p["source"], p["package"]) == (
        "nvidia_peermem", "nvidia-peermem", "driver", None)


def test_old_driver_uses_nv_peer_mem_1_0_9():
    p = plan(driver=READY_460, peermem_ok=False)
    assert p["action"] == "configure"
    assert (p["module"], p["package"], p["package_version"]) == ("nv_peer_mem", "nvidia-peer-memory-dkms", "1.0-9")


def test_driver_built_without_nvidia_peermem_falls_back_to_nv_peer_mem():
    p = plan(nvidia_ok=True, peermem_ok=False)
    assert p["module"] == "nv_peer_mem" and "without nvidia-peermem" in p["reason"]


def test_no_kernel_module_for_this_kernel_decides_by_version():
    # The sandbox and molecule: the driver package is installed, DKMS built nothing.
    p = plan(driver=NOT_LOADED_535, gpus=0, hcas=[], ofed=None, api=None, nvidia_ok=False, peermem_ok=False)
    assert p["action"] == "skip" and p["module"] == "nvidia_peermem"
    assert p["reason"].startswith("no NVIDIA GPU on the PCI bus and no RDMA device")
    assert any("inbox RDMA stack" in n for n in p["notes"])


def test_required_without_hardware_lists_every_missing_piece():
    p = plan(mode="required", driver=NOT_LOADED_535, gpus=0, hcas=[], ofed=None, api=None, nvidia_ok=False)
    assert p["action"] == "refuse"
    assert p["problems"][0].startswith("gpudirect_mode: required, but this node has no NVIDIA GPU")
    assert any("inbox RDMA stack" in x for x in p["problems"])


def test_inbox_stack_on_a_real_rdma_node_is_refused():
    p = plan(ofed=None, api=False)
    assert p["action"] == "refuse"
    assert len(p["problems"]) == 1 and "rdma_stack: ofed" in p["problems"][0]


def test_ofed_installed_but_inbox_ib_core_still_loaded():
    p = plan(api=False)
    assert p["action"] == "refuse" and "openibd restart or reboot" in p["problems"][0]


@pytest.mark.parametrize("mode", ["auto", "required"])
@pytest.mark.parametrize("driver", [READY_535, NOT_LOADED_535, READY_460, ABSENT])
@pytest.mark.parametrize("gpus", [0, 8])
@pytest.mark.parametrize("ofed", [None, "23.10-1.1.9.0"])
@pytest.mark.parametrize("api", [True, False])
def test_without_hcas_the_unread_peer_api_decides_as_any_reading(mode, driver, gpus, ofed, api):
    """roles/gpudirect/tasks/assert.yml greps /proc/kallsyms only on a node with an HCA and passes
    None elsewhere, as for a node without ib_core. Without an HCA, None decides as every reading
    (True, False) did: the same action (skip for auto, refuse for required), module and reason.
    What differs is the one peer-API sentence among the notes (auto) or after the missing-hardware
    problem (required), and only in two cases, where ib_core is loaded without an HCA: True on the
    inbox stack said nothing (None: the inbox stack lacks the API), and False with OFED said the
    loaded ib_core lacks it (None: nothing)."""
    keys = ("action", "module", "modprobe", "source", "package", "package_version", "reason")
    unread = plan(mode=mode, driver=driver, gpus=gpus, hcas=[], ofed=ofed, api=None)
    read = plan(mode=mode, driver=driver, gpus=gpus, hcas=[], ofed=ofed, api=api)
    assert unread["action"] == {"auto": "skip", "required": "refuse"}[mode]
    assert {k: read[k] for k in keys} == {k: unread[k] for k in keys}

    def said(p, peer_api=True):
        return {k: [x for x in p[k] if peer_api or "ib_register_peer_memory_client" not in x]
                for k in ("notes", "problems")}

    assert said(read, peer_api=False) == said(unread, peer_api=False)
    assert (said(read) == said(unread)) is ((ofed, api) not in ((None, True), ("23.10-1.1.9.0", False)))


def test_driver_not_loaded_on_a_gpu_node_points_at_the_reboot_point():
    p = plan(driver=NOT_LOADED_535)
    assert p["action"] == "refuse" and "gpucluster_allow_reboot" in p["problems"][0]


def test_no_driver_at_all():
    p = plan(driver=ABSENT)
    assert p["action"] == "refuse" and "run the nvidia_driver stage first" in p["problems"][0]


@pytest.mark.parametrize(("module", "driver", "expect"), [
    ("nv_peer_mem", READY_535, "must never be loaded together"),
    ("nvidia-peermem", READY_460, "comes with drivers >= 470"),
])
def test_a_forced_module_that_does_not_fit_the_driver(module, driver, expect):
    p = plan(module=module, driver=driver)
    assert p["action"] == "refuse" and expect in " ".join(p["problems"])


def test_the_other_module_loaded_is_refused():
    p = plan(loaded=["nv_peer_mem"])
    assert p["action"] == "refuse" and "modprobe -r nv_peer_mem" in p["problems"][0]


def test_disabled_removes_and_bad_values_raise():
    assert plan(mode="disabled")["action"] == "remove"
    with pytest.raises(ValueError, match="gpudirect_mode"):
        plan(mode="on")
    with pytest.raises(ValueError, match="gpudirect_module"):
        plan(module="peermem")


def test_load_errors_are_classified():
    c24 = fixture_text("peer-memory/C24_nv_peer_mem_unknown_symbol_ib_register_peer_memory_client."
                       "1-modprobe-dmesg.txt")
    assert gd.load_error(c24)["class"] == "PEER_MEM_API_MISSING"
    built = ("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n"
             "nvidia_peermem: module compiled without IB peer memory symbols present\n")
    result = gd.load_error(built)
    assert result["class"] == "BUILT_WITHOUT_PEER_MEMORY" and "rebuild it" in result["message"]


def test_loaded_modules_read_from_proc_modules():
    proc = ("nvidia_peermem 16384 0 - Live 0x0000000000000000\n"
            "ib_core 458752 8 nvidia_peermem,rdma_ucm,ib_uverbs, Live 0x0000000000000000\n")
    assert gd.FilterModule().filters()["gpudirect_loaded_modules"](proc) == ["nvidia_peermem"]
