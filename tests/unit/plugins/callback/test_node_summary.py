"""The closing summary per node (plugins/callback/node_summary.py): the pure formatter, and a
real ansible-playbook run through the project's ansible.cfg (which enables it) on three local
nodes: one changed by two stages, one failed in a stage, one unreachable."""

from __future__ import annotations

import re
import subprocess

import yaml

from plugins.callback.node_summary import NodeRecord, _first_line, summary_lines
from tests.conftest import ROOT

PY = str(ROOT / ".venv/bin/python")
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": PY}
GONE = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9,
        "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no"}


def test_lines_group_the_changes_by_stage_and_name_where_a_node_stopped():
    a, b, c = NodeRecord(), NodeRecord(), NodeRecord()
    for stage, name in [("docker", "Write daemon.json"), ("docker", "Restart dockerd"), ("docker", "Write daemon.json"),
                        ("container_ssh", "Write the files")]:
        a.change(stage, name)
    b.change("rdma", "Install rdma-core")
    b.stopped = ("failed", "docker : Restart dockerd", "Unable to start service docker")
    lines = summary_lines({"node-3": c, "node-1": a, "node-2": b})
    assert [h for h, _, _ in lines] == ["node-1", "node-2", "node-3"]
    assert lines[0][1:] == ("node-1: changed 3: docker (Write daemon.json, Restart dockerd), "
                            "container_ssh (Write the files)", "changed")
    assert lines[1][1:] == ("node-2: FAILED at docker : Restart dockerd: Unable to start service docker "
                            "(before that: changed 1: rdma (Install rdma-core))", "failed")
    assert lines[2][1:] == ("node-3: changed nothing", "ok")
    assert summary_lines({"node-1": a}, check_mode=True)[0][1].startswith("node-1: would change 3: ")


def test_a_long_stage_shows_the_first_names_and_counts_the_rest():
    rec = NodeRecord()
    for i in range(5):
        rec.change("container_ssh", f"t{i}")
    (_, line, _), = summary_lines({"n": rec}, names_per_stage=2)
    assert line == "n: changed 5: container_ssh (t0, t1, +3 more)"


def test_the_reason_is_the_line_that_says_why():
    assert _first_line({"msg": "Task failed: Failed to connect to the host via ssh: refused\nmore"}) == \
        "Failed to connect to the host via ssh: refused"
    assert _first_line({"msg": "EOF on stream; last 100 lines received:\nssh: connect to host x: refused"}) == \
        "ssh: connect to host x: refused"
    assert _first_line({"msg": "", "stderr": "E: one\nE: Unable to locate package rdma-core\n", "rc": 100}) == \
        "E: Unable to locate package rdma-core"
    assert _first_line({"rc": 3}) == "rc=3"
    assert _first_line({}) == "no message"


def _run(tmp_path, *extra):
    (tmp_path / "roles/stage_a/tasks").mkdir(parents=True)
    (tmp_path / "roles/stage_a/tasks/main.yml").write_text(yaml.safe_dump([
        {"name": "Change A", "ansible.builtin.command": "true", "changed_when": True},
        {"name": "Stay A", "ansible.builtin.command": "true", "changed_when": False},
        {"name": "Break on node-2", "ansible.builtin.fail": {"msg": "stage A broke\nsecond line"},
         "when": "inventory_hostname == 'node-2'"},
        {"name": "Tolerated", "ansible.builtin.command": "false", "ignore_errors": True},
    ]))
    (tmp_path / "roles/stage_b/tasks").mkdir(parents=True)
    (tmp_path / "roles/stage_b/tasks/main.yml").write_text(yaml.safe_dump([
        {"name": "Change B", "ansible.builtin.copy": {
            "content": "b\n", "dest": "{{ out_dir }}/{{ inventory_hostname }}.b", "mode": "0644"}}]))
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node-1": LOCAL, "node-2": LOCAL, "node-3": GONE}}}))
    pb = tmp_path / "play.yml"
    pb.write_text(yaml.safe_dump([{"name": "Stages", "hosts": "all", "gather_facts": False,
                                   "roles": ["stage_a", "stage_b"]}]))
    args = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), str(pb), "-e", f"out_dir={tmp_path}", *extra]
    r = subprocess.run(args, cwd=ROOT,
                       capture_output=True, text=True, timeout=180,
                       env={"PATH": f"{ROOT / '.venv/bin'}:/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(tmp_path),
                            "ANSIBLE_ROLES_PATH": str(tmp_path / "roles"),
                            "ANSIBLE_HOST_KEY_CHECKING": "False"})
    return r.returncode, r.stdout


def test_a_real_run_ends_with_one_line_per_node(tmp_path):
    rc, out = _run(tmp_path)
    assert rc != 0, out
    tail = out[out.index("NODE SUMMARY"):]
    assert re.search(r"^node-1: changed 2: stage_a \(Change A\), stage_b \(Change B\)$", tail, re.M), tail
    assert re.search(r"^node-2: FAILED at stage_a : Break on node-2: stage A broke "
                     r"\(before that: changed 1: stage_a \(Change A\)\)$", tail, re.M), tail
    assert re.search(r"^node-3: UNREACHABLE at stage_a : Change A: .*port 9: Connection refused", tail, re.M), tail
    # After the recap, so the recap's parsers (and an operator's eye) find it last.
    assert out.index("PLAY RECAP") < out.index("NODE SUMMARY")


def test_check_mode_says_what_would_change(tmp_path):
    _, out = _run(tmp_path, "--check", "--limit", "node-1")
    tail = out[out.index("NODE SUMMARY"):]
    # command does not run in check mode (skipped, so no change); copy says it would write.
    assert re.search(r"^node-1: would change 1: stage_b \(Change B\)$", tail, re.M), tail
    assert not (tmp_path / "node-1.b").exists()
    assert "node-2" not in tail and "node-3" not in tail
