"""RDMA fact parsers: ``ibdev2netdev``, ``ibstatus``, ``ibv_devinfo [-v]``, ``ibv_devices``,
``rdma link``, ``show_gids``, sysfs GID tables; the one GID model and the RoCE v2 GID choice.

Pure functions over the tools' text output (and over a dict of sysfs file contents), stdlib
only, for Python 3.8+ on the managed node (``rdma_facts`` module) and for pytest. Nothing here
runs a command or opens a file.

Every parser raises :class:`ParseError` (a ``ValueError``) that says what it expected and on
which line when the input is malformed or truncated; none returns a half-read value.

Units: link rates are in Gbit/s (``rate_gbps``), MTUs in bytes.

Sources:

- ``ibdev2netdev`` (MLNX_OFED / DOCA-OFED script): ``<hca> port <n> ==> <netdev> (<Up|Down>)``;
  with ``-v`` the PCI address, part number, firmware and the IB port state come first. The
  ``(Up)``/``(Down)`` is the state of the *netdev* (IPoIB or Ethernet), not of the IB port
  (fixture C05: a pure IB fabric without IPoIB shows every HCA ``(Down)``).
- ``ibstatus`` (infiniband-diags) and the kernel's sysfs ABI
  (``Documentation/ABI/stable/sysfs-class-infiniband``): ``state`` ``4: ACTIVE``,
  ``phys_state`` ``5: LinkUp``, ``rate`` ``100 Gb/sec (4X EDR)``, ``link_layer``
  ``InfiniBand``/``Ethernet``, ``gids/<i>`` and ``gid_attrs/types/<i>`` (``IB/RoCE v1``,
  ``RoCE v2``), ``gid_attrs/ndevs/<i>``. On RoCE the rate keeps the IB speed name (fixture C06).
- ``ibv_devinfo`` (rdma-core ``libibverbs/examples/devinfo.c``): ``hca_id:``, ``port:``,
  ``state: PORT_ACTIVE (4)``, ``active_width: 4X (2)``, ``active_speed: 25.0 Gbps (32)``,
  ``link_layer``; with ``-v`` the GID table ``GID[  3]: ::ffff:192.0.2.6, RoCE v2``.
- GID index for NCCL: NCCL environment variables documentation, ``NCCL_IB_GID_INDEX``
  ("the Global ID index used in RoCE mode", see ``show_gids``) and, since NCCL 2.21, the
  automatic choice driven by ``NCCL_IB_ADDR_FAMILY`` (default ``AF_INET``) and
  ``NCCL_IB_ROCE_VERSION_NUM`` (default 2): a RoCE v2 GID holding the IPv4-mapped address
  (``::ffff:a.b.c.d``). The link-local ``fe80::`` RoCE v2 GID is not routable and times out
  across nodes (NVIDIA/nccl #769, fixture C32).
"""

from __future__ import annotations

import ipaddress
import json
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    natural_key,
    shorten,
    split_lines,
)

ACTIVE = "ACTIVE"


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _number(text):
    value = float(text)
    return int(value) if value.is_integer() else value


def fabric(link_layer):
    """``"InfiniBand"`` for an InfiniBand link layer, ``"RoCE"`` for Ethernet, else None."""
    if link_layer == "InfiniBand":
        return "InfiniBand"
    if link_layer == "Ethernet":
        return "RoCE"
    return None


_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\(([^)]*)\))?$")


def parse_rate(text):
    """``"100 Gb/sec (4X EDR)"`` -> ``{"rate_gbps": 100, "width": "4X", "speed": "EDR"}``.

    The rate is in Gbit/s as the kernel reports it (sysfs ``rate``, ``ibstatus``); width and
    speed name are None when the parenthesis is absent. Raises ParseError otherwise.
    """
    m = _RATE_RE.match(str(text).strip())
    if not m:
        raise ParseError(f"rate: expected '<n> Gb/sec (<width> <speed>)', got {text!r}")
    width = speed = None
    if m.group(2):
        parts = m.group(2).split()
        if parts and re.match(r"^\d+X$", parts[0]):
            width = parts[0]
            speed = " ".join(parts[1:]) or None
        else:
            speed = m.group(2).strip() or None
    return {"rate_gbps": _number(m.group(1)), "width": width, "speed": speed}


_NUM_STATE_RE = re.compile(r"^(\d+):\s*(\S.*)$")
# Logical port states (IBTA spec, ``enum ibv_port_state`` in rdma-core verbs.h).
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
LINK_LAYERS = ("InfiniBand", "Ethernet", "Unknown")
# ibv_devinfo of rdma-core >= v33 (commit b87d8c973, "Fix reporting link_layer for efa devices")
# prints IBV_LINK_LAYER_UNSPECIFIED as "Unspecified" (AWS EFA); before it printed "InfiniBand".
# The kernel's sysfs (and so ibstatus) says "Unknown" for the same port.
DEVINFO_LINK_LAYERS = LINK_LAYERS + ("Unspecified",)


def _num_state(text, what, names=None):
    """``"4: ACTIVE"`` -> (``"ACTIVE"``, 4) (sysfs and ibstatus form).

    With ``names`` ({number: name}) the pair must be one of them (a cut ``4: ACT`` fails).
    """
    m = _NUM_STATE_RE.match(str(text).strip())
    if not m:
        raise ParseError(f"{what}: expected '<n>: <NAME>' such as '4: ACTIVE', got {text!r}")
    number, name = int(m.group(1)), m.group(2).strip()
    if names is not None and names.get(number) != name:
        raise ParseError(f"{what}: {text!r} is not a port state "
                         f"({', '.join(f'{k}: {v}' for k, v in sorted(names.items()))})")
    return name, number


def _link_layer(value, what, allowed=LINK_LAYERS):
    if value not in allowed:
        raise ParseError(f"{what}: link layer should be one of {', '.join(allowed)}, "
                         f"got {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# GIDs
# --------------------------------------------------------------------------------------------


def gid_entry(index, gid, gid_type=None, netdev=None, device=None, port=None):
    """One GID table entry as a dict: THE GID model (ibv_devinfo -v, show_gids, sysfs).

    ::

        {"index": 3, "gid": "::ffff:192.0.2.6",   # as printed
         "type": "RoCE v2" or "RoCE v1" or "IB/RoCE v1" or None,
         "roce_version": 2 or 1 or None,
         "ipv4": "192.0.2.6" or None,            # IPv4-mapped GID (::ffff:a.b.c.d)
         "link_local": False,                    # fe80::/10
         "netdev": "ens1f0" or None,             # sysfs gid_attrs/ndevs, show_gids DEV
         "device": "mlx5_0" or None,             # hca_id / show_gids DEV column
         "port": 1 or None}

    ``type`` is what the tool prints: ``RoCE v1``/``RoCE v2`` (ibv_devinfo -v of rdma-core >= 28,
    Ethernet link layer only), ``IB/RoCE v1``/``RoCE v2`` (sysfs ``gid_attrs/types``), ``v1``/``v2``
    (show_gids, normalised to ``RoCE v1``/``RoCE v2``), ``Invalid gid type`` (devinfo's default
    branch: ``roce_version`` None). Raises ParseError when ``gid`` is not an IPv6-formatted GID
    or the type is none of these.
    """
    try:
        addr = ipaddress.IPv6Address(str(gid).strip())
    except ValueError:
        raise ParseError(f"GID[{index}]: {gid!r} is not a 128-bit GID "
                         f"(IPv6 notation)") from None
    version = None
    if gid_type:
        gid_type = " ".join(gid_type.split())
        if re.match(r"^v[12]$", gid_type):
            gid_type = "RoCE " + gid_type
        m = re.match(r"^(?:IB/)?RoCE v([12])$", gid_type)
        if m:
            version = int(m.group(1))
        elif gid_type != "Invalid gid type":
            raise ParseError(f"GID[{index}]: type {gid_type!r} is not 'RoCE v1', "
                             f"'IB/RoCE v1' or 'RoCE v2'")
    mapped = addr.ipv4_mapped
    return {
        "index": int(index),
        "gid": str(gid).strip(),
        "type": gid_type or None,
        "roce_version": version,
        "ipv4": str(mapped) if mapped is not None else None,
        "link_local": addr.is_link_local,
        "netdev": netdev,
        "device": device,
        "port": port,
    }


_GID_LINE_RE = re.compile(r"^GID\[\s*(\d+)\]:\s*([0-9A-Fa-f:.]+)\s*(?:,\s*(.*\S))?\s*$")
# show_gids (MLNX_OFED / DOCA script over sysfs): DEV PORT INDEX GID [IPv4] VER DEV
_SHOW_GIDS_RE = re.compile(
    r"^(\S+)\s+(\d+)\s+(\d+)\s+([0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){7})\s+"
    r"(?:(\d+\.\d+\.\d+\.\d+)\s+)?(v[12])\s*(\S+)?$"
)
_SHOW_GIDS_OTHER_RE = re.compile(r"^(?:DEV\s+PORT\s+INDEX\b.*|[-\s]+|n_gids_found=\d+)$")
_HCA_ID_RE = re.compile(r"^hca_id:\s*(\S+)$")
_PORT_RE = re.compile(r"^port:\s*(\d+)$")


def _gid_from_line(line, lineno, device=None, port=None):
    m = _GID_LINE_RE.match(line.strip())
    if not m:
        raise ParseError(f"ibv_devinfo line {lineno}: expected 'GID[ n]: <gid>[, RoCE v1|v2]', "
                         f"got {shorten(line)!r}")
    return gid_entry(int(m.group(1)), m.group(2), m.group(3), device=device, port=port)


def parse_gid_table(text):
    """GID entries of ``ibv_devinfo -v`` (one or more ports) or of ``show_gids``.

    ``ibv_devinfo -v`` (rdma-core ``libibverbs/examples/devinfo.c``): every line that starts with
    ``GID[`` is read: ``GID[  3]:  ::ffff:192.0.2.6, RoCE v2``; rdma-core >= 28 prints a RoCE v2
    GID with inet_ntop and a v1 one as eight hex groups, the type only on an Ethernet link layer
    (absent on InfiniBand and before v28). ``hca_id:``/``port:`` lines set ``device``/``port``.
    ``show_gids`` (MLNX_OFED/DOCA script): ``mlx5_0 1 3 0000:...:c000:0206 192.0.2.6 v2 ens1f0``
    rows; its header, dashes and ``n_gids_found=`` are skipped. Tabs or collapsed spaces are
    fine.

    Returns :func:`gid_entry` dicts in (device, port, index) order. Raises ParseError when no
    GID is found, when a ``GID[`` line or a show_gids row is malformed (a truncated GID fails
    IPv6 parsing), or when a line looks like a show_gids row but is not one.
    """
    gids = []
    device = port = None
    show_gids = False
    for lineno, line in enumerate(split_lines(text, "GID table"), 1):
        s = line.strip()
        if not s:
            continue
        m = _HCA_ID_RE.match(s)
        if m:
            device, port = m.group(1), None
            continue
        m = _PORT_RE.match(s)
        if m:
            port = int(m.group(1))
            continue
        if s.startswith("GID["):
            gids.append(_gid_from_line(s, lineno, device, port))
            continue
        if re.match(r"^DEV\s+PORT\s+INDEX\b", s):
            show_gids = True
            continue
        m = _SHOW_GIDS_RE.match(s)
        if m:
            entry = gid_entry(m.group(3), m.group(4), m.group(6), m.group(7), m.group(1),
                              int(m.group(2)))
            if m.group(5) and entry["ipv4"] != m.group(5):
                raise ParseError(f"show_gids line {lineno}: IPv4 column {m.group(5)} does not "
                                 f"match GID {m.group(4)}")
            gids.append(entry)
            continue
        if show_gids and not _SHOW_GIDS_OTHER_RE.match(s):
            raise ParseError(f"show_gids line {lineno}: expected 'DEV PORT INDEX GID [IPv4] VER "
                             f"DEV', got {shorten(line)!r}")
    if not gids:
        raise ParseError("GID table: no 'GID[ n]:' lines (run ibv_devinfo with -v) and no "
                         "show_gids row found")
    return sorted(gids, key=lambda g: (natural_key(g["device"] or ""), g["port"] or 0,
                                       g["index"]))


def _wanted_ipv4(ipv4):
    """``"192.0.2.6"``, ``"192.0.2.6/24"`` or a list of them -> set of address strings."""
    items = [ipv4] if isinstance(ipv4, str) else list(ipv4)
    wanted = set()
    for address in items:
        try:
            wanted.add(str(ipaddress.ip_interface(str(address).strip()).ip))
        except ValueError:
            raise ParseError(f"{address!r} is not an IPv4 address") from None
    return wanted


def pick_roce_gid_index(gids, ipv4=None):
    """THE GID index choice for ``NCCL_IB_GID_INDEX`` / ``NVSHMEM_IB_GID_INDEX`` on a RoCE port.

    ``gids`` are :func:`gid_entry` dicts (from :func:`parse_gid_table`, :func:`parse_ibv_devinfo`
    or :func:`parse_sysfs_infiniband`); ``ipv4`` optionally names the address(es) of the
    interface NCCL should use (strings, CIDR allowed: ``192.0.2.6/24``).

    Rule (NCCL environment variables documentation, NCCL_IB_GID_INDEX and, from NCCL 2.21,
    NCCL_IB_ADDR_FAMILY=AF_INET / NCCL_IB_ROCE_VERSION_NUM=2; NVIDIA/nccl #769): the entry must
    be RoCE v2 and hold an IPv4-mapped address ``::ffff:a.b.c.d`` (equal to ``ipv4`` when
    given). The link-local ``fe80::`` RoCE v2 entry is never chosen (not routable: QPs time
    out between nodes, fixture C32), nor are RoCE v1 entries. Among several matches the lowest
    index wins. Returns None when no entry qualifies (no IPv4 address on the netdev yet, or an
    InfiniBand port, where NCCL needs no GID index).
    """
    wanted = _wanted_ipv4(ipv4) if ipv4 else None
    matches = [g["index"] for g in gids
               if g.get("roce_version") == 2 and g.get("ipv4") and not g.get("link_local")
               and (wanted is None or g["ipv4"] in wanted)]
    return min(matches) if matches else None


def check_gid_index(index, gids, ipv4=None, where="NCCL_IB_GID_INDEX"):
    """Problems with a configured GID index against the port's GID table (empty list: fine).

    The configured value must name an entry that exists, is RoCE v2 and carries an IPv4-mapped
    address (of ``ipv4`` when given); each finding says what the table holds at that index and
    which index :func:`pick_roce_gid_index` would use.
    """
    try:
        index = int(str(index).strip())
    except ValueError:
        return [f"{where}={index!r} is not a number"]
    if index < 0:
        return []  # NCCL >= 2.21: -1 is "choose automatically"
    best = pick_roce_gid_index(gids, ipv4)
    hint = (f"; the RoCE v2 IPv4 GID is index {best}" if best is not None
            else "; the table has no RoCE v2 GID with an IPv4 address (give the netdev one)")
    entry = next((g for g in gids if g["index"] == index), None)
    if entry is None:
        return [f"{where}={index}: no such GID in the table (indices "
                f"{', '.join(str(g['index']) for g in gids) or 'none'}){hint}"]
    if entry.get("roce_version") != 2:
        return [f"{where}={index}: GID {entry['gid']} is {entry.get('type') or 'untyped'}, not "
                f"RoCE v2{hint}"]
    if entry.get("link_local") or not entry.get("ipv4"):
        return [f"{where}={index}: GID {entry['gid']} is link-local/not IPv4-mapped; it times "
                f"out across subnets (fixture C32){hint}"]
    if ipv4 and entry["ipv4"] not in _wanted_ipv4(ipv4):
        return [f"{where}={index}: GID carries {entry['ipv4']}, not the data address "
                f"{', '.join(sorted(_wanted_ipv4(ipv4)))}{hint}"]
    return []


# --------------------------------------------------------------------------------------------
# ibdev2netdev
# --------------------------------------------------------------------------------------------

# The MLNX_OFED script's "old style" branch (no /sys/class/net/*/dev_id): ``print_line`` echoes
# ``<hca> port <n> <===> <netdev>`` with no state (Mellanox/docker-sriov-plugin, ibdev2netdev).
_IBDEV2NETDEV_OLD_RE = re.compile(r"^(?P<hca>[A-Za-z][\w.-]*)\s+port\s+(?P<port>\d+)\s+<===>\s+(?P<netdev>\S+)$")
_IBDEV2NETDEV_RE = re.compile(
    r"^(?:(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+)?"
    r"(?P<hca>[A-Za-z][\w.-]*)\s+(?:.*?\s)?port\s+(?P<port>\d+)"
    r"(?:\s+\((?P<port_state>[A-Z_]+)\s*\))?\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>[^)]+)\)$"
)


def parse_ibdev2netdev(text):
    """Records of ``ibdev2netdev`` or ``ibdev2netdev -v``, naturally sorted by HCA and port.

    Returns::

        [{"hca": "mlx5_0", "port": 1, "netdev": "ibp26s0",
          "netdev_state": "Down",            # the netdev's state, NOT the IB port state
          "netdev_type": "ipoib" or "ethernet",
          "bus_id": "0000:1a:00.0" or None,  # -v only
          "port_state": "ACTIVE" or None}]   # -v only; else read ibv_devinfo / sysfs

    ``netdev_type`` is read from the name: IPoIB interfaces are ``ib<N>`` or
    ``ibp<bus>s<slot>`` (kernel and systemd naming), everything else is the Ethernet netdev of
    a RoCE port. Use the port's ``link_layer`` (ibv_devinfo, sysfs) where it is known.

    The script's "old style" branch (kernels without ``/sys/class/net/*/dev_id``) prints
    ``<hca> port <n> <===> <netdev>`` without a state: ``netdev_state`` is then None.

    ``-v`` pads the port state to six characters (the script's ``printf "%-6s"``: ``(DOWN  )``,
    ``(INIT  )``). Spacing from ``column -t`` and trailing ``# ...`` annotations are tolerated (fixture C05);
    any other line raises ParseError. Empty output gives ``[]``.
    """
    records = []
    for lineno, line in enumerate(split_lines(text, "ibdev2netdev"), 1):
        content = re.sub(r"\s+#.*$", "", line).strip()
        if not content:
            continue
        m = _IBDEV2NETDEV_RE.match(content) or _IBDEV2NETDEV_OLD_RE.match(content)
        if not m:
            raise ParseError(f"ibdev2netdev line {lineno}: expected '<hca> port <n> ==> <netdev> "
                             f"(Up|Down)', got {shorten(line)!r}")
        netdev = m.group("netdev")
        records.append({
            "hca": m.group("hca"),
            "port": int(m.group("port")),
            "netdev": netdev,
            "netdev_state": m.groupdict().get("state"),
            "netdev_type": "ipoib" if re.match(r"^ib(?:\d|p\d)", netdev) else "ethernet",
            "bus_id": m.group("bus").lower() if m.groupdict().get("bus") else None,
            "port_state": m.groupdict().get("port_state"),
        })
    records.sort(key=lambda r: (natural_key(r["hca"]), r["port"]))
    return records


def classify_hcas(netdev_records, ports=None):
    """HCAs split by fabric: ``{"infiniband": [...], "ethernet": [...]}`` (natural order).

    With ``ports`` (dicts with ``hca`` and ``link_layer``, from :func:`parse_ibstatus`,
    :func:`parse_sysfs_infiniband` or the ports of :func:`parse_ibv_devinfo` with ``hca``
    added) the link layer decides; an HCA without port information falls back to the netdev
    name (``netdev_type`` of :func:`parse_ibdev2netdev`). The netdev state (Up/Down) is not
    looked at: it says nothing about the RDMA port (fixture C05). The ``infiniband`` list is
    what ``NCCL_IB_HCA`` should name on an InfiniBand fabric.
    """
    layer = {}
    for port in ports or []:
        layer.setdefault(port["hca"], port.get("link_layer"))
    out = {"infiniband": [], "ethernet": []}
    seen = set()
    hcas = [(r["hca"], r.get("netdev_type")) for r in netdev_records or []]
    hcas += [(hca, None) for hca in layer]
    for hca, netdev_type in hcas:
        if hca in seen:
            continue
        seen.add(hca)
        ll = layer.get(hca)
        if ll == "InfiniBand" or (ll is None and netdev_type == "ipoib"):
            out["infiniband"].append(hca)
        elif ll == "Ethernet" or (ll is None and netdev_type == "ethernet"):
            out["ethernet"].append(hca)
    for key in out:
        out[key].sort(key=natural_key)
    return out


# --------------------------------------------------------------------------------------------
# ibstatus
# --------------------------------------------------------------------------------------------

_IBSTATUS_HEADER_RE = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:$")
_IBSTATUS_REQUIRED = ("state", "phys state", "rate", "link_layer")


def _ibstatus_port(hca, port, values, lineno):
    missing = [k for k in _IBSTATUS_REQUIRED if k not in values]
    if missing:
        raise ParseError(f"ibstatus: block '{hca}' port {port} (ending at line {lineno}) lacks "
                         f"{', '.join(missing)}; output truncated?")
    state, state_num = _num_state(values["state"], f"ibstatus {hca} port {port} state",
                                  PORT_STATES)
    _link_layer(values["link_layer"], f"ibstatus {hca} port {port}")
    phys, phys_num = _num_state(values["phys state"], f"ibstatus {hca} port {port} phys state")
    rate = parse_rate(values["rate"])
    default_gid = values.get("default gid")
    link_local = None
    if default_gid:
        link_local = gid_entry(0, default_gid)["link_local"]
    return {
        "hca": hca, "port": port,
        "state": state, "state_num": state_num,
        "phys_state": phys, "phys_state_num": phys_num,
        "rate": values["rate"], "rate_gbps": rate["rate_gbps"], "width": rate["width"],
        "speed": rate["speed"],
        "link_layer": values["link_layer"], "fabric": fabric(values["link_layer"]),
        "base_lid": values.get("base lid"), "sm_lid": values.get("sm lid"),
        "default_gid": default_gid,
        "default_gid_link_local": link_local,
    }


def parse_ibstatus(text):
    """Ports of ``ibstatus`` output, naturally sorted.

    Returns::

        [{"hca": "mlx5_0", "port": 1, "state": "ACTIVE", "state_num": 4,
          "phys_state": "LinkUp", "phys_state_num": 5,
          "rate": "100 Gb/sec (4X EDR)", "rate_gbps": 100, "width": "4X", "speed": "EDR",
          "link_layer": "Ethernet", "fabric": "RoCE",
          "base_lid": "0x0", "sm_lid": "0x0",
          "default_gid": "fe80:...", "default_gid_link_local": True}]

    ``fabric`` follows the link layer only: on RoCE ``ibstatus`` still prints IB speed names
    such as ``4X EDR`` (fixture C06). The ``default gid`` is GID index 0, the link-local one:
    never the GID NCCL should use on RoCE (see :func:`pick_roce_gid_index`).

    Every block must carry state, phys state, rate and link_layer (the last line ibstatus
    prints), else ParseError (truncated); lines outside ``Infiniband device '<hca>' port <n>
    status:`` blocks or without ``key: value`` raise ParseError. Empty output gives ``[]``.
    """
    ports = []
    current = None
    values = {}
    last = 0
    for lineno, line in enumerate(split_lines(text, "ibstatus"), 1):
        stripped = " ".join(line.split())
        if not stripped:
            continue
        header = _IBSTATUS_HEADER_RE.match(stripped)
        if header:
            if current:
                ports.append(_ibstatus_port(current[0], current[1], values, last))
            current = (header.group(1), int(header.group(2)))
            values = {}
            last = lineno
            continue
        if current is None:
            raise ParseError(f"ibstatus line {lineno}: expected \"Infiniband device '<hca>' port "
                             f"<n> status:\", got {shorten(line)!r}")
        key, sep, value = stripped.partition(":")
        if not sep or not key.strip():
            raise ParseError(f"ibstatus line {lineno}: expected 'key: value', got {shorten(line)!r}")
        values[" ".join(key.split())] = " ".join(value.split())
        last = lineno
    if current:
        ports.append(_ibstatus_port(current[0], current[1], values, last))
    ports.sort(key=lambda p: (natural_key(p["hca"]), p["port"]))
    return ports


# --------------------------------------------------------------------------------------------
# ibv_devinfo [-v]
# --------------------------------------------------------------------------------------------

_KEY_RE = re.compile(r"^([A-Za-z][\w .\-/]*?)\s*:\s*(.*)$")
_PORT_STATE_RE = re.compile(r"^PORT_([A-Z_]+)\s*\((\d+)\)$")
_PAREN_CODE_RE = re.compile(r"^(.*?)\s*\((\d+)\)$")
_DEVICE_INT_KEYS = ("vendor_part_id", "phys_port_cnt")


def _strip_code(value):
    """``"InfiniBand (0)"`` -> ``"InfiniBand"``; ``"LINK_UP (5)"`` -> ``"LINK_UP"``."""
    m = _PAREN_CODE_RE.match(value)
    return m.group(1) if m else value


def _int_or_error(value, what, lineno):
    m = re.match(r"^(\d+)", value)
    if not m:
        raise ParseError(f"ibv_devinfo line {lineno}: {what} should be a number, got {value!r}")
    return int(m.group(1))


def _new_port(number):
    return {"port": number, "state": None, "state_num": None, "active": False,
            "phys_state": None, "link_layer": None, "fabric": None,
            "max_mtu": None, "active_mtu": None, "sm_lid": None, "port_lid": None,
            "port_lmc": None, "active_width": None, "active_speed": None, "rate_gbps": None,
            "gids": []}


def _set_port_key(port, key, value, lineno):
    if key == "state":
        m = _PORT_STATE_RE.match(value)
        if not m:
            raise ParseError(f"ibv_devinfo line {lineno}: port state should read like "
                             f"'PORT_ACTIVE (4)', got {value!r}")
        port["state"], port["state_num"] = m.group(1), int(m.group(2))
        if PORT_STATES.get(port["state_num"]) != port["state"]:
            raise ParseError(f"ibv_devinfo line {lineno}: {value!r} is not a port state "
                             f"(PORT_DOWN (1), PORT_INIT (2), PORT_ARMED (3), PORT_ACTIVE (4))")
        port["active"] = m.group(1) == ACTIVE
    elif key in ("max_mtu", "active_mtu", "sm_lid", "port_lid"):
        port[key] = _int_or_error(value, key, lineno)
    elif key == "link_layer":
        port["link_layer"] = _link_layer(value, f"ibv_devinfo line {lineno}", DEVINFO_LINK_LAYERS)
        port["fabric"] = fabric(value)
    elif key in ("phys_state", "active_width", "active_speed", "port_lmc"):
        port[key] = _strip_code(value)


def _finish_ports(port):
    width = re.match(r"^(\d+)X", port["active_width"] or "")
    speed = re.match(r"^(\d+(?:\.\d+)?)\s*Gbps", port["active_speed"] or "")
    if width and speed:
        port["rate_gbps"] = _number(str(int(width.group(1)) * float(speed.group(1))))


def _check_device(dev, lineno):
    expected = dev.get("phys_port_cnt")
    if expected is not None and len(dev["ports"]) != expected:
        raise ParseError(f"ibv_devinfo: {dev['hca']} announces phys_port_cnt {expected} but "
                         f"{len(dev['ports'])} port section(s) follow (output truncated before "
                         f"line {lineno}?)")
    if not dev["ports"]:
        raise ParseError(f"ibv_devinfo: {dev['hca']} has no 'port:' section (output truncated "
                         f"before line {lineno}?)")
    for port in dev["ports"]:
        missing = [k for k in ("state", "link_layer") if port[k] is None]
        if missing:
            raise ParseError(f"ibv_devinfo: {dev['hca']} port {port['port']} lacks "
                             f"{', '.join(missing)} (output truncated before line {lineno}?)")
        _finish_ports(port)


def parse_ibv_devinfo(text):
    """Devices of ``ibv_devinfo`` or ``ibv_devinfo -v``, in natural order.

    Returns::

        [{"hca": "mlx5_7", "transport": "InfiniBand", "fw_ver": "28.39.3004",
          "node_guid": "0000:0000:0000:0000", "node_guid_zero": True,
          "sys_image_guid": "...", "vendor_id": "0x02c9", "vendor_part_id": 4126,
          "hw_ver": "0x0", "board_id": "MT_0000000838", "phys_port_cnt": 1,
          "ports": [{"port": 1, "state": "INIT", "state_num": 2, "active": False,
                     "phys_state": "LINK_UP" or None, "link_layer": "InfiniBand",
                     "fabric": "InfiniBand" or "RoCE", "max_mtu": 4096, "active_mtu": 4096,
                     "sm_lid": 4, "port_lid": None, "port_lmc": "0x00",
                     "active_width": "4X" or None, "active_speed": "25.0 Gbps" or None,
                     "rate_gbps": 100 or None,        # width x lane speed, Gbit/s
                     "gids": [gid_entry, ...]}]}]     # -v only, see gid_entry

    Tolerant of tabs or collapsed spaces, of unknown keys (skipped) and of the flag lists and
    notes ``-v`` prints on lines of their own (fixture C07 has 4-space indentation and a
    ``port_id`` key). ``No IB devices found`` gives ``[]``.

    Raises ParseError when: text comes before the first ``hca_id:``; a device has fewer
    ``port:`` sections than its ``phys_port_cnt``; a port lacks ``state`` or ``link_layer``
    (the last line of a port in plain ibv_devinfo; so a cut output is caught); a state, MTU,
    LID or GID is malformed. ``link_layer`` may also read ``Unspecified`` (rdma-core >= v33 on
    AWS EFA; ``fabric`` None).
    """
    lines = split_lines(text, "ibv_devinfo")
    if any(line.strip() == "No IB devices found" for line in lines):
        return []
    devices = []
    dev = None
    port = None
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("GID["):
            if port is None:
                raise ParseError(f"ibv_devinfo line {lineno}: GID line outside a 'port:' "
                                 f"section")
            port["gids"].append(_gid_from_line(stripped, lineno, dev["hca"], port["port"]))
            continue
        m = _KEY_RE.match(stripped)
        if m and m.group(1) == "hca_id":
            if dev is not None:
                _check_device(dev, lineno)
            if not m.group(2).strip():
                raise ParseError(f"ibv_devinfo line {lineno}: 'hca_id:' without a device name")
            dev = {"hca": m.group(2).strip(), "transport": None, "fw_ver": None,
                   "node_guid": None, "node_guid_zero": False, "sys_image_guid": None,
                   "vendor_id": None, "vendor_part_id": None, "hw_ver": None,
                   "board_id": None, "phys_port_cnt": None, "ports": []}
            devices.append(dev)
            port = None
            continue
        if dev is None:
            raise ParseError(f"ibv_devinfo line {lineno}: expected 'hca_id: <device>' first, "
                             f"got {shorten(line)!r}")
        if not m:
            # -v prints flag names and notes ("tag matching not supported") on lines of their own.
            continue
        key, value = " ".join(m.group(1).split()), " ".join(m.group(2).split())
        if key == "port":
            port = _new_port(_int_or_error(value, "port", lineno))
            dev["ports"].append(port)
        elif port is not None:
            _set_port_key(port, key, value, lineno)
        elif key in _DEVICE_INT_KEYS:
            dev[key] = _int_or_error(value, key, lineno)
        elif key == "transport":
            dev["transport"] = _strip_code(value)
        elif key in ("fw_ver", "node_guid", "sys_image_guid", "vendor_id", "hw_ver", "board_id"):
            dev[key] = value
            if key == "node_guid":
                dev["node_guid_zero"] = bool(re.match(r"^[0:]+$", value))
    if dev is not None:
        _check_device(dev, len(lines) + 1)
    if not devices:
        raise ParseError("ibv_devinfo: no 'hca_id:' line (empty or not ibv_devinfo output)")
    devices.sort(key=lambda d: natural_key(d["hca"]))
    return devices


def rdma_problems(devices):
    """Findings on :func:`parse_ibv_devinfo` devices, one sentence each (empty = healthy).

    - a port not ``ACTIVE`` (fixture C07: ``INIT`` means the link trained but the subnet
      manager has not activated the port; NCCL cannot use it);
    - a node GUID of all zeros (a virtual function without an assigned GUID, fixture C07); not
      for a device whose ports all have an ``Unspecified`` link layer (AWS EFA: rdma-core
      b87d8c973 shows ``efa_0`` with node_guid ``0000:0000:0000:0000`` by design).

    No root cause is claimed; the sentence names the device, the port and what was read.
    """
    problems = []
    for dev in devices:
        efa_like = bool(dev["ports"]) and all(p["link_layer"] == "Unspecified" for p in dev["ports"])
        if dev.get("node_guid_zero") and not efa_like:
            problems.append(f"{dev['hca']}: node_guid is {dev['node_guid']} (all zero: a virtual "
                            f"function without an assigned GUID)")
        for port in dev["ports"]:
            if not port["active"]:
                problems.append(f"{dev['hca']} port {port['port']}: state {port['state']} "
                                f"({port['state_num']}), not ACTIVE")
    return problems


# --------------------------------------------------------------------------------------------
# ibv_devices
# --------------------------------------------------------------------------------------------

_IBV_DEVICES_HEADER_RE = re.compile(r"^device\s+node\s+GUID$")
_IBV_DEVICES_RULE_RE = re.compile(r"^-+\s+-+$")
_IBV_DEVICES_ROW_RE = re.compile(r"^([A-Za-z][\w.-]*)\s+([0-9a-fA-F]{16})$")
_PROMPT_RE = re.compile(r"^(?:\[[^\]]*\][#$]|[\w.@:~/-]*[#$])\s*\S.*$")


def _is_prompt(stripped):
    """A shell prompt line pasted with the output (``[root@test test]# ibv_devices``)."""
    return bool(_PROMPT_RE.match(stripped))


def parse_ibv_devices(text):
    """Devices of ``ibv_devices`` (rdma-core ``libibverbs/examples/device_list.c``, all versions).

    Grammar: a header ``    device          \\t   node GUID``, a rule ``    ------ \\t----...``,
    then one row per verbs device: the name padded to 16 and a TAB, then the node GUID as 16
    hex digits (``%016llx``, host byte order). Zero devices print the header only. Returns::

        [{"hca": "mlx5_bond_0", "node_guid": "e8ebd30300000001", "node_guid_zero": False,
          "bond": True}]                        # mlx5_bond_<n>: RoCE LAG, one device per adapter

    in natural order. Columns split on any white space (TAB included); a shell prompt line is
    skipped. Raises ParseError naming the line for anything else (a GUID cut short, a row
    without GUID, ``Failed to get IB devices list`` - the verbs library itself failed).
    """
    devices = []
    for lineno, line in enumerate(split_lines(text, "ibv_devices"), 1):
        s = " ".join(line.split())
        if not s or _IBV_DEVICES_HEADER_RE.match(s) or _IBV_DEVICES_RULE_RE.match(s) or _is_prompt(s):
            continue
        if s.startswith("Failed to get IB devices list"):
            raise ParseError(f"ibv_devices line {lineno}: {s!r}: libibverbs could not list devices "
                             f"(is the rdma-core library installed and /sys/class/infiniband_verbs "
                             f"present?)")
        m = _IBV_DEVICES_ROW_RE.match(s)
        if not m:
            raise ParseError(f"ibv_devices line {lineno}: expected '<device> <16 hex digit node "
                             f"GUID>', got {shorten(line)!r}")
        guid = m.group(2).lower()
        devices.append({"hca": m.group(1), "node_guid": guid,
                        "node_guid_zero": guid == "0" * 16,
                        "bond": bool(re.match(r"^mlx\d+_bond_\d+$", m.group(1)))})
    devices.sort(key=lambda d: natural_key(d["hca"]))
    return devices


_LSPCI_NIC_RE = re.compile(
    r"^(?P<slot>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<cls>Ethernet controller|Infiniband controller|InfiniBand controller|Network controller)"
    r"(?:\s*\[[0-9a-fA-F]{4}\])?:\s*(?P<name>.+)$"
)


def parse_lspci_rdma_functions(text):
    """Mellanox/NVIDIA network functions in ``lspci`` output (plain, ``-D`` or ``-nn``).

    Lines of other classes or vendors and shell prompts are skipped (``lspci | grep Ether``
    pastes keep the prompt). Returns ``[{"slot": "0000:17:00.1", "adapter": "0000:17:00",
    "function": 1, "class": "Ethernet controller", "name": "MT27800 Family [ConnectX-5]"}]``.
    """
    out = []
    for _lineno, line in enumerate(split_lines(text, "lspci"), 1):
        s = " ".join(line.split())
        m = _LSPCI_NIC_RE.match(s)
        if not m:
            continue
        name = m.group("name")
        if not re.match(r"^(?:Mellanox Technologies|NVIDIA Corporation)\b", name) and "[15b3:" not in name:
            continue
        slot = m.group("slot").lower()
        if slot.count(":") == 1:
            slot = "0000:" + slot
        name = re.sub(r"^(?:Mellanox Technologies|NVIDIA Corporation)\s+", "", name)
        out.append({"slot": slot, "adapter": slot.rsplit(".", 1)[0], "function": int(slot[-1]),
                    "class": m.group("cls"), "name": name})
    return out


def rdma_device_coverage(devices, functions):
    """Do the verbs devices cover the PCI functions? ``{"verdict", "expected", "found",
    "bond_devices", "problems"}``.

    ``devices``: :func:`parse_ibv_devices` (or ``parse_ibv_devinfo``) entries; ``functions``:
    :func:`parse_lspci_rdma_functions`. A ``mlx5_bond_<n>`` device is one RDMA device for all
    functions of one adapter (RoCE LAG: the ports are bonded), so two ConnectX functions with
    one bond device are complete (fixture N18). Verdicts: ``ROCE_LAG_ACTIVE`` (complete, with a
    bond), ``OK`` (one device per function), ``DEVICES_MISSING`` (fewer devices than the
    functions need; verbs providers or mlx5_ib missing?), ``NO_RDMA_HARDWARE`` (neither).
    """
    names = [d["hca"] for d in devices]
    bonds = [n for n in names if re.match(r"^mlx\d+_bond_\d+$", n)]
    adapters = {}
    for f in functions:
        adapters.setdefault(f["adapter"], []).append(f["slot"])
    multi = sorted(a for a, slots in adapters.items() if len(slots) > 1)
    # Each bond takes a whole multi-function adapter; the other devices one function each.
    need = len(functions)
    covered_by_bonds = sum(len(adapters[a]) for a in multi[:len(bonds)])
    expected = need - covered_by_bonds + min(len(bonds), len(multi))
    problems = []
    if not functions and not names:
        verdict = "NO_RDMA_HARDWARE"
    elif len(names) >= expected:
        verdict = "ROCE_LAG_ACTIVE" if bonds else "OK"
    else:
        verdict = "DEVICES_MISSING"
        problems.append(f"{len(functions)} RDMA PCI function(s) ({', '.join(f['slot'] for f in functions)}) "
                        f"but {len(names)} verbs device(s){' (' + ', '.join(names) + ')' if names else ''}: "
                        f"expected {expected}; check the verbs providers (ibverbs-providers / "
                        f"rdma-core) and that mlx5_ib is loaded")
    return {"verdict": verdict, "expected": expected, "found": len(names), "bond_devices": bonds,
            "problems": problems}


_NO_PROVIDER_DIR_RE = re.compile(r"libibverbs: Warning: couldn't open config directory '([^']+)'")
_NO_DRIVER_RE = re.compile(r"libibverbs: Warning: no userspace device-specific driver found for (\S+)")


def classify_no_devices(text, sysfs_hcas=None):
    """Why verbs sees no device, from ``ibv_devinfo``/``ibv_devices`` output (None: it sees some).

    Returns ``{"class", "evidence", "fix"}``:

    - ``RDMA_VERBS_PROVIDERS_MISSING``: libibverbs warns ``couldn't open config directory
      '/etc/libibverbs.d'`` (the provider package creates it) or ``no userspace
      device-specific driver found for /sys/class/infiniband_verbs/uverbs0`` (rdma-core
      ``libibverbs/init.c``; fixture N20). Fix: install ``ibverbs-providers`` (Debian/Ubuntu)
      or ``rdma-core``/``libibverbs`` (RHEL family), in the container image too.
    - ``RDMA_KERNEL_DEVICES_MISSING``: no warning and ``sysfs_hcas`` (the names under
      ``/sys/class/infiniband``) is an empty list: the kernel has no RDMA device (modprobe
      mlx5_ib, or no hardware).
    - ``RDMA_NO_DEVICES``: no devices, cause not visible in the text.
    """
    lines = split_lines(text, "ibv_devinfo")
    if not any(re.search(r"\bNo IB devices found\b", ln) for ln in lines):
        return None
    for ln in lines:
        m = _NO_PROVIDER_DIR_RE.search(ln) or _NO_DRIVER_RE.search(ln)
        if m:
            return {"class": "RDMA_VERBS_PROVIDERS_MISSING", "evidence": ln.strip(),
                    "fix": "install the libibverbs provider libraries: ibverbs-providers on "
                           "Debian/Ubuntu, rdma-core/libibverbs on RHEL-family (inside the container "
                           "image too), then re-run ibv_devinfo"}
    if sysfs_hcas is not None and not list(sysfs_hcas):
        return {"class": "RDMA_KERNEL_DEVICES_MISSING", "evidence": "/sys/class/infiniband is empty",
                "fix": "load the RDMA kernel driver (modprobe mlx5_ib) or check that the HCA is present"}
    return {"class": "RDMA_NO_DEVICES", "evidence": "No IB devices found",
            "fix": "compare /sys/class/infiniband and lspci with what verbs sees"}


# --------------------------------------------------------------------------------------------
# rdma link show (iproute2)
# --------------------------------------------------------------------------------------------

PHYS_STATES = ("NOP", "SLEEP", "POLLING", "DISABLED", "ARMED", "LINK_UP", "LINK_ERROR_RECOVER",
               "PHY_TEST", "UNKNOWN", "OPA_OFFLINE", "OPA_TEST")
_LINK_START_RE = re.compile(r"^(?:link\s+(?P<n1>[^\s/]+)/(?P<p1>\d+)|(?P<idx>\d+)/(?P<pi>\d+):\s+"
                            r"(?P<n2>[^\s/]+)/(?P<p2>\d+):)(?:\s+|$)")
_LINK_INT_KEYS = ("lid", "sm_lid", "lmc", "netdev_index")
_LINK_KEYS = ("subnet_prefix", "lid", "sm_lid", "lmc", "state", "physical_state", "netdev",
              "netdev_index")


def _link_record(name, port, rest, lineno):
    rec = {"hca": name, "port": int(port), "state": None, "active": False, "phys_state": None,
           "netdev": None, "netdev_index": None, "subnet_prefix": None, "lid": None,
           "sm_lid": None, "lmc": None, "caps": None, "lineno": lineno}
    m = re.search(r"\bcaps\s+<([^>]*)>", rest)
    if m:
        rec["caps"] = [c.strip() for c in m.group(1).split(",") if c.strip()]
        rest = rest[:m.start()] + rest[m.end():]
    elif re.search(r"\bcaps\s+<", rest):
        raise ParseError(f"rdma link line {lineno}: caps list '<...' not closed (output cut?)")
    tokens = rest.split()
    if len(tokens) % 2:
        raise ParseError(f"rdma link line {lineno}: {name}/{port}: expected 'key value' pairs, "
                         f"'{tokens[-1]}' has no value (output cut?)")
    for i in range(0, len(tokens), 2):
        key, value = tokens[i], tokens[i + 1]
        if key not in _LINK_KEYS:
            rec.setdefault("other", {})[key] = value
            continue
        if key in _LINK_INT_KEYS:
            if not value.isdigit():
                raise ParseError(f"rdma link line {lineno}: {key} should be a number, got {value!r}")
            value = int(value)
        rec["phys_state" if key == "physical_state" else key] = value
    if rec["state"] is None:
        raise ParseError(f"rdma link line {lineno}: {name}/{port} has no 'state' (output cut?)")
    if rec["state"] not in PORT_STATES.values() and rec["state"] != "UNKNOWN":
        raise ParseError(f"rdma link line {lineno}: state {rec['state']!r} is not a port state "
                         f"({', '.join(PORT_STATES.values())})")
    if rec["phys_state"] is not None and rec["phys_state"] not in PHYS_STATES:
        raise ParseError(f"rdma link line {lineno}: physical_state {rec['phys_state']!r} is not one "
                         f"of {', '.join(PHYS_STATES)}")
    rec["active"] = rec["state"] == ACTIVE
    return rec


def parse_rdma_link(text):
    """Ports of iproute2 ``rdma link [show]`` (``rdma/link.c``), text or ``-j`` JSON.

    Text grammar, one port per line: iproute2 4.16-5.x ``<devidx>/<port>: <dev>/<port>: `` and
    later ``link <dev>/<port> ``, then ``key value`` pairs in this order, each only when the
    kernel reports it: ``subnet_prefix``, ``lid``, ``sm_lid``, ``lmc`` (InfiniBand), ``state``
    (NOP, DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER), ``physical_state`` (``LINK_UP``,
    ``DISABLED``, ``POLLING``, ...), ``netdev`` (with ``-d``: ``netdev_index``, ``caps <A,
    B>``). A line that does not start a port continues the previous one (a wrapped paste);
    prompt lines are skipped. JSON: a list of objects with ``ifname`` (``dev/port``), ``port``,
    ``state``, ``physical_state``, ``netdev``.

    Returns ``[{"hca", "port", "state", "active", "phys_state", "netdev", "netdev_index",
    "subnet_prefix", "lid", "sm_lid", "lmc", "caps"}]`` in natural order. Raises ParseError
    naming the line for a port without ``state`` (cut), an unknown state, a dangling key or
    text before the first port.
    """
    lines = split_lines(text, "rdma link")
    body = "\n".join(lines).strip()
    if body.startswith("["):
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ParseError(f"rdma -j link: not complete JSON ({exc})") from None
        out = []
        for n, item in enumerate(data, 1):
            if not isinstance(item, dict) or "ifname" not in item or "state" not in item:
                raise ParseError(f"rdma -j link: entry {n} lacks ifname/state")
            name, _, port = str(item["ifname"]).partition("/")
            pairs = " ".join(f"{k} {item[k]}" for k in ("subnet_prefix", "lid", "sm_lid", "lmc", "state",
                                                        "physical_state", "netdev", "netdev_index")
                             if k in item)
            rec = _link_record(name, item.get("port", port or 1), pairs, n)
            rec.pop("lineno")
            out.append(rec)
        return sorted(out, key=lambda r: (natural_key(r["hca"]), r["port"]))
    pending = []
    for lineno, line in enumerate(lines, 1):
        s = " ".join(line.split())
        if not s or _is_prompt(s):
            continue
        m = _LINK_START_RE.match(s)
        if m:
            name = m.group("n1") or m.group("n2")
            port = m.group("p1") or m.group("p2")
            pending.append([name, port, s[m.end():], lineno])
        elif pending:
            pending[-1][2] += " " + s
        else:
            raise ParseError(f"rdma link line {lineno}: expected 'link <dev>/<port> ...' or "
                             f"'<n>/<port>: <dev>/<port>: ...', got {shorten(line)!r}")
    out = []
    for name, port, rest, lineno in pending:
        rec = _link_record(name, port, rest, lineno)
        rec.pop("lineno")
        out.append(rec)
    return sorted(out, key=lambda r: (natural_key(r["hca"]), r["port"]))


# --------------------------------------------------------------------------------------------
# sysfs /sys/class/infiniband
# --------------------------------------------------------------------------------------------

_SYSFS_PORT_RE = re.compile(r"^([^/]+)/ports/(\d+)/(state|phys_state|link_layer|rate)$")
_SYSFS_GID_RE = re.compile(r"^([^/]+)/ports/(\d+)/(gids|gid_attrs/types|gid_attrs/ndevs)/(\d+)$")
_SYSFS_NET_RE = re.compile(r"^([^/]+)/device/net/([^/]+)/(dev_port|operstate)$")
_ZERO_GID = ipaddress.IPv6Address("::")


def parse_sysfs_infiniband(files):
    """Ports, GID tables and netdevs from the contents of ``/sys/class/infiniband``.

    ``files`` maps paths relative to ``/sys/class/infiniband`` to the file contents (the
    module reads them; a test passes a dict)::

        {"mlx5_0/ports/1/state": "4: ACTIVE",
         "mlx5_0/ports/1/phys_state": "5: LinkUp",
         "mlx5_0/ports/1/link_layer": "Ethernet",
         "mlx5_0/ports/1/rate": "100 Gb/sec (4X EDR)",
         "mlx5_0/ports/1/gids/3": "0000:0000:0000:0000:0000:ffff:c000:0206",
         "mlx5_0/ports/1/gid_attrs/types/3": "RoCE v2",
         "mlx5_0/ports/1/gid_attrs/ndevs/3": "ens1f0",
         "mlx5_0/device/net/ens1f0/dev_port": "0",
         "mlx5_0/device/net/ens1f0/operstate": "up"}

    Other paths are ignored. Returns::

        {"ports": [{"hca": "mlx5_0", "port": 1, "state": "ACTIVE", "state_num": 4,
                    "phys_state": "LinkUp", "phys_state_num": 5,
                    "link_layer": "Ethernet", "fabric": "RoCE",
                    "rate": "100 Gb/sec (4X EDR)", "rate_gbps": 100,
                    "gids": [gid_entry, ...],         # all-zero (unused) entries left out
                    "roce_gid_index": 3 or None}],    # pick_roce_gid_index(gids)
         "netdevs": [{"hca": "mlx5_0", "port": 1, "netdev": "ens1f0", "netdev_state": "Up",
                      "netdev_type": "ethernet", "bus_id": None, "port_state": "ACTIVE"}]}

    netdevs have the shape of :func:`parse_ibdev2netdev` (the ibdev2netdev script reads the
    same files: ``device/net/<netdev>/dev_port`` is the 0-based port; on RoCE
    ``gid_attrs/ndevs/0`` names the netdev). Raises ParseError when a port lacks ``state`` or
    ``link_layer``, or a value is malformed.
    """
    ports = {}
    gids = {}
    net = {}
    for path in sorted(files):
        value = str(files[path]).strip()
        m = _SYSFS_PORT_RE.match(path)
        if m:
            ports.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = value
            continue
        m = _SYSFS_GID_RE.match(path)
        if m:
            key = (m.group(1), int(m.group(2)))
            ports.setdefault(key, {})
            gids.setdefault(key, {}).setdefault(int(m.group(4)), {})[m.group(3)] = value
            continue
        m = _SYSFS_NET_RE.match(path)
        if m:
            net.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = value

    out_ports = []
    for (hca, number), attrs in sorted(ports.items(), key=lambda kv: (natural_key(kv[0][0]),
                                                                       kv[0][1])):
        missing = [k for k in ("state", "link_layer") if k not in attrs]
        if missing:
            raise ParseError(f"sysfs {hca}/ports/{number}: {', '.join(missing)} missing")
        where = f"sysfs {hca}/ports/{number}"
        state, state_num = _num_state(attrs["state"], f"{where}/state", PORT_STATES)
        _link_layer(attrs["link_layer"], f"{where}/link_layer")
        phys = phys_num = None
        if "phys_state" in attrs:
            phys, phys_num = _num_state(attrs["phys_state"], f"{where}/phys_state")
        rate = parse_rate(attrs["rate"]) if "rate" in attrs else None
        table = []
        for index, entry in sorted(gids.get((hca, number), {}).items()):
            if "gids" not in entry:
                continue
            gid = gid_entry(index, entry["gids"], entry.get("gid_attrs/types") or None,
                            entry.get("gid_attrs/ndevs") or None, hca, number)
            if ipaddress.IPv6Address(gid["gid"]) == _ZERO_GID:
                continue
            table.append(gid)
        out_ports.append({
            "hca": hca, "port": number, "state": state, "state_num": state_num,
            "phys_state": phys, "phys_state_num": phys_num,
            "link_layer": attrs["link_layer"], "fabric": fabric(attrs["link_layer"]),
            "rate": attrs.get("rate"), "rate_gbps": rate["rate_gbps"] if rate else None,
            "gids": table, "roce_gid_index": pick_roce_gid_index(table),
        })

    state_of = {(p["hca"], p["port"]): p["state"] for p in out_ports}
    netdevs = []
    for (hca, netdev), attrs in net.items():
        if "dev_port" not in attrs:
            continue
        if not attrs["dev_port"].isdigit():
            raise ParseError(f"sysfs {hca}/device/net/{netdev}/dev_port: expected a number, "
                             f"got {attrs['dev_port']!r}")
        netdevs.append(_netdev_record(hca, int(attrs["dev_port"]) + 1, netdev,
                                      attrs.get("operstate"), state_of))
    covered = {(n["hca"], n["port"]) for n in netdevs}
    for port in out_ports:
        ndev = next((g["netdev"] for g in port["gids"] if g["netdev"]), None)
        if ndev and (port["hca"], port["port"]) not in covered:
            netdevs.append(_netdev_record(port["hca"], port["port"], ndev, None, state_of))
    netdevs.sort(key=lambda r: (natural_key(r["hca"]), r["port"], r["netdev"]))
    return {"ports": out_ports, "netdevs": netdevs}


def _netdev_record(hca, port, netdev, operstate, state_of):
    netdev_state = None
    if operstate is not None:
        netdev_state = "Up" if operstate.strip().lower() == "up" else "Down"
    return {"hca": hca, "port": port, "netdev": netdev, "netdev_state": netdev_state,
            "netdev_type": "ipoib" if re.match(r"^ib(?:\d|p\d)", netdev) else "ethernet",
            "bus_id": None, "port_state": state_of.get((hca, port))}


# --------------------------------------------------------------------------------------------
# Facts
# --------------------------------------------------------------------------------------------


def rdma_inventory(devices=None, sysfs=None, netdevs=None, ipv4=None):
    """Merge what a node reports into the ``gpucluster_rdma`` facts of ``rdma_facts``.

    Inputs (each may be None when the tool or file is absent): ``devices`` from
    :func:`parse_ibv_devinfo`, ``sysfs`` from :func:`parse_sysfs_infiniband`, ``netdevs`` from
    :func:`parse_ibdev2netdev` (else the sysfs netdevs are used), ``ipv4`` the address(es) the
    RoCE GID must carry (see :func:`pick_roce_gid_index`).

    Returns::

        {"hcas": [{"name": "mlx5_0", "transport": "InfiniBand", "fw_ver": "28.39.3004",
                   "node_guid": "...", "vendor_part_id": 4129, "board_id": "MT_...",
                   "ports": [{"port": 1, "state": "ACTIVE", "active": True,
                              "phys_state": "LinkUp", "link_layer": "Ethernet",
                              "fabric": "RoCE", "rate_gbps": 100,
                              "netdev": "ens1f0" or None, "netdev_state": "Up" or None,
                              "roce_gid_index": 3 or None,
                              "gids": [gid_entry, ...]}]}],
         "netdevs": [parse_ibdev2netdev records],
         "infiniband_hcas": ["mlx5_0", ...],   # HCAs with an InfiniBand port
         "roce_hcas": [...],                   # HCAs with an Ethernet (RoCE) port
         "active_hcas": [...],                 # HCAs with at least one ACTIVE port
         "nccl_ib_gid_index": 3 or None,       # shared by every ACTIVE RoCE port
         "problems": ["sentence", ...]}

    Port state, link layer, rate and GIDs come from sysfs when given (the kernel's own view,
    with GID types), else from ibv_devinfo. Device identity (firmware, GUIDs, part id) comes
    from ibv_devinfo.
    """
    devices = devices or []
    sysfs = sysfs or {"ports": [], "netdevs": []}
    netdevs = netdevs if netdevs is not None else sysfs.get("netdevs", [])
    by_name = {}
    for dev in devices:
        by_name[dev["hca"]] = {
            "name": dev["hca"], "transport": dev.get("transport"), "fw_ver": dev.get("fw_ver"),
            "node_guid": dev.get("node_guid"), "vendor_part_id": dev.get("vendor_part_id"),
            "board_id": dev.get("board_id"),
            "ports": {p["port"]: {
                "port": p["port"], "state": p["state"], "active": p["active"],
                "phys_state": p.get("phys_state"), "link_layer": p["link_layer"],
                "fabric": p["fabric"], "rate_gbps": p.get("rate_gbps"), "gids": p["gids"],
            } for p in dev["ports"]},
        }
    for p in sysfs.get("ports", []):
        hca = by_name.setdefault(p["hca"], {"name": p["hca"], "transport": None, "fw_ver": None,
                                            "node_guid": None, "vendor_part_id": None,
                                            "board_id": None, "ports": {}})
        old = hca["ports"].get(p["port"], {})
        hca["ports"][p["port"]] = {
            "port": p["port"], "state": p["state"], "active": p["state"] == ACTIVE,
            "phys_state": p.get("phys_state") or old.get("phys_state"),
            "link_layer": p["link_layer"], "fabric": p["fabric"],
            "rate_gbps": p.get("rate_gbps") if p.get("rate_gbps") is not None
            else old.get("rate_gbps"),
            "gids": p["gids"] or old.get("gids", []),
        }
    netdev_of = {}
    for rec in netdevs:
        netdev_of.setdefault((rec["hca"], rec["port"]), rec)

    problems = rdma_problems(devices)
    hcas = []
    gid_indices = {}
    for name in sorted(by_name, key=natural_key):
        hca = by_name[name]
        ports = []
        for number in sorted(hca["ports"]):
            port = dict(hca["ports"][number])
            rec = netdev_of.get((name, number))
            port["netdev"] = rec["netdev"] if rec else None
            port["netdev_state"] = rec["netdev_state"] if rec else None
            port["roce_gid_index"] = (pick_roce_gid_index(port["gids"], ipv4)
                                      if port["link_layer"] == "Ethernet" else None)
            if port["link_layer"] == "Ethernet" and port["active"]:
                gid_indices[f"{name}/{number}"] = port["roce_gid_index"]
                if port["roce_gid_index"] is None:
                    problems.append(f"{name} port {number}: ACTIVE RoCE port without a RoCE v2 "
                                    f"IPv4 GID{'' if ipv4 is None else f' for {ipv4}'} (no "
                                    f"IPv4 address on {port['netdev'] or 'its netdev'}?)")
            ports.append(port)
        hca["ports"] = ports
        hcas.append(hca)

    values = set(gid_indices.values())
    nccl_gid = None
    if len(values) == 1 and None not in values:
        nccl_gid = values.pop()
    elif len(values - {None}) > 1:
        problems.append("RoCE ports disagree on the RoCE v2 IPv4 GID index ("
                        + ", ".join(f"{k}: {v}" for k, v in sorted(gid_indices.items()))
                        + "); NCCL_IB_GID_INDEX is one value for all HCAs")

    def having(pred):
        return [h["name"] for h in hcas if any(pred(p) for p in h["ports"])]

    return {
        "hcas": hcas,
        "netdevs": list(netdevs),
        "infiniband_hcas": having(lambda p: p["link_layer"] == "InfiniBand"),
        "roce_hcas": having(lambda p: p["link_layer"] == "Ethernet"),
        "active_hcas": having(lambda p: p["active"]),
        "nccl_ib_gid_index": nccl_gid,
        "problems": problems,
    }
