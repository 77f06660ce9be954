"""Every role's molecule scenario, run for real on the gpucluster node image.

Each scenario: destroy, create, prepare, converge, idempotence (a second converge must
report no change), verify (the real end state), destroy. The scenarios share the sandbox's
apt cache through the ``gpucluster`` network, so package downloads happen once per run.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from gpucluster import images
from gpucluster.locks import host_lock
from gpucluster.sandbox import APT_CACHE_PORT, Sandbox, SandboxConfig
from tests.docker_env import ROOT, docker_client, venv_env

# A scenario for real hardware (a GPU/RDMA node reached through the delegated driver) carries
# a `.ci-skip` marker: it cannot run on this machine, and is not counted as run.
ALL_SCENARIOS = sorted(ROOT.glob("roles/*/molecule/*/molecule.yml"))
SCENARIOS = [p for p in ALL_SCENARIOS if not (p.parent / ".ci-skip").exists()]


#: The scenarios' own infra (apt cache) and network, apart from the integration tests' sandbox:
#: the two run side by side (scripts/test.sh: pytest-xdist), and the integration tests end by
#: taking their sandbox down.
MOLECULE_SANDBOX = "gpucmol"


@pytest.fixture(scope="session")
def molecule_env():
    client = docker_client()
    tag = images.ensure_node_image(client, log=lambda m: None)
    cfg = SandboxConfig(name=MOLECULE_SANDBOX, inventory_dir=ROOT / ".cache" / "molecule-infra")
    sb = Sandbox(cfg, client=client, log=lambda m: None)
    with host_lock("molecule-infra"):  # two xdist workers: one starts it, the other reuses it
        infra = sb.ensure_infra()
        # The sandbox's training image (Open MPI, sshd, mpi4py): the validate scenario loads it
        # into its node's Docker engine (no registry on this machine).
        train = images.build_from_node(client, images.train_image_tag(), images.TRAIN_DOCKERFILE, lambda m: None,
                                       f"http://{infra.name}:{APT_CACHE_PORT}", sb.cfg.network)
    return venv_env(
        NO_COLOR="1",
        GPUCLUSTER_NODE_IMAGE=tag,
        GPUCLUSTER_TRAIN_IMAGE=train,
        GPUCLUSTER_NETWORK=sb.cfg.network,
        GPUCLUSTER_APT_PROXY=f"http://{infra.name}:{APT_CACHE_PORT}",
    )


def test_every_role_has_a_scenario():
    roles = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
    with_scenario = sorted({p.parents[2].name for p in SCENARIOS if p.parent.name == "default"})
    assert roles == with_scenario


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: f"{p.parents[2].name}-{p.parent.name}")
def test_scenario(scenario, molecule_env):
    role_dir = scenario.parents[2]
    r = subprocess.run(
        ["molecule", "test", "-s", scenario.parent.name],
        cwd=role_dir,
        env={**molecule_env, "GPUCLUSTER_MOLECULE_INSTANCE": f"molecule-{role_dir.name}-{scenario.parent.name}"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)
    assert r.returncode == 0, out[-8000:]
    # Converge, idempotence (a second converge with no change) and verify all ran and passed.
    for step in ("converge", "idempotence", "verify"):
        assert re.search(rf"{step}: Executed: Successful", out), f"{step} did not run successfully:\n{out[-4000:]}"
