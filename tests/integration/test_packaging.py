"""gpucluster installed the way users install it, used from outside the checkout.

(a) The wheel: ``pip wheel --no-deps`` of a clean copy of the checkout, installed (not editable)
    into a fresh venv in a temp dir with its dependencies from PyPI at the versions of
    requirements/constraints.txt; the CLI then runs from a temp cwd, and the modules it imports
    must be the venv's copies, not the checkout's.
(b) The collection: ``ansible-galaxy collection build`` of a clean copy (offline), installed from
    the tarball into a temp collections path; ansible-doc, a playbook that uses a role by FQCN and
    ``import_playbook: gpucluster.cluster.site`` (--syntax-check, --list-tasks) and a real run of a
    module and a filter by FQCN on localhost, all from a temp dir without the checkout's
    ansible.cfg.

``run_site_from_collection(inventory)`` converges an inventory through the installed collection
(tests/integration/test_sandbox.py uses it on the sandbox).

No Docker needed; (a) downloads the dependencies from PyPI (pip's cache makes reruns quick).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the test venv: ansible-galaxy, ansible-playbook, ansible-doc
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"

pytestmark = pytest.mark.integration


def sh(*args, cwd: Path, env: dict | None = None, timeout: int = 900, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if ok and r.returncode != 0:
        cmd = " ".join(map(str, args))
        pytest.fail(f"{cmd} (cwd {cwd}) exited {r.returncode}:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}")
    return r


def clean_copy(dest: Path) -> Path:
    """The checkout's files as a clean clone has them (tracked + new, not ignored; no build output)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():  # deleted in the work tree
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)
    return dest


def outside_env(**extra: str) -> dict[str, str]:
    """An environment that knows nothing about the checkout: no PYTHONPATH, no ANSIBLE_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(NO_COLOR="1", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PY_COLORS="0")
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------------------
# (a) the wheel in a fresh venv


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = clean_copy(tmp / "src")
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp / "dist", src, cwd=tmp)
    wheels = list((tmp / "dist").glob("gpucluster-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", venv, cwd=tmp)
    sh(venv / "bin" / "python", "-m", "pip", "install", "-q", "-c", CONSTRAINTS, wheels[0], cwd=tmp, timeout=1800)
    return venv


@pytest.fixture
def outside(tmp_path) -> Path:
    cwd = tmp_path / "work"
    cwd.mkdir()
    return cwd


def cli(venv: Path, *args, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    return sh(venv / "bin" / "gpucluster", *args, cwd=cwd, env=outside_env(PATH=f"{venv / 'bin'}:/usr/bin:/bin"),
              timeout=300, ok=ok)


def test_wheel_is_installed_not_the_checkout(wheel_venv, outside):
    code = ("import json, gpucluster, gpucluster.cli\n"
            "import ansible_collections.gpucluster.cluster.plugins.module_utils.launch as core\n"
            "print(json.dumps([gpucluster.__file__, gpucluster.cli.__file__, core.__file__]))")
    r = sh(wheel_venv / "bin" / "python", "-c", code, cwd=outside, env=outside_env())
    files = [Path(f).resolve() for f in json.loads(r.stdout)]
    for f in files:
        assert f.is_relative_to(wheel_venv.resolve()), f"{f} is not the venv's copy"
        assert not f.is_relative_to(ROOT), f"{f} is the checkout's"
    direct_url = list((wheel_venv / "lib").glob("python3*/site-packages/gpucluster-*.dist-info/direct_url.json"))
    assert not direct_url or not json.loads(direct_url[0].read_text()).get("dir_info", {}).get("editable")


def test_cli_help_and_version(wheel_venv, outside):
    r = cli(wheel_venv, "--help", cwd=outside)
    for cmd in ("sandbox", "hosts", "launch", "report"):
        assert cmd in r.stdout
    # --version: added by the CLI work of issue 9 (passes once that is merged)
    r = cli(wheel_venv, "--version", cwd=outside)
    assert "0.1.0" in r.stdout + r.stderr


def test_cli_hosts_init_help(wheel_venv, outside):
    r = cli(wheel_venv, "hosts", "init", "--help", cwd=outside)
    assert r.stdout.startswith("usage: gpucluster hosts") and "--hosts" in r.stdout, r.stdout


@pytest.fixture
def job(outside) -> Path:
    path = outside / "job.yml"
    shutil.copy(ROOT / "examples" / "jobs" / "resnet50-horovod.yml", path)
    return path


def test_cli_launch_mpirun(wheel_venv, outside, job):
    spec = yaml.safe_load(job.read_text())
    r = cli(wheel_venv, "launch", job.name, "--mpirun", cwd=outside)
    line = r.stdout.strip()
    assert line.startswith("mpirun "), line
    assert f"-np {spec['node_count'] * spec['gpus_per_node']} " in line
    # the NCCL env: what failed with ModuleNotFoundError (ansible.module_utils.gpucluster) before
    assert f"-x NCCL_SOCKET_IFNAME={spec['nccl_env']['NCCL_SOCKET_IFNAME']} " in line
    assert line.endswith(spec["command"])


def test_cli_launch_mpijob(wheel_venv, outside, job):
    r = cli(wheel_venv, "launch", str(job), "--mpijob", cwd=outside)
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert docs and docs[0]["kind"] == "MPIJob"
    assert docs[0]["metadata"]["name"] == "resnet50-horovod"
    assert "Traceback" not in r.stderr


def test_cli_report(wheel_venv, outside):
    results = [
        {"gpus": 1, "nodes": 1, "runtime": "horovod", "throughput": 125.0, "unit": "img/sec"},
        {"gpus": 8, "nodes": 1, "runtime": "horovod", "throughput": 950.0, "unit": "img/sec"},
        {"gpus": 16, "nodes": 2, "runtime": "horovod", "throughput": 1700.0, "unit": "img/sec"},
    ]
    (outside / "results.json").write_text(json.dumps(results))
    cli(wheel_venv, "report", "results.json", "--out-dir", "out", cwd=outside)
    assert sorted(p.name for p in (outside / "out").iterdir()) == ["report.json", "report.md", "report.png"]
    report = json.loads((outside / "out" / "report.json").read_text())
    assert [p["gpus"] for p in report["series"]["horovod"]] == [1, 8, 16]
    assert (outside / "out" / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_spec_is_an_error_not_a_traceback(wheel_venv, outside):
    (outside / "bad.yml").write_text("name: x\nnodes: -1\n")
    r = cli(wheel_venv, "launch", "bad.yml", "--mpirun", cwd=outside, ok=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------
# (b) the collection, installed from its tarball


@cache
def installed_collection() -> Path:
    """Build the collection from a clean copy and install the tarball; returns the collections path
    (once per test session; the lead's sandbox test shares it through run_site_from_collection)."""
    tmp = Path(tempfile.mkdtemp(prefix="gpucluster-collection-"))
    src = clean_copy(tmp / "src")
    colls = tmp / "collections"
    env = collection_env(colls)
    sh(BIN / "ansible-galaxy", "collection", "build", "--output-path", tmp / "dist", src, cwd=tmp, env=env)
    tarballs = list((tmp / "dist").glob("gpucluster-cluster-*.tar.gz"))
    assert len(tarballs) == 1, tarballs
    # --force: a copy elsewhere on this machine must not make galaxy skip the install
    sh(BIN / "ansible-galaxy", "collection", "install", "--offline", "--force", "-p", colls, tarballs[0],
       cwd=tmp, env=env)
    assert (colls / "ansible_collections" / "gpucluster" / "cluster" / "MANIFEST.json").is_file()
    return colls


def collection_env(colls: Path, **extra: str) -> dict[str, str]:
    """Ansible as a user outside the checkout runs it: no repository ansible.cfg (an empty one, so
    that no ansible.cfg of the machine or the cwd counts), the temp collections path only, and a
    HOME of its own (no ~/.ansible/collections of this machine)."""
    home = colls.parent / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "ansible.cfg").write_text("[defaults]\n")
    return outside_env(PATH=f"{BIN}:{os.environ.get('PATH', '')}", HOME=str(home),
                       ANSIBLE_CONFIG=str(home / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(colls), **extra)


def run_site_from_collection(inventory_path, *args: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    """``ansible-playbook -i <inventory_path> site.yml`` where site.yml is a user's playbook outside the
    checkout (a temp dir, no repository ansible.cfg) that only says ``import_playbook:
    gpucluster.cluster.site``, run against the collection built and installed from its tarball.
    Extra ``args`` go to ansible-playbook; the result is returned, not checked."""
    colls = installed_collection()
    work = Path(tempfile.mkdtemp(prefix="gpucluster-site-"))
    (work / "site.yml").write_text(
        "---\n- name: gpucluster from the installed collection\n"
        "  ansible.builtin.import_playbook: gpucluster.cluster.site\n")
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(Path(inventory_path).resolve()), "site.yml", *args],
                          cwd=work, env=collection_env(colls), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def colls() -> Path:
    return installed_collection()


def test_tarball_leaves_out_what_is_not_content(colls):
    root = colls / "ansible_collections" / "gpucluster" / "cluster"
    for kept in ("MANIFEST.json", "meta/runtime.yml", "plugins/modules/gpu_facts.py", "playbooks/site.yml",
                 "roles/docker/tasks/main.yml"):
        assert (root / kept).exists(), kept
    for left_out in ("tests", "src", ".venv", "collections", "pyproject.toml"):
        assert not (root / left_out).exists(), left_out
    assert not list(root.glob("roles/*/molecule"))


def test_ansible_doc_reads_the_installed_module(colls, outside):
    r = sh(BIN / "ansible-doc", "--json", "gpucluster.cluster.gpu_facts", cwd=outside, env=collection_env(colls))
    doc = json.loads(r.stdout)["gpucluster.cluster.gpu_facts"]["doc"]
    assert Path(doc["filename"]).resolve().is_relative_to(colls.resolve()), doc["filename"]
    assert doc["attributes"]["check_mode"]["support"] == "full"
    r = sh(BIN / "ansible-doc", "gpucluster.cluster.gpu_facts", cwd=outside, env=collection_env(colls))
    assert "gpu_facts" in r.stdout and "ATTRIBUTES" in r.stdout


def _user_playbook(cwd: Path) -> Path:
    (cwd / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "node-a": {"ansible_host": "192.0.2.10"}, "node-b": {"ansible_host": "192.0.2.11"}}}}}}))
    (cwd / "user.yml").write_text("""---
- name: A role of the collection by FQCN
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: gpucluster.cluster.hugepages
- name: The whole converge
  ansible.builtin.import_playbook: gpucluster.cluster.site
""")
    return cwd / "user.yml"


def test_user_playbook_syntax_and_tasks(colls, outside):
    book = _user_playbook(outside)
    env = collection_env(colls)
    sh(BIN / "ansible-playbook", "-i", "hosts.yml", book.name, "--syntax-check", cwd=outside, env=env)
    r = sh(BIN / "ansible-playbook", "-i", "hosts.yml", book.name, "--list-tasks", cwd=outside, env=env)
    assert "gpucluster.cluster.hugepages" in r.stdout or "hugepages :" in r.stdout
    # the stages of gpucluster.cluster.site, by their play names in playbooks/site.yml's imports
    for play in ("Preflight", "Docker", "NVIDIA Container Toolkit"):
        assert play.lower() in r.stdout.lower(), play
    assert "[WARNING]: Could not match supplied host pattern" not in r.stderr


def test_module_and_filter_by_fqcn_run_on_localhost(colls, outside):
    (outside / "local.yml").write_text("""---
- name: Module and filter of the installed collection
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: GPU facts (a machine without GPU gets an empty list)
      gpucluster.cluster.gpu_facts:
        topology: false
        kernel_log: false
    - name: Parse a meminfo excerpt with the collection's filter
      ansible.builtin.set_fact:
        pages: "{{ 'HugePages_Total:       4\\nHugePages_Free:        3\\nHugepagesize:       2048 kB\\n'
                   | gpucluster.cluster.hugepages_parse_meminfo }}"
    - name: Show both
      ansible.builtin.debug:
        msg: "GPUCLUSTER {{ {'gpus': ansible_facts.gpucluster_gpu.gpus | length,
                             'driver': ansible_facts.gpucluster_gpu.driver.state,
                             'total': pages.total, 'free': pages.free,
                             'page_size_kb': pages.page_size_kb} | to_json }}"
""")
    env = collection_env(colls, ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
                         ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    r = sh(BIN / "ansible-playbook", "local.yml", cwd=outside, env=env)
    line = next(ln for ln in r.stdout.splitlines() if "GPUCLUSTER " in ln)
    shown = json.loads(line.split("GPUCLUSTER ", 1)[1].rstrip('"').replace('\\"', '"'))
    assert shown["total"] == 4 and shown["free"] == 3 and shown["page_size_kb"] == 2048
    assert isinstance(shown["gpus"], int) and shown["driver"] in ("absent", "installed-not-loaded", "ready")
    assert "ok=3" in r.stdout and "failed=0" in r.stdout
