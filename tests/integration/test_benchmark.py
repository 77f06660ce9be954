"""Runtime switch and scaling benchmark on the local multi-node test cluster.

What runs for real here: playbooks/runtime.yml's checks (refusal to mix runtimes, a clear
failure where a package cannot be had) and its switch both ways with a second run changing
nothing (runtime profile and env file, the training container recreated with it, the NCCL net
plugin moved aside and back, pip uninstall/install in the containers, the runtime recorded per
node); playbooks/benchmark.yml end to end on 1, 2 and 3 nodes (CPU data-parallel benchmark,
report JSON + Markdown + PNG).

What is a stand-in, and why: light-horovod is the vendor's package (not on PyPI) and a GPU
build of horovod needs CUDA and NCCL, so the switch test installs two wheels built here, named
light-horovod and horovod, whose only content says they are stand-ins; the sandbox has no NCCL
net plugin, so a placeholder file sits at the plugin's path; the training image has no pip, so
pip runs from the controller's Debian pip wheel (runtime_pip_wheel). The pip and file steps on
them are the real ones.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.docker_env import ROOT
from tests.integration.conftest import changes, node_exec, playbook, recap, sandbox_nodes

pytestmark = pytest.mark.integration

PLUGIN = "/opt/gpucluster/tools/nccl-net/libnccl-net.so"
PLUGIN_ASIDE = "/opt/gpucluster/tools/nccl-net/disabled/libnccl-net.so"
WHEEL_DIR = "/opt/gpucluster/bin/wheels"
PIP_WHEELS = sorted(Path("/usr/share/python-wheels").glob("pip-*-py3-none-any.whl"))
# The stand-in wheels, made by the runtime role's molecule scenario's script (one maker for both).
STAND_IN_MAKER = ROOT / "roles/runtime/molecule/default/stand_in_wheel.py"
_spec = importlib.util.spec_from_file_location("stand_in_wheel", STAND_IN_MAKER)
_stand_in = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stand_in)
stand_in_wheel = _stand_in.stand_in_wheel
STAND_IN = _stand_in.STAND_IN
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def container(node: str, *cmd: str, check: bool = True) -> str:
    return node_exec(node, "docker", "exec", "gpucluster-train", *cmd, check=check)


def packages(node: str) -> dict[str, str | None]:
    probe = (ROOT / "roles/runtime/files/runtime_probe.py").read_text()
    return json.loads(container(node, "python3", "-c", probe))["packages"]


def remove_stand_ins() -> None:
    """Leave the sandbox as the bootstrap made it: no Horovod package, no plugin placeholder."""
    for node in sandbox_nodes():
        node_exec(node, "rm", "-f", PLUGIN, PLUGIN_ASIDE)
        # The directories go too when nothing else (the nccl_net_plugin role) put files there.
        node_exec(node, "sh", "-c", f"rmdir {Path(PLUGIN_ASIDE).parent} {Path(PLUGIN).parent} 2>/dev/null || true")
        installed = [name for name, version in packages(node).items() if version]
        if installed:
            pip = node_exec(node, "sh", "-c", f"ls {WHEEL_DIR}/pip-*.whl | head -1").strip()
            container(node, "python3", f"{pip}/pip", "uninstall", "-y", "--break-system-packages", *installed)
        node_exec(node, "rm", "-rf", WHEEL_DIR)


@pytest.fixture(scope="module")
def clean(sandbox):
    remove_stand_ins()
    yield sandbox
    remove_stand_ins()


@pytest.fixture(scope="module")
def stand_ins(clean, tmp_path_factory):
    if not PIP_WHEELS:
        pytest.fail("no pip wheel in /usr/share/python-wheels (Debian's python3-pip-whl, installed with python3-venv)")
    d = tmp_path_factory.mktemp("wheels")
    extra = {
        "runtime_pip_wheel": str(PIP_WHEELS[-1]),
        "runtime_pip_extra_args": ["--break-system-packages"],
        "runtime_horovod_wheel": str(stand_in_wheel(d, "horovod", "0.28.1")),
        "runtime_lightcc_wheel": str(stand_in_wheel(d, "light-horovod", "0.1.0")),
    }
    path = d / "stand-ins.yml"
    path.write_text(yaml.safe_dump(extra))
    return path


# --- runtime.yml: what must be refused ------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "expect"),
    [
        ("horovod", [
            ": cannot install horovod==0.28.1 (built with HOROVOD_WITH_MPI=1 HOROVOD_GPU_OPERATIONS=NCCL) from the "
            "index https://pypi.org/simple (runtime_horovod_index_url)",
            "has no nvcc (CUDA toolkit) and no libnccl (NCCL)",
            "set runtime_horovod_wheel",
        ]),
        ("lightcc", [
            ": cannot install light-horovod in gpucluster-train: light-horovod is the vendor's package and is not "
            "on PyPI",
            "Set runtime_lightcc_wheel", "runtime_lightcc_index_url",
        ]),
    ],
)
def test_a_package_that_cannot_be_had_fails_naming_package_and_source(clean, runtime, expect):
    r = playbook("playbooks/runtime.yml", "-e", f"runtime={runtime}", check=False)
    assert r.returncode != 0
    for host in sandbox_nodes():
        for text in expect:
            assert f"{host}{text}" in r.stdout if text.startswith(":") else text in r.stdout, r.stdout[-4000:]
    # Refused in the checks, before anything changed on any node.
    assert "PLAY [Runtime - switch" not in r.stdout
    assert all(v["changed"] == 0 for v in recap(r.stdout).values()), changes(r.stdout)


def test_a_switch_that_would_mix_runtimes_is_refused(clean):
    r = playbook("playbooks/runtime.yml", "-e", "runtime=horovod", "--limit", "node-1", check=False)
    assert r.returncode != 0
    assert "refusing to switch node-1 to horovod: nodes would run different runtimes (node-1 on horovod; " \
           "node-2, node-3 on lightcc)" in r.stdout, r.stdout[-3000:]
    assert all(v["changed"] == 0 for v in recap(r.stdout).values()), changes(r.stdout)


# --- runtime.yml: both ways, then nothing to do -----------------------------------------------------


def env_file(node: str) -> dict[str, str]:
    text = node_exec(node, "cat", "/etc/gpucluster/runtime.env")
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def check_node(node: str, runtime: str) -> None:
    assert node_exec(node, "cat", "/etc/gpucluster/runtime") == f"{runtime}\n"
    profile = env_file(node)
    prefix = "LIGHT_" if runtime == "lightcc" else "HOROVOD_"
    assert profile and all(k.startswith(prefix) for k in profile), profile
    # The container's environment is the env file (it was recreated with it).
    live = dict(line.split("=", 1) for line in container(node, "env").splitlines() if "=" in line)
    assert {k: v for k, v in live.items() if k.startswith(("LIGHT_", "HOROVOD_"))} == profile
    # ... over the NCCL stage's settings, which the switch keeps (from the node's local fact).
    nccl = json.loads(node_exec(node, "cat", "/etc/gpucluster/contract.d/nccl.json"))["container_env"]
    assert nccl["NCCL_SOCKET_IFNAME"].startswith("=") and "OMPI_MCA_btl_tcp_if_include" in nccl, nccl
    assert {k: live.get(k) for k in nccl} == nccl
    # A library the inventory does not manage is placed as site.yml places it: not enabled
    # (enabling needs a source), so aside for both runtimes and never lost (the managed branch,
    # back for LightCC, is the nccl_net_plugin scenario's).
    assert plugin_state(node) == (False, True)
    assert node_exec(node, "cat", PLUGIN_ASIDE) == "stand-in NCCL net plugin\n"
    if runtime == "horovod":
        assert packages(node) == {"light-horovod": None, "horovod": "0.28.1"}
    else:
        assert packages(node) == {"light-horovod": "0.1.0", "horovod": None}
    # What imports as horovod is the package just installed (here: a stand-in).
    assert STAND_IN in container(node, "python3", "-c", "import horovod; print(horovod.__doc__)")


def plugin_state(node: str) -> tuple[bool, bool]:
    ls = node_exec(node, "sh", "-c", f"ls {PLUGIN} {PLUGIN_ASIDE} 2>/dev/null || true").split()
    return PLUGIN in ls, PLUGIN_ASIDE in ls


def test_switch_both_ways_and_a_second_run_changes_nothing(stand_ins):
    nodes = sandbox_nodes()
    for node in nodes:
        node_exec(node, "sh", "-c", f"mkdir -p {Path(PLUGIN).parent} && echo 'stand-in NCCL net plugin' > {PLUGIN}")
    for runtime in ("horovod", "lightcc"):
        r = playbook("playbooks/runtime.yml", "-e", f"runtime={runtime}", "-e", f"@{stand_ins}")
        assert all(v["changed"] > 0 and v["failed"] == 0 for v in recap(r.stdout).values()), r.stdout[-4000:]
        for node in nodes:
            assert f"{node}  runs {runtime}  (recorded {runtime};" in r.stdout
            assert (f"{node}: the NCCL net plugin {PLUGIN} stays aside" in r.stdout) == (runtime == "lightcc")
            check_node(node, runtime)
        again = playbook("playbooks/runtime.yml", "-e", f"runtime={runtime}", "-e", f"@{stand_ins}")
        rc = recap(again.stdout)
        assert sorted(rc) == nodes
        assert all(v["changed"] == 0 for v in rc.values()), changes(again.stdout)
        converge_keeps_the_switch(nodes, runtime)


def converge_keeps_the_switch(nodes: list[str], runtime: str) -> None:
    """site.yml after runtime.yml must neither undo the switch nor recreate the container (which
    would lose what pip installed in it): both compose the container's environment the same way."""
    started = {n: node_exec(n, "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", "gpucluster-train")
               for n in nodes}
    site = playbook("site.yml")
    rc = recap(site.stdout)
    assert sorted(rc) == nodes
    assert all(v["changed"] == 0 and v["failed"] == 0 for v in rc.values()), changes(site.stdout)
    for node in nodes:
        assert node_exec(node, "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}",
                         "gpucluster-train") == started[node]
        check_node(node, runtime)


# --- benchmark.yml ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_benchmark_end_to_end_writes_the_report(clean, n):
    nodes = sandbox_nodes()[:n]
    before = set((ROOT / "reports").glob("benchmark-*"))
    r = playbook("playbooks/benchmark.yml", "--limit", ",".join(nodes))
    assert all(v["failed"] == 0 for v in recap(r.stdout).values())
    new = sorted(set((ROOT / "reports").glob("benchmark-*")) - before)
    assert len(new) == 1, new
    out = new[0]
    results = json.loads((out / "results.json").read_text())
    report = json.loads((out / "report.json").read_text())
    markdown = (out / "report.md").read_text()
    png = (out / "report.png").read_bytes()
    # Labelled as what it is.
    assert results["title"].startswith("CPU data-parallel benchmark") and "not GPUs" in results["title"]
    assert "CPU ranks" in results["note"] and "neither light-horovod nor Horovod takes part" in results["note"]
    # 1 rank on node-1, then 2 nodes, 3 nodes: every rank ran where planned and trained.
    expected = list(range(1, n + 1))
    assert [x["gpus"] for x in results["results"]] == expected
    for x in results["results"]:
        assert sorted(set(x["ranks_hosts"])) == nodes[: x["gpus"]]
        assert x["unit"] == "samples/sec" and x["throughput"] > 0 and x["loss_last"] < x["loss_first"]
    series = report["series"]["lightcc"]
    assert [p["gpus"] for p in series] == expected
    assert series[0]["efficiency"] == 1.0
    for p in series:
        assert p["efficiency"] == pytest.approx(p["throughput"] / (p["gpus"] * series[0]["throughput"]))
    assert report["unit"] == "samples/sec"
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == n and "scaling efficiency" in markdown
    assert png.startswith(PNG_SIGNATURE) and len(png) > 10_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1100, 450)
    logs = sorted((out / "runs").glob("*.log"))
    assert len(logs) == n and all("mpirun" in log.read_text() for log in logs)
    # The launcher exported the runtime profile and kept MPI on the nodes' network, off lo/docker0
    # (Docker gives the sandbox network whichever pool is free: 172.x or 192.168.x).
    first = logs[-1].read_text()
    assert "-x LIGHT_TOPK_RATIO=0.01" in first
    include = re.search(r"--mca btl_tcp_if_include (\S+)", first)
    assert include, first
    network = ipaddress.ip_network(include.group(1))
    hosts = yaml.safe_load(clean.read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    assert all(ipaddress.ip_address(hosts[node]["ansible_host"]) in network for node in nodes)
    assert not network.overlaps(ipaddress.ip_network("127.0.0.0/8"))
    assert not network.overlaps(ipaddress.ip_network("172.17.0.0/16"))  # docker0
    assert f"--mca oob_tcp_if_include {network}" in first
    assert f"written to {out}" in r.stdout

