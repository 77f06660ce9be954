"""``gpucluster launch`` and ``gpucluster report``.

``gpucluster launch SPEC.yml --mpirun|--mpijob|--env-file [--output FILE]`` renders a job spec
(:mod:`gpucluster.launch`): the shell-quoted ``mpirun`` line, the MPIJob YAML (validated
against the pinned mpi-operator CRD schema first), or the env file of the job's environment.
With ``--inventory INV`` what the spec leaves out comes from the nodes (``gpucluster plan``:
nodes, ranks per node, runtime, the nccl_env stage's NCCL variables and data NICs, the net plugin,
the tuned runtime profile, the sshd port; see
``launch.spec_from_contract``). Nothing is executed; running on the cluster is the playbooks' job.

``gpucluster report RESULTS.json --out-dir DIR`` writes ``report.json``, ``report.md`` and
``report.png`` (:mod:`gpucluster.report`); ``RESULTS.json`` is the ``results.json`` that
``playbooks/benchmark.yml`` writes to ``reports/benchmark-<timestamp>/``.

Both raise :class:`ValueError` for wrong input (the core's ``launch.JobSpecError``,
:class:`gpucluster.report.ResultsError`, an unwritable ``--output`` / ``--out-dir``);
``gpucluster.cli.main`` prints the message as written (Rich markup off: ``give nodes: [host, ...]``
keeps its brackets) and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)


def add_launch(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="render a job spec as an mpirun command, an MPIJob or an env file")
    p.add_argument("spec", type=Path, help="job spec YAML (see examples/jobs/)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--mpirun", dest="mode", action="store_const", const="mpirun",
                      help="the mpirun command line for the first node's training container")
    mode.add_argument("--mpijob", dest="mode", action="store_const", const="mpijob",
                      help="the Kubeflow MPIJob manifest (YAML), schema-checked")
    mode.add_argument("--env-file", dest="mode", action="store_const", const="env",
                      help="the job environment as KEY=VALUE lines (docker --env-file format)")
    p.add_argument("--output", "-o", type=Path, default=None,
                   help="write here instead of stdout (its directory must exist)")
    p.add_argument("--inventory", "-i", default=None,
                   help="take what the spec leaves out from the cluster's nodes (gpucluster plan): nodes, "
                        "gpus_per_node, runtime and the NCCL variables the nccl_env stage set")
    p.set_defaults(func=run_launch)


def run_launch(args: argparse.Namespace) -> int:
    from ansible_collections.gpucluster.cluster.plugins.module_utils import launch
    from ansible_collections.gpucluster.cluster.plugins.module_utils.runtime import render_env_file

    from gpucluster import mpijob

    if args.output is not None and not args.output.parent.is_dir():
        raise ValueError(
            f"--output {args.output}: directory {args.output.parent} does not exist; create it first "
            "(gpucluster launch makes no directories) or write elsewhere"
        )
    if args.inventory:
        from gpucluster.cli_plan import collect

        data = launch.spec_from_contract(mpijob.read_job_spec(args.spec), collect(args.inventory, quiet=True))
        job = mpijob.parse_job_spec(data)
    else:
        job = mpijob.load_job_spec(args.spec)
    if args.mode == "mpirun":
        text = launch.render_mpirun_command(job) + "\n"
    elif args.mode == "env":
        forwarded = launch.profile_forwarded(job)
        header = f"gpucluster job {job.name}: runtime {job.runtime}; the variables this job sets"
        if forwarded:
            header += (f"\nnot set by the job, so the node's values apply (/etc/gpucluster/runtime.env): "
                       f"{', '.join(forwarded)}")
        text = render_env_file(launch.job_env(job), header=header)
    else:
        documents = launch.render_k8s_documents(job)
        check = mpijob.validate_mpijob(documents[-1])
        if not check.checked:
            console.print(f"[yellow]warning:[/yellow] {check.note}")
        text = mpijob.to_yaml(documents)
    if args.output:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"--output {args.output}: cannot write ({exc.strerror or exc}); give a file in a directory "
                "you can write"
            ) from exc
        console.print(f"wrote {escape(str(args.output))}")
    else:
        sys.stdout.write(text)
    return 0


def add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="scaling report (JSON, Markdown, PNG) from benchmark results")
    p.add_argument("results", type=Path,
                   help="the results.json playbooks/benchmark.yml writes (reports/benchmark-<timestamp>/): "
                        "[{gpus, nodes, runtime, throughput, unit}, ...]")
    p.add_argument("--out-dir", type=Path, required=True,
                   help="directory for report.json/.md/.png (made when missing; its parent must exist)")
    p.add_argument("--title", default=None, help="report title (default: the file's title)")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from gpucluster.report import OutDirError, ResultsError, write_report

    try:
        data = json.loads(args.results.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{args.results}: cannot read the results ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{args.results}: not valid JSON ({exc})") from exc
    try:
        paths = write_report(data, args.out_dir, title=args.title)
    except ResultsError as exc:
        raise ValueError(f"{args.results}: {exc}") from exc
    except OutDirError as exc:
        raise ValueError(f"--out-dir {exc}") from exc
    for kind, path in paths.items():
        console.print(f"wrote {kind}: {escape(str(path))}")
    return 0
