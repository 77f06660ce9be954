"""Property tests for the GPU readers: what pastes do to an output never crashes a reader and
never changes its reading silently.

Each reader gets its real inputs (fixtures N21, N24, C14 and the nvidia-smi -q reports) cut at
any character, re-indented, with spaces turned into tabs, and with one line moved elsewhere.
Allowed outcomes: ParseError, the same reading, or a reading flagged ``complete: False``.

Two rules follow from what the outputs are:

- A kernel log or a journal cut at a line boundary is a shorter log, as real as the whole one:
  its events must be a prefix of the whole log's events (nothing invented, nothing changed).
  ``nvidia-smi -q`` has an end (``Processes`` closes each GPU block, ``Attached GPUs`` counts
  them), so a cut report must read incomplete.
- In a log the reading is the set of events, each carrying its own time stamp; a moved line
  changes line numbers and order, not the events. Line numbers are left out of the comparison.

Needs hypothesis (skipped without it).
"""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")

from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_fabric import (  # noqa: E402
    parse_fabricmanager,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_kernel import (  # noqa: E402
    parse_kernel_log,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_smi import (  # noqa: E402
    parse_smi_q,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (  # noqa: E402
    ParseError,
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.conftest import fixture_text  # noqa: E402
from tests.unit.plugins.module_utils.gpu_cases import (  # noqa: E402
    N21_JOURNAL,
    N21_START,
    N24,
    c14_blocks,
    smi_q,
)
from tests.unit.plugins.module_utils.test_gpu_fabric import STATUS_RUNNING  # noqa: E402
from tests.unit.plugins.module_utils.test_gpu_kernel import XIDS  # noqa: E402

SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _events(reading, key):
    """The reading's events without positions, as a sorted list (order-free comparison)."""
    out = []
    for event in reading[key]:
        out.append(repr(sorted((k, v) for k, v in event.items() if k not in ("line", "end_line"))))
    return sorted(out)


def _kernel_view(r):
    return {"events": _events(r, "events"), "gpus": r["gpus"], "lost": r["lost_bus_ids"],
            "failed": r["failed_bus_ids"], "unknown": r["unknown_xids"], "driver": r["driver"],
            "action": r["action"], "complete": r["complete"]}


def _fm_view(r):
    return {"events": _events(r, "errors"), "state": r["state"], "start_failed": r["start_failed"],
            "exit_status": r["exit_status"], "tokens": r["tokens"], "version": r["version"],
            "pids": r["pids"], "loaded": r["loaded"], "complete": r["complete"]}


READERS = {
    "smi_q": (parse_smi_q, lambda r: r, None),
    "kernel": (parse_kernel_log, _kernel_view, "events"),
    "fabric": (parse_fabricmanager, _fm_view, "errors"),
}

INPUTS = [
    ("smi_q", smi_q("r535_h100_2gpu.txt")),
    ("smi_q", smi_q("r418_v100.txt")),
    ("kernel", fixture_text(N24)),
    ("kernel", c14_blocks()[1].lstrip("\n")),
    ("kernel", XIDS),
    ("fabric", fixture_text(N21_START) + fixture_text(N21_JOURNAL)),
    ("fabric", STATUS_RUNNING),
]
IDS = [f"{kind}-{i}" for i, (kind, _t) in enumerate(INPUTS)]


def _read(kind, text):
    reader, view, _events_key = READERS[kind]
    try:
        return view(reader(text))
    except ParseError:
        return None


def _assert_same_or_flagged(kind, original, mutated, prefix_ok=False):
    base = _read(kind, original)
    assert base is not None and base["complete"] in (True, False)
    got = _read(kind, mutated)  # any exception but ParseError fails the test here
    if got is None or got == base or got["complete"] is False:
        return
    events_key = READERS[kind][2]
    if prefix_ok and events_key:
        reader = READERS[kind][0]
        whole = [e for e in reader(original)[events_key]]
        part = [e for e in reader(mutated)[events_key]]
        assert part == whole[:len(part)], "a cut log reads events the whole log does not have"
        kept = mutated.count("\n")
        inside = [e for e in whole if e["line"] <= kept < e.get("end_line", e["line"])]
        assert not inside, f"cut inside the message of {inside[0]} but not flagged"
        return
    raise AssertionError(f"silently different reading:\n{got}\n!=\n{base}")


@pytest.mark.parametrize(("kind", "text"), INPUTS, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_truncated(kind, text, data):
    if data.draw(st.booleans(), label="at a line boundary"):
        ends = [i + 1 for i, ch in enumerate(text) if ch == "\n"][:-1] or [0]
        cut = data.draw(st.sampled_from(ends), label="cut after line")
    else:
        cut = data.draw(st.integers(min_value=0, max_value=len(text) - 1), label="cut")
    mutated = text[:cut]
    _assert_same_or_flagged(kind, text, mutated,
                            prefix_ok=kind != "smi_q" and (cut == 0 or mutated.endswith("\n")))


@pytest.mark.parametrize(("kind", "text"), INPUTS, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_reindented(kind, text, data):
    lines = text.split("\n")
    rnd = data.draw(st.randoms(use_true_random=False), label="indents")
    indents = [rnd.choice(["", " ", "  ", "    ", "\t", "        ", " \t"]) for _line in lines]
    mutated = "\n".join(ind + line.lstrip() for ind, line in zip(lines, indents, strict=True))
    _assert_same_or_flagged(kind, text, mutated)


@pytest.mark.parametrize(("kind", "text"), INPUTS, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_tab_mangled(kind, text, data):
    tab_every = data.draw(st.integers(min_value=2, max_value=8), label="spaces per tab")
    expand = data.draw(st.booleans(), label="expand tabs instead")
    mutated = text.expandtabs(tab_every) if expand else text.replace(" " * tab_every, "\t")
    _assert_same_or_flagged(kind, text, mutated)


@pytest.mark.parametrize(("kind", "text"), INPUTS, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_one_line_moved(kind, text, data):
    lines = text.split("\n")
    src = data.draw(st.integers(min_value=0, max_value=len(lines) - 1), label="from")
    line = lines.pop(src)
    dst = data.draw(st.integers(min_value=0, max_value=len(lines)), label="to")
    lines.insert(dst, line)
    _assert_same_or_flagged(kind, text, "\n".join(lines))


def test_line_moved_inside_a_section_changes_nothing():
    # the example behind test_one_line_moved: nvidia-smi -q keys are read by name
    text = smi_q("r535_h100_2gpu.txt")
    moved = text.replace("                Max                       : 5\n"
                         "                Current                   : 5\n",
                         "                Current                   : 5\n"
                         "                Max                       : 5\n", 1)
    assert moved != text
    assert parse_smi_q(moved) == parse_smi_q(text)
