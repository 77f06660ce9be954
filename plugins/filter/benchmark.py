"""Filters for ``playbooks/benchmark.yml``: the scaling plan, the mpirun of each step, the
parsing of each run, the NCCL bus-bandwidth check.

The logic they call is ``plugins/module_utils``: ``launch.py`` renders the mpirun argv from a
job spec (the one renderer, also of ``gpucluster launch --mpirun``), ``bench.py`` parses
Horovod's "Total img/sec on N GPU(s)" / tf_cnn_benchmarks' "total images/sec" / nccl-tests
tables and checks bus bandwidth, ``gpucluster report`` (run by the playbook) turns the results
into the scaling report; ``allreduce.py`` reads the validation allreduce benchmark
(gpucluster_allreduce_*).

Examples::

    {{ ansible_play_hosts | gpucluster_benchmark_plan(8) }}
        -> [{"name": "1 GPU", "gpus": 1, "nodes": 1, ...}, {"name": "1 node", "gpus": 8, ...}, ...]
    {{ step | gpucluster_benchmark_argv(spec) }}                     -> ["mpirun", "--allow-run-as-root", ...]
    {{ out.stdout | gpucluster_benchmark_result(step, 'lightcc', 'gpu') }} -> {"gpus": 8, "throughput": ...}
    {{ out.stdout | gpucluster_benchmark_nccl_check(100, 0.8) }}    -> {"passed": true, "message": ...}
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.module_utils import allreduce, bench, launch

CPU_UNIT = "samples/sec"
_PROFILE_PREFIXES = ("LIGHT_", "HOROVOD_")


def _positive_int(value: Any, what: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"{what}={value!r} must be a positive integer") from exc
    if isinstance(value, bool) or n < 1 or (isinstance(value, float) and value != n):
        raise AnsibleFilterError(f"{what}={value!r} must be a positive integer")
    return n


def default_node_counts(nodes: int) -> list[int]:
    """1, 2, 4, ... (doubling, as the vendors' scaling tables go) and always ``nodes`` itself."""
    counts, k = [], 1
    while k < nodes:
        counts.append(k)
        k *= 2
    return counts + [nodes]


def benchmark_plan(hosts: Sequence[str], gpus_per_node: Any, node_counts: Sequence[Any] | None = None) -> list[dict]:
    """The runs of one scaling measurement: 1 GPU, 1 node, then more nodes up to all of them.

    ``hosts`` in launch order (the first is where mpirun starts and the 1-GPU run happens);
    ``gpus_per_node`` ranks per node (one per GPU; on a GPU-less test cluster, CPU ranks);
    ``node_counts`` the node counts to run (default :func:`default_node_counts`). Steps with the
    same GPU count are run once (with one rank per node, "1 GPU" is "1 node"). Each step is
    ``{"name", "gpus", "nodes", "ranks_per_node", "hosts"}``.
    """
    hosts = [str(h) for h in hosts or []]
    if not hosts:
        raise AnsibleFilterError("no hosts to benchmark: the play has no reachable node")
    gpn = _positive_int(gpus_per_node, "GPUs per node (benchmark_gpus_per_node)")
    if node_counts:
        counts = sorted({_positive_int(k, "benchmark_node_counts item") for k in node_counts})
        too_many = [k for k in counts if k > len(hosts)]
        if too_many:
            raise AnsibleFilterError(
                f"benchmark_node_counts {too_many} exceed the {len(hosts)} nodes in the play "
                f"({', '.join(hosts)}); give counts from 1 to {len(hosts)}"
            )
    else:
        counts = default_node_counts(len(hosts))
    steps = [{"name": "1 GPU", "gpus": 1, "nodes": 1, "ranks_per_node": 1, "hosts": hosts[:1]}]
    for k in counts:
        if k * gpn == 1:
            steps[0]["name"] = "1 GPU = 1 node"
            continue
        steps.append({"name": "1 node" if k == 1 else f"{k} nodes", "gpus": k * gpn, "nodes": k,
                      "ranks_per_node": gpn, "hosts": hosts[:k]})
    return steps


def _profile_for(step: Mapping[str, Any], profile_env: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """The runtime profile for one step and notes: ``LIGHT_INTRA_SIZE`` must divide the step's
    ranks per node (the 1-GPU run has one), so it becomes gcd(intra size, ranks per node)."""
    profile = {k: v for k, v in profile_env.items() if str(k).startswith(_PROFILE_PREFIXES)}
    notes = []
    if "LIGHT_INTRA_SIZE" in profile:
        intra = int(profile["LIGHT_INTRA_SIZE"])
        rpn = int(step["ranks_per_node"])
        if intra > 0 and rpn % intra:
            profile["LIGHT_INTRA_SIZE"] = math.gcd(intra, rpn)
            notes.append(f"LIGHT_INTRA_SIZE {intra} -> {profile['LIGHT_INTRA_SIZE']} for {rpn} rank(s) per node")
    return profile, notes


def benchmark_job(step: Mapping[str, Any], spec: Mapping[str, Any]) -> dict:
    """The job spec (:mod:`gpucluster.launch` form) of one step.

    ``spec``: ``name``, ``image``, ``command`` (list), ``runtime``, ``profile_env`` (the node's
    env file: LIGHT_*/HOROVOD_* go to the validated profile, anything else to ``env``),
    ``env`` (extra variables), ``nccl_env``, ``network_interface`` (NIC or CIDR for Open MPI's
    TCP), ``ssh_port``.
    """
    profile, _ = _profile_for(step, spec.get("profile_env") or {})
    extra = {k: v for k, v in (spec.get("profile_env") or {}).items() if not str(k).startswith(_PROFILE_PREFIXES)}
    env = {**extra, **(spec.get("env") or {})}
    job = {
        "name": spec.get("name", "benchmark"),
        "image": spec.get("image") or "training-image",
        "command": list(spec["command"]),
        "nodes": list(step["hosts"]),
        "gpus_per_node": int(step["ranks_per_node"]),
        "runtime": spec.get("runtime", "lightcc"),
        "profile": profile,
        "env": {k: v for k, v in env.items() if not str(k).startswith("NCCL_")},
        "nccl_env": {**{k: v for k, v in env.items() if str(k).startswith("NCCL_")}, **(spec.get("nccl_env") or {})},
        "network_interface": spec.get("network_interface"),
        "ssh_port": int(spec.get("ssh_port", launch.DEFAULT_SSH_PORT)),
    }
    return job


def benchmark_argv(step: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """The mpirun argv of one step (``gpucluster.launch.render_mpirun`` of :func:`benchmark_job`)."""
    try:
        return launch.render_mpirun(benchmark_job(step, spec))
    except launch.JobSpecError as exc:
        raise AnsibleFilterError(f"benchmark step {step.get('name')}: {exc}") from exc


def benchmark_notes(step: Mapping[str, Any], profile_env: Mapping[str, Any]) -> list[str]:
    """What the step changes in the profile (see :func:`_profile_for`)."""
    return _profile_for(step, profile_env or {})[1]


def _host_key(name: Any) -> str:
    return str(name).strip().rstrip(".").lower()


def host_names(facts: Mapping[str, Any] | None) -> list[str]:
    """A node's own names from its facts (``hostname``, ``nodename``, ``fqdn``; each once): what its
    ranks may report as their host (``socket.gethostname()``), the ``aliases`` of
    :func:`benchmark_result`."""
    facts = facts or {}
    return list(dict.fromkeys(str(facts[k]) for k in ("hostname", "nodename", "fqdn") if facts.get(k)))


def _cpu_result(text: str, step: Mapping[str, Any], aliases: Mapping[str, Any] | None = None) -> dict:
    lines = [ln for ln in str(text).splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise AnsibleFilterError(
            f"{step.get('name')}: the CPU benchmark printed no JSON result (it did not finish); see its output"
        )
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise AnsibleFilterError(f"{step.get('name')}: unreadable CPU benchmark result: {exc}") from exc
    if data.get("device") != "cpu" or "total" not in data:
        raise AnsibleFilterError(f"{step.get('name')}: not a CPU benchmark result: {lines[-1][:200]}")
    try:
        ranks, total = int(data.get("ranks")), float(data.get("total"))
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{step.get('name')}: not a CPU benchmark result (ranks {data.get('ranks')!r}, "
                                 f"total {data.get('total')!r}): {lines[-1][:200]}") from None
    if ranks != int(step["gpus"]):
        raise AnsibleFilterError(
            f"{step.get('name')}: the benchmark ran on {data.get('ranks')} ranks, the step asked for {step['gpus']}"
        )
    # A rank names its node by its host name (socket.gethostname()), which need not be the
    # inventory name (an address, an FQDN, a molecule instance): each node's names count, compared
    # as DNS names are (case, a trailing dot). A name that two nodes share (a default
    # localhost.localdomain FQDN) proves neither; a node proven by no name of its own is refused.
    ran = {_host_key(h) for h in data.get("hosts") or [] if _host_key(h)}
    names = {}
    for h in step["hosts"]:
        own = (aliases or {}).get(h) or []
        own = [own] if isinstance(own, str) else list(own)
        names[h] = {k for k in [_host_key(h)] + [_host_key(a) for a in own if a is not None] if k}
    owners: dict[str, list[str]] = {}
    for h, keys in names.items():
        for k in keys:
            owners.setdefault(k, []).append(str(h))
    unique = {h: {k for k in keys if len(owners[k]) == 1} for h, keys in names.items()}
    missing = sorted(str(h) for h in step["hosts"] if not unique[h] & ran)
    if missing:
        shared = sorted({f"{k!r} ({', '.join(v)})" for k, v in owners.items() if len(v) > 1 and k in ran})
        why = (f"; the names they report are shared by several nodes, so their ranks cannot be told apart: "
               f"{'; '.join(shared)}. Fix: give every node its own host name (hostnamectl set-hostname) and rerun"
               if shared else "")
        raise AnsibleFilterError(f"{step.get('name')}: no rank ran on {', '.join(missing)} "
                                 f"(hosts {data.get('hosts')}){why}")
    if not data.get("params_in_sync"):
        raise AnsibleFilterError(
            f"{step.get('name')}: the ranks' parameters differ after training: the gradient allreduce is wrong"
        )
    return {"throughput": total, "unit": CPU_UNIT, "ci": data.get("total_ci"),
            "model": data.get("model"), "batch_size": data.get("batch_size"),
            "per_rank": data.get("per_rank"), "loss_first": data.get("loss_first"),
            "loss_last": data.get("loss_last"), "ranks_hosts": data.get("hosts")}


def _gpu_result(text: str, step: Mapping[str, Any]) -> dict:
    try:
        result = bench.parse_throughput(str(text))
    except bench.BenchmarkParseError as exc:
        raise AnsibleFilterError(f"{step.get('name')}: {exc}") from exc
    if result.gpus is not None and result.gpus != int(step["gpus"]):
        raise AnsibleFilterError(
            f"{step.get('name')}: the benchmark reports {result.gpus} GPU(s), the step ran {step['gpus']} ranks"
        )
    return {"throughput": result.total, "unit": result.unit, "ci": result.total_ci, "model": result.model,
            "batch_size": result.batch_size, "per_gpu": result.per_gpu, "tool": result.tool}


def benchmark_result(text: str, step: Mapping[str, Any], runtime: str, mode: str = "gpu",
                     aliases: Mapping[str, Any] | None = None) -> dict:
    """One report entry from a run's output: ``{gpus, nodes, runtime, throughput, unit, ...}``.

    ``mode`` ``gpu``: Horovod's synthetic benchmark or tf_cnn_benchmarks (img/sec, through
    :func:`gpucluster.bench.parse_throughput`); ``cpu``: the JSON line of
    ``roles/benchmark/files/cpu_dp_bench.py`` (samples/sec), checked for the right ranks and hosts
    and for parameters still in sync. ``aliases``: ``{inventory name: [its host names]}``
    (Ansible's ``hostname``, ``nodename``, ``fqdn``), the names a rank may report for its node.
    """
    if mode not in ("gpu", "cpu"):
        raise AnsibleFilterError(f"benchmark mode {mode!r} must be gpu or cpu")
    detail = _cpu_result(text, step, aliases) if mode == "cpu" else _gpu_result(text, step)
    return {"gpus": int(step["gpus"]), "nodes": int(step["nodes"]), "runtime": str(runtime),
            "step": step.get("name"), "hosts": list(step["hosts"]), **detail}


def benchmark_results(runs: Sequence[Mapping[str, Any]], runtime: str, mode: str = "gpu",
                      aliases: Mapping[str, Any] | None = None) -> list[dict]:
    """Report entries from a looped run's ``results`` (each has ``item`` = the step and
    ``stdout``): :func:`benchmark_result` of each."""
    return [benchmark_result(r.get("stdout", ""), r["item"], runtime, mode, aliases) for r in runs]


def benchmark_log(run: Mapping[str, Any], runtime: str, timeout_s: Any = None) -> dict:
    """One looped run's record for the report directory and for failure messages:
    ``{step, gpus, hosts, runtime, rc, argv, output, summary}`` (``output`` = stderr then
    stdout; ``summary`` says which step failed and why when ``rc`` is not 0; rc 124 is
    ``timeout`` killing the run)."""
    step = run.get("item") or {}
    rc = run.get("rc")
    output = "\n".join(x for x in (run.get("stderr") or "", run.get("stdout") or "") if x)
    if run.get("msg") and rc is None:  # the exec itself failed (container gone, ...)
        output = str(run["msg"])
    hosts = ", ".join(step.get("hosts") or [])
    name = f"{step.get('name', '?')} ({step.get('gpus', '?')} rank(s) on {hosts}, {runtime})"
    if rc == 0:
        summary = f"{name}: ok"
    elif rc == 124:
        summary = f"{name}: killed after {timeout_s} s (benchmark_timeout_s): a rank hung or the run is too long"
    else:
        summary = f"{name}: exited {rc}"
    return {"step": step.get("name"), "gpus": step.get("gpus"), "hosts": step.get("hosts"), "runtime": runtime,
            "rc": rc, "argv": run.get("invocation", {}).get("module_args", {}).get("argv"), "output": output,
            "summary": summary}


def benchmark_report_input(results: Sequence[Mapping[str, Any]], title: str, note: str) -> dict:
    """The ``gpucluster report`` input: ``{"title", "note", "results": [...]}`` (every entry
    keeps its details; the report reads gpus, nodes, runtime, throughput and unit)."""
    if not results:
        raise AnsibleFilterError("no benchmark results to report")
    return {"title": str(title), "note": str(note), "results": [dict(r) for r in results]}


def benchmark_line_rate(
    rdma: Mapping[str, Any] | None, interfaces: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None,
    gpus_per_node: Any
) -> dict:
    """The per-GPU share of the node's inter-node line rate in Gbit/s, from facts, with its source.

    RDMA facts (``gpucluster_rdma.hcas[].ports[]``, ACTIVE ports' ``rate_gbps``) when there
    are any, else the summed ``speed`` (Mbit/s, Ansible's fact) of the data NICs NCCL's sockets
    use (the nccl_env stage's, ``gpucluster_data_nic_facts``), not the default route's NIC;
    divided by the GPUs per node, the form :func:`gpucluster.bench.check_bus_bandwidth` takes.
    """
    gpn = _positive_int(gpus_per_node, "GPUs per node")
    hcas = (rdma if isinstance(rdma, Mapping) else {}).get("hcas") or []
    ports = [p for h in hcas if isinstance(h, Mapping) for p in (h.get("ports") or []) if isinstance(p, Mapping)
             and (p.get("active") or p.get("state") == "ACTIVE")]
    rates = [(p, _rate(p.get("rate_gbps"))) for p in ports]
    rates = [(p, r) for p, r in rates if r > 0]
    total = sum(r for _, r in rates)
    if total > 0:
        names = ", ".join(f"{p.get('netdev') or p.get('port')}" for p, _ in rates)
        return {"gbit": total / gpn, "source": f"{len(rates)} active RDMA port(s) ({names}), {total:g} Gbit/s "
                                              f"over {gpn} GPU(s)"}
    nics = [interfaces] if isinstance(interfaces, Mapping) else list(interfaces or [])
    nics = [n if isinstance(n, Mapping) else {"device": str(n)} for n in nics]
    speeds: dict[str, float] = {}
    for n in nics:  # each NIC once, however often it is listed
        speeds.setdefault(str(n.get("device", "?")), _rate(n.get("speed")))
    rated = {d: v for d, v in speeds.items() if v > 0}
    if rated:
        where = ", ".join(f"{d} at {v:g} Mbit/s" for d, v in rated.items())
        unrated = [d for d in speeds if d not in rated]
        note = f"; no speed for {', '.join(unrated)}" if unrated else ""
        return {"gbit": sum(rated.values()) / 1000 / gpn, "source": f"data NIC(s) {where} over {gpn} GPU(s){note}"}
    named = ", ".join(speeds) or "none"
    return {"gbit": 0.0, "source": f"no RDMA port and no speed in the facts of the data NIC(s) ({named})"}


def _rate(value: Any) -> float:
    """A positive, finite rate from a fact, else 0 (unknown: -1, None, a string, inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) and value > 0 else 0.0


def benchmark_nccl_check(text: str, line_rate_gbit: Any, fraction: Any = 0.8) -> dict:
    """Parse an nccl-tests run and compare its peak bus bandwidth with ``fraction`` x line rate."""
    try:
        result = bench.parse_nccl_tests(str(text))
    except bench.BenchmarkParseError as exc:
        return {"passed": False, "message": f"nccl-tests: {exc}", "peak_busbw": None, "avg_busbw": None}
    try:
        passed, message = bench.check_bus_bandwidth(result, float(line_rate_gbit), fraction=float(fraction))
    except ValueError as exc:
        raise AnsibleFilterError(f"nccl-tests bus bandwidth check: {exc}") from exc
    peak = result.peak_busbw()[0] if result.rows else None
    return {"passed": passed, "message": message, "peak_busbw": peak, "avg_busbw": result.avg_busbw,
            "ranks": len(result.ranks)}


def allreduce_report(stdout):
    """Parse the allreduce benchmark's JSON line (the last line that is a JSON object) into the report."""
    lines = [ln for ln in str(stdout).splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise ValueError("the allreduce benchmark printed no JSON result; see its output above")
    return allreduce.report(json.loads(lines[-1]))


def allreduce_table(stdout):
    """The allreduce benchmark's JSON result as table lines."""
    lines = [ln for ln in str(stdout).splitlines() if ln.strip().startswith("{")]
    return allreduce.table(json.loads(lines[-1])).splitlines()


class FilterModule:
    def filters(self):
        return {
            "gpucluster_allreduce_report": allreduce_report,
            "gpucluster_allreduce_table": allreduce_table,
            "gpucluster_benchmark_plan": benchmark_plan,
            "gpucluster_benchmark_host_names": host_names,
            "gpucluster_benchmark_job": benchmark_job,
            "gpucluster_benchmark_argv": benchmark_argv,
            "gpucluster_benchmark_notes": benchmark_notes,
            "gpucluster_benchmark_result": benchmark_result,
            "gpucluster_benchmark_results": benchmark_results,
            "gpucluster_benchmark_log": benchmark_log,
            "gpucluster_benchmark_report_input": benchmark_report_input,
            "gpucluster_benchmark_line_rate": benchmark_line_rate,
            "gpucluster_benchmark_nccl_check": benchmark_nccl_check,
        }
