"""The training play's membership check (roles/container_ssh/tasks/membership.yml), run on this
machine: two nodes with a local connection and one that cannot be reached (SSH to a closed port
on 127.0.0.1) or that failed in an earlier play. Nothing the roles write is run here; the
sandbox test (tests/integration/test_membership.py) runs the real training stage."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
PY = str(ROOT / ".venv/bin/python")
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": PY}
# Port 9 (discard) on loopback: nothing listens there, so SSH is refused at once.
GONE = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9,
        "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no"}


def _run(tmp_path, hosts, fail_in_earlier_stage=(), extra=None, limit=None):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    pb = tmp_path / "play.yml"
    pb.write_text(yaml.safe_dump([
        {"name": "An earlier stage", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "Fail on some nodes", "ansible.builtin.fail": {"msg": "earlier stage broke"},
             "when": f"inventory_hostname in {list(fail_in_earlier_stage)!r}"}]},
        {"name": "Training stage", "hosts": "gpu_nodes", "gather_facts": False, "pre_tasks": [
            {"name": "Membership", "ansible.builtin.import_role": {"name": "container_ssh",
                                                                    "tasks_from": "membership.yml"}}],
         "tasks": [
             {"name": "Write", "ansible.builtin.debug": {"msg": "WORLD={{ __container_ssh_peers | join(',') }}"}}]},
    ]))
    args = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), str(pb)]
    if extra:
        ev = tmp_path / "extra.yml"
        ev.write_text(yaml.safe_dump(extra))
        args += ["-e", f"@{ev}"]
    if limit:
        args += ["--limit", limit]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=180,
                       env={"PATH": f"{ROOT / '.venv/bin'}:/usr/bin:/bin", "NO_COLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                            "HOME": str(tmp_path), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
                            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
                            "ANSIBLE_HOST_KEY_CHECKING": "False"})
    return r.returncode, r.stdout + r.stderr


def _refusals(out, text):
    """``{host: message}`` of the nodes whose training stage was refused with ``text`` in the message."""
    found = re.findall(r"^\[ERROR\]: Task failed: Action failed: (node-\d): (.*)$", out, re.M)
    return {host: msg for host, msg in found if text in msg}


def _world(out):
    """``{host: world}`` printed by the task after the check (only reached when it passes)."""
    return dict(re.findall(r'^ok: \[(node-\d)\] => \{\n\s+"msg": "WORLD=(.*)"', out, re.M))


def test_an_unreachable_member_stops_every_node_naming_it(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL, "node-3": GONE})
    assert rc != 0, out
    assert _world(out) == {}, "a task after the check ran"
    refused = _refusals(out, "member(s) node-3 of the training group gpu_nodes are not in this run")
    assert set(refused) == {"node-1", "node-2"}, out
    # Why, in the connection's own words (ssh's, through the ssh plugin or mitogen).
    why = refused["node-1"]
    assert re.search(r"\(node-3: unreachable \((Failed to connect to the host via ssh: )?"
                     r"ssh: connect to host 127\.0\.0\.1 port 9: Connection refused\)", why), why
    assert """-e '{"gpucluster_excluded_nodes": ["node-3"]}'""" in refused["node-1"]


def test_a_member_failed_in_an_earlier_stage_is_named_with_that_reason(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL, "node-3": LOCAL}, fail_in_earlier_stage=["node-2"])
    assert rc != 0, out
    assert _world(out) == {}
    refused = _refusals(out, "member(s) node-2 of")
    assert set(refused) == {"node-1", "node-3"}, out
    assert "(node-2: failed in an earlier stage of this run" in refused["node-3"]


def test_a_limit_run_is_refused_rather_than_shrinking_the_world(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL}, limit="node-1")
    assert rc != 0, out
    assert "node-2" in _refusals(out, "(node-2: not in this run (--limit")["node-1"]


def test_excluding_the_missing_node_on_purpose_passes_and_says_so(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL, "node-3": GONE},
                   extra={"gpucluster_excluded_nodes": ["node-3"]})
    assert rc == 0, out  # node-3 is not even contacted
    assert "MEMBERSHIP: node-3 excluded on purpose" in out
    assert _world(out) == {"node-1": "node-1,node-2", "node-2": "node-1,node-2"}, out


def test_an_excluded_node_that_is_up_is_left_alone(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL}, extra={"gpucluster_excluded_nodes": ["node-2"]})
    assert rc == 0, out
    assert _world(out) == {"node-1": "node-1"}, out


def test_the_exclusion_list_names_inventory_nodes_only(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL}, extra={"gpucluster_excluded_nodes": ["node-3"]})
    assert rc != 0, out
    assert "gpucluster_excluded_nodes: 'node-3' is not a node of the training group (node-1, node-2)" in out
    assert re.search(r"did you mean node-[12]\?\)\. Fix: name inventory hosts of the group only", out)
    assert _world(out) == {}


def test_a_complete_group_passes(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL})
    assert rc == 0, out
    assert _world(out) == {"node-1": "node-1,node-2", "node-2": "node-1,node-2"}, out
    assert "MEMBERSHIP" not in out


def test_an_exclusion_list_given_as_a_string_is_refused_not_matched(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-11": LOCAL}, extra={"gpucluster_excluded_nodes": "node-11"})
    assert rc != 0, out
    assert "gpucluster_excluded_nodes: 'node-11' is not a list of node names" in out
    assert _world(out) == {}


def test_an_exclusion_given_as_a_number_is_refused_with_the_fix(tmp_path):
    rc, out = _run(tmp_path, {"node-1": LOCAL, "node-2": LOCAL}, extra={"gpucluster_excluded_nodes": 3})
    assert rc != 0, out
    assert "gpucluster_excluded_nodes: 3 is not a list of node names. Fix: give a list" in out


def test_site_preflight_refuses_a_bad_exclusion_before_the_lock_and_any_stage(tmp_path):
    """site.yml's first play declares the group from the inventory alone: a name the group lacks
    stops the run before the run lock is taken and before the host stack (it used to reach the
    training stage, after every earlier stage had changed the node)."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-1": LOCAL, "node-2": LOCAL}}}}}))
    ev = tmp_path / "extra.yml"
    ev.write_text(yaml.safe_dump({"gpucluster_excluded_nodes": ["node-22"],
                                  "preflight_lock_path": str(tmp_path / "run.lock")}))
    r = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), "-e", f"@{ev}", "site.yml"],
                       cwd=ROOT, capture_output=True, text=True, timeout=180,
                       env={"PATH": f"{ROOT / '.venv/bin'}:/usr/bin:/bin", "NO_COLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                            "HOME": str(tmp_path)})
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    refused = _refusals(out, "gpucluster_excluded_nodes: 'node-22' is not a node of the training group "
                             "(node-1, node-2)")
    assert set(refused) == {"node-1", "node-2"}, out
    assert "did you mean node-2?" in refused["node-1"]
    assert "TASK [preflight : Refuse a training group the inventory does not declare well]" in out
    assert "Describe this run" not in out and not (tmp_path / "run.lock").exists()
    assert "PLAY [RDMA stack]" not in out
