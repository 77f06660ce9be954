"""playbooks/k8s.yml up to the Kubernetes API, run for real on this machine: the manifests are
read and checked, then every kubernetes.core call goes to the API the kubeconfig and context
name (the role's module_defaults). No API answers here (docs/k8s.md), so the run must fail at
the apply, naming the kubeconfig's server or context: that proves the wiring, not the apply."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT, run_tool

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: here, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: t}}]
current-context: here
"""


def _run(tmp_path, *extra):
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG)
    return run_tool("ansible-playbook", "-i", "localhost,", ROOT / "playbooks" / "k8s.yml",
                    "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"k8s_kubeconfig={kc}", *extra,
                    home=tmp_path, cwd=tmp_path, timeout=300)


@pytest.mark.parametrize("extra, expect", [
    # The kubeconfig's server: the apply tried it (nothing listens on port 1).
    ((), "host='127.0.0.1', port=1"),
    # A context the kubeconfig lacks reaches the client too.
    (("-e", "k8s_context=elsewhere"), "Expected object with name elsewhere"),
])
def test_the_apply_goes_to_the_kubeconfig_and_context_given(tmp_path, extra, expect):
    r = _run(tmp_path, *extra)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    failed = [line for line in out.splitlines() if line.startswith("TASK [")]
    assert failed and "Apply each manifest" in failed[-1], out[-3000:]
    assert expect in out, out[-3000:]
