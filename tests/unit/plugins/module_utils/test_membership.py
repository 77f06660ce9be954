"""Membership of the training group (plugins/module_utils/membership.py)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import membership as m

NODES = ["node-1", "node-2", "node-3"]


def test_the_world_is_the_declared_group_minus_the_excluded():
    assert m.world(["node-3", "node-1", "node-2"], ["node-2"]) == ["node-1", "node-3"]
    assert m.world(NODES, None) == NODES


def test_a_complete_run_has_nothing_missing():
    assert m.membership_errors("node-1", "gpu_nodes", NODES, [], NODES, NODES, NODES) == []


def test_a_lost_node_is_named_unreachable_or_failed_by_the_probe():
    probe = {"node-2": "ssh: connect to host 10.0.0.2 port 22: No route"}
    lost = m.missing(NODES, [], NODES, ["node-1"], ["node-1"], probe)
    assert lost == {"node-2": "unreachable (ssh: connect to host 10.0.0.2 port 22: No route)",
                    "node-3": "failed in an earlier stage of this run (its error is above)"}


def test_a_limited_node_is_missing_too():
    assert m.missing(NODES, [], ["node-1"], ["node-1"], ["node-1"]) == {
        "node-2": "not in this run (--limit, or not a host of the training play)",
        "node-3": "not in this run (--limit, or not a host of the training play)"}


def test_an_excluded_node_is_not_missing():
    assert m.membership_errors("node-1", "gpu_nodes", NODES, ["node-3"], NODES, ["node-1", "node-2"],
                               ["node-1", "node-2"]) == []


def test_the_refusal_names_host_group_node_reason_and_both_fixes():
    (msg,) = m.membership_errors("node-1", "gpu_nodes", NODES, [], NODES, ["node-1", "node-2"], ["node-1", "node-2"],
                                 {"node-3": "timed out"})
    assert msg.startswith("node-1: member(s) node-3 of the training group gpu_nodes are not in this run "
                          "(node-3: unreachable (timed out)).")
    assert "writes nothing" in msg
    assert msg.endswith("""Fix: bring node-3 back and rerun, or leave them out on purpose with """
                        """-e '{"gpucluster_excluded_nodes": ["node-3"]}'.""")


def test_the_exclusion_list_is_validated_before_membership():
    assert m.check_excluded(["nod-2"], NODES) == [
        "gpucluster_excluded_nodes: 'nod-2' is not a node of the training group (node-1, node-2, node-3) "
        "(did you mean node-2?). Fix: name inventory hosts of the group only"]
    assert "is not a list of node names" in m.check_excluded("node-3", NODES)[0]
    assert "is not a list of node names" in m.check_excluded({"node-3": True}, NODES)[0]
    assert m.check_excluded(["node-3"], NODES) == []
    # A bad list stops the stage even when every node is there.
    (msg,) = m.membership_errors("node-2", "gpu_nodes", NODES, ["gpu-9"], NODES, NODES, NODES)
    assert msg.startswith("node-2: gpucluster_excluded_nodes: 'gpu-9' is not a node")


def test_probe_results_give_the_unreachable_nodes_and_their_error():
    probe = {"results": [
        {"item": "node-2", "unreachable": True,
         "msg": "Task failed: Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 9: "
                "Connection refused"},
        {"item": "node-3", "ping": "pong", "changed": False},
    ]}
    assert m.probe_unreachable(probe) == {
        "node-2": "Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 9: Connection refused"}
    # mitogen's connection: a header, then what ssh said last.
    probe = {"results": [{"item": "node-3", "unreachable": True,
                          "msg": "Task failed: EOF on stream; last 100 lines received:\n"
                                 "Warning: Permanently added '[127.0.0.1]:9' (ED25519) to the list of known hosts.\n"
                                 "ssh: connect to host 127.0.0.1 port 9: Connection refused"}]}
    assert m.probe_unreachable(probe) == {"node-3": "ssh: connect to host 127.0.0.1 port 9: Connection refused"}
    assert m.probe_unreachable({"results": [{"item": "node-3", "unreachable": True, "msg": ""}]}) == {"node-3": ""}
    # Skipped (nothing lost): no results.
    assert m.probe_unreachable({"skipped": True, "results": []}) == {}


def test_the_declared_group_is_the_inventory_group_less_the_excluded():
    decl, errors = m.declared("node-1", "gpu_nodes", ["node-3", "node-1", "node-2"], ["node-2"])
    assert errors == []
    assert decl == {"group": "gpu_nodes", "members": NODES, "excluded": ["node-2"], "world": ["node-1", "node-3"]}
    decl, errors = m.declared("node-1", "gpu_nodes", NODES, None)
    assert errors == [] and decl["world"] == NODES and decl["excluded"] == []


def test_a_declared_exclusion_of_an_unknown_node_is_refused_and_excludes_only_real_members():
    decl, (msg,) = m.declared("node-2", "gpu_nodes", NODES, ["node-3", "node-33"])
    assert msg == ("node-2: gpucluster_excluded_nodes: 'node-33' is not a node of the training group "
                   "(node-1, node-2, node-3) (did you mean node-3?). Fix: name inventory hosts of the group only.")
    assert decl["excluded"] == ["node-3"] and decl["world"] == ["node-1", "node-2"]


@pytest.mark.parametrize("bad", ["node-3", {"node-3": True}, 3, True])
def test_a_declared_exclusion_that_is_no_list_is_refused_and_excludes_nothing(bad):
    decl, (msg,) = m.declared("node-1", "gpu_nodes", NODES, bad)
    assert msg.startswith(f"node-1: gpucluster_excluded_nodes: {bad!r} is not a list of node names. Fix: give a list")
    assert decl["excluded"] == [] and decl["world"] == NODES


def test_an_empty_training_group_is_refused_naming_the_group_setting():
    decl, (msg,) = m.declared("node-1", "trainers", [], None)
    assert decl["world"] == []
    assert msg == ("node-1: the training group 'trainers' has no host in the inventory. Fix: put the training nodes "
                   "in inventory group trainers, or set container_ssh_group to the group that holds them.")


def test_the_filter_takes_ansibles_groups_and_an_unset_exclusion():
    from ansible_collections.gpucluster.cluster.plugins.filter.plan import declared_membership

    # Unset: the task's vars lookup gives its default, []; a null in the inventory gives None.
    for unset in ([], None):
        out = declared_membership({"all": NODES, "gpu_nodes": NODES}, "node-1", "gpu_nodes", unset)
        assert out == {"membership": {"group": "gpu_nodes", "members": NODES, "excluded": [], "world": NODES},
                       "errors": []}
