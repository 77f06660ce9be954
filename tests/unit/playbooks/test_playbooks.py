"""playbooks/runtime.yml, benchmark.yml and k8s.yml parse (ansible-playbook --syntax-check),
and what k8s.yml expects of the pinned mpi-operator manifest is what the manifest holds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "src/gpucluster/data/mpi-operator-v0.8.2/mpi-operator.yaml"


@pytest.mark.parametrize("name", ["runtime.yml", "benchmark.yml", "k8s.yml", "training.yml", "reboot.yml",
                                  "host_stack.yml", "network.yml", "health.yml", "validate.yml", "plan.yml",
                                  "site.yml"])
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
    assert "TASK [reboot_point : Reboot the node]" not in out and "failed=1" in out


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
    # The refusal, the report and the reboot block: each skipped as one task.
    assert "skipped=3" in out and "changed=0" in out, out
    assert "TASK [reboot_point : Reboot the node]" not in out


def _patched_operator_manifest(tmp_path, volcano, manifest=MANIFEST):
    """``__k8s_mpi_operator_patched`` of playbooks/vars/k8s.yml (what tasks/k8s_apply.yml applies)
    evaluated by ansible-playbook on ``manifest``'s documents."""
    out = tmp_path / f"patched-{volcano}.json"
    playbook = tmp_path / "patch.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(ROOT / "playbooks/vars/k8s.yml")],
        "vars": {"k8s_volcano": volcano, "ansible_python_interpreter": str(ROOT / ".venv/bin/python"),
                 "__k8s_documents": "{{ lookup('ansible.builtin.file', '" + str(manifest) + "')"
                                    " | ansible.builtin.from_yaml_all | select | list }}"},
        "tasks": [{"ansible.builtin.copy": {"content": "{{ __k8s_mpi_operator_patched | to_json }}",
                                            "dest": str(out), "mode": "0644"}}],
    }]))
    r = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", "localhost,", str(playbook)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env={"PATH": f"{ROOT / '.venv/bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


def _operator_args(docs):
    deploy = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mpi-operator")
    return next(c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "mpi-operator")["args"]


def test_k8s_volcano_starts_mpi_operator_with_gang_scheduling(tmp_path):
    """mpi-operator creates the Volcano PodGroup of an MPIJob (minMember from
    runPolicy.schedulingPolicy.minAvailable) only when started with --gang-scheduling=volcano;
    the pinned manifest starts it without, so k8s_volcano=true must add the flag."""
    original = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert not any(a.startswith("--gang-scheduling") for a in _operator_args(original))
    # The pinned operator's RBAC lets it manage Volcano PodGroups.
    role = next(d for d in original if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "mpi-operator")
    assert any("scheduling.volcano.sh" in rule.get("apiGroups", []) and "podgroups" in rule.get("resources", [])
               for rule in role["rules"])

    patched = _patched_operator_manifest(tmp_path, True)
    assert _operator_args(patched) == _operator_args(original) + ["--gang-scheduling=volcano"]
    # Only the args change: every other document and field is the manifest's.
    for before, after in zip(original, patched, strict=True):
        if before["kind"] == "Deployment":
            after = json.loads(json.dumps(after))
            after["spec"]["template"]["spec"]["containers"][0]["args"] = _operator_args(original)
        assert after == json.loads(json.dumps(before, default=str))
    # Idempotent: patching the patched manifest (or one with another --gang-scheduling) changes nothing.
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump_all(patched))
    assert _patched_operator_manifest(tmp_path, True, again) == patched
    other = json.loads(json.dumps(patched))
    _operator_args(other)[-1] = "--gang-scheduling=scheduler-plugins"
    again.write_text(yaml.safe_dump_all(other))
    assert _patched_operator_manifest(tmp_path, True, again) == patched
    # Without Volcano the manifest is applied as it is.
    assert _patched_operator_manifest(tmp_path, False) == json.loads(json.dumps(original, default=str))


def test_k8s_apply_applies_the_patched_documents_once():
    """One writer: the same kubernetes.core.k8s server-side apply applies the patched documents;
    the Deployment is not patched again afterwards."""
    tasks = yaml.safe_load((ROOT / "playbooks/tasks/k8s_apply.yml").read_text())
    applies = [t for t in tasks if "kubernetes.core.k8s" in t]
    assert len(applies) == 1 and applies[0]["kubernetes.core.k8s"]["definition"] == "{{ __k8s_documents }}"
    assert "src" not in applies[0]["kubernetes.core.k8s"]
    patch = next(t for t in tasks if "block" in t)
    assert "__k8s_mpi_operator_extra_args" in patch["when"]
    assert patch["block"][0]["ansible.builtin.set_fact"] == {"__k8s_documents": "{{ __k8s_mpi_operator_patched }}"}
    assert tasks.index(patch) < tasks.index(applies[0])
    playbook = (ROOT / "playbooks/k8s.yml").read_text()
    assert "state: patched\n        api_version: v1\n        kind: Node" in playbook
    assert playbook.count("state: patched") == 1  # nodes only, never the operator's Deployment
    k8s_vars = yaml.safe_load((ROOT / "playbooks/vars/k8s.yml").read_text())
    assert "__k8s_volcano" in k8s_vars["__k8s_mpi_operator_extra_args"]  # the var that installs Volcano
