"""playbooks/runtime.yml, benchmark.yml and k8s.yml parse (ansible-playbook --syntax-check),
and what the k8s role expects of the pinned mpi-operator manifest is what the manifest holds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S_VERSION = yaml.safe_load((ROOT / "roles/k8s/vars/main.yml").read_text())["__k8s_mpi_operator_version"]
MANIFEST = ROOT / f"roles/k8s/files/mpi-operator-v{K8S_VERSION}.yaml"


@pytest.mark.parametrize("name", ["runtime.yml", "benchmark.yml", "k8s.yml", "training.yml", "reboot.yml",
                                  "host_stack.yml", "network.yml", "health.yml", "validate.yml", "plan.yml",
                                  "site.yml"])
def test_syntax_check(name):
    r = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "--syntax-check", f"playbooks/{name}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_k8s_defaults_point_at_the_pinned_manifest_it_checks():
    k8s_vars = yaml.safe_load((ROOT / "roles/k8s/vars/main.yml").read_text())
    defaults = yaml.safe_load((ROOT / "roles/k8s/defaults/main.yml").read_text())
    assert defaults["k8s_mpi_operator_manifest"] == ""
    assert "role_path ~ '/files/mpi-operator-v' ~ __k8s_mpi_operator_version ~ '.yaml'" in " ".join(
        k8s_vars["__k8s_mpi_operator_source"].split())
    assert MANIFEST.is_file()
    assert "volcano-sh/volcano/v1.9.0/" in defaults["k8s_volcano_manifest"]
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    assert "v2beta1" in [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    # The CRD gpucluster validates MPIJobs against (the Python package's copy) is the one installed.
    pkg_crd_path = ROOT / f"src/gpucluster/data/mpi-operator-v{K8S_VERSION}/kubeflow.org_mpijobs.yaml"
    pkg_crd = yaml.safe_load(pkg_crd_path.read_text())
    from gpucluster.mpijob import CRD_RESOURCE
    assert CRD_RESOURCE[1] == pkg_crd_path.parent.name, "gpucluster launch checks MPIJobs against another release"
    assert pkg_crd["spec"]["versions"] == crd["spec"]["versions"]
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    assert (deploy["metadata"]["name"], deploy["metadata"]["namespace"]) == ("mpi-operator", "mpi-operator")
    # Client-side apply would store the whole CRD in an annotation limited to 262144 bytes,
    # hence server-side apply in the role.
    assert len(yaml.safe_dump(crd)) > 262144
    assert "server_side_apply" in (ROOT / "roles/k8s/tasks/main.yml").read_text()


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


def _pinned_image():
    """The image the k8s role gives the pinned manifest's operator (vars/main.yml, where
    k8s_mpi_operator_image and k8s_mpi_operator_manifest are unset)."""
    import jinja2
    text = yaml.safe_load((ROOT / "roles/k8s/vars/main.yml").read_text())["__k8s_mpi_operator_image"]
    defaults = yaml.safe_load((ROOT / "roles/k8s/defaults/main.yml").read_text())
    assert defaults["k8s_mpi_operator_image"] == "" and defaults["k8s_mpi_operator_manifest"] == ""
    return jinja2.Template(text).render(k8s_mpi_operator_image="", k8s_mpi_operator_manifest="",
                                        __k8s_mpi_operator_version=K8S_VERSION).strip()


def _patched_operator_manifest(tmp_path, volcano, manifest=MANIFEST):
    """The documents the k8s role applies for mpi-operator (gpucluster_k8s_operator_patch with the
    role's extra args for ``volcano`` and the pinned manifest's image)."""
    from ansible_collections.gpucluster.cluster.plugins.filter.k8s import k8s_operator_patch
    docs = [d for d in yaml.safe_load_all(Path(manifest).read_text()) if d]
    out = k8s_operator_patch(docs, ["--gang-scheduling=volcano"] if volcano else [], str(manifest), _pinned_image())
    assert out["error"] == ""
    return json.loads(json.dumps(out["documents"], default=str))


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
    # Only the args and the image change: every other document and field is the manifest's.
    for before, after in zip(original, patched, strict=True):
        if before["kind"] == "Deployment":
            after = json.loads(json.dumps(after))
            container = after["spec"]["template"]["spec"]["containers"][0]
            assert container["image"] == _pinned_image()
            container["args"] = _operator_args(original)
            container["image"] = before["spec"]["template"]["spec"]["containers"][0]["image"]
        assert after == json.loads(json.dumps(before, default=str))
    # Idempotent: patching the patched manifest (or one with another --gang-scheduling) changes nothing.
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump_all(patched))
    assert _patched_operator_manifest(tmp_path, True, again) == patched
    other = json.loads(json.dumps(patched))
    _operator_args(other)[-1] = "--gang-scheduling=scheduler-plugins"
    again.write_text(yaml.safe_dump_all(other))
    assert _patched_operator_manifest(tmp_path, True, again) == patched
    # Without Volcano the manifest is applied as it is, but for the release's image.
    plain = _patched_operator_manifest(tmp_path, False)
    assert _operator_args(plain) == _operator_args(original)
    assert [d for d in plain if d["kind"] != "Deployment"] == json.loads(json.dumps(
        [d for d in original if d["kind"] != "Deployment"], default=str))


def test_k8s_apply_applies_the_patched_documents_once():
    """One writer: the one kubernetes.core.k8s server-side apply applies the documents the
    manifests step patched; the operator's Deployment is never patched afterwards."""
    top = yaml.safe_load((ROOT / "roles/k8s/tasks/main.yml").read_text())
    tasks = [t for task in top for t in [task, *task.get("block", [])]]
    applies = [t for t in tasks if "kubernetes.core.k8s" in t]
    assert len(applies) == 1
    assert applies[0]["kubernetes.core.k8s"]["definition"] == "{{ k8s_manifest_documents[item.name] }}"
    assert applies[0]["kubernetes.core.k8s"]["server_side_apply"]["field_manager"] == "gpucluster"
    assert tasks.index(next(t for t in tasks if "include_tasks" in str(t))) < tasks.index(applies[0])
    # Every call reaches the API the kubeconfig and context name (tests/unit/playbooks/test_k8s_playbook.py).
    api = next(t for t in top if "block" in t and applies[0] in t["block"])
    assert api["module_defaults"] == {"group/kubernetes.core.k8s": "{{ __k8s_api }}"}
    manifests = (ROOT / "roles/k8s/tasks/manifests.yml").read_text()
    assert "gpucluster_k8s_operator_patch(__k8s_mpi_operator_extra_args" in manifests
    labels = (ROOT / "roles/k8s/tasks/labels.yml").read_text()
    assert "state: patched\n    api_version: v1\n    kind: Node" in labels
    role = "".join(p.read_text() for p in (ROOT / "roles/k8s/tasks").glob("*.yml"))
    assert role.count("state: patched") == 1  # nodes only, never the operator's Deployment
    k8s_vars = yaml.safe_load((ROOT / "roles/k8s/vars/main.yml").read_text())
    assert "k8s_volcano" in k8s_vars["__k8s_mpi_operator_extra_args"]  # the var that installs Volcano


def test_k8s_operator_patch_refuse_a_manifest_without_the_operator():
    from ansible_collections.gpucluster.cluster.plugins.filter.k8s import k8s_operator_patch
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}},
            {"kind": "Deployment", "metadata": {"name": "mpi-operator"},
             "spec": {"template": {"spec": {"containers": [{"name": "other", "args": []}]}}}}]
    out = k8s_operator_patch(docs, ["--gang-scheduling=volcano"], "k8s_mpi_operator_manifest '/srv/m.yaml'")
    assert out["error"].startswith("k8s_mpi_operator_manifest '/srv/m.yaml' has no Deployment mpi-operator with a "
                                   "container mpi-operator, so --gang-scheduling=volcano cannot be added")
    assert "Fix: leave k8s_mpi_operator_manifest unset" in out["error"] and out["documents"] == docs
    # Nothing to add: nothing to refuse.
    assert k8s_operator_patch(docs, [], "m") == {"documents": docs, "error": ""}
    assert k8s_operator_patch([None, *docs], None)["documents"] == docs


@pytest.mark.parametrize("deploy", [
    {"kind": "Deployment", "metadata": {"name": "mpi-operator"}},
    {"kind": "Deployment", "metadata": {"name": "mpi-operator"}, "spec": None},
    {"kind": "Deployment", "metadata": {"name": "mpi-operator"}, "spec": {"template": None}},
    {"kind": "Deployment", "metadata": {"name": "mpi-operator"}, "spec": {"template": {"spec": None}}},
    {"kind": "Deployment", "metadata": {"name": "mpi-operator"},
     "spec": {"template": {"spec": {"containers": [None]}}}},
    {"kind": "Deployment", "metadata": None},
])
def test_k8s_operator_patch_refuse_a_malformed_deployment_with_a_message(deploy):
    from ansible_collections.gpucluster.cluster.plugins.filter.k8s import k8s_operator_patch
    out = k8s_operator_patch([deploy], ["--gang-scheduling=volcano"], "m")
    assert "has no Deployment mpi-operator with a container mpi-operator" in out["error"]


def test_k8s_operator_patch_pins_the_image_and_only_the_image():
    """The pinned v0.8.2 manifest runs the moving master tag; the role's default is the release's tag."""
    from ansible_collections.gpucluster.cluster.plugins.filter.k8s import k8s_operator_patch
    image = _pinned_image()
    assert image == "mpioperator/mpi-operator:0.8.2"
    original = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    patched = k8s_operator_patch(original, [], "m", image)["documents"]
    deploy = next(d for d in patched if d["kind"] == "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == image and container["args"] == _operator_args(original)
    before = next(d for d in original if d["kind"] == "Deployment")
    assert before["spec"]["template"]["spec"]["containers"][0]["image"] == "mpioperator/mpi-operator:master"
    assert [d for d in patched if d is not deploy] == [d for d in original if d is not before]
    assert k8s_operator_patch(patched, [], "m", image)["documents"] == patched
    out = k8s_operator_patch([{"kind": "Namespace", "metadata": {"name": "x"}}], [], "m", image)
    assert "so the image mpioperator/mpi-operator:0.8.2 cannot be set" in out["error"]
    assert out["error"].endswith('or set k8s_mpi_operator_image: "".') and "k8s_volcano" not in out["error"]
    ns = [{"kind": "Namespace", "metadata": {"name": "x"}}]
    both = k8s_operator_patch(ns, ["--gang-scheduling=volcano"], "m", image)
    assert both["error"].endswith('or set k8s_volcano: false and k8s_mpi_operator_image: "".'), both["error"]


def test_k8s_operator_patch_are_idempotent_for_every_arg_and_every_spelling():
    from ansible_collections.gpucluster.cluster.plugins.filter.k8s import k8s_operator_patch
    deploy = {"kind": "Deployment", "metadata": {"name": "mpi-operator"}, "spec": {"template": {"spec": {
        "containers": [{"name": "mpi-operator", "args": ["-alsologtostderr", "--gang-scheduling", "none"]}]}}}}
    extra = ["--gang-scheduling=volcano", "--foo=1"]
    once = k8s_operator_patch([deploy], extra)["documents"]
    twice = k8s_operator_patch(once, extra)["documents"]
    args = once[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["-alsologtostderr", "--gang-scheduling=volcano", "--foo=1"] and twice == once
    # One string is one argument, not its letters; the input is left as it was.
    assert k8s_operator_patch([deploy], "--gang-scheduling=volcano")["documents"][0]["spec"]["template"]["spec"][
        "containers"][0]["args"] == ["-alsologtostderr", "--gang-scheduling=volcano"]
    assert deploy["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "none"
