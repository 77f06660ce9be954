"""``gpucluster`` command line.

Subcommands register themselves through ``COMMANDS``: each entry adds a sub-parser and
returns the function that runs it, so that features live in their own modules.

Exit status: 0 done; 1 the input is wrong or a check failed (a bad job spec or results file,
an unwritable output path, an unreachable host: one message naming what and the fix, no
traceback); 2 the command line itself is wrong (argparse's usage errors). Bare ``gpucluster``
prints the help and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Callable
from pathlib import Path

import docker.errors
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import gpucluster
from gpucluster.cli_diagnose import add_diagnose
from gpucluster.cli_launch import add_launch, add_report
from gpucluster.cli_plan import add_plan
from gpucluster.converge_bench import add_bench

console = Console(stderr=True)

#: Exit status when the input is wrong or a check failed (usage errors exit 2, from argparse).
EXIT_INPUT = 1


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


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _sandbox, _hosts, add_plan, add_launch, add_report, add_diagnose, add_bench,
]


def version() -> str:
    """The installed distribution's version; ``gpucluster.__version__`` when run from a
    checkout that is not installed (``PYTHONPATH=src``)."""
    try:
        return importlib.metadata.version("gpucluster")
    except importlib.metadata.PackageNotFoundError:
        return gpucluster.__version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucluster", description=gpucluster.__doc__,
                                     epilog="exit status: 0 done, 1 wrong input or a failed check, 2 usage error")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def print_error(exc: BaseException | str) -> None:
    """``error: <message>`` on stderr. The message is text, not Rich markup ("[host, ...]" in it
    prints as written), and is not wrapped at the terminal width (a path stays on one line)."""
    console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except (RuntimeError, ValueError, OSError, docker.errors.DockerException) as exc:
        print_error(exc)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
