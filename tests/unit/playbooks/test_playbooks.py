"""playbooks/runtime.yml, benchmark.yml and k8s.yml parse (ansible-playbook --syntax-check),
and what k8s.yml expects of the pinned mpi-operator manifest is what the manifest holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "src/gpucluster/data/mpi-operator-v0.8.2/mpi-operator.yaml"


@pytest.mark.parametrize("name", ["runtime.yml", "benchmark.yml", "k8s.yml", "training.yml", "reboot.yml",
                                  "host_stack.yml", "network.yml"])
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


def _reboot_point(tmp_path, **extra):
    """Run playbooks/reboot.yml on this machine (connection local) with the given stage results."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": str(ROOT / ".venv/bin/python")}}}}}}))
    ev = tmp_path / "extra.yml"
    ev.write_text(yaml.safe_dump(extra))
    return subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), "-e", f"@{ev}",
                           "playbooks/reboot.yml"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{ROOT / '.venv/bin'}:/usr/bin:/bin", "NO_COLOR": "1",
                               "ANSIBLE_FORCE_COLOR": "0", "HOME": str(tmp_path)})


def test_reboot_point_refuses_a_driver_that_is_not_loaded_without_permission(tmp_path):
    r = _reboot_point(tmp_path, nvidia_driver_reboot_required=True,
                      nvidia_driver_reboot_reason="driver 535.183.01 installed, 525.147.05 loaded",
                      hugepages_reboot_required=True, hugepages_reboot_reason="hugepages=50 not on the command line")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "node-x: needs a reboot: driver 535.183.01 installed, 525.147.05 loaded; hugepages: hugepages=50" in out
    assert "gpucluster_allow_reboot: true" in out
    assert "TASK [Reboot the node]" not in out and "failed=1" in out


def test_reboot_point_reports_pending_hugepages_and_goes_on(tmp_path):
    r = _reboot_point(tmp_path, hugepages_reboot_required=True,
                      hugepages_reboot_reason="hugepages=50 not on the command line")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "node-x: hugepages need a reboot (hugepages=50 not on the command line); it is not allowed here" in out
    assert "changed=0" in out and "failed=0" in out


def test_reboot_point_does_nothing_without_a_reason(tmp_path):
    r = _reboot_point(tmp_path, gpucluster_allow_reboot=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "skipped=7" in out and "changed=0" in out, out
