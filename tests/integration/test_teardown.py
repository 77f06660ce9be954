"""Last of the integration tests (scripts/test.sh runs this file last): `sandbox down`."""

from __future__ import annotations

from tests.docker_env import docker_client
from tests.integration.conftest import INVENTORY, run


def test_down_removes_exactly_what_up_created(cluster):
    """Last test of the module: takes the sandbox down and checks nothing else went with it."""
    client = docker_client()
    label = {"label": ["io.gpucluster.sandbox=gpucluster"]}
    made = {
        "containers": {c.name for c in client.containers.list(all=True, filters=label)},
        "volumes": {v.name for v in client.volumes.list(filters=label)},
        "networks": {n.name for n in client.networks.list(filters=label)},
    }
    assert {"gpucluster-infra", "gpucluster-node-1", "gpucluster-node-2", "gpucluster-node-3"} <= made["containers"]
    assert "gpucluster" in made["networks"] and "gpucluster-node-1-docker" in made["volumes"]
    bystander = client.volumes.create("gpucluster-bystander-test")
    try:
        r = run("gpucluster", "sandbox", "down")
        assert r.returncode == 0
        assert client.containers.list(all=True, filters=label) == []
        assert client.volumes.list(filters=label) == []
        assert client.networks.list(filters=label) == []
        assert not INVENTORY.exists()
        client.volumes.get("gpucluster-bystander-test")  # not made by up: still there
        assert client.images.list(name="gpucluster/node")  # the cache stays
    finally:
        bystander.remove()
