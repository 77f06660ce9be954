"""``gpucluster plan``: every node's plan (playbooks/plan.yml), changing nothing on the nodes.

Runs the same gathering and checks as site.yml's preflight, so a bad setting is refused here as
it would be there (Ansible's output names host, variable and fix), then prints one table per
node - GPUs, ranks per node, NICs, HCAs, the hugepage pool, the runtime and its environment,
the training container (image, flags, mounts, environment) and the node contract (what each
stage published, ``ansible_local.gpucluster``) - or ``--json`` on stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

#: The plan's keys first, in module_utils/plan.py's order, then what the stages settled.
ROWS = ("gpus", "gpus_ready", "driver", "slots", "nics", "hcas", "hugepages", "runtime", "runtime_env", "membership",
        "container")


def _contract_cell(contract) -> str:
    """The node contract (what each stage published, ansible_local.gpucluster) in one cell: per
    stage its plain values and lists; "-" before any stage ran."""
    if not isinstance(contract, dict) or not contract:
        return "-"
    lines = []
    for stage, data in sorted(contract.items()):
        if not isinstance(data, dict):
            lines.append(f"{stage}: {data}")
            continue
        shown = [f"{k}={', '.join(map(str, v)) if isinstance(v, list) else v}"
                 for k, v in sorted(data.items()) if not isinstance(v, dict)]
        lines.append(f"{stage}: {' '.join(shown) or '-'}")
    return "\n".join(lines)


def add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="every node's plan and its stages' values, changing nothing")
    p.add_argument("-i", "--inventory", default=None,
                   help="inventory (default: ansible.cfg's, the local test cluster)")
    p.add_argument("--limit", default=None, help="ansible-playbook --limit")
    p.add_argument("--json", action="store_true", help="print the plans as JSON on stdout")
    p.add_argument("-e", "--extra-vars", action="append", default=[], help="ansible-playbook -e (repeatable)")
    p.set_defaults(func=run_plan)


def root() -> Path:
    here = Path(__file__).resolve().parents[2]
    if not (here / "playbooks" / "plan.yml").is_file():
        raise ValueError(f"gpucluster plan runs playbooks/plan.yml from a checkout; {here} has none")
    return here


def command(out: Path, inventory=None, limit=None, extra_vars=()) -> list[str]:
    cmd = ["ansible-playbook", "playbooks/plan.yml", "-e", json.dumps({"plan_out": str(out)})]
    if inventory:
        # ansible-playbook runs from the checkout: a path is the caller's, relative to its directory.
        inv = str(inventory)
        cmd += ["-i", str(Path(inv).resolve()) if Path(inv).exists() else inv]
    if limit:
        cmd += ["--limit", limit]
    for extra in extra_vars:
        cmd += ["-e", extra]
    return cmd


def collect(inventory=None, limit=None, extra_vars=(), quiet=False) -> dict:
    """``{host: view}`` of every node of gpu_nodes, in inventory order (playbooks/plan.yml). ``quiet``
    sends Ansible's output to stderr (stdout stays for the caller's own output)."""
    with tempfile.TemporaryDirectory(prefix="gpucluster-plan-") as tmp:
        out = Path(tmp) / "plan.json"
        r = subprocess.run(command(out, inventory, limit, extra_vars), cwd=root(), check=False,
                           stdout=sys.stderr if quiet else None)
        if r.returncode != 0:
            raise ValueError(f"the plan was refused (ansible-playbook exit {r.returncode}); its output above "
                             "names each host, variable and fix")
        if not out.is_file():
            raise ValueError("the inventory has no node in gpu_nodes (or --limit matched none): nothing to plan; "
                             "give the inventory with -i (gpucluster sandbox up writes inventory/sandbox/hosts.yml)")
        return json.loads(out.read_text(encoding="utf-8"))


def _cell(value) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return "\n".join(f"{k}={_cell(v) if isinstance(v, list) else v}" for k, v in value.items()) or "-"
    return str(value)


def render(plans: dict, console: Console) -> None:
    for host, plan in plans.items():
        table = Table(title=f"plan of {host}", show_header=False)
        table.add_column("key", style="bold")
        table.add_column("value")
        for key in ROWS:
            if key in plan:
                value = plan[key]
                if key == "hugepages" and isinstance(value, dict):
                    value = {k: v for k, v in value.items() if not isinstance(v, (dict, list))}
                if key == "container" and isinstance(value, dict):
                    # Flags one a line; the environment's variables each on a line of their own.
                    # The layers' sources each on a line of their own too (a layer names several keys).
                    env = value.get("env") or {}
                    layers = value.get("env_layers") or []
                    value = {**{k: v for k, v in value.items() if k not in ("env", "env_layers")},
                             **{f"env {k}": v for k, v in env.items()},
                             **{f"env_layers {i}": v for i, v in enumerate(layers, 1)}}
                table.add_row(key, escape(_cell(value)))
        if "contract" in plan:
            table.add_row("contract", escape(_contract_cell(plan["contract"])))
        console.print(table)


def run_plan(args: argparse.Namespace) -> int:
    plans = collect(args.inventory, args.limit, args.extra_vars, quiet=args.json)
    if args.json:
        print(json.dumps(plans, indent=2, sort_keys=True))
    else:
        render(plans, Console())
    return 0
