"""The main job end to end on the local multi-node test cluster.

README command 1 (``scripts/bootstrap.sh``) brings up 3 nodes, converges site.yml and
validates; then the properties of a mature converge are checked on that real cluster:
a rerun and ``--check --diff`` change nothing, user keys in daemon.json survive, bad
inputs fail before anything changes, an unreachable node does not stop the others' earlier
stages and stops the training stage, named.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.docker_env import docker_client
from tests.integration.conftest import INVENTORY, changes, node_exec, playbook, recap, run, sandbox_nodes
from tests.integration.test_packaging import run_site_from_collection

pytestmark = pytest.mark.integration

def test_bootstrap_converges_three_nodes_and_validates(cluster):
    out = cluster["bootstrap"].stdout
    hosts = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    assert sorted(hosts) == ["node-1", "node-2", "node-3"]
    final = recap(out.split("PLAY [Validate")[-1])
    assert sorted(final) == ["node-1", "node-2", "node-3"]
    assert all(v["failed"] == 0 and v["unreachable"] == 0 for v in final.values()), final
    # The validation table: every size from 1 KiB to 64 MiB, reduced correctly on 3 ranks.
    assert "allreduce (sum, float32) on 3 ranks" in out
    sizes = re.findall(r"^\s*\"?\s*(\d+ [KM]iB)\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+OK", out, re.M)
    assert sizes[0] == "1 KiB" and sizes[-1] == "64 MiB" and len(sizes) == 17, sizes
    assert "WRONG" not in out
    assert len(cluster["reports"]) == 1
    report = json.loads(cluster["reports"][0].read_text())
    assert report["ranks"] == 3 and report["all_correct"]
    assert sorted(set(report["hosts"])) == ["node-1", "node-2", "node-3"]
    assert report["nodes"] == ["node-1", "node-2", "node-3"]
    row = report["rows"][-1]
    assert row["bytes"] == 64 * 1024 * 1024
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 4 / 3)


def test_second_run_changes_nothing(cluster):
    r = playbook("site.yml")
    rc = recap(r.stdout)
    assert sorted(rc) == ["node-1", "node-2", "node-3"]
    assert all(v["changed"] == 0 for v in rc.values()), changes(r.stdout)


def _apt_transactions(history: str) -> list[set[str]]:
    """The packages each transaction of apt's history log (``/var/log/apt/history.log``: stanzas
    of ``Key: value`` lines, a blank line between them) installed or upgraded, by name."""
    out = []
    for stanza in re.split(r"\n\s*\n", history):
        names: set[str] = set()
        for line in stanza.splitlines():
            key, _, value = line.partition(": ")
            if key in ("Install", "Upgrade", "Reinstall", "Downgrade"):
                # "name:arch (version[, automatic])" entries, separated by "), ".
                names.update(m.group(1) for m in re.finditer(r"(?:^|\), )([^\s:(),]+)(?::\S+)? \(", value))
        if names:
            out.append(names)
    return out


def test_apt_history_parser_reads_stanzas():
    history = ("\nStart-Date: 2026-12-07  23:36:35\nCommandline: apt-get install a\n"
               "Install: libx:amd64 (1.0-1, automatic), rdma-core:amd64 (44.0-2), docker.io:amd64 (20.10)\n"
               "End-Date: 2026-12-07  23:37:02\n\nStart-Date: x\nUpgrade: nvidia-smi:amd64 (1, 2)\nEnd-Date: y\n"
               "\nStart-Date: z\nRemove: foo:amd64 (1)\nEnd-Date: z\n")
    assert _apt_transactions(history) == [{"libx", "rdma-core", "docker.io"}, {"nvidia-smi"}]


def test_the_host_stack_installs_in_one_apt_transaction(cluster):
    """On a whole site.yml run the driver's, the inbox RDMA stack's and the Docker engine's packages
    come in one apt transaction per node (host_stack.yml, nvidia_driver_install_with), not three."""
    for node in sandbox_nodes():
        history = node_exec(node, "cat", "/var/log/apt/history.log")
        staged = [t for t in _apt_transactions(history) if t & {"nvidia-smi", "rdma-core", "docker.io"}]
        assert len(staged) == 1 and {"nvidia-smi", "rdma-core", "docker.io"} <= staged[0], (node, staged)


def test_plan_shows_every_node(cluster):
    """``gpucluster plan`` prints every node's plan (preflight's gpucluster_plan plus the runtime and
    hugepage pool the stages settle) from the real nodes; the reruns after it change nothing."""
    r = run("gpucluster", "plan", "-i", str(INVENTORY), "--json")
    plans = json.loads(r.stdout)
    assert sorted(plans) == ["node-1", "node-2", "node-3"], r.stdout
    for host, p in plans.items():
        # No GPU on the PCI bus; the Debian driver the host stack installed cannot load in a container.
        assert p["gpus"] == 0 and p["gpus_ready"] == 0 and p["slots"] == 1, (host, p)
        assert p["driver"] == "installed-not-loaded", (host, p)
        assert "eth0" in p["nics"] and "lo" not in p["nics"], (host, p)
        assert p["runtime"] == "lightcc" and p["runtime_env"]["LIGHT_INTRA_SIZE"] == "1", (host, p)
        # The declared training group (preflight's gpucluster_membership), the world the ssh stage wrote.
        assert p["membership"] == {"group": "gpu_nodes", "members": ["node-1", "node-2", "node-3"], "excluded": [],
                                   "world": ["node-1", "node-2", "node-3"]}, (host, p)
        # The node contract: what each stage published (ansible_local.gpucluster.<stage>).
        c = p["contract"]
        # The sandbox disables the container toolkit (NVIDIA's repository is unreachable here), so
        # that stage publishes nothing; every stage that ran did.
        assert set(c) == {"nccl", "runtime", "net_plugin", "ssh", "training"}, (host, c)
        assert "eth0" in c["nccl"]["data_interfaces"], (host, c)
        assert c["nccl"]["container_env"]["NCCL_SOCKET_IFNAME"].startswith("="), (host, c)
        assert c["runtime"]["runtime"] == "lightcc" and c["runtime"]["env"] == p["runtime_env"], (host, c)
        assert c["ssh"]["port"] == 2222 and c["ssh"]["members"] == p["membership"]["world"], (host, c)
        assert c["ssh"]["slots"] == 1 and c["training"]["container"] == "gpucluster-train", (host, c)
        assert c["net_plugin"]["loaded"] is False and c["net_plugin"]["env"] == {}, (host, c)


def test_launch_from_the_inventory_takes_the_jobs_defaults_from_the_nodes(cluster, tmp_path: Path):
    """``gpucluster launch --inventory``: a spec with only a name, an image and a command gets the
    nodes, the ranks per node, the NCCL variables, the data NIC, the sshd port and the runtime
    profile the nodes were tuned with (each node's /etc/gpucluster/runtime.env), in both launchers:
    mpirun sets them by value (it forwarded them by name before). The sandbox's profile is the
    vendor's; the unit tests (test_launch_contract.py) cover values tuned away from it."""
    spec = tmp_path / "job.yml"
    spec.write_text(yaml.safe_dump({"name": "sandbox-job", "image": "registry.example:5000/train:1",
                                    "command": ["python3", "train.py"]}))
    tuned = {}
    for node in sandbox_nodes():
        env = dict(line.split("=", 1) for line in node_exec(node, "cat", "/etc/gpucluster/runtime.env").splitlines()
                   if "=" in line and not line.startswith("#"))
        tuned[node] = {k: v.strip().strip('"') for k, v in env.items() if k.startswith(("LIGHT_", "HOROVOD_"))}
    assert len({json.dumps(t, sort_keys=True) for t in tuned.values()}) == 1 and tuned["node-1"], tuned
    tuned = tuned["node-1"]
    line = run("gpucluster", "launch", str(spec), "--mpirun", "-i", str(INVENTORY)).stdout
    assert " -np 3 " in line and "-H node-1:1,node-2:1,node-3:1" in line, line
    assert "NCCL_SOCKET_IFNAME==eth0" in line and "-p 2222" in line, line
    assert all(f"{k}={v}" in line for k, v in tuned.items()), (tuned, line)
    docs = list(yaml.safe_load_all(run("gpucluster", "launch", str(spec), "--mpijob", "-i", str(INVENTORY)).stdout))
    job = docs[-1]
    for name, replica in job["spec"]["mpiReplicaSpecs"].items():
        env = {e["name"]: e.get("value") for e in replica["template"]["spec"]["containers"][0].get("env", [])}
        assert {k: env.get(k) for k in tuned} == tuned, (name, env)


def test_site_from_the_installed_collection_changes_nothing(cluster):
    """The collection built from this checkout and installed into a temp collections path, run by
    a user's playbook outside the checkout (``import_playbook: gpucluster.cluster.site``, no
    repository ansible.cfg), converges the same sandbox to the same state: nothing changes."""
    r = run_site_from_collection(INVENTORY)
    rc = recap(r.stdout)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert sorted(rc) == ["node-1", "node-2", "node-3"], r.stdout[-3000:]
    assert all(v["changed"] == 0 and v["failed"] == 0 for v in rc.values()), changes(r.stdout)
    assert "gpucluster.cluster.preflight : " in r.stdout  # the roles ran from the collection


def test_check_diff_on_converged_cluster_changes_nothing(cluster):
    # apt's lists an hour and more old, as on any node converged a while ago: refreshing that
    # cache is no change (the apt module itself reports one in check mode).
    for node in sandbox_nodes():
        node_exec(node, "touch", "-d", "-2 hours", "/var/lib/apt/lists")
    r = playbook("site.yml", "--check", "--diff")
    rc = recap(r.stdout)
    assert sorted(rc) == ["node-1", "node-2", "node-3"]
    assert all(v["changed"] == 0 and v["failed"] == 0 for v in rc.values()), changes(r.stdout)


def _exec(container: str, *cmd: str) -> str:
    client = docker_client()
    rc, out = client.containers.get(container).exec_run(list(cmd))
    assert rc == 0, out.decode()
    return out.decode()


def test_user_keys_in_daemon_json_survive(cluster):
    path = "/etc/docker/daemon.json"
    cfg = json.loads(_exec("gpucluster-node-2", "cat", path))
    # A user adds a key of their own and changes one the role manages.
    cfg["default-address-pools"] = [{"base": "10.203.0.0/16", "size": 24}]
    cfg["log-opts"]["max-size"] = "1m"
    _exec("gpucluster-node-2", "sh", "-c", f"cat > {path} <<'EOF'\n{json.dumps(cfg, indent=2)}\nEOF")
    backups = "ls /etc/docker/ | grep -c '^daemon.json\\..*~$' || true"
    before = int(_exec("gpucluster-node-2", "sh", "-c", backups))
    playbook("site.yml", "--tags", "docker", "--limit", "node-2")
    after = json.loads(_exec("gpucluster-node-2", "cat", path))
    assert after["default-address-pools"] == [{"base": "10.203.0.0/16", "size": 24}]
    assert after["log-opts"]["max-size"] == "100m"
    assert "gpucluster-infra:5000" in after["insecure-registries"]
    # The user's file before the change was kept as a backup beside it.
    assert int(_exec("gpucluster-node-2", "sh", "-c", backups)) == before + 1
    # ...and dockerd was restarted onto the merged file and still answers.
    assert "json-file" in _exec("gpucluster-node-2", "docker", "info", "--format", "{{.LoggingDriver}}")


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        ("training_image_ref=Not::A/Ref", "training_image_ref"),
        ("training_image_shm_size=lots", "training_image_shm_size: 'lots' is not a size"),
        ("container_ssh_port=70000", "container_ssh_port: 70000 is out of range"),
        # The stages' own read-only checks, run by preflight too.
        ("runtime_profile_light_topk_ratio=2", "runtime_profile_light_topk_ratio: LIGHT_TOPK_RATIO=2 is out of range"),
        ("hugepages_count=100000", "100000 x 1 GiB = 97.7 TiB would leave 0 B"),
        # The plan's own value (module_utils/plan.py).
        ("gpucluster_slots_per_node=0", "gpucluster_slots_per_node: '0' is not a whole number of ranks per node"),
    ],
)
def test_bad_input_fails_before_anything_changes(cluster, extra, expect):
    r = playbook("site.yml", "-e", extra, check=False)
    assert r.returncode != 0
    assert expect in r.stdout, r.stdout[-4000:]
    for host in ("node-1", "node-2", "node-3"):
        assert f"{host}: {expect.split(':')[0]}" in r.stdout
    # Only the preflight play ran (the host stack, first to change anything, did not), and it
    # changed nothing.
    assert "PLAY [RDMA stack]" not in r.stdout
    assert all(v["changed"] == 0 for v in recap(r.stdout).values()), changes(r.stdout)


def test_unreachable_node_is_named_and_the_rest_converge(cluster, tmp_path: Path):
    client = docker_client()
    net = client.networks.get("gpucluster")
    subnet = net.attrs["IPAM"]["Config"][0]["Subnet"]
    ghost_ip = subnet.rsplit(".", 2)[0] + ".0.250" if subnet.endswith(".0.0/16") else subnet.rsplit(".", 1)[0] + ".250"
    extra = tmp_path / "ghost.yml"
    extra.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "node-ghost": {"ansible_host": ghost_ip, "ansible_ssh_common_args": "-o ConnectTimeout=3"}}}}}}))
    r = run("ansible-playbook", "-i", str(INVENTORY), "-i", str(extra), "site.yml", check=False)
    assert r.returncode != 0
    rc = recap(r.stdout)
    assert rc["node-ghost"]["unreachable"] == 1
    assert "fatal: [node-ghost]: UNREACHABLE!" in r.stdout
    # The stages before training converge the others; the training stage then refuses on each of
    # them, naming the lost member, instead of shrinking the MPI world (membership is declared).
    assert "PLAY [Training containers" in r.stdout
    training = r.stdout.split("PLAY [Training containers")[-1]
    for host in ("node-1", "node-2", "node-3"):
        assert rc[host]["failed"] == 1 and rc[host]["unreachable"] == 0, rc
        assert re.search(rf"fatal: \[{host}\]: FAILED! => .*\"{host}: member\(s\) node-ghost of the training group "
                         r"gpu_nodes are not in this run \(node-ghost: unreachable", training), training[-4000:]


def test_hosts_init_installs_the_key_with_one_password_and_writes_an_inventory(cluster, tmp_path: Path):
    """Bootstrap mode (b) against real sshd: a user whose key is not trusted yet."""
    from gpucluster import hosts as hosts_mod

    client = docker_client()
    ips = []
    for name in ("gpucluster-node-2", "gpucluster-node-3"):
        c = client.containers.get(name)
        _exec(name, "sh", "-c", "id ops >/dev/null 2>&1 || useradd -m -s /bin/bash ops; "
                                "echo 'ops:s3cret-pw' | chpasswd; rm -f /home/ops/.ssh/authorized_keys")
        ips.append(c.attrs["NetworkSettings"]["Networks"]["gpucluster"]["IPAddress"])
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    asked = []

    def ask(prompt):
        asked.append(prompt)
        return "s3cret-pw"

    inv, todo = hosts_mod.init(ips, "ops", key, tmp_path / "inv", ask_password=ask,
                               image="registry.test:5000/team/train:2")
    assert len(asked) == 1 and all(ip in asked[0] for ip in ips)
    doc = yaml.safe_load(inv.read_text())
    nodes = doc["all"]["children"]["gpu_nodes"]["hosts"]
    assert sorted(nodes) == ["node-2", "node-3"]
    assert nodes["node-2"]["gpucluster_gathered"]["os"].startswith("Debian GNU/Linux 12")
    assert nodes["node-2"]["gpucluster_gathered"]["gpus"] == 0
    # The node's Python, found as Ansible's discovery finds it (Debian 12: python3.11 first).
    assert nodes["node-2"]["ansible_python_interpreter"] == "/usr/bin/python3.11"
    # A login user other than root becomes root for the stages; the stages' settings come
    # from the sample, with the image given.
    assert nodes["node-2"]["ansible_become"] is True
    image_vars = yaml.safe_load((tmp_path / "inv/group_vars/all/training_image.yml").read_text())
    assert image_vars["training_image_ref"] == "registry.test:5000/team/train:2"
    assert len(todo) == 1 and "copied from" in todo[0]
    # The key is now trusted: Ansible reaches both with host keys checked, no password
    # (ops has no sudo on these nodes, so without become here).
    r = run("ansible", "-i", str(inv), "gpu_nodes", "-e", "ansible_become=false",
            "-m", "ansible.builtin.command", "-a", "id -un")
    assert r.stdout.count("ops") == 2
    # A second run asks nothing and keeps what a user added to the inventory and group_vars.
    nodes["node-2"]["my_var"] = 1
    inv.write_text(yaml.safe_dump(doc))
    assert hosts_mod.init(ips, "ops", key, tmp_path / "inv", ask_password=ask)[1] == []
    assert len(asked) == 1
    assert yaml.safe_load(inv.read_text())["all"]["children"]["gpu_nodes"]["hosts"]["node-2"]["my_var"] == 1
    assert list((tmp_path / "inv").glob("hosts.yml.*.bak"))
