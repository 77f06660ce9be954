"""``gpucluster`` command line.

Subcommands register themselves through ``COMMANDS``: each entry adds a sub-parser and
returns the function that runs it, so that features live in their own modules.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import docker.errors
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpucluster.cli_diagnose import add_diagnose
from gpucluster.cli_launch import add_launch, add_report

console = Console(stderr=True)


def _sandbox(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sandbox", help="the local multi-node test cluster (Docker)")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--name", default="gpucluster", help="prefix of every Docker object (default: gpucluster)")
    p.add_argument("--nodes", type=int, default=3, help="number of nodes for `up` (default: 3)")
    p.add_argument("--inventory-dir", type=Path, default=None, help="where `up` writes hosts.yml (inventory/sandbox)")
    p.add_argument("--mirror", default=None, help="Debian archive URL for debootstrap (default: this machine's)")
    p.add_argument("--subnet", default=None, help="subnet of the cluster network, e.g. 172.30.0.0/24")
    p.add_argument("--purge-images", action="store_true", help="`down` also removes the cached images")
    p.add_argument("--json", action="store_true", help="print status as JSON")
    p.set_defaults(func=run_sandbox)


def run_sandbox(args: argparse.Namespace) -> int:
    from gpucluster.sandbox import Sandbox, SandboxConfig, default_inventory_dir

    cfg = SandboxConfig(
        name=args.name,
        nodes=args.nodes,
        inventory_dir=args.inventory_dir or default_inventory_dir(),
        mirror=args.mirror,
        subnet=args.subnet,
    )
    with console.status(f"sandbox {args.action}") as status:

        def log(msg: str) -> None:
            status.update(msg)
            console.log(msg)

        sb = Sandbox(cfg, log=log)
        if args.action == "up":
            result = sb.up()
        elif args.action == "down":
            for line in sb.down(purge_images=args.purge_images):
                console.log(f"removed {line}")
            return 0
        else:
            result = sb.status()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        table = Table(title=f"sandbox {result['name']}  ({result['inventory']})")
        for col in ("name", "hostname", "role", "state", "ip"):
            table.add_column(col)
        for row in result["containers"]:
            table.add_row(*(str(row[c]) for c in ("name", "hostname", "role", "state", "ip")))
        Console().print(table)
    return 0


def _hosts(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hosts", help="SSH trust and an inventory for real hosts")
    p.add_argument("action", choices=["init"])
    p.add_argument("--hosts", required=True, help="comma-separated host addresses")
    p.add_argument("--user", required=True, help="SSH user with sudo on the hosts")
    p.add_argument("--key", type=Path, default=None, help="controller private key (default ~/.ssh/id_ed25519)")
    p.add_argument("--inventory-dir", type=Path, default=Path("inventory/cluster"),
                   help="where hosts.yml, known_hosts and (when missing) group_vars/ go (default inventory/cluster, "
                        "relative to the current directory)")
    p.add_argument("--image", default=None,
                   help="training image reference written as training_image_ref into a new group_vars/")
    p.set_defaults(func=run_hosts)


def run_hosts(args: argparse.Namespace) -> int:
    from gpucluster.hosts import init

    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    path, todo = init(hosts, args.user, args.key, args.inventory_dir, image=args.image)
    console.print(f"inventory written: {escape(str(path))}")
    for line in todo:
        console.print(f"next: {escape(line)}")
    return 0


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_sandbox, _hosts, add_launch, add_report,
                                                                add_diagnose]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucluster", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (RuntimeError, ValueError, docker.errors.DockerException) as exc:
        # The message is text, not Rich markup: "[host, ...]" in it must print as written.
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
