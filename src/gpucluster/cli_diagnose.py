"""``gpucluster diagnose FILE... | -``: what pasted tool outputs say, one row per output.

Each input (a file, or ``-`` for stdin) may hold several outputs (an NCCL log, ``nvidia-smi``,
``ip rule``, a docker error, ...). ``plugins/module_utils/diagnose.py`` splits it into blocks,
detects each block's kind from the tool's grammar, and reads it with the reader that owns
that kind. Printed as a table (kind, state, cause, fix) or ``--json``.

Exit status: 0 healthy (``ok``/``warn`` only), 1 a problem found (a ``fail`` row), 2 unreadable
input (nothing recognised, a block that could not be read, or a file that cannot be opened).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console(stderr=True, soft_wrap=True)  # messages as written: a long path is never broken

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "unreadable": "magenta"}


def add_diagnose(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose",
                       help="explain pasted tool outputs (NCCL logs, nvidia-smi, ip rule, docker errors, ...)")
    p.add_argument("inputs", nargs="+", metavar="FILE", help="files with pasted outputs; '-' reads stdin")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=run_diagnose)


def _read(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    return Path(name).read_text(encoding="utf-8", errors="replace")


def run_diagnose(args: argparse.Namespace) -> int:
    from ansible_collections.gpucluster.cluster.plugins.module_utils import diagnose

    inputs = []
    for name in args.inputs:
        try:
            inputs.append(("stdin" if name == "-" else name, _read(name)))
        except OSError as exc:
            console.print(f"[red]error:[/red] {escape(name)}: {escape(exc.strerror or str(exc))}")
            return 2
    result = diagnose.diagnose_inputs(inputs)
    findings = result["findings"]
    if args.json:
        print(json.dumps({"exit_code": result["exit_code"], "findings": [f.as_dict() for f in findings],
                          "unrecognised": result["unrecognised"]}, indent=2, default=str))
        return result["exit_code"]
    if not findings:
        console.print("[magenta]unreadable:[/magenta] no known tool output in the input (nvidia-smi, NCCL log, "
                      "ip rule/route, docker/toolkit error, kubectl, cloud API error, ...)")
        return 2
    table = Table(title="gpucluster diagnose", show_lines=True)
    for col in ("kind", "state", "cause", "fix"):
        table.add_column(col, overflow="fold")
    for f in findings:
        where = f"{f.source}:{f.lines[0]}-{f.lines[1]}" if f.lines else (f.source or "")
        kind = f"{escape(f.kind)}\n[dim]{escape(where)}[/dim]"
        state = f"[{_STYLE[f.state]}]{f.state}[/{_STYLE[f.state]}]\n[dim]{escape(f.cls)}[/dim]"
        table.add_row(kind, state, escape(f.cause), escape(f.fix or ""))
    out = Console(width=max(Console().width, 160))
    out.print(table)
    for u in result["unrecognised"]:
        out.print(f"[dim]not read (no known tool output): {escape(u['source'])}:{u['lines'][0]}-{u['lines'][1]}[/dim]")
    return result["exit_code"]
