"""plugins/filter/hugepages.py: plan, kernel arguments, node readers, error mapping."""

from __future__ import annotations

import jinja2
import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import fixture_text
from tests.unit.plugins.filter.filters import all_filters

FILTERS = all_filters()
GiB = 1024**3
C20 = "hugepages/C20_hugepages_runtime_alloc_kubelet_reports_zero.1-node-facts.txt"


def test_hugepages_filters():
    assert FILTERS["hugepages_vendor_count"](8) == 50
    plan = FILTERS["hugepages_plan"](50, "1G", 1024 * GiB, ["hugepages-2048kB", "hugepages-1048576kB"])
    assert plan["kernel_args"] == ["default_hugepagesz=1G", "hugepagesz=1G", "hugepages=50"]
    assert FILTERS["hugepages_kernel_args"](plan) == plan["kernel_args"]
    meminfo = "HugePages_Total: 50\nHugePages_Free: 50\nHugepagesize: 1048576 kB\n"
    assert FILTERS["hugepages_verify"](meminfo, plan) == []
    pools = FILTERS["hugepages_plan_pools"](
        [[5128, "2M"], [4, "512M"]], 480 * GiB, FILTERS["hugepages_kernel_page_sizes"]("aarch64", 65536), "2M"
    )
    assert pools["kernel_args"][0] == "default_hugepagesz=2M"


def test_errors_become_ansible_filter_errors_with_the_numbers():
    with pytest.raises(
        AnsibleFilterError, match=r"50 x 1 GiB = 50 GiB would leave 14 GiB of 64 GiB \(22% < 25%\)"
    ):
        FILTERS["hugepages_plan"](50, "1G", 64 * GiB, [2 * 1024**2, GiB])


def test_hugepages_filters_on_c20():
    text = fixture_text(C20)
    mounts = FILTERS["hugepages_parse_mounts"](text)
    assert [m["mountpoint"] for m in mounts] == ["/dev/hugepages"]
    plan = {"pools": [{"page_size": 2 * 1024**2, "count": 4096}], "default_size": 2 * 1024**2, "mem_total": 0}
    status = FILTERS["hugepages_node_status"](plan, text, "ro", runtime={"requested": True, "applied": True})
    assert status["state"] == "ok"
    assert FILTERS["hugepages_cmdline_active"](plan, "default_hugepagesz=2M hugepagesz=2M hugepages=4096")


def test_node_reading_filter_on_n12():
    n12 = "hugepages/N12_hugepages_allocatable_static_not_reduced_by_usage"
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    out = env.from_string("{{ (m | hugepages_node_reading(d)).free_bytes }}").render(
        m=fixture_text(n12 + ".1-proc-meminfo-excerpt.txt"),
        d=fixture_text(n12 + ".2-kubectl-describe-node-excerpt.txt"))
    assert out == str(481 * 2 * 1024**2)
    with pytest.raises(AnsibleFilterError, match="parse_node_resources: kubectl describe node line 2"):
        FILTERS["hugepages_parse_kubelet"]("Capacity:\n memory:\n")


def test_the_checked_plan_returns_the_refusal_as_a_value_instead_of_raising():
    from ansible_collections.gpucluster.cluster.plugins.filter.hugepages import FilterModule

    checked = FilterModule().filters()["hugepages_plan_checked"]
    ok = checked(4, "1G", 64 * 2**30, [2**21, 2**30])
    assert ok["refusal"] == "" and ok["value"]["count"] == 4
    bad = checked(100000, "1G", 64 * 2**30, [2**21, 2**30])
    assert bad["value"] is None and "lower hugepages_count" in bad["refusal"]
