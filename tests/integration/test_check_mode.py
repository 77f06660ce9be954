"""``site.yml --check`` on fresh nodes: each node's plan is shown, every stage says what it would
change (or, where it needs what an earlier stage installs, that the real run does it), nothing
on the nodes or the controller changes, and the run exits 0.

Runs first among the sandbox tests (scripts/test.sh order), on the nodes ``gpucluster sandbox
up`` makes, before the bootstrap converges them. Check mode fetches apt's package lists on a
node that has none (a cache, not configuration), so /etc, /opt, the run lock, the installed
packages and the controller's cluster key are compared before and after.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import INVENTORY, playbook, recap, run, sandbox_nodes
from tests.integration.conftest import node_exec as exec_on

pytestmark = pytest.mark.integration

STATE = ("find /etc /opt /var/lib/gpucluster -xdev -type f -exec sha256sum {} + 2>/dev/null | sort | sha256sum; "
         "dpkg-query -W | sha256sum")


def _state(nodes):
    return {n: exec_on(n, "sh", "-c", STATE) for n in nodes}


def test_check_on_fresh_nodes_shows_the_plan_changes_nothing_and_exits_0():
    run("gpucluster", "sandbox", "up", "--nodes", "3")
    nodes = sandbox_nodes()
    assert nodes == ["node-1", "node-2", "node-3"]
    fresh = all("docker.io" not in exec_on(n, "dpkg-query", "-W", "-f", "${Package}\n", check=False) for n in nodes)
    key = INVENTORY.parent / ".cluster-key"
    key_before = key.exists()
    before = _state(nodes)
    r = playbook("site.yml", "--check", check=False)
    out = r.stdout
    assert r.returncode == 0, out[-8000:]
    rc = recap(out)
    assert sorted(rc) == nodes and all(v["failed"] == 0 and v["unreachable"] == 0 for v in rc.values()), rc
    for n in nodes:
        assert f'"{n}: plan: {{\\"gpus\\": 0' in out, f"{n}: no plan shown"
    if fresh:
        for n in nodes:
            assert f"{n}: check mode: would install rdma-core" in out, out[-8000:]
            assert f"{n}: check mode: would install docker.io" in out, out[-8000:]
            assert f"{n}: check mode: the training stage needs the Docker engine" in out, out[-8000:]
    assert _state(nodes) == before, "site.yml --check changed a node"
    assert key.exists() == key_before, "site.yml --check made the cluster key"
