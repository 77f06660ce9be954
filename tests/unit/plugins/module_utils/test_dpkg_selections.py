"""dpkg selections: the reader on dpkg's own output grammar, the plan, and the stdin it writes."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.dpkg_selections import (
    parse_selections,
    plan_selections,
    render,
    set_selections_input,
)

# dpkg 1.21 output, tabs as getselections pads them (6 - len // 8, at least one), a
# Multi-Arch: same package printed with its architecture, stderr mixed in by a caller.
GET = (
    "bash\t\t\t\t\t\tinstall\n"
    "libnvidia-compute-550:amd64\t\t\thold\n"
    "a-very-long-package-name-of-more-than-forty-chars\thold\n"
    "oldpkg\t\t\t\t\t\tdeinstall\n"
    "gone\t\t\t\t\t\tpurge\n"
    "dpkg: no packages found matching nope\n"
)


def test_reader_follows_dpkg_grammar():
    sel = parse_selections(GET)
    assert sel["bash"] == "install"
    assert sel["libnvidia-compute-550:amd64"] == "hold"
    assert sel["libnvidia-compute-550"] == "hold"  # a bare-name query finds the arch-qualified line
    assert sel["a-very-long-package-name-of-more-than-forty-chars"] == "hold"
    assert sel["oldpkg"] == "deinstall" and sel["gone"] == "purge"
    assert "nope" not in sel and "dpkg:" not in sel


def test_plan_changes_only_what_differs_in_order_without_repeats():
    sel = parse_selections(GET)
    plan = plan_selections(["libnvidia-compute-550", "bash", "bash", "oldpkg"], "hold", sel)
    assert plan == {"changes": [("bash", "install", "hold"), ("oldpkg", "deinstall", "hold")], "missing": []}
    assert set_selections_input(plan["changes"]) == "bash hold\noldpkg hold\n"


def test_plan_refuses_to_hold_an_unknown_package_and_releases_it_as_a_no_op():
    sel = parse_selections(GET)
    assert plan_selections(["nope", "bash"], "hold", sel)["missing"] == ["nope"]
    assert plan_selections(["nope", "libnvidia-compute-550"], "install", sel) == {
        "changes": [("libnvidia-compute-550", "hold", "install")], "missing": []}


def test_plan_refuses_another_selection():
    with pytest.raises(ValueError, match="purge"):
        plan_selections(["bash"], "purge", {})


def test_render_marks_unknown_packages():
    assert render({"bash": "hold"}, ["bash", "nope", "bash"]) == "bash hold\nnope -\n"
