"""Property tests (hypothesis) for the issue-12 readers: what pastes do to an output - lost or
changed indentation, tabs for spaces, trailing spaces, CRLF, lines of interleaved ranks or of an
order-free listing shuffled, a cut anywhere - never crashes a reader (ParseError at most) and
never silently changes the reading:

- white-space mangling and order-free shuffles give exactly the reading of the original;
- a cut gives ParseError, or a reading whose every read value is the original's value; only a
  value on the line the cut went through may come out as a prefix of the original (a paste
  cut there says no more). Verdict fields (class, severity, cause, fix, state) are derived from
  what was read and are not compared for cuts.
"""

from __future__ import annotations

import contextlib
import random
import re

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import (
    cloud_errors,
    container_toolkit,
    diagnose,
    mpi_operator,
    nccl_net_plugin,
    policy_routing,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# No shrinking (a failure prints its example as drawn) and no example database in the checkout.
FAST = settings(max_examples=15, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
                suppress_health_check=[HealthCheck.too_slow])


def _plugin(text):
    d = nccl_net_plugin.read_net_plugin(text).as_dict()
    d.pop("evidence")
    d["ranks"] = sorted(d["ranks"], key=lambda r: (r["host"] or "", r["pid"] or 0))
    d["bootstrap"] = sorted(d["bootstrap"], key=lambda b: (b["host"] or "", b["interface"]))
    return d


def _job(text):
    d = mpi_operator.read_job_status(text)
    d["pods"] = sorted(d["pods"], key=lambda p: p["name"])
    return d


READERS = {
    "nccl-net-plugin/N01_nccl_plugin_hpcx_v5_loaded_under_nccl_2_18_v6_api.txt": _plugin,
    "nccl-net-plugin/N02_nccl_plugin_found_but_no_supported_symbol_internal_fallback.txt": _plugin,
    "container-toolkit/N04_unknown_runtime_nvidia_daemon_json_edited_dockerd_not_restarted.1-docker-compose-up.txt":
        container_toolkit.read_toolkit_error,
    "container-toolkit/N04_unknown_runtime_nvidia_daemon_json_edited_dockerd_not_restarted.3-docker-info-grep-runtime"
    ".txt": container_toolkit.parse_docker_info_runtimes,
    "container-toolkit/N05_container_nvml_unknown_error_after_systemctl_daemon_reload.2-on-host.txt":
        container_toolkit.parse_nvidia_smi_list,
    "container-toolkit/N06_cdi_unresolvable_runtime_nvidia_gpu_all_auto_spec_generation_failed.txt":
        container_toolkit.read_toolkit_error,
    "mpi-operator/N08_mpijob_v2beta1_launcher_ssh_cannot_resolve_worker_dns.txt": mpi_operator.read_launcher_log,
    "mpi-operator/N10_mpijob_gang_podgroup_notenoughresources_1_of_3_running.txt": _job,
    "cloud-eni/N13_eni_attachment_limit_exceeded_t2_medium_ipamd.txt": cloud_errors.read_cloud_error,
    "cloud-eni/N15_efa_p5_device_index_exceeds_network_card_limit.1-nodegroup-creation-error.txt":
        cloud_errors.read_cloud_error,
    "policy-routing/N16_multi_eni_same_subnet_source_rules_table_10001_present.txt": policy_routing.read_session,
}
CASES = sorted(READERS)
VERDICT = {"class", "severity", "cause", "fix", "state", "cuda_failures", "pods_running", "pods_pending", "evidence",
           "retryable", "leftover_enis", "orte_banner"}


def _consistent(part, full, path="$"):
    """Whether the reading of a cut input only lacks values or cuts one short (see module doc)."""
    if isinstance(part, dict):
        if not isinstance(full, dict):
            return False
        return all(k in VERDICT or (k in full and _consistent(v, full[k], f"{path}.{k}")) for k, v in part.items())
    if isinstance(part, (list, tuple)):
        return isinstance(full, (list, tuple)) and all(any(_consistent(p, f, path) for f in full) for p in part)
    if part is None or part == full or full is None and part is None:
        return True
    if isinstance(part, (str, int)) and not isinstance(part, bool) and isinstance(full, (str, int)):
        return str(full).startswith(str(part))
    return False


@st.composite
def whitespace_mangled(draw, text):
    out = []
    for line in text.splitlines():
        # lose or change the indentation, or keep it
        body = draw(st.sampled_from(["", " ", "\t", "    ", "\t\t"])) + line.strip() if draw(st.booleans()) else line
        # each run of blanks inside the line: keep, or replace by tabs / other spaces
        parts = re.split(r"([ \t]+)", body)
        for i in range(1, len(parts), 2):
            if parts[i] and parts[i - 1] and draw(st.integers(0, 3)) == 0:
                parts[i] = draw(st.sampled_from(["\t", "  ", " \t", "\t "]))
        body = "".join(parts) + draw(st.sampled_from(["", " ", "  ", "\t"]))
        out.append(body)
    return draw(st.sampled_from(["\n", "\r\n"])).join(out) + "\n"


@pytest.mark.parametrize("case", CASES)
@FAST
@given(data=st.data())
def test_whitespace_mangling_keeps_the_reading(case, data):
    text = fixture_text(case)
    reader = READERS[case]
    assert reader(data.draw(whitespace_mangled(text))) == reader(text)


@pytest.mark.parametrize("case", CASES)
@FAST
@given(cut=st.floats(0.0, 1.0))
def test_a_cut_is_a_parse_error_or_a_consistent_reading(case, cut):
    text = fixture_text(case)
    reader = READERS[case]
    full = reader(text)
    part_text = text[: int(len(text) * cut)]
    try:
        part = reader(part_text)
    except ParseError:
        return
    assert _consistent(part, full), (part_text[-80:], part)


def _interleave(groups, rnd):
    """Merge ``groups`` (lists of lines) in random order, keeping each group's own order."""
    idx = [0] * len(groups)
    out = []
    while any(i < len(g) for i, g in zip(idx, groups)):  # noqa: B905
        k = rnd.choice([n for n, g in enumerate(groups) if idx[n] < len(g)])
        out.append(groups[k][idx[k]])
        idx[k] += 1
    return out


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("nccl-net-plugin/")])
@FAST
@given(seed=st.integers(0, 2**32))
def test_interleaved_ranks_keep_the_reading(case, seed):
    text = fixture_text(case)
    groups = {}
    for line in text.splitlines():
        m = re.match(r"^([^\s:]+:\d+):", line)
        groups.setdefault(m.group(1) if m else None, []).append(line)
    shuffled = "\n".join(_interleave(list(groups.values()), random.Random(seed))) + "\n"
    assert _plugin(shuffled) == _plugin(text)


def _shuffle_lines(text, seed, keep=lambda line: False):
    """Shuffle the lines of ``text`` that ``keep`` does not pin."""
    lines = text.splitlines()
    free = [i for i, ln in enumerate(lines) if not keep(ln)]
    moved = [lines[i] for i in free]
    random.Random(seed).shuffle(moved)
    for i, ln in zip(free, moved):  # noqa: B905
        lines[i] = ln
    return "\n".join(lines) + "\n"


@FAST
@given(seed=st.integers(0, 2**32))
def test_shuffled_order_free_listings_keep_the_reading(seed):
    # ip rule lines (sorted by priority), docker info lines, ipamd debug lines, kubectl pod rows
    n16 = "policy-routing/N16_multi_eni_same_subnet_source_rules_table_10001_present.txt"
    text = fixture_text(n16)
    head, rules, tail = text.partition("TEST:~$ ip -6 rule\n")[0].partition("TEST:~$ ip -4 rule\n")
    mixed = head + rules + _shuffle_lines(tail, seed) + "TEST:~$ ip -6 rule\n" + text.partition(
        "TEST:~$ ip -6 rule\n")[2]
    assert policy_routing.read_session(mixed) == policy_routing.read_session(text)
    info = ("container-toolkit/N04_unknown_runtime_nvidia_daemon_json_edited_dockerd_not_restarted"
            ".3-docker-info-grep-runtime.txt")
    assert container_toolkit.parse_docker_info_runtimes(_shuffle_lines(fixture_text(info), seed)) == \
        container_toolkit.parse_docker_info_runtimes(fixture_text(info))
    n13 = fixture_text("cloud-eni/N13_eni_attachment_limit_exceeded_t2_medium_ipamd.txt")
    pinned = _shuffle_lines(n13, seed, keep=lambda ln: "[ERROR]" in ln or "status code" in ln)
    assert cloud_errors.read_cloud_error(pinned) == cloud_errors.read_cloud_error(n13)
    n10 = fixture_text("mpi-operator/N10_mpijob_gang_podgroup_notenoughresources_1_of_3_running.txt")
    lines = n10.splitlines()
    assert lines[5].startswith("NAME ") and lines[9] == ""
    rows = lines[6:9]  # the three pod rows under the pod header
    random.Random(seed).shuffle(rows)
    assert _job("\n".join(lines[:6] + rows + lines[9:]) + "\n") == _job(n10)


@settings(max_examples=60, deadline=None, database=None, phases=(Phase.explicit, Phase.generate))
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=400)
       | st.lists(st.sampled_from([
           "x:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin X (v7)", "32765:\tfrom 10.0.0.1 lookup 7",
           "default via 10.0.0.1 dev eth1", "ssh: Could not resolve hostname a-worker-0.a-worker: x",
           "An error occurred (AttachmentLimitExceeded) when calling the AttachNetworkInterface operation: y",
           "\tstatus code: 400, request id: r", "NAME READY STATUS RESTARTS AGE", "status:", "- message: 'a",
           " Runtimes: runc", "{", "}", "GPU 0: A (UUID: GPU-1)", "NCCL version 2.1", "", "  "]), max_size=12)
       .map("\n".join))
def test_arbitrary_input_never_crashes_a_reader_or_diagnose(text):
    for reader in (nccl_net_plugin.read_net_plugin, container_toolkit.read_toolkit_error,
                   container_toolkit.parse_docker_info_runtimes, container_toolkit.parse_nvidia_smi_list,
                   mpi_operator.read_launcher_log, mpi_operator.read_job_status, cloud_errors.read_cloud_error,
                   policy_routing.read_session):
        with contextlib.suppress(ParseError):
            reader(text)
    for finding in diagnose.diagnose_text(text):
        assert finding.state in ("ok", "warn", "fail", "unreadable")


MULTI = [c for c in CASES if not c.startswith("container-toolkit/N04") or ".1-" in c]


@settings(FAST, max_examples=8)
@given(data=st.data())
def test_diagnose_of_a_mangled_multi_output_paste_keeps_kinds_and_classes(data):
    order = data.draw(st.permutations(MULTI))
    text = "".join(fixture_text(c) for c in order)

    def rows(t):
        return [(f.kind, f.state, f.cls) for f in diagnose.diagnose_text(t)]

    assert rows(data.draw(whitespace_mangled(text))) == rows(text)
