"""Property tests of the RDMA, hugepages, NCCL-config and peer-memory readers (hypothesis).

What pastes do to a tool's output - indentation lost or changed, tabs for spaces, the text cut
anywhere, records in another order, arbitrary junk - must end in either the same reading or a
ParseError (a ``ValueError`` naming the line); never another exception, never a reading that
differs from the real one without a word. Inputs are the real captured outputs of
``tests/fixtures`` (and the tools' documented grammar where no capture exists).

Limit, stated rather than hidden: a cut exactly at the end of a free-form value on the last line
(``netdev ens10f`` for ``ens10f0``, ``HugePages_Free: 48`` for ``481``) reads as a well-formed
shorter value; no grammar can tell, and Ansible strips the final newline that could. The
truncation property therefore allows at most the one cut line's record to differ.

hypothesis is a test-only dependency: ``pip install 'hypothesis==6.*'``; without it this module
is skipped.
"""

from __future__ import annotations

import re

import pytest

hypothesis = pytest.importorskip("hypothesis")
from ansible_collections.gpucluster.cluster.plugins.module_utils import (  # noqa: E402
    hugepages,
    multi_nic,
    nccl,
    peermem,
    rdma,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.conftest import fixture_text  # noqa: E402

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _without_prompts(text):
    return "\n".join(ln for ln in text.splitlines() if not re.match(r"^(\$ |root@)", ln)) + "\n"


RDMA_LINK = (
    "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0 \n"
    "link mlx5_1/1 subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state DOWN physical_state DISABLED \n"
    "link mlx5_10/1 state ACTIVE physical_state LINK_UP netdev ens10f0 \n"
)
SHOW_GIDS = (
    "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n"
    "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n"
    "mlx5_0\t1\t0\tfe80:0000:0000:0000:0e42:a1ff:fe9a:0b3e\t\t\tv1\tens1f0\n"
    "mlx5_0\t1\t1\tfe80:0000:0000:0000:0e42:a1ff:fe9a:0b3e\t\t\tv2\tens1f0\n"
    "mlx5_0\t1\t2\t0000:0000:0000:0000:0000:ffff:c000:0206\t192.0.2.6  \tv1\tens1f0\n"
    "mlx5_0\t1\t3\t0000:0000:0000:0000:0000:ffff:c000:0206\t192.0.2.6  \tv2\tens1f0\n"
)


def _ibstatus_blocks(text):
    return re.split(r"(?m)^(?=Infiniband device )", text)


def _devinfo_blocks(text):
    return re.split(r"(?m)^(?=hca_id:)", text)


def _node_blocks(text):
    return re.split(r"(?m)^(?=[A-Z][A-Za-z ]*:\s*$)", text)


# (name, reader, text, how records are delimited: "lines" or a block splitter)
CASES = [
    ("ibv_devices N18", rdma.parse_ibv_devices,
     fixture_text("rdma/N18_ibv_devices_single_mlx5_bond_0_for_two_cx5_ports.1-ibv-devices.txt"), "lines"),
    ("ibdev2netdev C05", rdma.parse_ibdev2netdev,
     _without_prompts(fixture_text("rdma/C05_ibdev2netdev_h100_ib_plus_eth_netdev_down.txt")), "lines"),
    ("rdma link", rdma.parse_rdma_link, RDMA_LINK, "lines"),
    ("show_gids", rdma.parse_gid_table, SHOW_GIDS, "lines"),
    ("ibv_devinfo -v GIDs C32", rdma.parse_gid_table,
     fixture_text("nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.1-ibv-devinfo-v-gid-table.txt"),
     "lines"),
    ("ibstatus C06", rdma.parse_ibstatus,
     fixture_text("rdma/C06_ibstatus_roce_8x100g_ethernet_link_layer.txt"), _ibstatus_blocks),
    ("ibv_devinfo C07", rdma.parse_ibv_devinfo,
     _without_prompts(fixture_text("rdma/C07_ibv_devinfo_vf_in_pod_port_init.txt")), _devinfo_blocks),
    ("describe node N12", hugepages.parse_node_resources,
     fixture_text("hugepages/N12_hugepages_allocatable_static_not_reduced_by_usage.2-kubectl-describe-node-excerpt.txt"),
     _node_blocks),
    ("meminfo N12", hugepages.parse_meminfo,
     fixture_text("hugepages/N12_hugepages_allocatable_static_not_reduced_by_usage.1-proc-meminfo-excerpt.txt"),
     "lines"),
    ("lsmod", peermem.loaded_peer_memory_modules,
     "Module                  Size  Used by\nnvidia_peermem         16384  0\nib_core               434176  9 "
     "nvidia_peermem,rdma_cm\n", "lines"),
]
IDS = [c[0] for c in CASES]


def _records(reading):
    """The reading as a list of records (dict readers: their items, one level of nesting flat)."""
    if isinstance(reading, dict):
        out = []
        for k, v in reading.items():
            if isinstance(v, dict):
                out += [(k, k2, repr(v2)) for k2, v2 in v.items()]
            elif v is not None:
                out.append((k, repr(v)))
        return sorted(out)
    return [repr(r) for r in reading]


def _read(reader, text):
    try:
        return reader(text)
    except ParseError:
        return None


def test_every_sample_reads():
    for name, reader, text, _ in CASES:
        assert reader(text), name


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_reindented_and_tab_mangled_reads_the_same(case, data):
    name, reader, text, _ = case
    expected = reader(text)
    ws = st.text(alphabet=" \t", min_size=0, max_size=4)
    sep = st.text(alphabet=" \t", min_size=1, max_size=3)
    lines = []
    for line in text.splitlines():
        body = line.strip()
        if not body:
            lines.append("")
            continue
        # keep one separator wherever there was white space inside the line
        parts = re.split(r"[ \t]+", body)
        lines.append(data.draw(ws) + "".join(p + data.draw(sep) for p in parts[:-1]) + parts[-1]
                     + data.draw(ws))
    mangled = "\n".join(lines) + "\n"
    got = _read(reader, mangled)
    assert got == expected, f"{name}: re-indented/tab-mangled input read differently"


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SETTINGS
@given(cut=st.floats(min_value=0.0, max_value=1.0), inside=st.booleans())
def test_truncated_is_an_error_or_a_faithful_part(case, cut, inside):
    """A cut at a line end (a shorter, well-formed output) must read as a subset of the records;
    a cut inside a line may at most change the record of that one line (a value cut at its
    very end, e.g. a netdev name, has no grammar to tell - see the module docstring)."""
    name, reader, text, _ = case
    expected = _records(reader(text))
    pos = int(len(text) * cut)
    if not inside:
        pos = text.rfind("\n", 0, pos) + 1
    got = _read(reader, text[:pos])
    if got is None:
        return
    altered = set(_records(got)) - set(expected)
    assert len(altered) <= (1 if inside else 0), f"{name}: a cut at {pos} changed {sorted(altered)}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SETTINGS
@given(seed=st.randoms(use_true_random=False))
def test_records_in_another_order_read_the_same(case, seed):
    name, reader, text, split = case
    if split == "lines":
        parts = [ln + "\n" for ln in text.splitlines()]
        head = [p for p in parts if not p.strip() or re.match(r"^\s*(DEV\s+PORT|---|device|-+\s|Module\s)", p)]
        body = [p for p in parts if p not in head]
    else:
        chunks = split(text)
        head, body = chunks[:1], chunks[1:]
        body = [c if c.endswith("\n") else c + "\n" for c in body]
    seed.shuffle(body)
    got = _read(reader, "".join(head + body))
    expected = reader(text)
    if isinstance(expected, dict):
        assert got == expected, name
    else:
        assert got is not None and sorted(map(repr, got)) == sorted(map(repr, expected)), name


READERS = [
    rdma.parse_ibv_devices, rdma.parse_ibdev2netdev, rdma.parse_rdma_link, rdma.parse_gid_table,
    rdma.parse_ibstatus, rdma.parse_ibv_devinfo, hugepages.parse_node_resources, hugepages.parse_meminfo,
    peermem.loaded_peer_memory_modules, multi_nic.parse_ifconfig, nccl.parse_nccl_conf,
    rdma.classify_no_devices, rdma.parse_lspci_rdma_functions,
]
JUNK = st.lists(st.sampled_from(list("abcXYZ019:/._-[]()<>=#$ \t\n,'\"") + [
    "GID[", "port:", "hca_id:", "link ", "state ", "Capacity:", "HugePages_Total:", "Infiniband device '",
    "mlx5_0/1 ", " ACTIVE", "No IB devices found", "0000:17:00.0 Ethernet controller: Mellanox Technologies "]),
    max_size=60).map("".join)


@pytest.mark.parametrize("reader", READERS, ids=[r.__name__ for r in READERS])
@settings(max_examples=30, deadline=None, derandomize=True)
@given(text=JUNK)
def test_junk_never_crashes(reader, text):
    try:
        reader(text)
    except ParseError as exc:
        assert str(exc)  # a message, naming what was expected
    except ValueError as exc:  # the readers' own error classes are ValueErrors with a message
        assert str(exc) and type(exc).__name__.endswith("Error")
