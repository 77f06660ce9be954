"""Policy routing of secondary NICs, read from iproute2 output: ``ip addr``, ``ip rule``,
``ip route show table N``. One state model: per interface, whether every source address it owns
has a from-rule to a table whose routes leave through it.

Stdlib only, Python 3.8+. Grammar from iproute2 (``ip/iprule.c`` print_rule,
``ip/iproute.c`` print_route, ``ip/ipaddress.c``; iproute2 4.x .. 6.x):

- rules: ``<prio>:<TAB or spaces>[not ]from <all|addr[/len]> [to <addr[/len]>] [tos X]
  [fwmark 0xM[/0xN]] [iif <dev>] [oif <dev>] [uidrange A-B] [ipproto P] [sport/dport N]
  (lookup <table> | goto <prio> | blackhole | unreachable | prohibit | nop) [suppress_prefixlength N]
  [realms R]``; older iproute2 prints a trailing space and aligns with spaces.
- routes: ``[unicast|local|broadcast|blackhole|unreachable|prohibit|throw] <default|addr[/len]>
  [via [inet6] <gw>] [dev <dev>] [proto P] [scope S] [src A] [metric N] [mtu N] [pref P]``
  (``ip ro`` is ``ip route``; ``ip -6`` adds ``metric 1024 pref medium``).
- addresses: ``<ifindex>: <name>[@link]: <FLAGS> mtu N ... state S ...``, ``link/ether <mac>``,
  ``inet <addr/len> ... scope <s> [dynamic] <label>``, ``inet <addr> peer <peer/len> ...`` (tun,
  ppp), ``inet6 <addr/len> scope <s>``; multipath routes print each ``nexthop via <gw> dev <dev>
  weight <n>`` on its own indented line after the route's.

A shell session (``host:~$ ip -4 rule`` prompts between outputs) is split by its commands
(:func:`read_session`); without prompts each line is read by its own grammar. A line that
starts like a rule or route but does not complete the grammar raises ParseError naming it.
Table numbering 10000 + device number follows amazon-ec2-net-utils (fixture N16).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError, shorten, split_lines

_RULE = re.compile(r"^(\d+):\s+(not\s+)?from\s+(\S+)(.*)$")
_RULE_ACTIONS = ("lookup", "table", "goto", "blackhole", "unreachable", "prohibit", "nop")
_ROUTE_TYPES = ("unicast", "local", "broadcast", "blackhole", "unreachable", "prohibit", "throw", "anycast", "multicast")  # noqa: E501
_ADDR_HEAD = re.compile(r"^(\d+):\s+([^\s:@]+)(?:@\S+)?:\s+<([^>]*)>(.*)$")
_PROMPT = re.compile(r"^\S*[$#]\s+(ip\s.*)$")


def _norm(line):
    return re.sub(r"[ \t]+", " ", line.strip())


def _prefix(text, lineno, raw):
    if text in ("all", "default"):
        return text
    try:
        return str(ipaddress.ip_network(text, strict=False)) if "/" in text else str(ipaddress.ip_address(text))
    except ValueError:
        raise ParseError(f"ip output line {lineno}: {text!r} is not an address or prefix: {shorten(raw)!r}") from None


def parse_rule_line(line, lineno=1):
    """One ``ip rule`` line as ``{"priority", "not", "from", "to", "iif", "oif", "fwmark",
    "table", "action"}``; ParseError when it is cut or not in the grammar."""
    s = _norm(line)
    m = _RULE.match(s)
    if not m:
        raise ParseError(f"ip rule line {lineno}: not '<prio>: from <sel> ...': {shorten(line)!r}")
    out = {"priority": int(m.group(1)), "not": bool(m.group(2)), "from": _prefix(m.group(3), lineno, line),
           "to": None, "iif": None, "oif": None, "fwmark": None, "table": None, "action": None}
    words = m.group(4).split()
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("to", "iif", "oif", "fwmark", "tos", "dsfield", "uidrange", "ipproto", "sport", "dport",
                 "realms", "suppress_prefixlength", "suppress_ifgroup", "lookup", "table", "goto", "l3mdev",
                 "protocol", "pref", "priority"):
            if w == "l3mdev":
                out["action"] = "l3mdev"
                i += 1
                continue
            if i + 1 >= len(words):
                raise ParseError(f"ip rule line {lineno}: '{w}' without a value (cut?): {shorten(line)!r}")
            val = words[i + 1]
            if w == "to":
                out["to"] = _prefix(val, lineno, line)
            elif w in ("iif", "oif", "fwmark"):
                out[w] = val
            elif w in ("lookup", "table"):
                out["table"] = val
                out["action"] = "lookup"
            elif w == "goto":
                out["action"] = f"goto {val}"
            i += 2
            continue
        if w in ("blackhole", "unreachable", "prohibit", "nop"):
            out["action"] = w
        elif w in ("[detached]", "[oif", "[iif", "down]", "proto", "kernel", "boot", "static"):
            pass
        i += 1
    if out["action"] is None:
        raise ParseError(f"ip rule line {lineno}: no action (lookup/goto/blackhole/...; cut?): {shorten(line)!r}")
    return out


def parse_ip_rule(text) -> list:
    """Rules of ``ip rule`` / ``ip -4 rule`` / ``ip -6 rule``, by priority (then as printed)."""
    rules = []
    for lineno, raw in enumerate(split_lines(text, "ip rule"), 1):
        if not raw.strip() or _PROMPT.match(raw.strip()):
            continue
        rules.append(parse_rule_line(raw, lineno))
    if not rules:
        raise ParseError("ip rule: no rule line")
    return sorted(rules, key=lambda r: r["priority"])


def parse_route_line(line, lineno=1, table="main"):
    """One ``ip route`` line: ``{"type", "dst", "via", "dev", "proto", "scope", "src", "metric", "table",
    "nexthops"}``. A multipath route (``ip route add ... nexthop via A dev X nexthop via B dev Y``)
    has its ``nexthop`` groups in ``nexthops`` (``[{"via", "dev", "weight"}]``, ``dev`` None); iproute2
    prints them on their own indented lines after the route's, which :func:`parse_ip_route` and
    :func:`read_session` join to it (:func:`route_devs` reads both forms)."""
    s = _norm(line)
    words = s.split()
    out = {"type": "unicast", "dst": None, "via": None, "dev": None, "proto": None, "scope": None, "src": None,
           "metric": None, "table": table, "nexthops": []}
    hop = None  # the nexthop group being read, or None for the route's own words
    i = 0
    if words and words[0] in _ROUTE_TYPES:
        out["type"] = words[0]
        i = 1
    if i >= len(words):
        raise ParseError(f"ip route line {lineno}: no destination: {shorten(line)!r}")
    out["dst"] = _prefix(words[i], lineno, line)
    i += 1
    while i < len(words):
        w = words[i]
        if w in ("via", "dev", "proto", "scope", "src", "metric", "table", "mtu", "pref", "expires", "weight",
                 "advmss", "hoplimit", "realm", "onlink", "linkdown", "nexthop", "congctl", "rtt", "initcwnd"):
            if w == "nexthop":
                hop = {"via": None, "dev": None, "weight": None}
                out["nexthops"].append(hop)
                i += 1
                continue
            if w in ("onlink", "linkdown"):
                i += 1
                continue
            if i + 1 >= len(words):
                raise ParseError(f"ip route line {lineno}: '{w}' without a value (cut?): {shorten(line)!r}")
            val = words[i + 1]
            if w == "via" and val in ("inet", "inet6") and i + 2 < len(words):
                i += 1
                val = words[i + 1]
            if hop is not None and w in ("via", "dev", "weight"):
                if w == "weight" and not val.isdigit():
                    raise ParseError(f"ip route line {lineno}: weight {val!r} is not a number: {shorten(line)!r}")
                hop[w] = _prefix(val, lineno, line) if w == "via" else int(val) if w == "weight" else val
            elif w == "via" or w == "src":
                out[w] = _prefix(val, lineno, line)
            elif w == "metric":
                if not val.isdigit():
                    raise ParseError(f"ip route line {lineno}: metric {val!r} is not a number: {shorten(line)!r}")
                out["metric"] = int(val)
            elif w in ("dev", "proto", "scope", "table"):
                out[w] = val
            i += 2
            continue
        i += 1
    for n, h in enumerate(out["nexthops"], 1):
        if h["dev"] is None:
            raise ParseError(f"ip route line {lineno}: nexthop {n} without 'dev' (cut?): {shorten(line)!r}")
    if out["type"] == "unicast" and not route_devs(out):
        raise ParseError(f"ip route line {lineno}: unicast route without 'dev' or 'nexthop ... dev' (cut?): "
                         f"{shorten(line)!r}")
    return out


def route_devs(route):
    """The interfaces a route leaves through: its ``dev``, or each nexthop's of a multipath route."""
    return [route["dev"]] if route["dev"] else [h["dev"] for h in route.get("nexthops", []) if h["dev"]]


def _route_lines(lines):
    """``(lineno, text)`` of each route, a multipath route's ``nexthop`` lines joined to its own."""
    out = []
    for lineno, raw in lines:
        s = _norm(raw)
        if s.startswith("nexthop ") and out:
            out[-1] = (out[-1][0], out[-1][1] + " " + s)
            continue
        out.append((lineno, s))
    return out


def parse_ip_route(text, table="main") -> list:
    """Routes of ``ip route [show table N]`` (``ip ro``, ``-4``/``-6``)."""
    lines = [(n, raw) for n, raw in enumerate(split_lines(text, "ip route"), 1)
             if raw.strip() and not _PROMPT.match(raw.strip())]
    if lines and _norm(lines[0][1]).startswith("nexthop "):
        raise ParseError(f"ip route line {lines[0][0]}: a nexthop line without its route (cut?): "
                         f"{shorten(lines[0][1])!r}")
    routes = [parse_route_line(s, lineno, table) for lineno, s in _route_lines(lines)]
    if not routes:
        raise ParseError("ip route: no route line")
    return routes


def parse_ip_addr(text) -> dict:
    """Interfaces of ``ip addr [show dev X]``: ``{name: {"ifindex", "flags", "mtu", "state", "mac",
    "inet": [cidr], "inet6": [{"address", "scope"}], "peers": {}}}``. ``mac`` is the link-layer address as
    printed (20 bytes for IPoIB); a point-to-point address (``inet <local> peer <peer>/<len>``)
    is the local host's own (``/32``, ``/128``), its peer in ``peers`` (``{local: peer/len}``)."""
    out = {}
    cur = None
    for lineno, raw in enumerate(split_lines(text, "ip addr"), 1):
        s = _norm(raw)
        if not s or _PROMPT.match(s):
            continue
        m = _ADDR_HEAD.match(s)
        if m:
            rest = m.group(4)
            mtu = re.search(r"\bmtu (\d+)", rest)
            state = re.search(r"\bstate (\S+)", rest)
            cur = out[m.group(2)] = {"ifindex": int(m.group(1)), "flags": m.group(3).split(","),
                                     "mtu": int(mtu.group(1)) if mtu else None,
                                     "state": state.group(1) if state else None, "mac": None, "inet": [], "inet6": [],
                                     "peers": {}}
            continue
        if cur is None:
            raise ParseError(f"ip addr line {lineno}: address line before any interface line: {shorten(raw)!r}")
        # The link-layer address whole: 6 bytes for Ethernet, 20 for IPoIB (link/infiniband).
        m = re.match(r"^link/(\w+) ((?:[0-9a-f]{2}:)+[0-9a-f]{2})\b", s)
        if m:
            cur["mac"] = m.group(2)
            continue
        m = re.match(r"^(inet6?) (\S+) peer (\S+)", s)
        if m:  # a point-to-point address (tun, ppp): "inet <local> peer <peer>/<len>", the length is the peer's
            if "/" in m.group(2) or not _ok_iface(m.group(3)):
                _bad(lineno, raw)
            local = ipaddress.ip_interface(m.group(2))  # no length: the host itself
            peer = str(ipaddress.ip_interface(m.group(3)))
            if m.group(1) == "inet":
                cur["inet"].append(str(local))
            else:
                scope = re.search(r"\bscope (\w+)", s)
                cur["inet6"].append({"address": str(local), "scope": scope.group(1) if scope else None})
            cur["peers"][str(local.ip)] = peer
            continue
        m = re.match(r"^inet (\S+)( .*)?$", s)
        if m:
            cur["inet"].append(str(ipaddress.ip_interface(m.group(1))) if _ok_iface(m.group(1)) else _bad(lineno, raw))
            continue
        m = re.match(r"^inet6 (\S+) scope (\w+)", s)
        if m:
            if not _ok_iface(m.group(1)):
                _bad(lineno, raw)
            cur["inet6"].append({"address": str(ipaddress.ip_interface(m.group(1))), "scope": m.group(2)})
            continue
        if re.match(r"^inet6? ", s):
            _bad(lineno, raw)
    if not out:
        raise ParseError("ip addr: no interface line ('<n>: <name>: <FLAGS> ...')")
    return out


def _ok_iface(text):
    try:
        ipaddress.ip_interface(text)
        return "/" in text
    except ValueError:
        return False


def _bad(lineno, raw):
    raise ParseError(f"ip addr line {lineno}: address cut or not '<addr>/<len>': {shorten(raw)!r}")


def _command_kind(cmd):
    words = _norm(cmd).split()
    fam = "6" if "-6" in words else ("4" if "-4" in words else None)
    obj = next((w for w in words[1:] if not w.startswith("-")), "")
    table = None
    if "table" in words and words.index("table") + 1 < len(words):
        table = words[words.index("table") + 1]
    for full, kind in (("rule", "rule"), ("route", "route"), ("address", "addr")):
        if obj and full.startswith(obj):
            return kind, fam, table
    return None, fam, table


def read_session(text) -> dict:
    """Addresses, rules and tables from a paste of iproute2 outputs (with or without prompts).

    Returns ``{"interfaces": parse_ip_addr result, "rules": {"4": [...], "6": [...]},
    "tables": {"<table>": {"4": [...], "6": [...]}}}``; family ``"?"`` where neither the
    command nor the addresses tell.
    """
    lines = split_lines(text, "ip output")
    chunks = []
    cur = {"kind": None, "fam": None, "table": None, "lines": []}
    for lineno, raw in enumerate(lines, 1):
        s = raw.strip()
        m = _PROMPT.match(s)
        if m:
            kind, fam, table = _command_kind(m.group(1))
            cur = {"kind": kind, "fam": fam, "table": table, "lines": []}
            chunks.append(cur)
            continue
        if not s:
            continue
        kind = cur["kind"]
        if kind is None:
            n = _norm(s)
            if _RULE.match(n) or re.match(r"^\d+:\s+not\s", n):
                kind = "rule"
            elif _ADDR_HEAD.match(n) or re.match(r"^(link/|inet6? |valid_lft)", n):
                kind = "addr"
            else:
                kind = "route"
            if not chunks or chunks[-1]["kind"] is not None or chunks[-1].get("auto") != kind:
                cur = {"kind": None, "auto": kind, "fam": None, "table": None, "lines": []}
                chunks.append(cur)
        cur["lines"].append((lineno, raw))
    interfaces, rules, tables = {}, {}, {}
    for ch in chunks:
        kind = ch["kind"] or ch.get("auto")
        if not ch["lines"] or kind is None:
            continue
        for lineno, raw in (_route_lines(ch["lines"]) if kind == "route" else ch["lines"]):
            if kind == "addr":
                continue
            if kind == "rule":
                r = parse_rule_line(raw, lineno)
                fam = ch["fam"] or _family(r["from"])
                rules.setdefault(fam, []).append(r)
            elif kind == "route":
                r = parse_route_line(raw, lineno, ch["table"] or "main")
                fam = ch["fam"] or _family(r["dst"], r["via"])
                tables.setdefault(r["table"], {}).setdefault(fam, []).append(r)
        if kind == "addr":
            block = "\n".join([""] * (ch["lines"][0][0] - 1) + [raw for _, raw in ch["lines"]])
            interfaces.update(parse_ip_addr(block))
    if not (interfaces or rules or tables):
        raise ParseError("ip output: no ip addr / ip rule / ip route line")
    for fam in rules:
        rules[fam].sort(key=lambda r: r["priority"])
    return {"interfaces": interfaces, "rules": rules, "tables": tables}


def _family(*values):
    for v in values:
        if v and v not in ("all", "default"):
            return "6" if ":" in v else "4"
    return "?"


def _covers(selector, address):
    if selector == "all":
        return False
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(selector, strict=False)
    except ValueError:
        return False


def check_policy_routing(session, primary=None) -> dict:
    """Per secondary interface: every global address needs a from-rule to a table whose default
    route leaves through that interface.

    ``primary``: the primary interface (None: the dev of main's default route without metric or
    with the lowest). Returns ``{"class": "POLICY_ROUTING_OK"|"MISSING_SOURCE_RULE"|
    "TABLE_WRONG_DEVICE"|"TABLE_NO_DEFAULT"|"TABLE_NOT_SHOWN"|"NO_SECONDARY", "severity",
    "cause", "fix", "primary", "interfaces": {name: {"sources": [{"source", "rule", "table",
    "state"}]}}}``. Rules that select a prefix routed through the interface's table (delegated
    prefixes) are listed as well.
    """
    interfaces, rules, tables = session["interfaces"], session["rules"], session["tables"]
    if primary is None:
        defaults = [r for fam in tables.get("main", {}).values() for r in fam if r["dst"] == "default"]
        defaults.sort(key=lambda r: r["metric"] or 0)
        primary = route_devs(defaults[0])[0] if defaults else None
    report = {}
    worst = None
    order = ("MISSING_SOURCE_RULE", "TABLE_WRONG_DEVICE", "TABLE_NO_DEFAULT", "TABLE_NOT_SHOWN")
    for name, iface in sorted(interfaces.items()):
        if name == primary or name == "lo":
            continue
        sources = [c.split("/")[0] for c in iface["inet"]]
        sources += [a["address"].split("/")[0] for a in iface["inet6"] if a["scope"] == "global"]
        entries = []
        for src in sources:
            fam = "6" if ":" in src else "4"
            fam_rules = rules.get(fam)
            if fam_rules is None:
                entries.append({"source": src, "rule": None, "table": None, "state": "TABLE_NOT_SHOWN"})
                continue
            rule = next((r for r in fam_rules if not r["not"] and r["action"] == "lookup"
                         and r["table"] not in ("local", "main", "default")
                         and (r["from"] == src or _covers(r["from"], src))), None)
            if rule is None:
                entries.append({"source": src, "rule": None, "table": None, "state": "MISSING_SOURCE_RULE"})
                continue
            entries.append({"source": src, "rule": rule["priority"], "table": rule["table"],
                            "state": _table_state(tables, rule["table"], fam, name)})
        for fam, fam_rules in rules.items():
            for r in fam_rules:
                if r["from"] in ("all",) or r["from"] in sources or r["action"] != "lookup":
                    continue
                if any(e["table"] == r["table"] for e in entries):
                    entries.append({"source": r["from"], "rule": r["priority"], "table": r["table"],
                                    "state": _table_state(tables, r["table"], fam, name)})
        if not entries:
            continue
        report[name] = {"sources": entries}
        for e in entries:
            if e["state"] in order and (worst is None or order.index(e["state"]) < order.index(worst[0])):
                worst = (e["state"], name, e)
    if not report:
        return {"class": "NO_SECONDARY", "severity": "ok", "primary": primary, "interfaces": {},
                "cause": "no secondary interface with a global address in the paste", "fix": None}
    if worst is None:
        names = ", ".join(sorted(report))
        return {"class": "POLICY_ROUTING_OK", "severity": "ok", "primary": primary, "interfaces": report,
                "cause": f"every source address of {names} has a from-rule to a table whose default route "
                         f"leaves through it (primary {primary or 'unknown'} uses main)", "fix": None}
    state, name, e = worst
    texts = {
        "MISSING_SOURCE_RULE": (f"{name}: no 'from {e['source']}' rule: replies from it follow main's default out "
                                f"of {primary or 'the primary NIC'} (asymmetric routing, rp_filter drops, ARP flux)",
                                f"ip rule add from {e['source']} lookup <10000+device number>; ip route add default "
                                f"via <gateway> dev {name} table <same>"),
        "TABLE_WRONG_DEVICE": (f"{name}: rule {e['rule']} sends {e['source']} to table {e['table']}, whose default "
                               f"route does not leave through {name}",
                               f"ip route replace default via <gateway> dev {name} table {e['table']}"),
        "TABLE_NO_DEFAULT": (f"{name}: table {e['table']} (rule {e['rule']}, from {e['source']}) has no default "
                             "route", f"ip route add default via <gateway> dev {name} table {e['table']}"),
        "TABLE_NOT_SHOWN": (f"{name}: the paste does not show the rules/table for {e['source']}",
                            f"paste 'ip -4 rule', 'ip -6 rule' and 'ip route show table {e['table'] or '<N>'}'"),
    }
    cause, fix = texts[state]
    return {"class": state, "severity": "warn" if state == "TABLE_NOT_SHOWN" else "fail", "primary": primary,
            "interfaces": report, "cause": cause, "fix": fix}


def _table_state(tables, table, fam, dev):
    routes = tables.get(table, {})
    fam_routes = routes.get(fam, routes.get("?"))
    if fam_routes is None:
        return "TABLE_NOT_SHOWN"
    default = [r for r in fam_routes if r["dst"] == "default"]
    if not default:
        return "TABLE_NO_DEFAULT"
    if all(dev not in route_devs(r) for r in default):
        return "TABLE_WRONG_DEVICE"
    return "OK"
