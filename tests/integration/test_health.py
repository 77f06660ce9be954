"""playbooks/health.yml on the sandbox: a real report, GPU checks that say the node has no
GPU, container limits read for real and equal to what the container itself says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.docker_env import ROOT
from tests.integration.conftest import node_exec, playbook, sandbox_nodes

pytestmark = pytest.mark.integration

NO_GPU = "the node has no NVIDIA GPU"
# The sandbox runs the training_image role's own container name (its default; one owner).
CONTAINER = yaml.safe_load((ROOT / "roles/training_image/defaults/main.yml").read_text())[
    "training_image_container_name"]
GPU_CHECKS = ("gpu_count", "gpu_model", "driver", "nvlink", "persistence_mode", "ecc", "kernel_log", "gpu_pcie_link",
              "fabric_manager", "peer_memory", "dcgm")


def check_health_report(run_playbook, nodes, exec_on_node, reports=ROOT / "reports") -> dict:
    """Run playbooks/health.yml, then hold its report against the nodes. Returns the report."""
    before = set(reports.glob("health-*"))
    r = run_playbook("playbooks/health.yml", check=False)
    new = sorted(set(reports.glob("health-*")) - before)
    assert len(new) == 1, f"one new reports/health-* directory, got {new}:\n{r.stdout[-4000:]}"
    report = json.loads((new[0] / "health.json").read_text())
    md = (new[0] / "health.md").read_text()
    assert sorted(report["nodes"]) == sorted(nodes)
    failed = [n for n, v in report["nodes"].items() if v["verdict"] == "failed"]
    assert (r.returncode != 0) == bool(failed), f"rc {r.returncode} with failed nodes {failed}:\n{r.stdout[-4000:]}"
    for node in nodes:
        result = report["nodes"][node]
        assert f"## {node}: {result['verdict']}" in md
        checks = {}
        for c in result["checks"]:
            checks.setdefault(c["check"], []).append(c)
        for name in GPU_CHECKS:
            assert [(c["status"], c["cause"]) for c in checks[name]] == [("skipped", NO_GPU)], (node, name)
        # The container's limits, read for real, equal what the container itself says.
        memlock = exec_on_node(node, "docker", "exec", CONTAINER, "sh", "-c", "ulimit -l").strip()
        nofile = exec_on_node(node, "docker", "exec", CONTAINER, "sh", "-c", "ulimit -n").strip()
        assert checks["container"][0]["status"] == "ok", checks["container"]
        # The sandbox's contract is the 8 MiB hard limit (training_image_ulimit_memlock), so ok.
        assert [(c["status"], c["cause"]) for c in checks["container_memlock"]] == [("ok", f"ulimit -l {memlock}")]
        assert checks["container_nofile"][0]["cause"].startswith(f"ulimit -n {nofile}")
        shm = exec_on_node(node, "docker", "exec", CONTAINER, "df", "-B1", "--output=size", "/dev/shm")
        assert f"/dev/shm {shm.split()[-1]} bytes" in checks["container_shm"][0]["cause"]
        # The data NICs are the nccl_env contract's, read on the node.
        for c in checks["data_nics"]:
            link = exec_on_node(node, "ip", "-o", "-4", "addr", "show", "dev", c["subject"])
            assert c["status"] == "ok" and link.split()[3].split("/")[0] in c["cause"], c
        assert {i["status"] for i in result["drift"]} <= {"same", "drifted"}
    return report


def test_health_report_on_the_sandbox(sandbox: Path):
    check_health_report(playbook, sandbox_nodes(), lambda n, *cmd: node_exec(n, *cmd))
