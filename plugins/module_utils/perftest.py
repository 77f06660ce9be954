"""perftest's ``ib_write_bw`` between nodes, one run per RDMA port: which pairs run, how to read
the report, and whether the measured bandwidth reaches the port's rate. Pure functions, stdlib
only (filters ``perftest_write_bw_plan`` / ``perftest_bw_report`` / ``perftest_write_bw_check``,
used by ``playbooks/validate.yml``).

The report grammar (linux-rdma/perftest, ``perftest_parameters.c`` / ``perftest_resources.c``,
versions 4.x to 25.x, and the outputs under ``tests/fixtures/perftest``):

- a banner ``RDMA_Write BW Test`` (``RDMA_Write Bidirectional BW Test``, ``Send BW Test`` ...)
  between dashed lines, then ``Key : value`` settings, two per line where the second is set off
  by white space (``Device         : mlx5_0``, ``Link type       : Ethernet``,
  ``GID index       : 3``);
- the result header ``#bytes  #iterations  BW peak[<unit>]  BW average[<unit>]  MsgRate[Mpps]``
  where ``<unit>`` is ``MB/sec`` (older releases) or ``MiB/sec`` (newer ones), both
  ``0x100000`` bytes per second in the source's ``format_factor``, or ``Gb/sec`` with
  ``--report_gbits`` (``125000000`` bytes per second, i.e. 10^9 bit/s); a dual-port or
  per-port run adds columns after MsgRate;
- one row per message size (``-a`` prints many): bytes, iterations, peak, average, msg rate.
  With ``-D`` (duration) the peak is not measured and printed as 0.00 ("WARNING: BW peak won't
  be measured in this run."), so the average is what is judged. Warnings may be printed
  between the header and the rows ("Conflicting CPU frequency values detected ...");
- errors are plain lines: ``Couldn't connect to <host>:<port>``, ``Unable to init the socket
  connection``, ``Unable to find the Infiniband/RoCE device``, ``Couldn't get context for the
  device``, ``Failed to modify QP to RTS``, ``Completion with error at client`` ...

Inputs of the plan are ``rdma_facts`` facts (``ansible_facts.gpucluster_rdma``, see
``rdma.rdma_inventory``): per HCA a list of ports with ``active``, ``link_layer``,
``rate_gbps`` and ``roce_gid_index``.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    natural_key,
    shorten,
    split_lines,
)

# Bytes per second of each unit perftest prints (format_factor in perftest_resources.c).
UNIT_BYTES = {"MB/sec": 0x100000, "MiB/sec": 0x100000, "Gb/sec": 125000000}

_HEADER = re.compile(
    r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[(?P<unit2>[^\]]+)\]"
)
_ROW = re.compile(
    r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>-?\d+(?:\.\d+)?)\s+(?P<avg>-?\d+(?:\.\d+)?)"
    r"(?:\s+(?P<rate>-?\d+(?:\.\d+)?))?"
)
_BANNER = re.compile(r"^\s*(?P<name>[A-Za-z_ ]*\bBW Test)\s*$")
_SETTING = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9 .*/_-]*?)\s*:\s*(?P<value>\S+(?: \S+)*?)(?=\s{2,}|\t|$)")
_ERRORS = (
    "Couldn't connect to",
    "Unable to init the socket connection",
    "Unable to open file descriptor for socket connection",
    "Unable to find the Infiniband/RoCE device",
    "Couldn't get context for the device",
    "No IB devices found",
    "Unable to Connect the HCA's through the link",
    "Failed to exchange data between server and clients",
    "Failed to modify QP",
    "Completion with error",
    "Couldn't read remote address",
    "Unable to read to socket/rdma_cm",
    "Couldn't allocate MR",
    "is not a valid",
    # Failures that end the run without the "Unable to init the socket connection" summary
    # (perftest write_bw.c / perftest_communication.c): RDMA_CM resources, IB resources,
    # parameter negotiation, GID type mismatch, the server's listen socket, option parsing;
    # and the RDMA_CM connect path's own detail lines.
    "Unable to create RDMA_CM resources",
    "Couldn't create IB resources",
    "Failed to negotiate parameters",
    "Unable to set up socket connection",
    "Found Incompatibility issue with GID types",
    "Couldn't listen to port",
    "Parser function exited with Error",
    "Unable to perform rdma_client function",
    "Unable to perform rdma_server function",
    "Unable to connect (retries",
    "rdma_resolve_addr failed",
    "rdma_resolve_route failed",
)
_ROCE_LINK = "Ethernet"


def _settings(line):
    return {m.group("key").strip(): m.group("value").strip() for m in _SETTING.finditer(line)}


def parse_bw_report(text):
    """``ib_write_bw`` (any perftest ``*_bw``) output -> ::

        {"test": "RDMA_Write BW Test" or None, "device": "mlx5_0" or None,
         "link_type": "Ethernet" | "IB" | None, "gid_index": 3 or None,
         "unit": "Gb/sec" | "MB/sec" | "MiB/sec" | None,
         "rows": [{"bytes": 65536, "iterations": 5000, "bw_peak": 0.0, "bw_average": 98.02,
                   "msg_rate_mpps": 0.18695, "bw_peak_gbps": 0.0, "bw_average_gbps": 98.02}],
         "errors": ["Couldn't connect to 192.0.2.1:18515", ...]}

    Bandwidths stay in the printed unit; ``*_gbps`` are the same values in Gbit/s (10^9 bit/s).
    A row before any header, a header whose peak and average units differ, or a unit perftest
    does not print is a ParseError naming the line; an output with no header and no error line
    is a ParseError too (not perftest's report)."""
    lines = split_lines(text, "ib_write_bw output")
    out = {"test": None, "device": None, "link_type": None, "gid_index": None, "unit": None,
           "rows": [], "errors": []}
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or set(stripped) <= {"-", "*"}:
            continue
        if any(marker in stripped for marker in _ERRORS):
            out["errors"].append(stripped)
            continue
        header = _HEADER.match(line)
        if header:
            unit, unit2 = header.group("unit"), header.group("unit2")
            if unit != unit2 or unit not in UNIT_BYTES:
                raise ParseError(f"ib_write_bw output line {lineno}: result header with units "
                                 f"{unit!r}/{unit2!r}, expected one of {sorted(UNIT_BYTES)}: "
                                 f"{shorten(line)!r}")
            if out["unit"] not in (None, unit):
                raise ParseError(f"ib_write_bw output line {lineno}: a second result header in "
                                 f"{unit}, the first was in {out['unit']}")
            out["unit"] = unit
            continue
        row = _ROW.match(line)
        if row and not stripped.startswith("#"):
            if out["unit"] is None:
                raise ParseError(f"ib_write_bw output line {lineno}: a result row before the "
                                 f"'#bytes #iterations BW peak[...]' header: {shorten(line)!r}")
            factor = UNIT_BYTES[out["unit"]] * 8 / 1e9
            peak, avg = float(row.group("peak")), float(row.group("avg"))
            out["rows"].append({
                "bytes": int(row.group("bytes")), "iterations": int(row.group("iters")),
                "bw_peak": peak, "bw_average": avg,
                "msg_rate_mpps": float(row.group("rate")) if row.group("rate") else None,
                "bw_peak_gbps": round(peak * factor, 3), "bw_average_gbps": round(avg * factor, 3),
            })
            continue
        banner = _BANNER.match(line)
        if banner and out["test"] is None:
            out["test"] = banner.group("name").strip()
            continue
        if ":" in stripped and out["unit"] is None:
            s = _settings(line)
            out["device"] = s.get("Device", out["device"])
            out["link_type"] = s.get("Link type", out["link_type"])
            if re.fullmatch(r"\d+", s.get("GID index", "")):
                out["gid_index"] = int(s["GID index"])
    if out["unit"] is None and not out["errors"]:
        raise ParseError("ib_write_bw output: no '#bytes #iterations BW peak[...] BW average[...]' "
                         "result header and no perftest error line (not an ib_write_bw report, "
                         "or it was cut before the result)")
    return out


def _active_ports(rdma_facts):
    ports = []
    for hca in sorted((rdma_facts or {}).get("hcas") or [], key=lambda h: natural_key(h["name"])):
        for p in hca.get("ports") or []:
            if p.get("active"):
                ports.append({"device": hca["name"], "port": p["port"], "link_layer": p.get("link_layer"),
                              "rate_gbps": p.get("rate_gbps"), "gid_index": p.get("roce_gid_index")})
    return ports


def write_bw_plan(nodes, base_port=18515):
    """The ``ib_write_bw`` runs of a cluster: node ``i`` serves, node ``i+1`` (the last one: the
    first) is the client, the k-th ACTIVE port of one against the k-th of the other (ports in
    HCA name order: the same rail on identical nodes). ``nodes`` is an ordered list of
    ``{"host": name, "address": the server's address clients connect to, "rdma": rdma_facts}``.

    Returns ``{"runs": [{"server", "client", "address", "tcp_port", "server_device",
    "server_port", "server_gid_index", "client_device", "client_port", "client_gid_index",
    "rate_gbps", "fabric"}], "skipped": "why nothing runs" or None, "problems": [...]}``;
    each run has its own TCP port (``base_port`` + n) so that a node's servers wait side by side.
    A node without an active port among nodes that have them, or two nodes with different
    port counts, is a problem (a missing rail), not a silent skip."""
    nodes = list(nodes or [])
    with_ports = [(n, _active_ports(n.get("rdma"))) for n in nodes]
    if len(nodes) < 2:
        return {"runs": [], "skipped": f"{len(nodes)} node(s): ib_write_bw needs two", "problems": []}
    if not any(ports for _, ports in with_ports):
        return {"runs": [], "skipped": "no node has an ACTIVE RDMA port (rdma_facts): no ib_write_bw",
                "problems": []}
    problems = []
    counts = {n["host"]: len(ports) for n, ports in with_ports}
    if len(set(counts.values())) > 1:
        problems.append("nodes have different numbers of ACTIVE RDMA ports ("
                        + ", ".join(f"{h}: {c}" for h, c in counts.items())
                        + "): a rail is down or missing; only the common ones are measured")
    runs = []
    for i, (server, sports) in enumerate(with_ports):
        client, cports = with_ports[(i + 1) % len(with_ports)]
        if len(with_ports) == 2 and i == 1:
            break  # two nodes: one direction per port pair is the test
        for sp, cp in zip(sports, cports, strict=False):  # a missing rail: the common ones
            roce = sp["link_layer"] == _ROCE_LINK
            for who, p in (("server", server), ("client", client)):
                q = sp if who == "server" else cp
                if roce and q["gid_index"] is None:
                    problems.append(f"{p['host']}: {q['device']} port {q['port']} is RoCE without a "
                                    "RoCE v2 IPv4 GID index (rdma_facts); it cannot be measured")
            if roce and (sp["gid_index"] is None or cp["gid_index"] is None):
                continue
            rates = [r for r in (sp["rate_gbps"], cp["rate_gbps"]) if r]
            runs.append({
                "server": server["host"], "client": client["host"], "address": server["address"],
                "tcp_port": base_port + len(runs),
                "server_device": sp["device"], "server_port": sp["port"], "server_gid_index": sp["gid_index"],
                "client_device": cp["device"], "client_port": cp["port"], "client_gid_index": cp["gid_index"],
                "rate_gbps": min(rates) if rates else None, "fabric": "RoCE" if roce else "InfiniBand",
            })
    return {"runs": runs, "skipped": None, "problems": problems}


def write_bw_argv(run, role, size=1048576, duration=5, qps=1, binary="ib_write_bw"):
    """The argv of one side (``role`` server or client) of a planned run: device, port, GID
    index (RoCE), TCP port, ``--report_gbits``, ``-F`` (no CPU-frequency refusal), size,
    duration and QPs; the client adds the server's address."""
    if role not in ("server", "client"):
        raise ValueError(f"write_bw_argv: role {role!r}, expected server or client")
    argv = [binary, "-d", run[f"{role}_device"], "-i", str(run[f"{role}_port"]),
            "-p", str(run["tcp_port"]), "-s", str(int(size)), "-D", str(int(duration)),
            "-q", str(int(qps)), "-F", "--report_gbits"]
    if run.get(f"{role}_gid_index") is not None:
        argv += ["-x", str(run[f"{role}_gid_index"])]
    if role == "client":
        argv.append(str(run["address"]))
    return argv


def write_bw_check(results, fraction=0.95):
    """Judge the runs: ``results`` is a list of ``{"run": a planned run, "rc": client rc,
    "output": client stdout + stderr, "server_output": the server's, optional}``. A run passes
    when the client exited 0, its report has a row, and the largest message size's BW average
    is at least ``fraction`` of the port rate (Azure's acceptance: 380 of 400 Gb/s; OCI: 96%).

    Returns ``{"ok", "fraction", "runs": [{"server", "client", "device", "rate_gbps",
    "measured_gbps", "required_gbps", "ok", "problem"}], "problems": [...]}``."""
    fraction = float(fraction)
    if not 0 < fraction <= 1:
        raise ValueError(f"validate_ib_write_bw_fraction={fraction}: use a fraction of the port rate "
                         "in (0, 1], e.g. 0.95 (380 of 400 Gb/s)")
    runs, problems = [], []
    for res in results or []:
        run = res["run"]
        where = (f"{run['client']}:{run['client_device']}/{run['client_port']} -> "
                 f"{run['server']}:{run['server_device']}/{run['server_port']}")
        entry = {"server": run["server"], "client": run["client"], "device": run["client_device"],
                 "server_device": run["server_device"], "rate_gbps": run.get("rate_gbps"),
                 "measured_gbps": None, "required_gbps": None, "ok": False, "problem": None}
        text = str(res.get("output") or "")
        errors = parse_bw_report_errors(text) + parse_bw_report_errors(res.get("server_output"))
        failed_rc = res.get("rc") not in (0, "0")
        try:
            report = parse_bw_report(text)
        except ParseError as exc:
            report = None
            entry["problem"] = (f"{where}: ib_write_bw exited {res.get('rc')}"
                                + (f": {'; '.join(errors[:3])}" if errors else f": {exc}")
                                if failed_rc else f"{where}: {exc}")
        if report is not None:
            if report["rows"]:
                best = max(report["rows"], key=lambda r: r["bytes"])
                entry["measured_gbps"] = best["bw_average_gbps"]
            if failed_rc or not report["rows"]:
                entry["problem"] = (f"{where}: ib_write_bw exited {res.get('rc')}"
                                    + (f": {'; '.join(errors[:3])}" if errors else ": no result row"))
            elif not run.get("rate_gbps"):
                entry["problem"] = (f"{where}: the port's rate is unknown (rdma_facts rate_gbps), "
                                    "nothing to judge against")
            else:
                entry["required_gbps"] = round(run["rate_gbps"] * fraction, 3)
                if entry["measured_gbps"] < entry["required_gbps"]:
                    entry["problem"] = (f"{where}: BW average {entry['measured_gbps']} Gb/s is under "
                                        f"{fraction:g} of the {run['rate_gbps']} Gb/s port rate "
                                        f"({entry['required_gbps']} Gb/s)")
                else:
                    entry["ok"] = True
        if entry["problem"]:
            problems.append(entry["problem"])
        runs.append(entry)
    return {"ok": not problems and bool(runs), "fraction": fraction, "runs": runs, "problems": problems}


def parse_bw_report_errors(text):
    """The perftest error lines of a (server's) output, [] when there are none or no text."""
    if not text:
        return []
    return [ln.strip() for ln in str(text).splitlines() if any(m in ln for m in _ERRORS)]
