"""NCCL settings of a node: NCCL_SOCKET_IFNAME semantics, NCCL_IB_HCA / NCCL_IB_GID_INDEX choice,
the NCCL environment and the Open MPI TCP settings it implies, ``/etc/nccl.conf`` render, parse
and lint. Pure functions, stdlib only.

Runs on managed nodes (Python 3.8+) and on the controller (filter plugin ``nccl``). Which NICs
are data NICs is decided in ``multi_nic.py``; the GID table and the RoCE v2 GID choice are
``rdma.py``'s (one GID model); the ``mpirun`` command line is ``launch.render_mpirun``'s, which
takes :func:`launch_settings` of a :func:`render_nccl_env` result.

**RDMA port** - ``{"device": "mlx5_0", "port": 1, "state": "ACTIVE" (any text containing
ACTIVE counts: "PORT_ACTIVE (4)", "4: ACTIVE"), "link_layer": "InfiniBand"|"Ethernet",
"netdev": "enp27s0f0np0" or None, "roce_v2_gid_index": 3 or None, "gids": [rdma.gid_entry()
dicts] or None}``.

Sources
=======

- NCCL environment variables, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html:
  ``NCCL_SOCKET_IFNAME`` is a comma list of interface-name prefixes; ``^`` in front excludes,
  ``=`` in front matches exact names (``=eth0,eth1``: only eth0 and eth1; ``^=docker0``: all but
  docker0); without a setting NCCL tries ``^docker,lo``, then docker, then lo (so ``^docker0``
  alone lets it pick ``lo``: fixture C29). ``NCCL_IB_HCA`` has the same syntax with optional
  ``:port`` (``=mlx5_0:1,mlx5_1:1``). ``NCCL_IB_GID_INDEX``: the GID index used in RoCE mode
  (find it with ``show_gids`` / ``ibv_devinfo -v``; default -1 = auto from NCCL 2.21, 0 before).
  ``NCCL_NET_GDR_LEVEL``: the longest GPU-NIC path where GPUDirect RDMA is used, one of LOC
  (never), PIX, PXB, PHB, SYS. ``NCCL_NET_PLUGIN``: plugin name, NCCL loads
  ``libnccl-net-<name>.so``. ``NCCL_SOCKET_NTHREADS`` (1-16) x ``NCCL_NSOCKS_PERTHREAD`` must not
  exceed 64. ``/etc/nccl.conf`` holds ``KEY=VALUE`` lines, read as-is (no quote stripping).
- Open MPI TCP: ``btl_tcp_if_include`` / ``oob_tcp_if_include`` take interface names or CIDR
  networks; include and exclude lists are mutually exclusive (Open MPI FAQ "tcp").
- RoCE v2 GID choice: ``rdma.pick_roce_gid_index`` (NVIDIA/nccl #769, fixture C32).
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils import rdma
from ansible_collections.gpucluster.cluster.plugins.module_utils.multi_nic import (
    NEVER_PREFIXES,
    NetworkError,
    exclusion_reason,
    has_ipv4,
    is_up,
    normalize_interface,
    same_subnet_groups,
    usable_interfaces,
    usable_ipv4,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import natural_key

GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
NCCL_DEFAULT_SOCKET_IFNAME = "^docker,lo"


class NcclEnvError(NetworkError):
    """Facts from which no sound NCCL/MPI network setting can be rendered; says what to fix."""


# --------------------------------------------------------------------------------------------
# NCCL_SOCKET_IFNAME semantics, nccl.conf
# --------------------------------------------------------------------------------------------




def parse_ifname_spec(spec: str) -> dict:
    """Split an ``NCCL_SOCKET_IFNAME``/``NCCL_IB_HCA`` value: ``{"exclude", "exact", "items"}``.

    ``items`` is a list of ``(name_or_prefix, port_or_None)``.
    """
    s = str(spec).strip()
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    items = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, port = part.partition(":")
        items.append((name, int(port) if port.isdigit() else None))
    return {"exclude": exclude, "exact": exact, "items": items}


def ifname_matches(spec: str, name: str) -> bool:
    """Whether NCCL would accept interface ``name`` under ``NCCL_SOCKET_IFNAME=spec``."""
    p = parse_ifname_spec(spec)
    hit = any((name == item if p["exact"] else name.startswith(item)) for item, _ in p["items"])
    return not hit if p["exclude"] else hit


def simulate_socket_ifname(spec, interfaces) -> list:
    """Names NCCL's socket code would use, in fact order (up, with an IPv4 address, matching).

    ``spec`` None reproduces NCCL's default chain ``^docker,lo`` -> ``docker`` -> ``lo``.
    An approximation of NCCL's ``findInterfaces`` for IPv4 (the case the fixtures show).
    """
    norm = [normalize_interface(i) for i in interfaces]
    with_addr = [i for i in norm if is_up(i) and has_ipv4(i)]

    def pick(s):
        return [i["name"] for i in with_addr if ifname_matches(s, i["name"])]

    if spec is not None:
        return pick(spec)
    for s in (NCCL_DEFAULT_SOCKET_IFNAME, "docker", "lo"):
        found = pick(s)
        if found:
            return found
    return []


def check_socket_ifname(value: str, interfaces=None) -> list:
    """Problems with an ``NCCL_SOCKET_IFNAME`` value (empty list: none found).

    Flags an exclude list that does not exclude ``lo`` (C29: ``^docker0`` lets NCCL pick lo),
    one that leaves other docker bridges eligible, and an include naming a never-use interface.
    With ``interfaces`` it also simulates the selection and flags what would be picked wrongly.
    """
    findings = []
    p = parse_ifname_spec(value)
    names = [n for n, _ in p["items"]]
    if not names:
        findings.append(f"NCCL_SOCKET_IFNAME={value} names no interface")
        return findings
    if p["exclude"]:
        if ifname_matches(value, "lo"):
            findings.append(
                "NCCL_SOCKET_IFNAME={} excludes only {}, so NCCL may pick lo (127.0.0.1, unreachable "
                "from peers); set an explicit include of the data NIC (=<nic>) or at least ^docker,lo".format(
                    value, ",".join(names)
                )
            )
        eligible = [n for n in ("docker0", "docker_gwbridge") if ifname_matches(value, n)]
        if eligible:
            findings.append(
                "NCCL_SOCKET_IFNAME={} leaves Docker bridges eligible ({}); use the prefix 'docker' "
                "without '=' or an explicit include".format(value, ", ".join(eligible))
            )
    else:
        for n in names:
            if n.startswith(NEVER_PREFIXES) or n == "lo" or (not p["exact"] and "lo".startswith(n)):
                findings.append(f"NCCL_SOCKET_IFNAME={value} includes {n}, which never carries NCCL traffic")
    if interfaces is not None:
        picked = simulate_socket_ifname(value, interfaces)
        if not picked:
            findings.append(f"NCCL_SOCKET_IFNAME={value} matches no up interface with an IPv4 address")
        for i in [normalize_interface(x) for x in interfaces]:
            if i["name"] in picked:
                reason = exclusion_reason(i, explicit=True)
                if reason:
                    findings.append("NCCL would use {}: {}".format(i["name"], reason))
    return findings


def parse_nccl_conf(text: str) -> dict:
    """``KEY=VALUE`` lines of an nccl.conf as NCCL reads them (split at the first ``=``).

    NCCL (src/misc/param.cc ``setEnvFile``) reads each line with ``getline``, skips it when it
    starts with ``#`` (column 0) or has no ``=``, drops only the final ``\n`` and sets the text
    before the first ``=`` as the variable name and the rest as its value, both verbatim: no
    whitespace or quote stripping, no ``export``. So ``NCCL_DEBUG = INFO`` sets a variable named
    ``"NCCL_DEBUG "`` (NCCL_DEBUG stays unset), ``  NCCL_DEBUG=INFO`` one named ``"  NCCL_DEBUG"``,
    and a CRLF file gives values ending in ``\r``; the keys and values here are those texts
    (lint_nccl_conf() names such lines). The FIRST line that sets a key wins, as in NCCL:
    ``setenv(name, value, 0)`` never overwrites a variable already set.
    """
    out = {}
    for line in str(text).split("\n"):
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out.setdefault(key, value)
    return out


NCCL_CONF_BEGIN = ("# BEGIN gpucluster nccl_env managed block (first, so NCCL takes these values; "
                   "edits inside are overwritten)")
NCCL_CONF_END = "# END gpucluster nccl_env managed block"
NCCL_CONF_OVERRIDDEN = "# gpucluster: overridden by the managed block above, kept for reference: "
_LEGACY_HEADER = "# Managed by Ansible (gpucluster)"


def merge_nccl_conf(existing, env) -> dict:
    """New ``/etc/nccl.conf`` text: gpucluster's managed block first, the user's lines kept after it.

    ``existing``: the file's text ('' when absent); ``env``: ``{NAME: value}`` (or the
    render_nccl_env() result). NCCL takes the first line that sets a variable (see
    parse_nccl_conf), so the block comes first and wins; a user line outside it that sets a key
    the block manages would be dead and misleading, so it is commented out
    (``NCCL_CONF_OVERRIDDEN`` + the line) and listed in ``overridden``. Every other line (comments,
    NCCL_DEBUG, NCCL_IB_TIMEOUT, ...) is kept as it is, in its order. A file written by an
    earlier gpucluster version (its ``# Managed by Ansible (gpucluster)`` header) was all
    gpucluster's: it is replaced. Returns ``{"text", "overridden" (list of lines),
    "user_lines" (list)}``; rerunning on its own output returns the same text.
    """
    body = render_nccl_conf(env).splitlines()[1:]
    managed = {line.partition("=")[0] for line in body}
    lines = str(existing or "").splitlines()
    if lines and lines[0].startswith(_LEGACY_HEADER):
        lines = []
    user, inside = [], False
    for line in lines:
        if line.startswith(NCCL_CONF_BEGIN.split(" (")[0]):
            inside = True
            continue
        if inside:
            inside = not line.startswith(NCCL_CONF_END)
            continue
        user.append(line)
    overridden, kept = [], []
    for line in user:
        s = line.strip()
        key = s.partition("=")[0].strip()
        if s and not s.startswith("#") and "=" in s and key in managed:
            overridden.append(line)
            kept.append(NCCL_CONF_OVERRIDDEN + line)
        else:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    text = "\n".join([NCCL_CONF_BEGIN] + body + [NCCL_CONF_END] + kept) + "\n"
    return {"text": text, "overridden": overridden, "user_lines": kept}


def lint_nccl_conf(text: str, interfaces=None, gids=None, ipv4=None) -> list:
    """Findings for an existing ``/etc/nccl.conf`` (see check_socket_ifname()); empty = clean.

    With ``gids`` (the port's GID table: text of ``ibv_devinfo -v``/``show_gids`` or
    ``rdma.gid_entry`` dicts) a ``NCCL_IB_GID_INDEX`` is checked against it
    (``rdma.check_gid_index``, optionally for the data address ``ipv4``).
    """
    findings = []
    conf = parse_nccl_conf(text)
    for key, value in conf.items():
        name = key.strip()
        if name.startswith("export ") or name.startswith("export\t"):
            name = name[len("export"):].strip()
        if key != name and name.startswith("NCCL_"):
            findings.append(f"{key}={value}: NCCL takes the text before '=' verbatim as the name, so this sets "
                            f"{key!r}, not {name}; write '{name}=<value>' (no spaces around '=', no 'export')")
        if value != value.rstrip() and key.strip().startswith(("NCCL_", "export")):
            findings.append(f"{key}={value.rstrip()}: the value ends in whitespace or a carriage return "
                            f"(CRLF file?), which NCCL keeps as part of the value; remove it")
        if value[:1] in ("'", '"'):
            findings.append(f"{key}={value}: NCCL does not strip quotes; write the bare value")
    if "NCCL_SOCKET_IFNAME" in conf:
        findings.extend(check_socket_ifname(conf["NCCL_SOCKET_IFNAME"].strip("'\""), interfaces))
    if "NCCL_IB_GID_INDEX" in conf and gids is not None:
        table = rdma.parse_gid_table(gids) if isinstance(gids, str) else gids
        findings.extend(rdma.check_gid_index(conf["NCCL_IB_GID_INDEX"], table, ipv4))
    return findings



# --------------------------------------------------------------------------------------------
# RDMA: HCAs and the one GID index
# --------------------------------------------------------------------------------------------


def _port_key(port: dict) -> str:
    return "{}:{}".format(port["device"], port["port"])


def normalize_rdma_port(port: dict) -> dict:
    """An RDMA port dict (module docstring shape) with ``port`` as int and ``active`` added."""
    out = dict(port)
    out["device"] = str(port.get("device") or port.get("hca") or "")
    out["port"] = int(port.get("port") or 1)
    out["active"] = "ACTIVE" in str(port.get("state", "")).upper()
    ll = str(port.get("link_layer") or "").lower()
    out["link_layer"] = (
        "InfiniBand" if ll.startswith("inf") or ll == "ib" else ("Ethernet" if ll.startswith("eth") else None)
    )
    return out


def select_hcas(rdma_ports, interfaces=None, hcas=None):
    """Choose the HCA ports for ``NCCL_IB_HCA``: ``(chosen, excluded)``.

    Only ACTIVE ports. When both link layers are present the InfiniBand ports are the
    training fabric and the Ethernet ones (front-end NICs) are left out (fixture C05). A RoCE
    port whose netdev is known and down is left out. ``hcas``: explicit ``["mlx5_0:1", ...]``
    or ``["mlx5_bond_0"]`` (port 1). Returns normalized port dicts (natural order) and
    ``{"mlx5_2:1": reason}``.
    """
    ports = [normalize_rdma_port(p) for p in (rdma_ports or [])]
    ports.sort(key=lambda p: (natural_key(p["device"]), p["port"]))
    up_netdevs = None
    if interfaces is not None:
        up_netdevs = {}
        for i in interfaces:
            n = normalize_interface(i)
            up_netdevs[n["name"]] = is_up(n)
    excluded = {}
    if hcas:
        if isinstance(hcas, str):
            hcas = [h for h in re.split(r"[,\s]+", hcas.lstrip("=")) if h]
        want = []
        for h in hcas:
            dev, _, port = str(h).partition(":")
            want.append((dev, int(port) if port else 1))
        chosen = []
        for dev, port in want:
            match = [p for p in ports if p["device"] == dev and p["port"] == port]
            if not match:
                raise NcclEnvError(f"HCA {dev}:{port} is not on this node")
            if not match[0]["active"]:
                raise NcclEnvError(
                    "HCA {}:{} is not ACTIVE (state {})".format(dev, port, match[0].get("state"))
                )
            chosen.append(match[0])
        return chosen, excluded
    active = []
    for p in ports:
        key = _port_key(p)
        if not p["active"]:
            excluded[key] = "port state %s, not ACTIVE" % (p.get("state") or "unknown")
        elif p["link_layer"] is None:
            excluded[key] = "unknown link layer {!r}".format(p.get("link_layer"))
        elif (
            p["link_layer"] == "Ethernet"
            and up_netdevs is not None
            and p.get("netdev") in up_netdevs
            and not up_netdevs[p["netdev"]]
        ):
            excluded[key] = "RoCE netdev {} is down".format(p["netdev"])
        else:
            active.append(p)
    if any(p["link_layer"] == "InfiniBand" for p in active):
        for p in active:
            if p["link_layer"] == "Ethernet":
                excluded[_port_key(p)] = "Ethernet port next to an InfiniBand fabric"
        active = [p for p in active if p["link_layer"] == "InfiniBand"]
    return active, excluded


def roce_gid_index(ports, interfaces=None) -> int:
    """The one ``NCCL_IB_GID_INDEX`` for RoCE ports (Ethernet link layer).

    Per port: ``rdma.pick_roce_gid_index()`` over ``gids`` restricted to the netdev's IPv4
    addresses when the interfaces are known, else ``roce_v2_gid_index`` (from ``rdma_facts``).
    When both are known they must agree (a configured index is checked against the GID table
    with ``rdma.check_gid_index``). The value is global in NCCL, so all ports must agree.
    Raises NcclEnvError otherwise.
    """
    addrs = {}
    for i in interfaces or []:
        n = normalize_interface(i)
        addrs[n["name"]] = n.get("ipv4") or []
    found = {}
    for p in ports:
        key = _port_key(p)
        idx = p.get("roce_v2_gid_index")
        ipv4 = addrs.get(p.get("netdev")) or None
        if p.get("gids"):
            if idx is not None:
                problems = rdma.check_gid_index(idx, p["gids"], ipv4, where=f"{key} GID index")
                if problems:
                    raise NcclEnvError("; ".join(problems))
            else:
                idx = rdma.pick_roce_gid_index(p["gids"], ipv4)
        if idx is None:
            raise NcclEnvError(
                "no RoCE v2 GID with an IPv4 address on {} (netdev {}): GID entries come from the "
                "netdev's IP addresses, so give {} an IPv4 address (link-local RoCE v2 GIDs fail across "
                "subnets)".format(key, p.get("netdev") or "unknown", p.get("netdev") or "the netdev")
            )
        found[key] = int(idx)
    values = sorted(set(found.values()))
    if len(values) > 1:
        raise NcclEnvError(
            "RoCE v2 GID index differs between HCAs ({}) but NCCL_IB_GID_INDEX is one value: make the "
            "GID tables agree (same address layout on every netdev) or leave NCCL_IB_GID_INDEX unset on "
            "NCCL >= 2.21".format(", ".join(f"{k}={v}" for k, v in sorted(found.items())))
        )
    return values[0]



# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------




def check_values(gdr_level=None, net_plugin=None, socket_nthreads=None, nsocks_perthread=None):
    """The nccl_env settings that need no node: raises NcclEnvError naming the first bad one.

    ``gdr_level`` one of GDR_LEVELS (any case); ``net_plugin`` a plugin name or library path;
    ``socket_nthreads`` 1-16 and ``nsocks_perthread`` >= 1 with a product of at most 64 (NCCL's
    limit, its environment variable documentation). None: not set. Used by
    render_nccl_env and, before any stage runs, by preflight (module_utils/stage_settings.py).
    """
    if gdr_level is not None and str(gdr_level).upper() not in GDR_LEVELS:
        raise NcclEnvError(
            "NCCL_NET_GDR_LEVEL must be one of {}, got {!r}".format(", ".join(GDR_LEVELS), gdr_level)
        )
    if net_plugin and not re.match(r"^[A-Za-z0-9._/+-]+$", str(net_plugin)):
        raise NcclEnvError(f"NCCL_NET_PLUGIN must be a plugin name or library path, got {net_plugin!r}")
    if socket_nthreads is not None or nsocks_perthread is not None:
        try:
            nt = int(socket_nthreads if socket_nthreads is not None else 1)
            ns = int(nsocks_perthread if nsocks_perthread is not None else 1)
        except (TypeError, ValueError):
            raise NcclEnvError(
                f"NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD must be whole numbers, got "
                f"{socket_nthreads!r} / {nsocks_perthread!r}") from None
        if not 1 <= nt <= 16:
            raise NcclEnvError(f"NCCL_SOCKET_NTHREADS must be 1-16, got {nt}")
        if ns < 1:
            raise NcclEnvError(f"NCCL_NSOCKS_PERTHREAD must be >= 1, got {ns}")
        if nt * ns > 64:
            raise NcclEnvError(
                f"NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = {nt} x {ns} = {nt * ns} exceeds NCCL's "
                "limit of 64"
            )


def render_nccl_env(
    interfaces,
    rdma_ports=None,
    data_interfaces=None,
    hcas=None,
    gdr_level=None,
    gpudirect_rdma=None,
    net_plugin=None,
    socket_nthreads=None,
    nsocks_perthread=None,
    mca_use_cidr: bool = False,
) -> dict:
    """NCCL environment and Open MPI MCA settings for one node.

    Arguments: ``interfaces`` and ``rdma_ports`` in the module docstring shapes;
    ``data_interfaces``: names to use (default: every usable interface); ``hcas``: explicit
    HCA list (default: select_hcas()); ``gdr_level``: LOC/PIX/PXB/PHB/SYS; ``gpudirect_rdma``:
    False renders ``NCCL_NET_GDR_LEVEL=LOC`` when no level is given (peer memory missing);
    ``net_plugin``: NCCL_NET_PLUGIN name; ``socket_nthreads``/``nsocks_perthread``: socket
    transport threads (1-16, product <= 64); ``mca_use_cidr``: Open MPI lists as networks
    (``198.18.160.0/20``) instead of names, for nodes whose NIC names differ.

    Returns ``{"env": {NAME: str}, "mca": {param: str}, "data_interfaces": [names],
    "excluded_interfaces": {name: reason}, "hcas": ["mlx5_0:1"], "excluded_hcas": {..},
    "same_subnet": [[names]], "warnings": [str]}``. Raises NcclEnvError with the fix when no
    usable interface exists or a value is invalid.
    """
    selected, excluded = usable_interfaces(interfaces, data_interfaces)
    names = [i["name"] for i in selected]
    env = {"NCCL_SOCKET_IFNAME": "=" + ",".join(names)}
    warnings = []

    chosen, excluded_hcas = select_hcas(rdma_ports, interfaces, hcas) if (rdma_ports or hcas) else ([], {})
    if chosen:
        env["NCCL_IB_HCA"] = "=" + ",".join(_port_key(p) for p in chosen)
        roce = [p for p in chosen if p["link_layer"] == "Ethernet"]
        if roce:
            env["NCCL_IB_GID_INDEX"] = str(roce_gid_index(roce, interfaces))
    elif rdma_ports:
        warnings.append(
            "no ACTIVE RDMA port ({}): NCCL will use the socket transport".format(
                ", ".join("{}: {}".format(*kv) for kv in excluded_hcas.items())
            )
        )

    check_values(gdr_level, net_plugin, socket_nthreads, nsocks_perthread)
    if gdr_level is not None:
        env["NCCL_NET_GDR_LEVEL"] = str(gdr_level).upper()
    elif gpudirect_rdma is False and chosen:
        env["NCCL_NET_GDR_LEVEL"] = "LOC"
        warnings.append(
            "GPUDirect RDMA unavailable (no peer memory): NCCL_NET_GDR_LEVEL=LOC stages through host memory"
        )

    if net_plugin:
        env["NCCL_NET_PLUGIN"] = str(net_plugin)
    if socket_nthreads is not None:
        env["NCCL_SOCKET_NTHREADS"] = str(int(socket_nthreads))
    if nsocks_perthread is not None:
        env["NCCL_NSOCKS_PERTHREAD"] = str(int(nsocks_perthread))

    if mca_use_cidr:
        nets = []
        for i in selected:
            for itf in usable_ipv4(i)[:1]:
                if str(itf.network) not in nets:
                    nets.append(str(itf.network))
        mca_value = ",".join(nets)
    else:
        mca_value = ",".join(names)
    mca = {"btl_tcp_if_include": mca_value, "oob_tcp_if_include": mca_value}

    groups = same_subnet_groups(selected)
    for g in groups:
        warnings.append(
            "{} share one IPv4 subnet: without per-NIC policy routing and arp_ignore/arp_announce/"
            "rp_filter (arp_sysctls(), policy_routes()) replies leave through one NIC (ARP flux); "
            "or give each rail its own subnet".format(", ".join(g))
        )
    return {
        "env": env,
        "mca": mca,
        "data_interfaces": names,
        "excluded_interfaces": excluded,
        "hcas": [_port_key(p) for p in chosen],
        "excluded_hcas": excluded_hcas,
        "same_subnet": groups,
        "warnings": warnings,
    }


def render_nccl_conf(env) -> str:
    """``/etc/nccl.conf`` text: a comment line, then sorted ``KEY=VALUE`` lines, final newline.

    ``env``: a ``{NAME: value}`` dict or the render_nccl_env() result. Values are written bare
    (NCCL does not strip quotes); a value with a newline or a key that is not an environment
    name raises NcclEnvError.
    """
    if isinstance(env, dict) and isinstance(env.get("env"), dict):
        env = env["env"]
    lines = ["# Managed by Ansible (gpucluster): NCCL settings for this node; edits are overwritten"]
    for key in sorted(env):
        value = env[key]
        if not re.match(r"^[A-Z_][A-Z0-9_]*$", str(key)):
            raise NcclEnvError(f"not an environment variable name: {key!r}")
        text = str(value)
        if "\n" in text or "\r" in text:
            raise NcclEnvError(f"value of {key} contains a line break")
        lines.append(f"{key}={text}")
    return "\n".join(lines) + "\n"


def mca_env(mca: dict) -> dict:
    """Open MPI MCA settings as environment: ``{"OMPI_MCA_btl_tcp_if_include": "enp159s0", ...}``."""
    if isinstance(mca, dict) and isinstance(mca.get("mca"), dict):
        mca = mca["mca"]
    return {f"OMPI_MCA_{k}": str(v) for k, v in sorted(mca.items())}


def launch_settings(rendered: dict) -> dict:
    """The job-spec fields ``launch.render_mpirun`` takes from a :func:`render_nccl_env` result.

    ``{"nccl_env": {NCCL_*: value}, "network_interface": "ens1,ens2" or "198.18.0.0/20"}``:
    launch exports ``nccl_env`` with ``-x NAME=value`` and pins Open MPI's
    ``btl_tcp_if_include`` and ``oob_tcp_if_include`` to ``network_interface``; so the one
    mpirun renderer carries what this module decided. Raises NcclEnvError when the two MCA
    lists differ (launch has one value for both) or a variable is not NCCL_*.
    """
    env = dict(rendered.get("env") or {})
    mca = dict(rendered.get("mca") or {})
    bad = sorted(k for k in env if not str(k).startswith("NCCL_"))
    if bad:
        raise NcclEnvError(f"only NCCL_* variables belong in a job's nccl_env, got {', '.join(bad)}")
    btl, oob = mca.get("btl_tcp_if_include"), mca.get("oob_tcp_if_include")
    if btl != oob:
        raise NcclEnvError(
            f"btl_tcp_if_include={btl!r} and oob_tcp_if_include={oob!r} differ; launch pins both to "
            "one network_interface"
        )
    out = {"nccl_env": {k: str(v) for k, v in sorted(env.items())}}
    if btl:
        out["network_interface"] = str(btl)
    return out
