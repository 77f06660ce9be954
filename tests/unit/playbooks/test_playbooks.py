"""playbooks/runtime.yml, benchmark.yml and k8s.yml parse (ansible-playbook --syntax-check),
and what k8s.yml expects of the pinned mpi-operator manifest is what the manifest holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "src/gpucluster/data/mpi-operator-v0.8.2/mpi-operator.yaml"


@pytest.mark.parametrize("name", ["runtime.yml", "benchmark.yml", "k8s.yml", "training.yml"])
def test_syntax_check(name):
    r = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "--syntax-check", f"playbooks/{name}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_k8s_defaults_point_at_the_pinned_manifest_it_checks():
    k8s_vars = yaml.safe_load((ROOT / "playbooks/vars/k8s.yml").read_text())
    assert "src/gpucluster/data/mpi-operator-v0.8.2/mpi-operator.yaml" in k8s_vars["__k8s_mpi_operator_manifest"]
    assert "volcano-sh/volcano/v1.9.0/" in k8s_vars["__k8s_volcano_manifest"]
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    assert "v2beta1" in [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    assert (deploy["metadata"]["name"], deploy["metadata"]["namespace"]) == ("mpi-operator", "mpi-operator")
    # Client-side apply would store the whole CRD in an annotation limited to 262144 bytes,
    # hence server-side apply in playbooks/tasks/k8s_apply.yml.
    assert len(yaml.safe_dump(crd)) > 262144
    assert "server_side_apply" in (ROOT / "playbooks/tasks/k8s_apply.yml").read_text()
