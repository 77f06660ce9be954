"""The converged 3-node sandbox the integration tests share.

``cluster`` runs README command 1 (``scripts/bootstrap.sh``) once per test session and keeps
its output (test_sandbox.py checks it). ``sandbox`` is for tests that need a converged cluster
but not the bootstrap's output: it runs the bootstrap only when there is no sandbox inventory
or a node's training container is not running; otherwise it refreshes the inventory
(``gpucluster sandbox up``, which keeps running containers) and, when the nodes were
converged by an older checkout, the training stage.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import docker
import pytest
import yaml

from tests.docker_env import ROOT, docker_client, venv_env

INVENTORY = ROOT / "inventory" / "sandbox" / "hosts.yml"
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)",
    re.M,
)


def run(*args: str, check: bool = True, timeout: int = 1800) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), cwd=ROOT, env=venv_env(NO_COLOR="1"), capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {r.returncode}:\n{r.stdout[-8000:]}\n{r.stderr[-3000:]}")
    return r


def recap(output: str) -> dict[str, dict[str, int]]:
    return {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"} for m in RECAP.finditer(output)}


TASK_HEADER = re.compile(r"^(TASK|RUNNING HANDLER) \[.*\] \*+$|^PLAY RECAP ")


def changes(output: str) -> str:
    """Every task that reported a change or a failure, with its result lines and diff: what an
    assertion that a run changed nothing prints (the run's last lines when there is none)."""
    blocks, block = [], []
    for line in output.splitlines() + ["PLAY RECAP "]:
        if TASK_HEADER.match(line):
            if any(b.startswith(("changed:", "fatal:", "failed:")) for b in block):
                blocks.append("\n".join(block))
            block = []
        block.append(line)
    return "\n\n".join(blocks) or output[-6000:]


def playbook(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("ansible-playbook", "-i", str(INVENTORY), *args, check=check)


def sandbox_nodes() -> list[str]:
    """Inventory names of the sandbox's nodes (node-1 ... node-N)."""
    inv = yaml.safe_load(INVENTORY.read_text())
    return sorted(inv["all"]["children"]["gpu_nodes"]["hosts"])


def node_exec(node: str, *cmd: str, check: bool = True) -> str:
    """Run ``cmd`` on a sandbox node (its container ``gpucluster-<node>``); returns the output."""
    rc, out = docker_client().containers.get(f"gpucluster-{node}").exec_run(list(cmd))
    text = out.decode(errors="replace")
    if check:
        assert rc == 0, f"{node}: {cmd} exited {rc}: {text}"
    return text


@pytest.fixture(scope="session")
def cluster():
    docker_client()
    before = set((ROOT / "reports").glob("validate-*.json"))
    r = run("bash", "scripts/bootstrap.sh")
    new_reports = sorted(set((ROOT / "reports").glob("validate-*.json")) - before)
    return {"bootstrap": r, "reports": new_reports}


def _training_state(node: str) -> str:
    """"ok" (container runs with a runtime profile), "stale" (runs without one) or "down"."""
    client = docker_client()
    try:
        c = client.containers.get(f"gpucluster-{node}")
    except docker.errors.DockerException:
        return "down"
    if c.status != "running":
        return "down"
    rc, out = c.exec_run(["docker", "exec", "gpucluster-train", "env"])
    if rc != 0:
        return "down"
    has_profile = any(line.startswith(("LIGHT_", "HOROVOD_")) for line in out.decode().splitlines())
    rc, _ = c.exec_run(["test", "-s", "/etc/gpucluster/runtime"])
    return "ok" if has_profile and rc == 0 else "stale"


@pytest.fixture(scope="session")
def sandbox(request) -> Path:
    """A converged sandbox; returns its inventory path."""
    docker_client()
    if not INVENTORY.exists():
        request.getfixturevalue("cluster")
        return INVENTORY
    run("gpucluster", "sandbox", "up", "--nodes", str(len(sandbox_nodes())))
    states = {node: _training_state(node) for node in sandbox_nodes()}
    if "down" in states.values():
        request.getfixturevalue("cluster")
    elif "stale" in states.values():
        playbook("playbooks/training.yml")
    return INVENTORY


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every integration test shares one sandbox and runs in file order (test_teardown.py last):
    under pytest-xdist (scripts/test.sh, ``--dist loadgroup``) they form one group on one worker,
    beside the molecule scenarios on the other. test_packaging.py's tests form a group of their own.

    ``tryfirst``: xdist's own hook turns the ``xdist_group`` marks into the node-id suffix its
    scheduler groups by, so the marks must be on the items before it runs, whatever order the
    plugins registered in. (CI's split of this group was pytest 9.2 ignoring that suffix,
    pytest-dev/pytest-xdist#1386; tests/unit/test_test_runner.py checks the installed pair.)"""
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        if path.parent != here:
            continue
        # test_packaging.py builds the wheel and the collection in temp dirs, no sandbox needed;
        # its tests stay together so that one worker builds each once (its fixtures are per
        # module: spread over both workers, CI built the wheel's venv twice, 53 s each).
        group = "packaging" if path.name == "test_packaging.py" else "sandbox"
        item.add_marker(pytest.mark.xdist_group(group))
