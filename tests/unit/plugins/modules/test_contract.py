"""contract module on a real tree in tmp_path: a stage's file is written once (a rerun changes
nothing), the fact script it installs prints every stage's file as one JSON object (run here
with sh, and read by Ansible's own setup module as ansible_local.gpucluster), check mode writes
nothing, absent removes the stage, older fact files go, bad input changes nothing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import contract

from tests.conftest import run_tool

ROOT = Path(__file__).resolve().parents[4]


def _run(capsys, tmp_path, **args):
    args.setdefault("path", str(tmp_path / "contract.d"))
    args.setdefault("facts_path", str(tmp_path / "facts.d"))
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        contract.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def _script_output(tmp_path):
    r = subprocess.run(["sh", str(tmp_path / "facts.d" / "gpucluster.fact")], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout)


NCCL = {"container_env": {"NCCL_SOCKET_IFNAME": "=eth1,eth2"}, "data_interfaces": ["eth1", "eth2"], "hcas": []}


def test_a_stage_is_published_once_and_the_fact_shows_every_stage(tmp_path, capsys):
    rc, r = _run(capsys, tmp_path, stage="nccl", data=NCCL)
    assert rc == 0 and r["changed"] is True and r["contract"] == {"nccl": NCCL}
    assert r["path"] == str(tmp_path / "contract.d" / "nccl.json")
    script = tmp_path / "facts.d" / "gpucluster.fact"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert _script_output(tmp_path) == {"nccl": NCCL}
    rc, again = _run(capsys, tmp_path, stage="nccl", data=NCCL)
    assert rc == 0 and again["changed"] is False
    rc, r = _run(capsys, tmp_path, stage="runtime", data={"runtime": "horovod"})
    assert r["changed"] is True and r["contract"] == {"nccl": NCCL, "runtime": {"runtime": "horovod"}}
    assert _script_output(tmp_path) == r["contract"]
    assert not [p for p in (tmp_path / "contract.d").iterdir() if p.name.startswith(".")]


def test_no_stage_yet_is_an_empty_contract(tmp_path, capsys):
    _run(capsys, tmp_path, stage="nccl", data=NCCL)
    os.unlink(tmp_path / "contract.d" / "nccl.json")
    assert _script_output(tmp_path) == {}
    os.rmdir(tmp_path / "contract.d")
    assert _script_output(tmp_path) == {}


def test_a_changed_value_is_rewritten_with_a_diff_and_check_mode_writes_nothing(tmp_path, capsys):
    _run(capsys, tmp_path, stage="nccl", data=NCCL)
    new = {**NCCL, "data_interfaces": ["eth1"]}
    rc, r = _run(capsys, tmp_path, stage="nccl", data=new, _ansible_check_mode=True, _ansible_diff=True)
    assert rc == 0 and r["changed"] is True and r["contract"]["nccl"] == new
    assert '"eth2"' in r["diff"]["before"] and '"eth2"' not in r["diff"]["after"]
    assert _script_output(tmp_path) == {"nccl": NCCL}
    rc, r = _run(capsys, tmp_path, stage="nccl", data=new)
    assert r["changed"] is True and _script_output(tmp_path) == {"nccl": new}


def test_a_fresh_node_in_check_mode_gets_nothing_written(tmp_path, capsys):
    rc, r = _run(capsys, tmp_path, stage="nccl", data=NCCL, _ansible_check_mode=True)
    assert rc == 0 and r["changed"] is True and r["contract"] == {"nccl": NCCL}
    assert not (tmp_path / "contract.d").exists() and not (tmp_path / "facts.d").exists()


def test_absent_removes_the_stage_and_older_fact_files_go(tmp_path, capsys):
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "facts.d" / "gpucluster_nccl.fact").write_text(json.dumps(NCCL))
    (tmp_path / "facts.d" / "users_own.fact").write_text("{}")
    rc, r = _run(capsys, tmp_path, stage="nccl", data=NCCL, remove_facts=["gpucluster_nccl.fact"])
    assert r["changed"] is True
    assert sorted(p.name for p in (tmp_path / "facts.d").iterdir()) == ["gpucluster.fact", "users_own.fact"]
    rc, r = _run(capsys, tmp_path, stage="nccl", state="absent")
    assert r["changed"] is True and r["contract"] == {} and _script_output(tmp_path) == {}
    rc, r = _run(capsys, tmp_path, stage="nccl", state="absent")
    assert r["changed"] is False


def test_a_tampered_script_is_mended(tmp_path, capsys):
    _run(capsys, tmp_path, stage="nccl", data=NCCL)
    script = tmp_path / "facts.d" / "gpucluster.fact"
    os.chmod(script, 0o644)
    assert _run(capsys, tmp_path, stage="nccl", data=NCCL)[1]["changed"] is True
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


@pytest.mark.parametrize("args, says", [
    ({"stage": "NCCL env"}, "stage 'NCCL env': use lower case letters"),
    ({"stage": "nccl", "path": "/etc/my contract"}, "path '/etc/my contract': give an absolute path"),
    ({"stage": "nccl", "remove_facts": ["../x.fact"]}, "remove_facts '../x.fact'"),
    ({"stage": "nccl", "remove_facts": ["gpucluster.fact"]}, "remove_facts 'gpucluster.fact'"),
])
def test_bad_input_changes_nothing(tmp_path, capsys, args, says):
    rc, r = _run(capsys, tmp_path, **args)
    assert rc == 1 and r["failed"] is True
    assert r["msg"].startswith("nothing was changed: ") and says in r["msg"], r["msg"]
    assert not (tmp_path / "contract.d").exists() and not (tmp_path / "facts.d").exists()


def test_ansible_setup_reads_it_as_ansible_local_gpucluster(tmp_path, capsys):
    _run(capsys, tmp_path, stage="nccl", data=NCCL)
    _run(capsys, tmp_path, stage="runtime", data={"runtime": "lightcc", "env_file": "/etc/gpucluster/runtime.env"})
    # -i localhost,: the project's ansible.cfg names the sandbox inventory (its group_vars need inventory_dir).
    r = run_tool("ansible", "localhost", "-i", "localhost,", "-c", "local", "-m", "ansible.builtin.setup",
                 "-a", f"gather_subset=!all fact_path={tmp_path / 'facts.d'} filter=ansible_local",
                 "-e", f"ansible_python_interpreter={sys.executable}", home=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    facts = json.loads(r.stdout.split("=>", 1)[1])["ansible_facts"]["ansible_local"]
    assert facts["gpucluster"] == {"nccl": NCCL,
                                   "runtime": {"runtime": "lightcc", "env_file": "/etc/gpucluster/runtime.env"}}
