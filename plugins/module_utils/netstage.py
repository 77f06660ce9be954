"""Glue logic of the network stage roles (pure functions, stdlib only, Python 3.8+).

The arithmetic and the NCCL rules live in ``hugepages.py``, ``multi_nic.py``, ``nccl.py`` and ``gpu.py``;
this module only joins them to the facts the roles have (Ansible facts, ``gpu_facts``,
``rdma_facts``, sysfs text, the ``cloud_eni`` module's result). Filters in
``plugins/filter/multi_nic.py``, ``hugepages.py`` and ``nccl.py`` expose it.

Shapes
======

**Secondary NIC spec** (``multi_nic_interfaces`` entry): ``{"name": "eth1" | None, "mac":
"20:90:6f:62:33:e2" | None, "address": "10.0.64.13/20" | "10.0.64.13" | None, "gateway":
"10.0.64.1" | None, "mtu": 9000 | None}``; at least one of name and mac.

**Resolved NIC** (resolve_secondary_nics()): ``{"name", "mac", "address" (CIDR), "ip",
"prefix" (int), "network" (CIDR), "gateway" (str or None), "mtu" (int or None), "ipv4"
([address]: the normalized-interface shape of multi_nic, so policy_routes() takes it)}``.

**GPU-NIC map entry** (gpu_netdev_map()): ``{"gpu": 0, "nic": "eth1", "address": "10.0.64.13",
"hca": "mlx5_0" | None, "link": "PXB" | "NODE" | "SYS" | None, "source": "topology" | "numa"
| "order"}``.

Sources
=======

- Closest NIC per GPU: ``gpu.gpu_nic_map()`` (PIX < PXB < PHB < NODE < SYS, round-robin among
  equally close NICs); a NIC that ``nvidia-smi topo -m`` does not list (a virtio ENI has no
  RDMA device) is placed by NUMA node: the same node counts as ``NODE``, another as ``SYS``,
  the legend's own words for those two paths.
- NUMA node of a NIC: ``/sys/class/net/<if>/device/numa_node`` (-1: no affinity), Linux
  ``Documentation/ABI/testing/sysfs-bus-pci`` (``numa_node``).
- Subnet gateway of an ENI: AWS and Tencent Cloud both reserve the subnet's first host address
  for the VPC router (AWS VPC User Guide, "Subnet CIDR blocks"; Tencent Cloud VPC, "子网"
  reserved addresses).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils import gpu_topology as gpu
from ansible_collections.gpucluster.cluster.plugins.module_utils import hugepages, multi_nic, nccl

MAC_RE = re.compile(r"^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$")
# A destination that is never routed (TEST-NET-1, RFC 5737): `ip route get` to it shows which
# way off-subnet traffic would take, and no packet is sent.
OFF_SUBNET_PROBE = "192.0.2.1"


class NetStageError(ValueError):
    """Facts or inventory from which the network stage cannot go on; says what to fix."""


# --------------------------------------------------------------------------------------------
# Secondary NICs
# --------------------------------------------------------------------------------------------


def _norm_mac(mac) -> str:
    text = str(mac or "").strip().lower().replace("-", ":")
    if not MAC_RE.match(text):
        raise NetStageError(f"{mac!r} is not a MAC address (expected aa:bb:cc:dd:ee:ff)")
    return text


def _fact_of(facts: dict, name: str):
    for key in (name, name.replace("-", "_"), "ansible_" + name, "ansible_" + name.replace("-", "_")):
        if isinstance(facts.get(key), dict):
            return facts[key]
    return {}


def node_interfaces(facts: dict) -> dict:
    """``{name: {"mac", "ipv4" ([CIDR]), "state", "mtu"}}`` from ``ansible_facts``."""
    out = {}
    for iface in multi_nic.interfaces_from_ansible_facts(facts):
        fact = _fact_of(facts, iface["name"])
        mac = str(fact.get("macaddress") or "").lower()
        out[iface["name"]] = {
            "mac": mac if MAC_RE.match(mac) else None,
            "ipv4": list(iface.get("ipv4") or []),
            "state": iface.get("state"),
            "mtu": iface.get("mtu"),
        }
    return out


def sorted_interfaces(facts: dict) -> list:
    """``multi_nic.interfaces_from_ansible_facts()`` in natural name order (eth2 before eth10).

    Ansible lists ``ansible_facts.interfaces`` in no fixed order (it differs between two runs
    on one node), so anything rendered from it in fact order would change on every run.
    """
    return sorted(multi_nic.interfaces_from_ansible_facts(facts), key=lambda i: gpu.natural_key(i["name"]))


def resolve_secondary_nics(specs, facts: dict, mtu=0) -> list:
    """Resolve ``multi_nic_interfaces`` against the node's facts (see the module docstring).

    ``specs``: list of NIC specs; ``facts``: ``ansible_facts`` (interfaces, per-interface facts,
    ``default_ipv4``); ``mtu``: MTU for entries without one (0 or None: leave the MTU alone).

    A NIC is found by name or by MAC (both given: they must agree). Its address is the entry's
    (CIDR, or a bare IP whose prefix comes from the same address already on the NIC), else the
    first IPv4 address the NIC has now. Refused, with the fix: the primary NIC (the one holding
    the default route), lo/docker*/veth*/virbr*, a NIC or address listed twice, a gateway
    outside the NIC's subnet, a NIC not on the node, a NIC without any address.
    """
    ifaces = node_interfaces(facts)
    by_mac = {v["mac"]: k for k, v in ifaces.items() if v["mac"]}
    primary = (facts.get("default_ipv4") or {}).get("interface")
    seen_names, seen_ips = {}, {}
    out = []
    for n, spec in enumerate(specs or [], start=1):
        if not isinstance(spec, dict):
            raise NetStageError(f"multi_nic_interfaces[{n - 1}] must be a dict with name or mac, got {spec!r}")
        name = spec.get("name") or None
        mac = _norm_mac(spec["mac"]) if spec.get("mac") else None
        where = f"multi_nic_interfaces[{n - 1}]"
        if name is None and mac is None:
            raise NetStageError(f"{where} names no NIC: give name or mac")
        if mac is not None:
            found = by_mac.get(mac)
            if found is None:
                raise NetStageError(
                    "{}: no interface with MAC {} on this node (interfaces: {}); an ENI attached a moment ago "
                    "may still be appearing, or the MAC is wrong".format(
                        where, mac, ", ".join(f"{k} {v['mac']}" for k, v in sorted(ifaces.items())) or "none"
                    )
                )
            if name is not None and name != found:
                raise NetStageError(f"{where}: MAC {mac} belongs to {found}, not {name}")
            name = found
        if name not in ifaces:
            raise NetStageError(
                "{}: interface {} is not on this node (interfaces: {})".format(
                    where, name, ", ".join(sorted(ifaces)) or "none"
                )
            )
        if name == "lo" or name.startswith(multi_nic.NEVER_PREFIXES):
            raise NetStageError(f"{where}: {name} is not a NIC for GPU traffic (lo, docker*, veth*, virbr*)")
        if name == primary:
            raise NetStageError(
                f"{where}: {name} holds the node's default route (the primary NIC); the multi_nic role "
                "leaves it alone. List only the secondary NICs"
            )
        if name in seen_names:
            raise NetStageError(f"{where}: {name} is already listed as multi_nic_interfaces[{seen_names[name]}]")
        seen_names[name] = n - 1
        current = ifaces[name]["ipv4"]
        address = spec.get("address") or None
        if address is None:
            if not current:
                raise NetStageError(
                    f"{where}: {name} has no IPv4 address now and none is given: set address (CIDR, e.g. "
                    "10.0.64.13/20)"
                )
            itf = ipaddress.ip_interface(current[0])
        else:
            text = str(address).strip()
            if "/" not in text:
                same = [c for c in current if c.split("/")[0] == text]
                if not same:
                    raise NetStageError(
                        f"{where}: address {text} has no prefix length and {name} does not carry it yet: "
                        "write it as CIDR (e.g. 10.0.64.13/20)"
                    )
                text = same[0]
            try:
                itf = ipaddress.ip_interface(text)
            except ValueError:
                raise NetStageError(f"{where}: {address!r} is not an IPv4 address in CIDR form") from None
        if itf.version != 4:
            raise NetStageError(f"{where}: {itf} is not IPv4")
        if itf.network.prefixlen < 31 and itf.ip in (itf.network.network_address, itf.network.broadcast_address):
            raise NetStageError(f"{where}: {itf} is the network or broadcast address of its subnet")
        ip = str(itf.ip)
        if ip in seen_ips:
            raise NetStageError(f"{where}: address {ip} is already used by {seen_ips[ip]}")
        seen_ips[ip] = name
        gateway = spec.get("gateway") or None
        if gateway is not None:
            try:
                gw = ipaddress.ip_address(str(gateway).strip())
            except ValueError:
                raise NetStageError(f"{where}: gateway {gateway!r} is not an IPv4 address") from None
            if gw not in itf.network or gw == itf.ip:
                raise NetStageError(f"{where}: gateway {gw} is not another address in {name}'s subnet {itf.network}")
            gateway = str(gw)
        nic_mtu = spec.get("mtu") if spec.get("mtu") not in (None, "", 0) else (mtu or None)
        if nic_mtu is not None:
            nic_mtu = int(nic_mtu)
            if not 68 <= nic_mtu <= 65535:
                raise NetStageError(f"{where}: MTU {nic_mtu} is outside 68-65535")
        out.append(
            {
                "name": name,
                "mac": ifaces[name]["mac"],
                "address": str(itf),
                "ip": ip,
                "prefix": itf.network.prefixlen,
                "network": str(itf.network),
                "gateway": gateway,
                "mtu": nic_mtu,
                "ipv4": [str(itf)],
            }
        )
    return out


def secondary_nic_plan(specs, facts: dict, mtu=0, table_base: int = 100) -> list:
    """resolve_secondary_nics() plus the policy routing of each NIC and where to probe it.

    Adds, per NIC, ``"table"`` (``table_base + n``), ``"rule"`` and ``"route"`` (iproute2
    arguments, from ``multi_nic.policy_routes()``), ``"probes"`` (probe_destinations()) and
    ``"probe_list"`` (its non-empty values, peer first).
    """
    nics = resolve_secondary_nics(specs, facts, mtu)
    routes = multi_nic.policy_routes(nics, int(table_base))
    for n, nic in enumerate(nics):
        route = routes[n]
        nic.update({"table": route["table"], "rule": route["rule"], "route": route["route"]})
        nic["probes"] = probe_destinations(nic)
        nic["probe_list"] = [a for a in (nic["probes"]["peer"], nic["probes"]["remote"]) if a]
    return nics


def probe_destinations(nic: dict) -> dict:
    """Where to ask ``ip route get ... from <nic ip>`` which way traffic would leave.

    Returns ``{"peer": an address of the NIC's subnet other than its own, or None for a /32,
    "remote": OFF_SUBNET_PROBE when the NIC has a gateway, else None}``. The peer is the last
    host address (the first when the NIC holds the last one).
    """
    itf = ipaddress.ip_interface(nic["address"])
    net = itf.network
    peer = None
    if net.prefixlen == 31:
        peer = next(a for a in net if a != itf.ip)
    elif net.prefixlen < 31:
        last = net.broadcast_address - 1
        peer = last if last != itf.ip else net.network_address + 1
    return {"peer": str(peer) if peer is not None else None, "remote": OFF_SUBNET_PROBE if nic.get("gateway") else None}


def parse_numa_nodes(text: str) -> dict:
    """``{netdev: NUMA node or None}`` from ``grep -H . /sys/class/net/*/device/numa_node``.

    Lines look like ``/sys/class/net/eth1/device/numa_node:0``; -1 (no affinity, a single-node
    machine or a virtual device) reads None. Other lines are ignored.
    """
    out = {}
    for line in str(text or "").splitlines():
        m = re.match(r"^/sys/class/net/([^/]+)/device/numa_node:(-?\d+)\s*$", line.strip())
        if m:
            value = int(m.group(2))
            out[m.group(1)] = value if value >= 0 else None
    return out


# --------------------------------------------------------------------------------------------
# GPU-NIC map
# --------------------------------------------------------------------------------------------


def _names(nics) -> list:
    return [n if isinstance(n, str) else n["name"] for n in nics or []]


def gpu_netdev_map(nics, gpu_facts=None, rdma_facts=None, numa_nodes=None, gpu_count=0) -> list:
    """GPU -> secondary NIC (netdev) map, one entry per GPU (module docstring shape).

    ``nics``: resolved NICs or names, in inventory order; ``gpu_facts``: ``gpucluster_gpu``
    (``topology`` from ``nvidia-smi topo -m`` when the driver answers); ``rdma_facts``:
    ``gpucluster_rdma`` (its ``netdevs`` tie an RDMA device of the matrix to a netdev);
    ``numa_nodes``: parse_numa_nodes() result; ``gpu_count``: GPUs to map when there is no
    topology (the PCI count).

    In order of preference (``source`` says which one decided):

    1. ``topology``: the matrix lists RDMA devices whose netdevs are among ``nics``: the
       closest one per GPU by ``gpu.gpu_nic_map()``, translated to its netdev;
    2. ``numa``: every GPU has a NUMA node in the matrix and every NIC one in sysfs: a NIC on the
       GPU's node counts as NODE, any other as SYS, then ``gpu.gpu_nic_map()`` deals them;
    3. ``order``: GPU i gets NIC i mod N (no topology: driver not loaded, or a GPU-less node).

    No NIC or no GPU gives ``[]``.
    """
    names = _names(nics)
    addresses = {}
    for n in nics or []:
        if isinstance(n, dict):
            addresses[n["name"]] = n.get("ip") or (n.get("address") or "").split("/")[0] or None
    gpu_facts = gpu_facts or {}
    topo = gpu_facts.get("topology") or None
    if not names:
        return []

    def entry(index, nic, hca, link, source):
        return {"gpu": index, "nic": nic, "address": addresses.get(nic), "hca": hca, "link": link, "source": source}

    if topo and topo.get("gpus"):
        netdev_of = {}
        for rec in (rdma_facts or {}).get("netdevs") or []:
            if rec.get("netdev") in names:
                netdev_of.setdefault(rec["hca"], rec["netdev"])
        listed = [n["name"] for n in topo.get("nics") or [] if n["name"] in netdev_of]
        if listed:
            return [
                entry(m["gpu"], netdev_of[m["nic"]], m["nic"], m["link"], "topology")
                for m in gpu.gpu_nic_map(topo, nics=listed)
            ]
        numa = numa_nodes or {}
        gpu_nodes = {g["name"]: g.get("numa_node") for g in topo["gpus"]}
        if all(v is not None for v in gpu_nodes.values()) and all(numa.get(n) is not None for n in names):
            synthetic = {
                "gpus": topo["gpus"],
                "nics": [{"name": n, "label": n} for n in names],
                "links": {
                    g: {n: ("NODE" if numa[n] == node else "SYS") for n in names} for g, node in gpu_nodes.items()
                },
            }
            return [entry(m["gpu"], m["nic"], None, m["link"], "numa") for m in gpu.gpu_nic_map(synthetic)]
        indexes = sorted(g["index"] for g in topo["gpus"])
    else:
        count = int(gpu_count or 0)
        if count < 0:
            raise NetStageError(f"GPU count must be >= 0, got {gpu_count!r}")
        indexes = list(range(count))
    return [entry(i, names[k % len(names)], None, None, "order") for k, i in enumerate(indexes)]


# --------------------------------------------------------------------------------------------
# NCCL inputs from the facts modules
# --------------------------------------------------------------------------------------------


def rdma_ports(rdma_facts) -> list:
    """``gpucluster_rdma`` (rdma_facts) ports in the shape ``nccl.render_nccl_env()`` takes.

    ``[{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "Ethernet", "netdev":
    "ens1f0", "roce_v2_gid_index": 3}]``; the GID index is the one rdma_facts picked (RoCE v2,
    IPv4-mapped, never link-local).
    """
    out = []
    for hca in (rdma_facts or {}).get("hcas") or []:
        for p in hca.get("ports") or []:
            out.append(
                {
                    "device": hca["name"],
                    "port": int(p["port"]),
                    "state": p.get("state") or "",
                    "link_layer": p.get("link_layer"),
                    "netdev": p.get("netdev"),
                    "roce_v2_gid_index": p.get("roce_gid_index"),
                }
            )
    return out


def container_env(rendered, include_mca=True, *extra) -> dict:
    """The training container's environment from a ``nccl.render_nccl_env()`` result.

    NCCL's variables, then (``include_mca``) Open MPI's as ``OMPI_MCA_*`` (``nccl.mca_env()``),
    then each dict of ``extra`` in order (later wins). Every value is a string, as a container's
    environment must be; a name that is not an environment variable name raises NetStageError.
    """
    out = {}
    parts = [rendered.get("env") or {}]
    if include_mca:
        parts.append(nccl.mca_env(rendered))
    parts.extend(e or {} for e in extra)
    for part in parts:
        for key, value in part.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(key)):
                raise NetStageError(f"not an environment variable name: {key!r}")
            out[str(key)] = "" if value is None else str(value)
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------------------------
# cloud_eni result -> multi_nic_interfaces
# --------------------------------------------------------------------------------------------


def eni_interfaces(interfaces, subnet_cidr, gateway=None, mtu=None) -> list:
    """``multi_nic_interfaces`` entries for the ENIs the cloud_eni module returned.

    ``interfaces``: the module's ``interfaces`` (``{id, mac, private_ip, device_index,
    status}``); ``subnet_cidr``: the ENIs' subnet (e.g. ``10.0.64.0/20``), which gives each
    address its prefix; ``gateway``: default the subnet's first host address (the VPC router);
    ``mtu``: optional, copied to every entry. Entries keep the module's order (device index).
    """
    try:
        net = ipaddress.ip_network(str(subnet_cidr).strip(), strict=True)
    except ValueError:
        raise NetStageError(
            f"cloud_eni_subnet_cidr {subnet_cidr!r} is not a subnet in CIDR form (e.g. 10.0.64.0/20)"
        ) from None
    if net.version != 4 or net.prefixlen > 30:
        raise NetStageError(f"cloud_eni_subnet_cidr {net} must be an IPv4 subnet of /30 or larger")
    gw = ipaddress.ip_address(str(gateway).strip()) if gateway else net.network_address + 1
    if gw not in net:
        raise NetStageError(f"cloud_eni_gateway {gw} is not in cloud_eni_subnet_cidr {net}")
    out = []
    for eni in interfaces or []:
        ip = ipaddress.ip_address(str(eni["private_ip"]))
        if ip not in net:
            raise NetStageError(
                "ENI {} has address {} outside cloud_eni_subnet_cidr {}: fix cloud_eni_subnet_cidr".format(
                    eni.get("id"), ip, net
                )
            )
        entry = {"mac": _norm_mac(eni["mac"]), "address": f"{ip}/{net.prefixlen}", "gateway": str(gw)}
        if mtu:
            entry["mtu"] = int(mtu)
        out.append(entry)
    return out


# --------------------------------------------------------------------------------------------
# Hugepages on the node: what the plan says against what the node has
# --------------------------------------------------------------------------------------------


def _plan(plan) -> dict:
    """A plan in its dict form (``HugepagesPlan.as_dict()``, what the hugepages_plan filter returns)."""
    if isinstance(plan, hugepages.HugepagesPlan):
        return plan.as_dict()
    if isinstance(plan, dict) and "pools" in plan and "default_size" in plan:
        return plan
    raise NetStageError(f"expected a hugepages plan (the hugepages_plan filter's result), got {plan!r}")


def cmdline_active(plan, cmdline: str) -> bool:
    """Whether ``cmdline`` (``/proc/cmdline``) already asks for exactly the planned pools."""
    p = _plan(plan)
    got = hugepages.parse_cmdline_hugepages(cmdline)
    return got["default_size"] == int(p["default_size"]) and all(
        got["pools"].get(int(pool["page_size"])) == int(pool["count"]) for pool in p["pools"]
    )


def grub_hugepage_args(text: str) -> list:
    """Hugepage arguments already on the kernel command line in a GRUB defaults file.

    ``text``: ``/etc/default/grub``; only its ``GRUB_CMDLINE_LINUX*`` lines are read (quotes
    removed). Returns the tokens (``["hugepages=16"]``), empty when there are none.
    """
    found = []
    for line in str(text or "").splitlines():
        m = re.match(r"^\s*(?:export\s+)?GRUB_CMDLINE_LINUX(?:_DEFAULT)?=(.*)$", line)
        if not m:
            continue
        for token in re.sub(r"[\"']", " ", m.group(1)).split():
            if re.match(r"^(default_hugepagesz|hugepagesz|hugepages)=", token):
                found.append(token)
    return found


def hugepages_status(plan, meminfo, cmdline, sysfs_pools=None, runtime=None, mounts=None, mount_path="/dev/hugepages"):
    """The node's hugepage state against the plan.

    ``meminfo``: ``/proc/meminfo`` text; ``cmdline``: ``/proc/cmdline``; ``sysfs_pools``:
    ``{size_bytes or "hugepages-<N>kB": nr_hugepages}`` for non-default pools; ``runtime``:
    ``{"requested": bool, "applied": bool, "reason": str or None}`` for the 2 MiB run-time
    allocation; ``mounts``: ``/proc/mounts`` text (None: not checked).

    Returns ``{"state": "ok" | "pending-reboot" | "mismatch", "mismatches": hugepages.verify()
    list, "cmdline_active": bool, "runtime": {...}, "mount": {"path", "present", "page_size"
    (bytes), "page_size_name" ("2M"), "expected" (bytes), "ok"} or None, "message": str}``.
    ``mismatch`` means the node already runs the planned command line (or the run-time
    allocation was applied) and still lacks the pages: a real fault, with the verify() causes.
    ``pending-reboot``: the planned arguments are written but not active yet, and nothing at
    run time made up for it.
    """
    p = _plan(plan)
    default_size = int(p["default_size"])
    count = sum(int(pool["count"]) for pool in p["pools"] if int(pool["page_size"]) == default_size)
    pools = None
    if sysfs_pools:
        pools = {hugepages.parse_size(k): int(v) for k, v in sysfs_pools.items()}
    mismatches = hugepages.verify(meminfo, p, None, pools)
    active = cmdline_active(p, cmdline)
    run = {"requested": False, "applied": False, "reason": None}
    run.update(runtime or {})
    if not mismatches:
        state = "ok"
        message = f"{count} x {hugepages.human_size(default_size)} pages in place (HugePages_Total matches the plan)"
    elif active or run["applied"]:
        state = "mismatch"
        message = "; ".join("{}: expected {}, found {}: {}".format(
            m["field"], m["expected"], m["actual"], m["cause"]) for m in mismatches)
    else:
        state = "pending-reboot"
        why = ["the kernel command line with {} is written but not active until the node reboots".format(
            " ".join(hugepages.kernel_cmdline_args(p)))]
        if run["requested"] and not run["applied"]:
            why.append("run-time allocation not applied: {}".format(run["reason"] or "unknown reason"))
        message = "; ".join(why)
    mount = None
    if mounts is not None:
        found = [m for m in hugepages.parse_hugetlbfs_mounts(mounts) if m["mountpoint"] == mount_path]
        info = hugepages.parse_meminfo(meminfo) if isinstance(meminfo, str) else meminfo
        size = None
        if found:
            size = found[-1]["page_size"] or info.get("page_size")
        mount = {
            "path": mount_path,
            "present": bool(found),
            "page_size": size,
            "page_size_name": hugepages.kernel_size(size) if size else None,
            "expected": default_size,
            "ok": bool(found) and size == default_size,
        }
    return {
        "state": state,
        "mismatches": mismatches,
        "cmdline_active": active,
        "runtime": run,
        "mount": mount,
        "message": message,
    }
