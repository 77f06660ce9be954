"""Hugepage arithmetic, guards, parsers and verification, on the fixtures in tests/fixtures/hugepages."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import netstage
from ansible_collections.gpucluster.cluster.plugins.module_utils.hugepages import (
    GiB,
    HugepagesError,
    HugepagesParseError,
    HugepagesPlan,
    KiB,
    MiB,
    kernel_cmdline_args,
    kernel_page_sizes,
    kubelet_resource_name,
    mem_total_bytes,
    node_hugepages_reading,
    parse_cmdline_hugepages,
    parse_hugetlbfs_mounts,
    parse_kubelet_capacity,
    parse_meminfo,
    parse_node_pages,
    parse_node_resources,
    parse_quantity,
    parse_size,
    plan,
    plan_pools,
    supported_page_sizes,
    vendor_page_count,
    verify,
)

from tests.conftest import fixture_text

C20 = "hugepages/C20_hugepages_runtime_alloc_kubelet_reports_zero"
C22 = "hugepages/C22_hugepages_1G_invalid_on_arm64_64k_kernel_gb200"
X86 = [2 * MiB, GiB]


# ---- vendor rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(("gpus", "pages"), [(8, 50), (4, 30), (1, 15), (0, 10), (16, 90)])
def test_vendor_page_count(gpus, pages):
    assert vendor_page_count(gpus) == pages


@pytest.mark.parametrize("bad", [-1, True, "8", 8.0, None])
def test_vendor_page_count_rejects_non_counts(bad):
    with pytest.raises(HugepagesError, match="GPU count"):
        vendor_page_count(bad)


# ---- sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1G", GiB),
        ("1GiB", GiB),
        ("1g", GiB),
        ("2M", 2 * MiB),
        ("2MB", 2 * MiB),
        ("512M", 512 * MiB),
        ("2048kB", 2 * MiB),
        ("hugepages-1048576kB", GiB),
        ("16G", 16 * GiB),
        (2097152, 2 * MiB),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "huge", "0M", "-2M", 0, True, "1.5G"])
def test_parse_size_rejects(bad):
    with pytest.raises(HugepagesError):
        parse_size(bad)


def test_kubelet_resource_names():
    assert kubelet_resource_name(2 * MiB) == "hugepages-2Mi"
    assert kubelet_resource_name(GiB) == "hugepages-1Gi"
    assert kubelet_resource_name(512 * MiB) == "hugepages-512Mi"


# ---- plan and guards ----------------------------------------------------------------------------


def test_plan_vendor_count_on_a_large_node_renders_kernel_args():
    p = plan(vendor_page_count(8), "1G", 1024 * GiB, X86)
    assert kernel_cmdline_args(p) == ["default_hugepagesz=1G", "hugepagesz=1G", "hugepages=50"]
    assert p.count == 50
    assert p.reserved == 50 * GiB
    assert p.default_size == GiB


def test_plan_2m_pages_use_2M_spelling():
    p = plan(1024, "2M", 64 * GiB, X86)
    assert kernel_cmdline_args(p) == ["default_hugepagesz=2M", "hugepagesz=2M", "hugepages=1024"]


def test_plan_refuses_count_that_leaves_too_little_memory_with_the_numbers():
    with pytest.raises(HugepagesError) as err:
        plan(50, "1G", 64 * GiB, X86)
    msg = str(err.value)
    assert msg.startswith(
        "50 x 1 GiB = 50 GiB would leave 14 GiB of 64 GiB (22% < 25%); lower hugepages_count"
    )
    assert "at most 48" in msg
    assert "hugepages_min_free_share" in msg


def test_plan_free_share_boundary():
    # 48 x 1 GiB of 64 GiB leaves exactly 16 GiB = 25 %: allowed; 49 is not.
    assert plan(48, "1G", 64 * GiB, X86).free_share == pytest.approx(0.25)
    with pytest.raises(
        HugepagesError, match=r"49 x 1 GiB = 49 GiB would leave 15 GiB of 64 GiB \(23% < 25%\)"
    ):
        plan(49, "1G", 64 * GiB, X86)
    assert plan(49, "1G", 64 * GiB, X86, min_free_share=0.2).count == 49


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, "1G", 64 * GiB, X86), "integer >= 1"),
        ((-4, "1G", 64 * GiB, X86), "integer >= 1"),
        ((4, "huge", 64 * GiB, X86), "cannot read page size"),
        ((4, "1G", 0, X86), "node memory must be positive"),
        ((4, "1G", "lots", X86), "byte count"),
        ((4, "1G", 64 * GiB, []), "offers no hugepage sizes"),
    ],
)
def test_plan_rejects_bad_input(args, match):
    with pytest.raises(HugepagesError, match=match):
        plan(*args)


def test_plan_rejects_min_free_share_out_of_range():
    with pytest.raises(HugepagesError, match=r"min_free_share must be in \[0, 1\)"):
        plan(1, "1G", 64 * GiB, X86, min_free_share=1.0)


def test_plan_refuses_1g_when_cpu_lacks_pdpe1gb():
    sizes = kernel_page_sizes("x86_64", 4096, cpu_flags=["pse", "pae"])
    assert sizes == [2 * MiB]
    with pytest.raises(
        HugepagesError, match=r"1 GiB \(hugepagesz=1G\) is not offered .* \(it offers 2 MiB\)"
    ):
        plan(50, "1G", 1024 * GiB, sizes)


def test_plan_dict_round_trip():
    p = plan(50, "1G", 1024 * GiB, X86)
    d = p.as_dict()
    assert d["pools"] == [{"page_size": GiB, "page_size_name": "1G", "count": 50}]
    assert d["kernel_args"] == kernel_cmdline_args(p)
    assert kernel_cmdline_args(d) == kernel_cmdline_args(p)
    with pytest.raises(HugepagesError, match="expected a hugepages plan"):
        kernel_cmdline_args({"count": 50})


# ---- C22: 1 GiB pages on a 64 KiB-page arm64 kernel ---------------------------------------------


def _c22_lines():
    text = fixture_text(C22 + ".txt")
    old = re.search(r"^-cmdline_hugepages=(.*)$", text, re.M).group(1)
    new = re.search(r"^\+cmdline_hugepages=(.*)$", text, re.M).group(1)
    return old, new


def test_c22_64k_arm64_kernel_offers_2m_512m_16g_only():
    by_arch = kernel_page_sizes("aarch64", 65536)
    assert by_arch == [2 * MiB, 512 * MiB, 16 * GiB]
    # The same reading from the sysfs listing a node would report.
    listing = "hugepages-16777216kB  hugepages-2048kB  hugepages-524288kB\n"
    assert supported_page_sizes(listing) == by_arch
    assert supported_page_sizes(["/sys/kernel/mm/hugepages/hugepages-2048kB"]) == [2 * MiB]
    assert GiB not in by_arch


def test_c22_old_profile_asking_for_1g_is_refused_at_render_time():
    old, _ = _c22_lines()
    requested = parse_cmdline_hugepages(old)
    assert requested["pools"] == {2 * MiB: 5128, GiB: 2}
    pools = [(count, size) for size, count in requested["pools"].items()]
    with pytest.raises(HugepagesError) as err:
        plan_pools(pools, 480 * GiB, kernel_page_sizes("aarch64", 65536), default_size="2M")
    msg = str(err.value)
    assert "1 GiB (hugepagesz=1G) is not offered by the running kernel" in msg
    assert "offers 2 MiB, 512 MiB, 16 GiB" in msg
    assert "the same 2 GiB fits as 4 x 512 MiB (hugepagesz=512M hugepages=4)" in msg


def test_c22_equivalent_2g_intent_renders_as_the_fixed_profile():
    _, new = _c22_lines()
    fixed = parse_cmdline_hugepages(new)
    assert fixed == {"default_size": 2 * MiB, "pools": {2 * MiB: 5128, 512 * MiB: 4}}
    # 4 x 512 MiB keeps the 2 GiB that 2 x 1 GiB gave.
    assert 4 * 512 * MiB == 2 * GiB
    p = plan_pools(
        [(5128, "2M"), (4, "512M")], 480 * GiB, kernel_page_sizes("aarch64", 65536), default_size="2M"
    )
    args = kernel_cmdline_args(p)
    assert args == [
        "default_hugepagesz=2M",
        "hugepagesz=2M",
        "hugepages=5128",
        "hugepagesz=512M",
        "hugepages=4",
    ]
    # Same meaning as the profile line, whatever the token order.
    assert parse_cmdline_hugepages(" ".join(args)) == fixed


def test_plan_pools_default_must_name_a_pool():
    with pytest.raises(HugepagesError, match="default_hugepagesz=1G names no requested pool"):
        plan_pools([(4, "2M")], 64 * GiB, X86, default_size="1G")
    with pytest.raises(HugepagesError, match="requested twice"):
        plan_pools([(4, "2M"), (8, "2M")], 64 * GiB, X86)


def test_parse_cmdline_hugepages_without_size_applies_to_default():
    got = parse_cmdline_hugepages("ro quiet default_hugepagesz=1G hugepages=16 console=ttyS0")
    assert got == {"default_size": GiB, "pools": {GiB: 16}}


# Linux 5.16+ (commit b5389086ad7b, kernel-parameters.txt): hugepages=<node>:<integer>[,<node>:<integer>];
# mm/hugetlb.c hugepages_setup adds every node's count to the pool.
def test_parse_cmdline_hugepages_per_numa_node_counts_sum_to_the_pool():
    got = parse_cmdline_hugepages("BOOT_IMAGE=/vmlinuz ro default_hugepagesz=1G hugepagesz=1G hugepages=0:4,1:4")
    assert got == {"default_size": GiB, "pools": {GiB: 8}, "nodes": {GiB: {0: 4, 1: 4}}}
    got = parse_cmdline_hugepages("BOOT_IMAGE=/vmlinuz ro hugepagesz=1G hugepages=0:1,1:3 hugepagesz=2M hugepages=512")
    assert got == {"default_size": None, "pools": {GiB: 4, 2 * MiB: 512}, "nodes": {GiB: {0: 1, 1: 3}}}
    # before any hugepagesz=, the node form goes to the default size, as the plain count does
    got = parse_cmdline_hugepages("hugepages=0:2,1:2, default_hugepagesz=1G")
    assert got == {"default_size": GiB, "pools": {GiB: 4}, "nodes": {GiB: {0: 2, 1: 2}}}
    plan_1g = plan(8, "1G", 512 * GiB, X86)
    assert netstage.cmdline_active(plan_1g, "default_hugepagesz=1G hugepagesz=1G hugepages=0:4,1:4")
    assert not netstage.cmdline_active(plan_1g, "default_hugepagesz=1G hugepagesz=1G hugepages=0:4,1:3")


@pytest.mark.parametrize("token", [
    "hugepages=0:4,1", "hugepages=0:4;1:4", "hugepages=4,0:4", "hugepages=-1", "hugepages=0:4,0:4",
    "hugepages=lots", "hugepagesz=1X",
])
def test_parse_cmdline_hugepages_malformed_token_is_a_parse_error_naming_it(token):
    with pytest.raises(HugepagesParseError, match=re.escape(repr(token))):
        parse_cmdline_hugepages(f"ro default_hugepagesz=1G hugepagesz=1G {token}")


# ---- C20: runtime 2 MiB pages, kubelet reports 0 -------------------------------------------------


def test_c20_meminfo_reading():
    info = parse_meminfo(fixture_text(C20 + ".1-node-facts.txt"))
    assert info["total"] == 4096
    assert info["free"] == 4096
    assert info["rsvd"] == 0
    assert info["surp"] == 0
    assert info["page_size_kb"] == 2048
    assert info["total_bytes"] == 8 * GiB  # 8192 Mi
    assert info["mem_total_kb"] is None  # not in the grep


def test_mem_total_from_meminfo_as_the_kernel_counts_it():
    import os
    from pathlib import Path

    # This machine's own /proc/meminfo: MemTotal is the kernel's totalram, which sysconf reports too.
    here = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert mem_total_bytes(Path("/proc/meminfo").read_text()) == here
    assert mem_total_bytes("MemTotal:       2113510400 kB\nMemFree: 1 kB\n") == 2113510400 * 1024
    with pytest.raises(HugepagesError, match="MemTotal"):
        mem_total_bytes(fixture_text(C20 + ".1-node-facts.txt"))  # a grep of the hugepage lines only


def test_c20_per_numa_node_and_mount():
    text = fixture_text(C20 + ".1-node-facts.txt")
    assert parse_node_pages(text) == {
        0: {2 * MiB: {"free_hugepages": 2048}},
        1: {2 * MiB: {"free_hugepages": 2048}},
    }
    mounts = parse_hugetlbfs_mounts(text)
    assert mounts == [{"mountpoint": "/dev/hugepages", "page_size": None, "options": ["rw", "relatime"]}]


def test_c20_kubelet_capacity_reading():
    cap = parse_kubelet_capacity(fixture_text(C20 + ".2-kubectl-describe-node-as-pasted.txt"))
    assert cap == {"hugepages-1Gi": 0, "hugepages-2Mi": 0, "memory": 264110532 * KiB}
    alloc = parse_kubelet_capacity(
        fixture_text(C20 + ".2-kubectl-describe-node-as-pasted.txt"), "Allocatable"
    )
    assert alloc["memory"] == 264008132 * KiB


def test_c20_verify_reports_kubelet_started_before_allocation():
    info = parse_meminfo(fixture_text(C20 + ".1-node-facts.txt"))
    cap = parse_kubelet_capacity(fixture_text(C20 + ".2-kubectl-describe-node-as-pasted.txt"))
    p = plan(4096, "2M", cap["memory"], X86)
    mismatches = verify(info, p, kubelet_capacity=cap)
    assert len(mismatches) == 1
    m = mismatches[0]
    assert m["field"] == "kubelet hugepages-2Mi"
    assert m["expected"] == 8 * GiB == parse_quantity("8Gi")
    assert m["actual"] == 0
    assert "only when it starts" in m["cause"]
    assert "restart kubelet" in m["cause"]
    # After the restart the capacity matches and nothing is reported.
    assert verify(info, p, kubelet_capacity=dict(cap, **{"hugepages-2Mi": parse_quantity("8Gi")})) == []


# ---- verify causes ---------------------------------------------------------------------------


def _meminfo(total, size_kb):
    return (
        "MemTotal:       1056000000 kB\n"
        f"HugePages_Total:   {total}\nHugePages_Free:    {total}\nHugePages_Rsvd:        0\n"
        f"HugePages_Surp:        0\nHugepagesize:    {size_kb} kB\nHugetlb:        {total * size_kb} kB\n"
    )


def test_verify_ok_after_boot():
    p = plan(50, "1G", 1024 * GiB, X86)
    assert verify(_meminfo(50, 1048576), p) == []
    info = parse_meminfo(_meminfo(50, 1048576))
    assert info["mem_total_kb"] == 1056000000
    assert info["hugetlb_kb"] == 50 * 1048576


def test_verify_default_size_not_applied():
    p = plan(50, "1G", 1024 * GiB, X86)
    (m,) = verify(_meminfo(0, 2048), p)
    assert m["field"] == "Hugepagesize"
    assert m["expected"] == GiB and m["actual"] == 2 * MiB
    assert "default_hugepagesz=1G" in m["cause"] and "rebooted" in m["cause"]


@pytest.mark.parametrize(
    ("total", "cause"),
    [(0, "reboot pending"), (31, "fragmented"), (60, "something else also allocates")],
)
def test_verify_count_mismatch_causes(total, cause):
    p = plan(50, "1G", 1024 * GiB, X86)
    (m,) = verify(_meminfo(total, 1048576), p)
    assert m["field"] == "HugePages_Total"
    assert (m["expected"], m["actual"]) == (50, total)
    assert cause in m["cause"]


def test_verify_non_default_pool_from_sysfs():
    p = plan_pools(
        [(5128, "2M"), (4, "512M")], 480 * GiB, kernel_page_sizes("aarch64", 65536), default_size="2M"
    )
    info = _meminfo(5128, 2048)
    assert verify(info, p, sysfs_pools={512 * MiB: 4}) == []
    (m,) = verify(info, p, sysfs_pools={512 * MiB: 0})
    assert m["field"] == "nr_hugepages (512M)"
    assert "hugepagesz=512M hugepages=4" in m["cause"]


def test_unreadable_inputs_give_clear_errors():
    with pytest.raises(HugepagesError, match="HugePages_Total"):
        parse_meminfo("this is not meminfo")
    with pytest.raises(HugepagesError, match="hugepages-<N>kB"):
        supported_page_sizes("ls: cannot access '/sys/kernel/mm/hugepages': No such file or directory")
    with pytest.raises(HugepagesError, match="arm64 base page size"):
        kernel_page_sizes("aarch64", 8192)
    with pytest.raises(HugepagesError, match="architecture"):
        kernel_page_sizes("riscv64")
    with pytest.raises(HugepagesError, match="Kubernetes quantity"):
        parse_quantity("lots")


def test_plan_type_is_frozen():
    p = plan(50, "1G", 1024 * GiB, X86)
    assert isinstance(p, HugepagesPlan)
    with pytest.raises(AttributeError):
        p.default_size = 2 * MiB


# ---- N12: Allocatable is static, not reduced by pods' use ---------------------------------------

N12 = "hugepages/N12_hugepages_allocatable_static_not_reduced_by_usage"


def test_n12_meminfo_excerpt_reading():
    info = parse_meminfo(fixture_text(N12 + ".1-proc-meminfo-excerpt.txt"))
    assert (info["total"], info["free"]) == (512, 481)
    assert info["page_size"] is None  # Hugepagesize was elided: not assumed


def test_n12_describe_node_reading_units_per_value():
    node = parse_node_resources(fixture_text(N12 + ".2-kubectl-describe-node-excerpt.txt"))
    for section in ("capacity", "allocatable"):
        assert node[section]["hugepages-1Gi"] == 0
        assert node[section]["hugepages-2Mi"] == GiB
        assert node[section]["cpu"] == 2000 and node[section]["pods"] == 110
    assert node["capacity"]["memory"] == 2937344 * KiB
    assert node["allocatable"]["memory"] == 1786368 * KiB
    assert node["capacity"]["ephemeral-storage"] == 39269648 * KiB
    assert node["allocatable"]["ephemeral-storage"] == 36190907537  # plain bytes


def test_n12_no_fault_allocatable_is_static_and_free_is_from_meminfo():
    r = node_hugepages_reading(fixture_text(N12 + ".1-proc-meminfo-excerpt.txt"),
                               fixture_text(N12 + ".2-kubectl-describe-node-excerpt.txt"))
    assert (r["total"], r["free"], r["in_use"]) == (512, 481, 31)
    assert (r["page_size"], r["page_size_source"]) == (2 * MiB, "kubelet capacity")
    assert r["free_bytes"] == 481 * 2 * MiB  # 962 MiB, not the reporter's "481Mi"
    # Capacity - Allocatable memory = the 1 GiB of hugepages + a 100 MiB reserve.
    assert r["memory_reserved_bytes"] == 102400 * KiB
    assert len(r["findings"]) == 1 and "is static" in r["findings"][0] and "962 MiB" in r["findings"][0]


def test_n12_without_a_matching_resource_the_size_stays_unknown():
    r = node_hugepages_reading("HugePages_Total: 512\nHugePages_Free: 481\n",
                               "Capacity:\n hugepages-2Mi: 0\nAllocatable:\n hugepages-2Mi: 0\n")
    assert r["page_size"] is None and r["free_bytes"] is None
    assert "size unknown" in r["findings"][0]


def test_describe_node_lost_indentation_and_cut_line():
    flat = "Capacity:\ncpu: 2\nhugepages-2Mi: 1Gi\nmemory: 2937344Ki\nAllocatable:\nhugepages-2Mi: 1Gi\nSystem Info:\n"
    node = parse_node_resources(flat)
    assert node["capacity"]["hugepages-2Mi"] == GiB and node["allocatable"] == {"hugepages-2Mi": GiB}
    with pytest.raises(HugepagesError, match="line 3: hugepages-2Mi has no value"):
        parse_node_resources("Capacity:\n cpu: 2\n hugepages-2Mi:\n")
    with pytest.raises(HugepagesError, match="line 2: .*memory '29373x' is not a Kubernetes quantity"):
        parse_node_resources("Capacity:\n memory: 29373x\n")


def test_node_pages_from_grep_path_colon_value():
    # `grep . /sys/devices/system/node/node*/hugepages/hugepages-*/*` as posted in an xmrig/xmrig
    # issue thread (Spudz76, 2022-01-25); the value follows the path and a colon on the same line,
    # which read as nothing at all before.
    text = (
        "# grep . /sys/devices/system/node/node*/hugepages/hugepages-*/*\n"
        "/sys/devices/system/node/node0/hugepages/hugepages-1048576kB/free_hugepages:0\n"
        "/sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages:3\n"
        "/sys/devices/system/node/node0/hugepages/hugepages-1048576kB/surplus_hugepages:0\n"
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages:233\n"
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages:240\n"
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/surplus_hugepages:0\n"
        "/sys/devices/system/node/node1/hugepages/hugepages-1048576kB/free_hugepages:0\n"
        "/sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages:3\n"
        "/sys/devices/system/node/node1/hugepages/hugepages-1048576kB/surplus_hugepages:0\n"
    )
    pages = parse_node_pages(text)
    assert pages[0][GiB] == {"free_hugepages": 0, "nr_hugepages": 3, "surplus_hugepages": 0}
    assert pages[0][2 * MiB] == {"free_hugepages": 233, "nr_hugepages": 240, "surplus_hugepages": 0}
    assert pages[1] == {GiB: {"free_hugepages": 0, "nr_hugepages": 3, "surplus_hugepages": 0}}
