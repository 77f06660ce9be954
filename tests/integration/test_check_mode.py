"""``site.yml --check`` on fresh nodes: each node's plan is shown, every stage says what it would
change (or, where it needs what an earlier stage installs, that the real run does it), nothing
on the nodes or the controller changes, and the run exits 0.

Runs first among the sandbox tests (scripts/test.sh order), on the nodes ``gpucluster sandbox
up`` makes, before the bootstrap converges them; a node an earlier run converged is replaced
first (``fresh_nodes``), so every assertion holds on every run instead of only on a fresh one.
Check mode fetches apt's package lists on a node that has none (a cache, not configuration),
so /etc, /opt, the run lock, the installed packages and the controller's cluster key are
compared before and after.
"""

from __future__ import annotations

import re

import pytest

from gpucluster.sandbox import Sandbox, SandboxConfig
from tests.docker_env import docker_client
from tests.integration.conftest import INVENTORY, playbook, recap, run, sandbox_nodes
from tests.integration.conftest import node_exec as exec_on

pytestmark = pytest.mark.integration

STATE = ("find /etc /opt /var/lib/gpucluster -xdev -type f -exec sha256sum {} + 2>/dev/null | sort | sha256sum; "
         "dpkg-query -W | sha256sum")


def _state(nodes):
    return {n: exec_on(n, "sh", "-c", STATE) for n in nodes}


# Packages site.yml installs on every node (host stack and Docker stage): a node with one of
# them is not fresh.
CONVERGED_BY = {"rdma-core", "docker.io"}


def _converged(node: str) -> set[str]:
    return CONVERGED_BY & set(exec_on(node, "dpkg-query", "-W", "-f", "${Package}\n").split())


@pytest.fixture(scope="module", autouse=True)
def fresh_nodes() -> list[str]:
    """Three nodes as ``gpucluster sandbox up`` makes them. A node an earlier run converged (a
    sandbox kept from a previous session) is removed with its Docker volume and made again."""
    run("gpucluster", "sandbox", "up", "--nodes", "3")
    stale = [n for n in sandbox_nodes() if _converged(n)]
    if stale:
        sb = Sandbox(SandboxConfig(), client=docker_client())
        for n in stale:
            sb.remove_node(sb.client.containers.get(f"gpucluster-{n}"))
        run("gpucluster", "sandbox", "up", "--nodes", "3")
    nodes = sandbox_nodes()
    assert nodes == ["node-1", "node-2", "node-3"]
    assert {n: _converged(n) for n in nodes} == {n: set() for n in nodes}
    return nodes


def test_check_on_fresh_nodes_shows_the_plan_changes_nothing_and_exits_0(fresh_nodes):
    nodes = fresh_nodes
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
    for n in nodes:
        assert f"{n}: check mode: would install rdma-core" in out, out[-8000:]
        assert f"{n}: check mode: would install docker.io" in out, out[-8000:]
        assert f"{n}: check mode: the training stage needs the Docker engine" in out, out[-8000:]
    assert _state(nodes) == before, "site.yml --check changed a node"
    assert key.exists() == key_before, "site.yml --check made the cluster key"


def test_check_with_vendor_rdma_stacks_on_fresh_nodes_says_what_it_would_install(tmp_path, fresh_nodes):
    """MLNX_OFED (a tarball) on node-1, DOCA-OFED (a DOCA-Host package) on node-2, inbox on the
    others: check mode copies nothing, so it has nothing to unpack or read; it says what the real
    run installs from which file and exits 0, the nodes unchanged. The files are stand-ins with
    their names' grammar and their real checksums (what is inside is read on the real run only)."""
    import hashlib
    import json
    import tarfile

    ofed = tmp_path / "MLNX_OFED_LINUX-24.10-1.1.4.0-debian12.5-x86_64.tgz"
    with tarfile.open(ofed, "w:gz") as tar:
        info = tarfile.TarInfo("MLNX_OFED_LINUX-24.10-1.1.4.0-debian12.5-x86_64/mlnxofedinstall")
        tar.addfile(info)
    doca = tmp_path / "doca-host_2.9.1-018000-24.10-debian12_amd64.deb"
    doca.write_bytes(b"stand-in")
    sha = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (ofed, doca)}
    per_host = "{{ {'node-1': 'ofed', 'node-2': 'doca'}.get(inventory_hostname, 'inbox') }}"
    extra = {"rdma_stack": per_host, "rdma_doca_profile": "doca-ofed-userspace",
             "rdma_ofed_tarball": {"src": str(ofed), "sha256": sha[ofed]},
             "rdma_doca_package": {"src": str(doca), "sha256": sha[doca]}}
    nodes = fresh_nodes
    assert {n: _converged(n) for n in nodes} == {n: set() for n in nodes}, "a node was converged before this run"
    before = {n: exec_on(n, "sh", "-c", UNTOUCHED) for n in nodes}
    r = playbook("site.yml", "--check", "-e", json.dumps(extra), check=False)
    out = r.stdout
    assert r.returncode == 0, out[-8000:]
    assert f"node-1: check mode: would install MLNX_OFED from {ofed.name}" in out, out[-8000:]
    assert f"node-2: check mode: would install doca-ofed-userspace from {doca.name}" in out, out[-8000:]
    for n in nodes[2:]:
        assert f"{n}: check mode: would install rdma-core" in out, out[-8000:]
    assert {n: exec_on(n, "sh", "-c", UNTOUCHED) for n in nodes} == before, "check mode changed a node"


# Settings a later stage would refuse, or apply and break the node with (issue 10's list), given
# together where one preflight task reports them all. Each run must stop in preflight, naming
# every node, the variable and the fix, with every node's /etc, /opt and package list as before.
BAD_INPUT = {
    "stage settings against the node": (
        {"nccl_env_data_interfaces": ["^docker0"], "nccl_env_extra": {"NCCL_SOCKET_IFNAME": "^docker0"},
         "multi_nic_interfaces": [{"name": "ens99"}], "gpudirect_mode": "required",
         "training_image_capabilities": ["CAP_NOPE"], "training_image_registry_username": "ci",
         "training_image_registry_password": ""},
        ["nccl_env_data_interfaces: '^docker0'", "nccl_env_extra: NCCL_SOCKET_IFNAME=^docker0",
         "multi_nic_interfaces[0]: interface ens99 is not on this node", "gpudirect_mode: required",
         "training_image_capabilities: 'CAP_NOPE'", "training_image_registry_password: is empty"],
    ),
    # One daemon.json that dockerd would not start with: a key given twice with two values, a
    # malformed insecure registry, an unknown key, log options every container would fail on.
    "daemon.json keys dockerd would not start with": (
        {"docker_data_root": "/srv/docker", "docker_insecure_registries": ["http://bad reg:5000"],
         "docker_log_max_size": "lots", "docker_daemon_options": {"data-root": "/data/docker", "no-such-key": True}},
        ["daemon.json: 'data-root' is \"/srv/docker\"",
         "'insecure-registries' entry \"http://bad reg:5000\" is not valid",
         "'no-such-key' is not a daemon.json key", "'log-opts.max-size' is \"lots\""],
    ),
    # A stage's own read-only check, run by preflight (preflight_stage_checks; the plugin's is
    # tested through gpucluster plan in tests/unit/playbooks/test_plan_playbook.py).
    "a cloud provider without its region": (
        {"cloud_eni_provider": "aws"}, ["cloud_eni_provider is aws but cloud_eni_region"],
    ),
}

UNTOUCHED = ("find /etc /opt /var/lib/gpucluster -xdev -type f ! -name run.lock -exec sha256sum {} + 2>/dev/null "
             "| sort | sha256sum; dpkg-query -W | sha256sum")


@pytest.mark.parametrize("case", list(BAD_INPUT), ids=lambda c: c.replace(" ", "-"))
def test_bad_input_on_fresh_nodes_is_refused_before_any_change(case, fresh_nodes):
    import json

    extra, expects = BAD_INPUT[case]
    nodes = fresh_nodes
    before = {n: exec_on(n, "sh", "-c", UNTOUCHED) for n in nodes}
    r = playbook("site.yml", "-e", json.dumps(extra), check=False)
    out = r.stdout
    assert r.returncode != 0, out[-6000:]
    for n in nodes:
        for expect in expects:
            # host, variable and value on one line, and the fix after them
            assert re.search(rf"{n}: [^\n]*{re.escape(expect)}[^\n]*Fix: ", out), (n, expect, out[-6000:])
    # Only preflight ran: the host stack, first to change anything, did not start.
    assert "PLAY [RDMA stack]" not in out, out[-6000:]
    assert {n: exec_on(n, "sh", "-c", UNTOUCHED) for n in nodes} == before, f"{case}: a node changed"
