"""Fail closed on the network: prove from the run's own output that the fast path carried it.

Pure functions, stdlib only (the filter plugin ``plugins/filter/health.py`` runs them on the
controller).

- :func:`check_nccl_transport`: reads an ``NCCL_DEBUG=INFO`` log with
  ``diagnose.nccl_transport_summary`` (transport, GDR) and, with a net plugin configured,
  ``nccl_net_plugin.read_net_plugin`` (the one net-plugin state: loaded, fell back, failed to
  load, and why) and, when given, the
  ``all_reduce_perf`` output with ``bench.parse_nccl_tests`` / ``bench.check_bus_bandwidth``
  (the one nccl-tests reader); fails when the transport is not the configured one (a net
  plugin configured but NCCL's internal IB or Socket used; IB expected but Socket; GDR
  expected but off) or when the Ring bus bandwidth is under the configured fraction of the
  line rate. The cases NVIDIA/nccl #1939 and #1537 describe: a job that silently runs over
  TCP sockets, or over IB without GPUDirect RDMA although the peer-memory module is loaded.
- :func:`parse_ompi_tcp_verbose` / :func:`check_mpi_interfaces`: which interfaces and
  addresses Open MPI's TCP BTL and its out-of-band channel actually used, read from its own
  verbose output (``--mca btl_base_verbose 100 --mca oob_base_verbose 100``), and whether
  they were only the configured data network.

  Open MPI's lines, from its source (ompi v4.x ``opal/mca/btl/tcp/btl_tcp_component.c`` and
  ``orte/mca/oob/tcp/oob_tcp_component.c``; written from the format strings, not captured
  here: the sandbox was down when this was written):

  - ``btl:tcp: examining interface <if>`` / ``btl:tcp: using ipv4 interface <if>`` (level 30;
    v4.x swaps the words ipv4/ipv6 in that message, so the family word is not trusted);
  - ``btl: tcp: Found match: <addr> (<if>)``: a CIDR of ``btl_tcp_if_include`` resolved;
  - ``btl:tcp: now connected to <addr>, process [[job,vpid],rank]`` (level 10);
  - ``<proc> oob:tcp:init adding <addr> to our list of V4 connections`` (level 10), and
    ``oob:tcp:init rejecting interface <if> (not in include list)``.

  Each line carries opal_output's ``[host:pid] `` prefix, and mpirun's ``--tag-output``
  ``[1,0]<stderr>:`` when given.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.bench import (
    BenchmarkParseError,
    check_bus_bandwidth,
    parse_nccl_tests,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.diagnose import nccl_transport_summary
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_net_plugin import read_net_plugin
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import strip_launcher_prefix

TRANSPORTS = ("IB", "Socket")


def expected_transport(net_plugin=None, rdma=False):
    """The transport a configuration must produce: the plugin's network when a net plugin is
    configured, IB when the node has RDMA NICs, else Socket."""
    if net_plugin:
        return "plugin"
    return "IB" if rdma else "Socket"


def check_nccl_transport(
    log, *, net_plugin=None, transport="IB", gdr=None, nccl_tests=None, line_rate_gbit=None, fraction=0.8
):
    """Judge an NCCL run against its configuration.

    ``log``: the ``NCCL_DEBUG=INFO`` text; ``net_plugin``: the configured plugin
    (``NCCL_NET_PLUGIN`` of the nccl_env contract) or None; with one, the run passes only when
    ``nccl_net_plugin.read_net_plugin`` finds a plugin loaded (``PLUGIN_LOADED`` or the
    ``PLUGIN_LOADED_OLDER_API`` compat path) and NCCL used a network other than its internal IB
    or Socket (validate.yml pins ``NCCL_NET`` to the plugin's network, so another plugin fails
    as ``NET_NOT_FOUND``); ``transport``: "IB" | "Socket" |
    "plugin" (what must carry the traffic; "plugin" when ``net_plugin`` is set); ``gdr``:
    True when GPUDirect RDMA must be on, None to not check; ``nccl_tests``: the
    ``all_reduce_perf`` output (run with ``NCCL_ALGO=Ring``); ``line_rate_gbit``: per-GPU
    share of the NIC rate in Gbit/s; ``fraction``: of the line rate the peak bus bandwidth
    must reach.

    Returns ``{"ok": bool, "problems": [str], "fix": [str], "used": {"transport",
    "net_plugin", "gdr", "nccl_version", "net_plugin_state" (with a plugin configured: the
    reader's class)}, "busbw": {"ok", "message"} | None}``. Fails closed:
    a log that does not say which transport NCCL used is a failure.
    """
    if transport not in (*TRANSPORTS, "plugin"):
        raise ValueError(f"transport={transport!r}: expected IB, Socket or plugin")
    if transport == "plugin" and not net_plugin:
        raise ValueError("transport='plugin' needs net_plugin (the configured plugin's name)")
    s = nccl_transport_summary(log)
    used = {
        "transport": s["transport"],
        "net_plugin": s["net_plugin"],
        "gdr": s["gdr"],
        "nccl_version": s["nccl_version"],
    }
    problems, fixes = [], []
    if s["transport"] is None:
        problems.append(
            "the log does not say which network NCCL used (no 'Using network' line): "
            "run with NCCL_DEBUG=INFO and capture the ranks' output"
        )
        fixes.append("set NCCL_DEBUG=INFO for the run and pass its whole output")
    elif net_plugin:
        try:
            state = read_net_plugin(log, expect_plugin=net_plugin)
        except ValueError as exc:
            problems.append(f"net plugin {net_plugin} configured, but the log's plugin lines cannot be read: {exc}")
            fixes.append("pass the whole NCCL_DEBUG=INFO output (NCCL_DEBUG_SUBSYS=INIT,NET) of the run")
        else:
            used["net_plugin_state"] = state.cls
            loaded = state.cls in ("PLUGIN_LOADED", "PLUGIN_LOADED_OLDER_API")
            if not loaded or s["transport"] in TRANSPORTS:
                problems.append(
                    f"net plugin {net_plugin} configured, but NCCL used "
                    f"{'its internal ' if s['transport'] in TRANSPORTS else ''}{s['transport']} "
                    f"({state.cls}: {state.cause})"
                )
                fixes.append(
                    state.fix
                    or f"pin NCCL_NET to the plugin and check that libnccl-net.so of {net_plugin} is on "
                    "LD_LIBRARY_PATH in the container (NCCL_NET_PLUGIN)"
                )
    elif transport == "IB" and s["transport"] != "IB":
        why = " (libibverbs missing in the container)" if s["ibverbs_available"] is False else ""
        problems.append(f"IB expected, NCCL used {s['transport']}{why}")
        fixes.append(
            "install rdma-core/libibverbs in the image, pass /dev/infiniband into the container, "
            "check NCCL_IB_HCA and that NCCL_IB_DISABLE is not set"
        )
    elif transport == "Socket" and s["transport"] != "Socket":
        problems.append(f"Socket expected, NCCL used {s['transport']}")
        fixes.append("the configuration says Socket: check nccl_env (NCCL_IB_DISABLE / NCCL_NET)")
    if gdr and s["gdr"] is not True:
        state = "disabled" if s["gdr"] is False else "not shown in the log"
        hcas = ", ".join(h for h, on in sorted(s["gdr_by_hca"].items()) if not on)
        problems.append(f"GPUDirect RDMA expected, {state}{' for ' + hcas if hcas else ''}")
        fixes.append(
            "load nvidia_peermem (gpudirect stage), check NCCL_NET_GDR_LEVEL and the PCIe "
            "topology (GPU and NIC under one switch); ACS must be off on the path"
        )
    busbw = None
    if nccl_tests is not None:
        try:
            result = parse_nccl_tests(nccl_tests)
        except BenchmarkParseError as exc:
            busbw = {"ok": False, "message": f"nccl-tests output unreadable: {exc}"}
        else:
            if line_rate_gbit:
                ok, message = check_bus_bandwidth(result, float(line_rate_gbit), fraction=float(fraction))
            else:
                ok, message = (
                    result.ok,
                    f"nccl-tests {result.reason or 'ok'} (no line rate configured: bandwidth not judged)",
                )
            busbw = {"ok": ok, "message": message}
        if not busbw["ok"]:
            problems.append(f"Ring bus bandwidth: {busbw['message']}")
            fixes.append("check the NICs' link rate and the transport above; rerun all_reduce_perf with NCCL_ALGO=Ring")
    return {"ok": not problems, "problems": problems, "fix": list(dict.fromkeys(fixes)), "used": used, "busbw": busbw}


# --------------------------------------------------------------------------------------------
# Open MPI: which interfaces the MPI traffic used
# --------------------------------------------------------------------------------------------

_HOSTPID = re.compile(r"^\[([^\]:\s]+):(\d+)\]\s*")
_BTL_USING = re.compile(r"btl:tcp: using ipv[46] interface (\S+)")
_BTL_EXAMINE = re.compile(r"btl:tcp: examining interface (\S+)")
_BTL_MATCH = re.compile(r"btl: ?tcp: Found match: (\S+) \((\S+)\)")
_BTL_CONNECTED = re.compile(r"btl:tcp: now connected to (\S+?),? process")
_OOB_ADD = re.compile(r"oob:tcp:init adding (\S+) to our list of (V4|V6) connections")
_OOB_REJECT = re.compile(r"oob:tcp:init rejecting (?:loopback )?interface (\S+)")


def parse_ompi_tcp_verbose(text):
    """Read Open MPI's TCP BTL / OOB verbose lines (see the module docstring).

    Returns ``{"btl_interfaces": {host: [if]}, "btl_matches": [{"host", "address",
    "interface"}], "btl_connected": [{"host", "address"}], "oob_addresses": [{"host",
    "address", "family"}], "oob_rejected": [{"host", "interface"}], "lines": int}``
    (``lines``: how many verbose lines were read). Hosts come from the ``[host:pid]`` prefix
    (None when absent).
    """
    out = {
        "btl_interfaces": {},
        "btl_matches": [],
        "btl_connected": [],
        "oob_addresses": [],
        "oob_rejected": [],
        "lines": 0,
    }

    def _connected(m, host):
        address = m.group(1)
        return {"host": host, "address": address.rsplit(":", 1)[0] if address.count(":") == 1 else address}

    # (pattern, list it adds to, the item of a match): one record per distinct item.
    records = (
        (_BTL_MATCH, "btl_matches", lambda m, h: {"host": h, "address": m.group(1), "interface": m.group(2)}),
        (_BTL_CONNECTED, "btl_connected", _connected),
        (_OOB_ADD, "oob_addresses", lambda m, h: {"host": h, "address": m.group(1), "family": m.group(2)}),
        (_OOB_REJECT, "oob_rejected", lambda m, h: {"host": h, "interface": m.group(1)}),
    )

    def add(lst, item):
        if item not in lst:
            lst.append(item)

    for raw in str(text).splitlines():
        line = strip_launcher_prefix(raw.rstrip()).lstrip()
        hm = _HOSTPID.match(line)
        host = hm.group(1) if hm else None
        using = _BTL_USING.search(line)
        if using or _BTL_EXAMINE.search(line):
            if using:
                add(out["btl_interfaces"].setdefault(host, []), using.group(1))
            out["lines"] += 1
            continue
        for pattern, key, item in records:
            m = pattern.search(line)
            if m:
                add(out[key], item(m, host))
                out["lines"] += 1
                break
    return out


def _in(address, network):
    try:
        return ipaddress.ip_address(address.strip("[]")) in ipaddress.ip_network(network, strict=False)
    except ValueError:
        return False


def check_mpi_interfaces(parsed, network, interfaces=None):
    """Did the MPI job use only the configured data network?

    ``parsed``: :func:`parse_ompi_tcp_verbose`; ``network``: the data network's CIDR
    (``btl_tcp_if_include`` / ``oob_tcp_if_include``); ``interfaces``: ``{host: [names]}`` of
    the data NICs (the names with an address in ``network``), or None to check addresses only.
    Returns ``{"ok", "problems": [str], "used": {"btl_interfaces", "oob_addresses",
    "btl_connected"}}``. Fails closed: output without any BTL interface or OOB address line
    proves nothing (the run lacked ``btl_base_verbose``/``oob_base_verbose``).
    """
    problems = []
    btl = parsed.get("btl_interfaces") or {}
    if not btl and not parsed.get("oob_addresses"):
        problems.append(
            "no Open MPI TCP interface lines in the output: run mpirun with --mca btl_base_verbose 100 "
            "--mca oob_base_verbose 100 to prove which NICs carried the job"
        )
    allowed = {h: set(v) for h, v in (interfaces or {}).items()}
    every = set().union(*allowed.values()) if allowed else set()
    for host, names in sorted(btl.items(), key=lambda kv: str(kv[0])):
        ok_names = allowed.get(host, every) if allowed else None
        for name in names:
            if ok_names is not None and name not in ok_names:
                problems.append(
                    f"{host or '?'}: MPI TCP BTL used {name}, not a data NIC ({', '.join(sorted(ok_names)) or 'none'})"
                )
    for m in parsed.get("btl_matches") or []:
        if not _in(m["address"], network):
            problems.append(
                f"{m['host'] or '?'}: btl_tcp_if_include resolved to {m['address']} ({m['interface']}), "
                f"outside {network}"
            )
    for c in parsed.get("btl_connected") or []:
        if not _in(c["address"], network):
            problems.append(f"{c['host'] or '?'}: MPI TCP connection to {c['address']}, outside {network}")
    for a in parsed.get("oob_addresses") or []:
        if a["family"] == "V4" and not _in(a["address"], network):
            problems.append(f"{a['host'] or '?'}: Open MPI out-of-band channel on {a['address']}, outside {network}")
    used = {
        "btl_interfaces": btl,
        "oob_addresses": sorted({a["address"] for a in parsed.get("oob_addresses") or []}),
        "btl_connected": sorted({c["address"] for c in parsed.get("btl_connected") or []}),
    }
    return {"ok": not problems, "problems": problems, "used": used}


def data_nics_by_host(facts_by_host, network):
    """``{host: ansible_facts}`` -> ``{name: [interfaces with an IPv4 address in network]}``,
    keyed by inventory name and by the node's own host name (what Open MPI prints in its
    ``[host:pid]`` prefix). Interfaces come from Ansible's ``interfaces`` list and each
    interface fact's ``ipv4`` / ``ipv4_secondaries``."""
    out = {}
    for host, facts in (facts_by_host or {}).items():
        facts = facts or {}
        names = []
        for name in facts.get("interfaces") or []:
            fact = facts.get(name) or facts.get(re.sub(r"[-.:]", "_", name)) or {}
            addrs = [fact.get("ipv4") or {}] + list(fact.get("ipv4_secondaries") or [])
            if any(a.get("address") and _in(a["address"], network) for a in addrs):
                names.append(name)
        names.sort()
        out[host] = names
        for alias in (facts.get("hostname"), facts.get("nodename")):
            if alias:
                out.setdefault(alias, names)
    return out
