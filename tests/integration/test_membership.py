"""Membership is declared, never inferred (issue 10, point 5) on the real sandbox.

A node is stopped (its container, as a node that lost power): the training stage fails on every
other node naming it, and their hostfile and known_hosts stay byte-for-byte what they were. Left
out on purpose (``gpucluster_excluded_nodes``) the stage passes, says so, and the others' files
omit exactly that node. Once the node is back, a plain rerun converges the whole group again.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.docker_env import docker_client
from tests.integration.conftest import changes, node_exec, playbook, recap, run, sandbox_nodes

pytestmark = pytest.mark.integration

FILES = ["/etc/gpucluster/mpi/hostfile", "/etc/gpucluster/ssh/client/known_hosts", "/etc/gpucluster/ssh/client/config"]


def _sums(node: str) -> dict[str, str]:
    out = node_exec(node, "sha256sum", *FILES)
    return {path: digest for digest, path in (line.split() for line in out.splitlines())}


def _hostfile_nodes(node: str) -> list[str]:
    text = node_exec(node, "cat", FILES[0])
    return [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_a_stopped_node_stops_the_training_stage_on_every_node_naming_it(sandbox):
    nodes = sandbox_nodes()
    assert len(nodes) >= 3, nodes
    gone, rest = nodes[-1], nodes[:-1]
    container = docker_client().containers.get(f"gpucluster-{gone}")
    before = {n: _sums(n) for n in rest}
    assert all(_hostfile_nodes(n) == nodes for n in rest)
    container.stop(timeout=10)
    try:
        r = playbook("playbooks/training.yml", check=False)
        out = r.stdout + r.stderr
        assert r.returncode != 0, out[-4000:]
        rc = recap(r.stdout)
        assert rc[gone]["unreachable"] == 1, rc
        for n in rest:
            assert rc[n]["failed"] == 1, rc
            assert re.search(rf"fatal: \[{n}\]: FAILED! => .*\"{n}: member\(s\) {gone} of the training group gpu_nodes "
                             rf"are not in this run \({gone}: unreachable", out), out[-4000:]
        # Nothing was written on the others: the check runs before any task that writes.
        assert {n: _sums(n) for n in rest} == before
        assert "TASK [container_ssh : Write the files" not in out

        # Left out on purpose: the stage passes on the others, says so loudly, and their files
        # name exactly the remaining nodes.
        r = playbook("playbooks/training.yml", "-e", json.dumps({"gpucluster_excluded_nodes": [gone]}), check=False)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-4000:]
        assert f"MEMBERSHIP: {gone} excluded on purpose (gpucluster_excluded_nodes)" in out
        assert gone not in recap(r.stdout) or recap(r.stdout)[gone]["unreachable"] == 0
        for n in rest:
            assert _hostfile_nodes(n) == rest
            known = node_exec(n, "cat", FILES[1])
            assert f"[{gone}]:" not in known and all(f"[{m}]:" in known for m in rest)
    finally:
        container.start()
    # Refresh the inventory (a restarted container may get another address) and wait for its sshd.
    run("gpucluster", "sandbox", "up", "--nodes", str(len(nodes)))

    # The node is back: a plain rerun (no exclusion) converges the whole declared group again.
    playbook("playbooks/training.yml")
    for n in nodes:
        assert _hostfile_nodes(n) == nodes, n
    r = playbook("playbooks/training.yml")
    assert all(v["changed"] == 0 and v["failed"] == 0 for v in recap(r.stdout).values()), changes(r.stdout)


def test_an_exclusion_of_a_node_the_inventory_lacks_is_refused_before_anything_changes(sandbox):
    nodes = sandbox_nodes()
    before = {n: _sums(n) for n in nodes}
    r = playbook("playbooks/training.yml", "-e", json.dumps({"gpucluster_excluded_nodes": ["node-9"]}), check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "gpucluster_excluded_nodes: 'node-9' is not a node of the training group" in out
    assert "did you mean node-" in out
    assert {n: _sums(n) for n in nodes} == before
