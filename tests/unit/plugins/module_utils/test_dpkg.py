"""dpkg selections: the reader on dpkg's own output grammar, the plan, and the stdin it writes."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.dpkg import (
    QUERY_FORMAT,
    parse_query,
    parse_selections,
    parse_wants,
    plan_selections,
    render,
    set_selections_input,
    unsatisfied,
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


# --- dpkg-query -W ----------------------------------------------------------------------------

QUERY_STATUS = """\
Package: rdma-core
Status: install ok installed
Version: 44.0-2
Architecture: amd64
Maintainer: x <x@example.org>
Description: rdma

Package: libibverbs1
Status: hold ok installed
Version: 44.0-2
Architecture: amd64
Multi-Arch: same
Maintainer: x <x@example.org>
Description: verbs

Package: perftest
Status: deinstall ok config-files
Version: 4.5-1
Architecture: amd64
Maintainer: x <x@example.org>
Description: perftest

Package: nvidia-container-toolkit
Status: install ok unpacked
Version: 1.17.8-1
Architecture: amd64
Maintainer: x <x@example.org>
Description: toolkit

"""


def _query(tmp_path, names):
    """The real dpkg-query on a private database (--admindir), as the roles run it."""
    import shutil
    import subprocess

    if shutil.which("dpkg-query") is None:
        pytest.skip("needs dpkg-query (Debian/Ubuntu)")
    d = tmp_path / "dpkg"
    (d / "info").mkdir(parents=True)
    (d / "status").write_text(QUERY_STATUS)
    r = subprocess.run(["dpkg-query", f"--admindir={d}", "-W", "-f", QUERY_FORMAT, *names],
                       capture_output=True, text=True, check=False)
    return r


def test_query_reader_on_the_real_dpkg_query(tmp_path):
    names = ["rdma-core", "libibverbs1", "perftest", "nvidia-container-toolkit", "ibverbs-utils"]
    r = _query(tmp_path, names)
    assert r.returncode == 1 and "ibverbs-utils" in r.stderr  # unknown name: rc 1, others still printed
    installed = parse_query(r.stdout)
    assert installed == {"rdma-core": "44.0-2", "libibverbs1:amd64": "44.0-2", "libibverbs1": "44.0-2"}
    assert unsatisfied(installed, names) == ["perftest", "nvidia-container-toolkit", "ibverbs-utils"]


def test_unsatisfied_reads_versions_as_apt_does():
    installed = {"nvidia-container-toolkit": "1.17.8-1", "nv-peer-mem-dkms": "1.2-0"}
    assert unsatisfied(installed, ["nvidia-container-toolkit=1.17.8-1"]) == []
    assert unsatisfied(installed, ["nvidia-container-toolkit=1.18.0-1"]) == ["nvidia-container-toolkit=1.18.0-1"]
    assert unsatisfied(installed, ["nv-peer-mem-dkms=1.2*", "nv-peer-mem-dkms=1.3*"]) == ["nv-peer-mem-dkms=1.3*"]
    assert unsatisfied({}, []) == []


def test_query_reader_ignores_noise():
    text = "dpkg-query: no packages found matching x\n\nbash\t5.2\tii \nbroken line\n"
    assert parse_query(text) == {"bash": "5.2"}


def test_the_dpkg_unsatisfied_filter_is_the_modules_own_rule(tmp_path):
    """nvidia_driver reads dpkg once by name, then asks for versions (dpkg_unsatisfied): a held
    driver (``hi``, as this role leaves it) is installed, at its version."""
    from ansible_collections.gpucluster.cluster.plugins.filter.dpkg import FilterModule

    installed = parse_query(_query(tmp_path, ["rdma-core", "libibverbs1", "perftest"]).stdout)
    missing = FilterModule().filters()["dpkg_unsatisfied"]
    assert missing(installed, ["libibverbs1=44.0-2", "rdma-core=44.*", "perftest"]) == ["perftest"]
    assert missing(installed, ["libibverbs1=45.0-1"]) == ["libibverbs1=45.0-1"]


def test_wants_reader_says_what_dpkg_get_selections_says(tmp_path):
    """parse_wants reads the selection from dpkg-query's status letters; dpkg --get-selections on
    the same database is the reference (hold, install, deinstall; an unknown name in neither)."""
    import subprocess

    names = ["rdma-core", "libibverbs1", "perftest", "nvidia-container-toolkit", "ibverbs-utils"]
    wants = parse_wants(_query(tmp_path, names).stdout)
    sel = subprocess.run(["dpkg", f"--admindir={tmp_path / 'dpkg'}", "--get-selections", *names],
                         capture_output=True, text=True, check=True)
    reference = dict(line.split() for line in sel.stdout.splitlines())
    assert {k: v for k, v in wants.items() if k in reference} == reference
    assert wants == {"rdma-core": "install", "libibverbs1:amd64": "hold", "libibverbs1": "hold",
                     "perftest": "deinstall", "nvidia-container-toolkit": "install"}


def test_wants_reader_ignores_noise():
    text = "dpkg-query: no packages found matching x\n\nbash\t5.2\thi \nbroken line\nodd\t1\tzi \n"
    assert parse_wants(text) == {"bash": "hold"}
