"""``gpucluster bench converge``: what a converge costs against its own package work.

Three arms per node count N, on sandbox nodes that are new for every measurement (the infra
container with its apt cache and registry is kept, so package downloads are warm for every arm
alike):

- **fresh**: ``ansible-playbook site.yml`` on new nodes (wall seconds, controller CPU);
- **noop**: ``site.yml`` again on the converged nodes (nothing should change);
- **raw**: the same package work done by hand on new nodes, over SSH, all nodes in parallel: the
  apt sources, keys and pins site.yml configured (copied from the node it converged), one
  ``apt-get update``, one ``apt-get install`` of the packages site.yml installed (the manual
  packages it added, read back from that node: ``apt-mark showmanual``), the registry made
  trusted, then the training image logged in, pulled and run.

The arms are interleaved (fresh, noop, raw, fresh, noop, raw ...) so that a machine that slows
down during the run slows every arm. Each figure is the median over the rounds. Controller CPU
is the user + system time of the ``ansible-playbook`` process tree (``RUSAGE_CHILDREN``), per
host, for the no-op run.

Goals (issue 11): fresh <= 1.3 x raw, noop <= 0.2 x fresh, noop(max N) / noop(1) <= 2,
controller CPU per host per no-op run <= 3 s.
"""

from __future__ import annotations

import json
import resource
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

ARMS = ("fresh", "noop", "raw")

#: (name, numerator, denominator or None for an absolute figure, limit), issue 11's goals.
GOALS = (
    ("fresh converge / raw package work", "fresh_s", "raw_s", 1.3),
    ("no-op rerun / fresh converge", "noop_s", "fresh_s", 0.2),
    ("controller CPU per host per no-op run (s)", "controller_cpu_s", None, 3.0),
)
NOOP_SCALING_LIMIT = 2.0


@dataclass(frozen=True)
class Sample:
    """One measured run: ``arm`` on ``nodes`` nodes in round ``round``."""

    nodes: int
    round: int
    arm: str
    wall_s: float
    controller_cpu_s: float = 0.0
    rc: int = 0


def parse_nodes(text: str) -> list[int]:
    """``"1,4,8"`` -> ``[1, 4, 8]`` (sorted, unique); ValueError naming the bad item."""
    out = set()
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"--nodes: {item!r} is not a node count (positive integers, e.g. 1,4,8)")
        out.add(int(item))
    if not out:
        raise ValueError("--nodes: give at least one node count, e.g. 1,4,8")
    return sorted(out)


def summarise(samples: Iterable[Sample]) -> dict[str, Any]:
    """The ``converge.json`` body from the samples.

    ``{"nodes": {"N": {"fresh_s", "raw_s", "noop_s", "controller_cpu_s", "fresh_over_raw",
    "noop_over_fresh", "rounds"}}}``: medians over the rounds; ``controller_cpu_s`` is the no-op
    run's controller CPU divided by N (per host). A failed run (rc != 0) is kept in ``failed`` and
    left out of the medians, since a failing converge is not a converge.
    """
    by: dict[int, dict[str, list[Sample]]] = {}
    failed = []
    for s in samples:
        if s.arm not in ARMS:
            raise ValueError(f"unknown arm {s.arm!r}: one of {', '.join(ARMS)}")
        if s.rc != 0:
            failed.append(asdict(s))
            continue
        by.setdefault(s.nodes, {a: [] for a in ARMS})[s.arm].append(s)
    nodes: dict[str, Any] = {}
    for n in sorted(by):
        arms = by[n]
        row: dict[str, Any] = {"rounds": max(len(v) for v in arms.values())}
        for arm in ARMS:
            walls = [s.wall_s for s in arms[arm]]
            row[f"{arm}_s"] = round(statistics.median(walls), 2) if walls else None
        cpu = [s.controller_cpu_s / n for s in arms["noop"]]
        row["controller_cpu_s"] = round(statistics.median(cpu), 2) if cpu else None
        row["fresh_controller_cpu_s"] = (
            round(statistics.median([s.controller_cpu_s / n for s in arms["fresh"]]), 2) if arms["fresh"] else None
        )
        row["fresh_over_raw"] = _ratio(row["fresh_s"], row["raw_s"])
        row["noop_over_fresh"] = _ratio(row["noop_s"], row["fresh_s"])
        nodes[str(n)] = row
    result: dict[str, Any] = {"nodes": nodes}
    if failed:
        result["failed"] = failed
    return result


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 3)


def goals(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each goal per node count: ``{"goal", "nodes", "value", "limit", "met"}`` (met None when
    the figure is missing), plus the no-op scaling goal across node counts."""
    rows = []
    nodes = summary.get("nodes", {})
    for name, num, den, limit in GOALS:
        for n, row in sorted(nodes.items(), key=lambda kv: int(kv[0])):
            value = row.get(num) if den is None else _ratio(row.get(num), row.get(den))
            rows.append({"goal": name, "nodes": int(n), "value": value, "limit": limit,
                         "met": None if value is None else value <= limit})
    counts = sorted(int(n) for n in nodes)
    if len(counts) >= 2:
        value = _ratio(nodes[str(counts[-1])].get("noop_s"), nodes[str(counts[0])].get("noop_s"))
        rows.append({"goal": f"no-op({counts[-1]}) / no-op({counts[0]})", "nodes": counts[-1], "value": value,
                     "limit": NOOP_SCALING_LIMIT, "met": None if value is None else value <= NOOP_SCALING_LIMIT})
    return rows


def render_markdown(summary: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The Markdown report: one row per node count, then the goals."""
    lines = [
        f"# Converge benchmark ({meta.get('date', '?')}, commit {meta.get('commit', '?')})",
        "",
        f"Machine: {meta.get('machine', '?')}. Medians over {meta.get('rounds', '?')} round(s); "
        "arms interleaved; new nodes for every fresh and raw run, warm apt cache.",
        "",
        "| nodes | fresh (s) | raw (s) | no-op (s) | fresh / raw | no-op / fresh | controller CPU / host, no-op (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, row in sorted(summary.get("nodes", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(
            f"| {n} | {_fmt(row.get('fresh_s'))} | {_fmt(row.get('raw_s'))} | {_fmt(row.get('noop_s'))} | "
            f"{_fmt(row.get('fresh_over_raw'))} | {_fmt(row.get('noop_over_fresh'))} | "
            f"{_fmt(row.get('controller_cpu_s'))} |"
        )
    lines += ["", "| goal | nodes | value | limit | met |", "|---|---|---|---|---|"]
    for g in goals(summary):
        met = {True: "yes", False: "**no**", None: "n/a"}[g["met"]]
        lines.append(f"| {g['goal']} | {g['nodes']} | {_fmt(g['value'])} | {g['limit']} | {met} |")
    for f in summary.get("failed", []):
        lines.append(f"\nFailed run (left out of the medians): {f['arm']} on {f['nodes']} node(s), "
                     f"round {f['round']}, rc {f['rc']}")
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def plot(summary: Mapping[str, Any], path: Path) -> None:
    """Wall seconds of each arm against the node count (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(summary.get("nodes", {}).items(), key=lambda kv: int(kv[0]))
    xs = [int(n) for n, _ in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, style in (("raw", "s--"), ("fresh", "o-"), ("noop", "^-")):
        ys = [row.get(f"{arm}_s") for _, row in rows]
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=arm)
    ax.set_xlabel("nodes")
    ax.set_ylabel("wall time (s)")
    ax.set_xticks(xs)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("site.yml converge vs its raw package work")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_results(out_dir: Path, samples: Sequence[Sample], meta: Mapping[str, Any]) -> dict[str, Any]:
    """``converge.json`` (summary + goals + samples + meta), ``converge.md`` and ``converge.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarise(samples)
    body = {**summary, "goals": goals(summary), "meta": dict(meta), "samples": [asdict(s) for s in samples]}
    (out_dir / "converge.json").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    (out_dir / "converge.md").write_text(render_markdown(summary, meta), encoding="utf-8")
    plot(summary, out_dir / "converge.png")
    return body


# --------------------------------------------------------------------------------------------
# Running the arms on the sandbox
# --------------------------------------------------------------------------------------------


def timed(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
          log: Callable[[str], None] = print, keep: Path | None = None) -> tuple[float, float, int, str]:
    """Run ``argv``; returns (wall s, CPU s of it and its children, rc, output tail). ``keep``:
    a file for the whole output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(list(argv), cwd=cwd, env=dict(env) if env else None, capture_output=True, text=True,
                       check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        log(f"{' '.join(argv[:3])} ... exited {r.returncode}: {(r.stdout + r.stderr)[-1500:]}")
    return wall, cpu, r.returncode, (r.stdout + r.stderr)[-4000:]


def inventory_hosts(inventory: Path) -> dict[str, dict[str, Any]]:
    """``{name: hostvars}`` of the sandbox inventory's gpu_nodes, with the group vars merged in."""
    inv = yaml.safe_load(inventory.read_text())
    group = inv["all"]["children"]["gpu_nodes"]
    hosts = {}
    for name, hv in (group.get("hosts") or {}).items():
        hosts[name] = {**(group.get("vars") or {}), **(hv or {})}
    return hosts


#: What apt reads its sources, keys and pins from: copied from the converged node to the raw
#: arm's new nodes (site.yml's driver, toolkit and docker stages add sources there).
APT_SOURCE_PATHS = ("etc/apt/sources.list", "etc/apt/sources.list.d", "etc/apt/keyrings", "etc/apt/trusted.gpg.d",
                    "etc/apt/preferences.d", "usr/share/keyrings")


def apt_sources_script(root: str = "/") -> str:
    """Shell that writes a gzipped tar of :data:`APT_SOURCE_PATHS` under ``root`` (those present)
    to stdout."""
    paths = " ".join(shlex.quote(p) for p in APT_SOURCE_PATHS)
    return f"cd {shlex.quote(root)} && tar -czf - $(for p in {paths}; do [ -e \"$p\" ] && echo \"$p\"; done)"


def raw_script(packages: Sequence[str], registry: str, user: str, password: str, image: str,
               sources_on_stdin: bool = False) -> str:
    """The hand-written equivalent of site.yml's package and image work on one node. With
    ``sources_on_stdin`` it first unpacks the tar of apt sources (:func:`apt_sources_script`)
    it reads on stdin."""
    pkgs = " ".join(shlex.quote(p) for p in packages)
    reg = shlex.quote(json.dumps({"insecure-registries": [registry]}))
    return "\n".join([
        "set -e",
        "export DEBIAN_FRONTEND=noninteractive",
        "tar -xzf - -C /" if sources_on_stdin else "true",
        "apt-get update -qq",
        f"apt-get install -y -qq --no-install-recommends {pkgs} >/dev/null" if pkgs else "true",
        "mkdir -p /etc/docker",
        f"printf '%s' {reg} > /etc/docker/daemon.json",
        "systemctl restart docker",
        f"echo {shlex.quote(password)} | docker login -u {shlex.quote(user)} --password-stdin {shlex.quote(registry)}"
        " >/dev/null",
        f"docker pull -q {shlex.quote(image)} >/dev/null",
        f"docker run -d --name gpucluster-raw --net=host {shlex.quote(image)} sleep infinity >/dev/null",
    ])


def ssh_argv(inventory_dir: Path, host: str, script: str) -> list[str]:
    """ssh as Ansible reaches the sandbox nodes (the inventory's key and known_hosts)."""
    return ["ssh", "-i", str(inventory_dir / ".ssh" / "id_ed25519"),
            "-o", f"UserKnownHostsFile={inventory_dir / '.ssh' / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", f"root@{host}", "bash", "-c", shlex.quote(script)]


class ConvergeBench:
    """Brings up new nodes per arm with :class:`gpucluster.sandbox.Sandbox` (own name, so the
    test cluster is untouched) and measures the arms."""

    def __init__(self, root: Path, work: Path, *, name: str = "gpucbench", log: Callable[[str], None] = print):
        self.root = root
        self.work = work
        self.name = name
        self.log = log
        self.packages: list[str] = []
        self.apt_sources: bytes = b""

    def _sandbox(self, nodes: int):
        from gpucluster.sandbox import Sandbox, SandboxConfig

        return Sandbox(SandboxConfig(name=self.name, nodes=nodes, inventory_dir=self.work / "inventory"),
                       log=lambda m: None)

    def fresh_nodes(self, nodes: int) -> Path:
        """Remove every node of the bench (container and its Docker volume), then bring up
        ``nodes`` new ones; the infra container is kept. Returns the inventory path."""
        sb = self._sandbox(nodes)
        for c in sb._labelled_containers(role="node"):
            sb.remove_node(c)
        sb.up()
        return self.work / "inventory" / "hosts.yml"

    @staticmethod
    def _on_first_node(inventory: Path, script: str) -> bytes:
        """stdout of ``script`` run on the inventory's first node."""
        hosts = inventory_hosts(inventory)
        first = sorted(hosts)[0]
        return subprocess.run(ssh_argv(inventory.parent, hosts[first]["ansible_host"], script),
                              capture_output=True, check=True).stdout

    def manual_packages(self, inventory: Path) -> list[str]:
        return sorted(set(self._on_first_node(inventory, "apt-mark showmanual").decode().split()))

    def read_apt_sources(self, inventory: Path) -> bytes:
        """The apt sources, keys and pins of the first node, as a gzipped tar."""
        return self._on_first_node(inventory, apt_sources_script())

    def run_site(self, inventory: Path, env: Mapping[str, str], label: str = "site") -> tuple[float, float, int]:
        """One site.yml run; its whole output (profile_tasks' slowest tasks at the end) is kept
        as ``<work>/logs/<label>.log`` for reading where the time went."""
        wall, cpu, rc, _ = timed(["ansible-playbook", "-i", str(inventory), "site.yml"], cwd=self.root, env=env,
                                 log=self.log, keep=self.work / "logs" / f"{label}.log")
        return wall, cpu, rc

    def run_raw(self, inventory: Path) -> tuple[float, float, int]:
        from gpucluster.sandbox import REGISTRY_PORT, REGISTRY_USER

        hosts = inventory_hosts(inventory)
        group_vars = yaml.safe_load((inventory.parent / "group_vars" / "all" / "sandbox.yml").read_text())
        registry = f"{self.name}-infra:{REGISTRY_PORT}"
        password = (inventory.parent / ".registry-password").read_text().strip()
        script = raw_script(self.packages, registry, REGISTRY_USER, password, str(group_vars["training_image_ref"]),
                            sources_on_stdin=bool(self.apt_sources))
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            results = list(pool.map(
                lambda hv: subprocess.run(ssh_argv(inventory.parent, hv["ansible_host"], script),
                                          input=self.apt_sources, capture_output=True, check=False),
                hosts.values()))
        wall = time.monotonic() - t0
        rc = max(r.returncode for r in results)
        if rc:
            self.log("raw arm failed: " + " | ".join((r.stdout + r.stderr).decode(errors="replace")[-800:]
                                                     for r in results if r.returncode))
        return wall, 0.0, rc

    def run(self, node_counts: Sequence[int], rounds: int, env: Mapping[str, str]) -> list[Sample]:
        """Every arm, interleaved: per round and node count fresh, noop, then raw on new nodes.
        The raw arm's package list comes from the first converged node (``apt-mark showmanual``
        after site.yml minus before it)."""
        samples: list[Sample] = []
        for r in range(1, rounds + 1):
            for n in node_counts:
                inv = self.fresh_nodes(n)
                before = set(self.manual_packages(inv))
                self.log(f"round {r}, {n} node(s): fresh converge")
                wall, cpu, rc = self.run_site(inv, env, f"{n}-{r}-fresh")
                samples.append(Sample(n, r, "fresh", round(wall, 2), round(cpu, 2), rc))
                if rc == 0 and not self.packages:
                    self.packages = sorted(set(self.manual_packages(inv)) - before)
                    self.apt_sources = self.read_apt_sources(inv)
                    self.log(f"package work: {len(self.packages)} manual packages, apt sources "
                             f"{len(self.apt_sources)} bytes (tar.gz)")
                self.log(f"round {r}, {n} node(s): no-op rerun")
                wall, cpu, rc = self.run_site(inv, env, f"{n}-{r}-noop")
                samples.append(Sample(n, r, "noop", round(wall, 2), round(cpu, 2), rc))
                inv = self.fresh_nodes(n)
                self.log(f"round {r}, {n} node(s): raw package work")
                wall, cpu, rc = self.run_raw(inv)
                samples.append(Sample(n, r, "raw", round(wall, 2), round(cpu, 2), rc))
        return samples

    def down(self) -> None:
        """Remove everything of the bench (nodes, infra, network, its inventory), images kept."""
        self._sandbox(1).down()


def add_bench(sub) -> None:
    """``gpucluster bench converge`` (registered in :data:`gpucluster.cli.COMMANDS`)."""
    p = sub.add_parser("bench", help="benchmarks of gpucluster itself")
    p.add_argument("what", choices=["converge"], help="converge: site.yml against its raw package work")
    p.add_argument("--nodes", default="1,4,8", help="node counts, comma-separated (default 1,4,8)")
    p.add_argument("--rounds", type=int, default=1, help="rounds per node count (default 1)")
    p.add_argument("--out", type=Path, required=True, help="directory for converge.json/.md/.png")
    p.add_argument("--keep", action="store_true", help="keep the bench's nodes and infra afterwards")
    p.set_defaults(func=run_bench)


def run_bench(args) -> int:
    import datetime
    import os
    import platform

    counts = parse_nodes(args.nodes)
    if args.rounds < 1:
        raise ValueError(f"--rounds {args.rounds}: give at least 1")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"--out {args.out}: cannot create it ({exc.strerror or exc}); choose a writable directory"
        ) from exc
    root = Path(__file__).resolve().parents[2]
    if not (root / "site.yml").is_file():
        raise ValueError(f"bench converge runs site.yml from a checkout; {root} has none (run it from the repository)")
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    meta = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "rounds": args.rounds,
            "node_counts": counts}
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1"}
    bench = ConvergeBench(root, args.out / "work", log=lambda m: print(m, flush=True))
    try:
        samples = bench.run(counts, args.rounds, env)
    finally:
        if not args.keep:
            bench.down()
    body = write_results(args.out, samples, meta)
    print(render_markdown(body, meta))
    return 0 if not body.get("failed") else 1
