"""What the molecule and integration tests share: a Docker engine, the cached node image,
and the sandbox's infra container (apt cache + registry) on the ``gpucluster`` network."""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

ROOT = Path(__file__).resolve().parent.parent


def docker_client():
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); run scripts/host-prereqs.sh (README command 2 does)")
    return client


def venv_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{env.get('PATH', '')}"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    env.update(extra)
    return env
