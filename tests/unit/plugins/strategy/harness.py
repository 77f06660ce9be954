"""Runs a playbook for real on this machine (connection local, two hosts) under a strategy, in an
interpreter that counts the workers forked; shared by the strategy's tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import yaml

from tests.conftest import ROOT, ansible_env

# ansible-playbook in an interpreter that writes the number of workers it forked to FORKS.
COUNTING = textwrap.dedent("""
    import atexit, os, sys
    import ansible.executor.process.worker as worker
    started = []
    real = worker.WorkerProcess.start
    def start(self):
        started.append(1)
        return real(self)
    worker.WorkerProcess.start = start
    atexit.register(lambda: open(os.environ["FORKS"], "w").write(str(len(started))))
    from ansible.cli.playbook import main
    sys.argv = ["ansible-playbook", *sys.argv[1:]]
    main()
""")


def run_playbook(tmp_path, arm, tasks, **env):
    """``tasks`` as one play on node-a and node-b (vars flag and none_true false, ``out`` the path
    a task may write to as ``{{ out }}.{{ inventory_hostname }}``) under strategy ``arm``: the
    completed process, what node-a's task wrote there (parsed JSON) or None, the workers forked,
    the PLAY RECAP lines. ``env``: more environment for ansible-playbook."""
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "Conditions", "hosts": "all", "gather_facts": False,
                                     "vars": {"flag": False, "none_true": False}, "tasks": tasks}]))
    out, forks = tmp_path / f"{arm}.json", tmp_path / f"{arm}.forks"
    written = tmp_path / f"{arm}.json.node-a"
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node-a": {}, "node-b": {}}}}))
    r = subprocess.run([sys.executable, "-c", COUNTING, "-i", str(inv), "-c", "local",
                        "-e", f"ansible_python_interpreter={sys.executable}",
                        "-e", json.dumps({"out": str(out)}), str(book)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=ansible_env(tmp_path, FORKS=str(forks), ANSIBLE_STRATEGY=arm, **env))
    recap = re.findall(r"^node-\w\s+:.*$", r.stdout, re.M)  # the PLAY RECAP lines
    return r, (json.loads(written.read_text()) if written.exists() else None), int(forks.read_text()), recap
