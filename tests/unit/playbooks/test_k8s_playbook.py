"""playbooks/k8s.yml up to the Kubernetes API, run for real on this machine: the manifests are
read and checked, then every kubernetes.core call goes to the API the kubeconfig and context
name (the role's module_defaults). No API answers here (docs/k8s.md), so the run must fail at
the apply, naming the kubeconfig's server or context: that proves the wiring, not the apply."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

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
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "NO_COLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "HOME": str(tmp_path),
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / "playbooks" / "k8s.yml"),
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"k8s_kubeconfig={kc}", *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


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
