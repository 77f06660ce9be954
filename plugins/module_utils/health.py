"""Node health: the verdict logic of the ``node_health`` role.

Pure functions, stdlib only (the filter plugin ``plugins/filter/health.py`` runs them on the
controller). Inputs are facts already parsed by their owners: ``gpucluster_gpu``
(gpu_facts), ``gpucluster_rdma`` (rdma_facts), ``ulimit -a`` read by
``diagnose.parse_ulimit_a``, hugetlbfs mounts read by ``hugepages.parse_hugetlbfs_mounts``,
``lsmod`` read by ``peermem.loaded_peer_memory_modules``. Outputs:

- a check: ``{"check": str, "status": "ok"|"degraded"|"failed"|"skipped", "cause": str,
  "fix": str, "subject": str}`` (``subject``: the GPU, NIC or limit it is about);
- a node verdict: ``{"verdict": "healthy"|"degraded"|"failed", "cause": [str], "fix": [str],
  "checks": [check], "counts": {status: n}}``: failed when one check failed, degraded when
  one is degraded, else healthy. Skipped checks never change the verdict; each says why.

Readers: the kernel log's NVIDIA records are read by ``gpu_kernel.parse_kernel_log``,
``nvidia-smi -q`` by ``gpu_smi.parse_smi_q`` and the Fabric Manager's status by
``gpu_fabric.parse_fabricmanager`` (the one reader of each); :func:`kernel_log` and
:func:`ecc_rows` only reshape their readings for the checks. Two readers live here because
no other module reads these lines:

- :func:`parse_lspci_vv`: ``lspci -D -vv`` ``LnkCap`` / ``LnkSta`` per PCI function
  (pciutils ``ls-caps.c``: ``Speed 16GT/s, Width x16`` with ``(ok)`` / ``(downgraded)``
  marks in newer pciutils; older ones print none).
- :func:`parse_aer_events`: PCIe AER lines of the kernel log (``pcieport <bdf>: AER:
  Corrected error received: <bdf>``, ``PCIe Bus Error: severity=Uncorrected (Fatal)``; Linux
  ``drivers/pci/pcie/aer.c``); ``gpu_kernel`` reads ``NVRM:`` records only.

The machine-type profile (``node_health_profile``) is a dict; every key is optional and a
missing key means "not checked": ``gpu_count`` (int), ``gpu_model`` (substring of the
nvidia-smi name, case-insensitive), ``nvlink`` (bool: GPU pairs linked by NVLink),
``nvswitch`` (bool), ``nic_count`` (int: RDMA HCA ports ACTIVE), ``nic_rate_gbps`` (int,
per port), ``driver_branch`` (str, e.g. ``"535"``), ``fabric_manager`` (bool: the
nvidia-fabricmanager service must be active). PCIe links are held against each device's own
LnkCap, not against the profile.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.diagnose import parse_ulimit_a
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_fabric import (
    fabricmanager_state,
    parse_fabricmanager,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_kernel import parse_kernel_log
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_smi import parse_smi_q
from ansible_collections.gpucluster.cluster.plugins.module_utils.hugepages import parse_hugetlbfs_mounts, parse_size

STATUSES = ("ok", "degraded", "failed", "skipped")
VERDICTS = ("healthy", "degraded", "failed")
NO_GPU = "the node has no NVIDIA GPU"

# PCIe data rate per lane by GT/s (PCI-SIG: 2.5 = Gen1 ... 32 = Gen5, 64 = Gen6).
PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def check(name, status, cause="", fix="", subject=""):
    """One check record (see the module docstring). Raises ValueError on an unknown status."""
    if status not in STATUSES:
        raise ValueError(f"check {name!r}: status {status!r} is not one of {', '.join(STATUSES)}")
    return {"check": name, "status": status, "cause": cause, "fix": fix, "subject": subject}


def verdict(checks):
    """The node verdict from its checks (see the module docstring)."""
    counts = {s: 0 for s in STATUSES}
    for c in checks:
        counts[c["status"]] += 1
    worst = "failed" if counts["failed"] else "degraded" if counts["degraded"] else "healthy"
    bad = [c for c in checks if c["status"] in ("failed", "degraded")]
    bad.sort(key=lambda c: c["status"] != "failed")
    return {
        "verdict": worst,
        "cause": [f"{c['check']}{' ' + c['subject'] if c['subject'] else ''}: {c['cause']}" for c in bad],
        "fix": list(dict.fromkeys(c["fix"] for c in bad if c["fix"])),
        "checks": list(checks),
        "counts": counts,
    }


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------

_LSPCI_HEAD = re.compile(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$")
_LNK = re.compile(r"^\s*(LnkCap|LnkSta):\s*(.*)$")
_SPEED = re.compile(r"Speed\s+(unknown|[0-9.]+)GT/s(?:\s*\((ok|downgraded)\))?")
_WIDTH = re.compile(r"Width\s+x(\d+)(?:\s*\((ok|downgraded)\))?")


def parse_lspci_vv(text):
    """``lspci -D -vv`` -> ``{bus_id: {"name", "cap": {"speed_gts", "width"}, "sta": {...}}}``.

    ``bus_id`` is the full ``dddd:bb:dd.f`` (``-D``); ``speed_gts`` a float (None when lspci
    prints ``unknown``), ``width`` an int; ``sta`` also has ``speed_downgraded`` /
    ``width_downgraded`` (bool, or None when this lspci prints no ``(ok)``/``(downgraded)``
    marks). Devices without a PCIe capability (no LnkCap/LnkSta lines, e.g. as non-root) have
    ``cap``/``sta`` None. Raises ValueError when no device line is found.
    """
    out = {}
    current = None
    for line in str(text).splitlines():
        m = _LSPCI_HEAD.match(line)
        if m:
            current = {"name": m.group(2).strip(), "cap": None, "sta": None}
            out[m.group(1).lower()] = current
            continue
        m = _LNK.match(line)
        if not (m and current is not None):
            continue
        speed, width = _SPEED.search(m.group(2)), _WIDTH.search(m.group(2))
        if not (speed and width):
            continue
        rec = {
            "speed_gts": None if speed.group(1) == "unknown" else float(speed.group(1)),
            "width": int(width.group(1)),
        }
        if m.group(1) == "LnkSta":
            rec["speed_downgraded"] = None if speed.group(2) is None else speed.group(2) == "downgraded"
            rec["width_downgraded"] = None if width.group(2) is None else width.group(2) == "downgraded"
            current["sta"] = rec
        else:
            current["cap"] = rec
    if not out:
        raise ValueError("lspci -vv: no device line ('dddd:bb:dd.f <class>: <name>'); run lspci -D -vv")
    return out


# The status a kernel-log event gives the node, by its action. ``gpu_kernel.ACTIONS`` (and
# "unknown" for an Xid outside its catalogue) for the NVIDIA records; "watch" / "replace" for
# the PCIe AER lines read here.
ACTION_STATUS = {
    "none": "ok",
    "restart_app": "ok",
    "watch": "degraded",
    "unknown": "degraded",
    "reset": "failed",
    "drain": "failed",
    "replace": "failed",
}
ACTION_FIX = {
    "none": "",
    "restart_app": "none on the node: the job's own fault (restart the application)",
    "watch": "watch the counter; drain the node and reseat the card if it keeps rising",
    "unknown": "look the Xid up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors); "
    "drain the node until it is known",
    "reset": "reset the GPU (nvidia-smi -r -i <gpu>) or reboot the node before the next job",
    "drain": "drain the node (no new jobs), reboot it and check power, cooling and seating of the GPU",
    "replace": "take the node out of service and have the GPU/board serviced (RMA)",
}

_AER = re.compile(
    r"(\S+ [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?"
    r"(?:PCIe Bus Error: severity=|AER: )?(Corrected|Uncorrected \(Non-Fatal\)|"
    r"Uncorrected \(Fatal\)|Uncorrectable \(Fatal\)|Uncorrectable \(Non-Fatal\))"
)
_AER_DEV = re.compile(r"error received: ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")


def parse_aer_events(text):
    """PCIe AER events in ``journalctl -k`` / ``dmesg`` text (see the module docstring).

    Returns ``[{"kind": "aer", "bus_id": "dddd:bb:dd.f", "severity": str, "meaning": str,
    "action": "watch" (corrected) | "replace" (uncorrected), "line": int}]``; the bus id is the
    device the error was received from when the line names it, else the reporting port.
    """
    events = []
    for lineno, raw in enumerate(str(text).splitlines(), 1):
        m = _AER.search(raw)
        if not m:
            continue
        dev = _AER_DEV.search(raw)
        severity = m.group(2)
        events.append(
            {
                "kind": "aer",
                "bus_id": (dev.group(1) if dev else m.group(1).split()[-1]).lower(),
                "severity": severity,
                "meaning": f"PCIe AER {severity} error",
                "action": "watch" if severity == "Corrected" else "replace",
                "line": lineno,
            }
        )
    return events


def kernel_log(text):
    """The kernel log as the kernel_log check reads it: ``{"events": [...], "error": str|None,
    "complete": bool}``. ``events``: the NVIDIA events of ``gpu_kernel.parse_kernel_log``
    (``kind`` xid / gpu_lost / init_failed / sxid / ..., ``code``, ``meaning``, ``action``)
    followed by :func:`parse_aer_events`. A log gpu_kernel cannot read (a cut Xid record) gives
    ``error`` with its message instead of failing the whole health run."""
    text = str(text or "")
    try:
        nvidia = parse_kernel_log(text) if text.strip() else {"events": [], "complete": True}
    except ValueError as exc:
        return {"events": parse_aer_events(text), "error": str(exc), "complete": False}
    return {"events": nvidia["events"] + parse_aer_events(text), "error": None, "complete": nvidia["complete"]}


def _short_bus(bus_id):
    """``0000:3B:00.0`` and the Xid form ``0000:3b:00`` compare equal (domain:bus:device)."""
    b = str(bus_id).lower()
    if b.count(":") == 1:
        b = "0000:" + b
    return b.split(".")[0][-12:]


# --------------------------------------------------------------------------------------------
# GPU checks (all skipped with NO_GPU on a node without an NVIDIA GPU)
# --------------------------------------------------------------------------------------------


def has_gpu(gpu_facts):
    gpu_facts = gpu_facts or {}
    return bool(gpu_facts.get("gpu_count") or gpu_facts.get("pci_gpu_count"))


def _skipped_gpu(names):
    return [check(n, "skipped", NO_GPU) for n in names]


GPU_CHECKS = (
    "gpu_count",
    "gpu_model",
    "driver",
    "persistence_mode",
    "ecc",
    "kernel_log",
    "gpu_pcie_link",
    "nvlink",
    "fabric_manager",
    "peer_memory",
    "dcgm",
)


def check_profile_gpus(profile, gpu_facts):
    """GPU count, model, driver state and branch, NVLink/NVSwitch against the profile."""
    profile = profile or {}
    g = gpu_facts or {}
    if not has_gpu(g):
        names = ["gpu_count", "gpu_model", "driver", "nvlink"]
        out = _skipped_gpu(names)
        if profile.get("gpu_count"):
            out[0] = check(
                "gpu_count",
                "failed",
                f"the profile expects {profile['gpu_count']} GPUs; {NO_GPU} (lspci lists none)",
                "check the node is the machine type of its host group, reseat the GPUs, check BIOS PCIe settings",
            )
        return out
    out = []
    driver = g.get("driver") or {}
    seen = g.get("gpu_count", 0)
    on_bus = g.get("pci_gpu_count", 0)
    want = profile.get("gpu_count")
    if driver.get("state") != "ready":
        out.append(
            check(
                "driver",
                "failed",
                f"driver {driver.get('state')} ({driver.get('class')}): {driver.get('reason')}",
                driver.get("hint") or "run the nvidia_driver stage",
            )
        )
    else:
        branch = str(profile.get("driver_branch") or "")
        version = str(driver.get("version") or "")
        if branch and version.split(".")[0] != branch:
            out.append(
                check(
                    "driver",
                    "failed",
                    f"driver {version} is not on branch {branch}",
                    f"install the {branch} branch (nvidia_driver_branch) or fix the profile",
                )
            )
        else:
            out.append(check("driver", "ok", f"driver {version} ready"))
    if want is None:
        status = "ok" if seen == on_bus else "failed"
        out.append(
            check(
                "gpu_count",
                status,
                f"nvidia-smi sees {seen} of the {on_bus} GPUs on the PCI bus (no profile count)",
                "" if status == "ok" else "see the kernel log for the missing GPUs (Xid 79, RmInitAdapter)",
            )
        )
    else:
        status = "ok" if seen == want else "failed"
        out.append(
            check(
                "gpu_count",
                status,
                f"{seen} GPUs usable, {on_bus} on the PCI bus, profile expects {want}",
                ""
                if status == "ok"
                else "find the missing GPU in the kernel log (Xid 79 / RmInitAdapter); reseat or replace it",
            )
        )
    model = profile.get("gpu_model")
    names = sorted({x.get("name") or "" for x in g.get("gpus") or []})
    if not model:
        out.append(
            check("gpu_model", "skipped", f"no gpu_model in the profile (GPUs: {', '.join(names) or 'none usable'})")
        )
    else:
        wrong = [n for n in names if model.lower() not in n.lower()]
        out.append(
            check(
                "gpu_model",
                "failed" if wrong or not names else "ok",
                f"GPUs {', '.join(names) or 'none usable'}; profile expects '{model}'",
                "put the node in the host group of its machine type" if wrong or not names else "",
            )
        )
    topo = g.get("topology")
    if profile.get("nvlink") is None and profile.get("nvswitch") is None:
        out.append(check("nvlink", "skipped", "no nvlink/nvswitch in the profile"))
    elif not topo:
        out.append(check("nvlink", "failed", "nvidia-smi topo -m was not read", "check nvidia-smi topo -m on the node"))
    else:
        problems = []
        for key in ("nvlink", "nvswitch"):
            if profile.get(key) is not None and bool(topo.get(key)) != bool(profile[key]):
                problems.append(
                    f"{key} {'present' if topo.get(key) else 'absent'}, profile expects "
                    f"{'present' if profile[key] else 'absent'}"
                )
        out.append(
            check(
                "nvlink",
                "failed" if problems else "ok",
                "; ".join(problems) or f"nvlink {bool(topo.get('nvlink'))}, nvswitch {bool(topo.get('nvswitch'))}",
                "check nvidia-smi nvlink -s and the Fabric Manager; a lost NVLink needs a GPU reset or service"
                if problems
                else "",
            )
        )
    return out


def check_persistence(gpu_facts):
    if not has_gpu(gpu_facts):
        return _skipped_gpu(["persistence_mode"])
    gpus = gpu_facts.get("gpus") or []
    if not gpus:
        return [check("persistence_mode", "skipped", "no GPU usable (see the driver check)")]
    off = [str(x.get("index")) for x in gpus if x.get("persistence_mode") is not True]
    if off:
        return [
            check(
                "persistence_mode",
                "degraded",
                f"persistence mode off on GPU {', '.join(off)}",
                "enable nvidia-persistenced (systemctl enable --now nvidia-persistenced)",
            )
        ]
    return [check("persistence_mode", "ok", f"on for {len(gpus)} GPUs")]


def check_ecc(gpu_facts, ecc, corrected_limit=0):
    """ECC per GPU from :func:`ecc_rows` (``{"rows": [...], "error": str|None}``, or None when
    ``nvidia-smi -q`` was not run). A row: ``bus_id``, ``ecc_mode`` (bool, None when not
    supported), the volatile ``uncorrected`` / ``corrected`` totals, ``pending`` (page
    retirement or row remapping pending) and ``remap_failure`` (no spare rows left)."""
    if not has_gpu(gpu_facts):
        return _skipped_gpu(["ecc"])
    ecc = ecc or {}
    if ecc.get("error"):
        cause = f"nvidia-smi -q could not be read: {ecc['error']}"
        return [check("ecc", "degraded", cause, "run nvidia-smi -q on the node by hand")]
    if not ecc.get("rows"):
        return [check("ecc", "skipped", "ECC counters not read (driver not ready)")]
    out = []
    for r in ecc["rows"]:
        subject = f"GPU {r.get('bus_id')}"
        if r.get("ecc_mode") is None:
            out.append(check("ecc", "skipped", "ECC not supported by this GPU", subject=subject))
        elif r.get("ecc_mode") is False:
            out.append(
                check("ecc", "degraded", "ECC is disabled", "nvidia-smi -e 1 -i <gpu>, then reset the GPU", subject)
            )
        elif r.get("remap_failure"):
            out.append(
                check("ecc", "failed", "row remapping failed (no spare rows left)", ACTION_FIX["replace"], subject)
            )
        elif (r.get("uncorrected") or 0) > 0:
            out.append(
                check(
                    "ecc",
                    "failed",
                    f"{r['uncorrected']} uncorrected volatile ECC errors",
                    ACTION_FIX["reset"] + "; replace when it recurs",
                    subject,
                )
            )
        elif r.get("pending"):
            out.append(
                check(
                    "ecc",
                    "degraded",
                    "page retirement / row remapping pending",
                    ACTION_FIX["reset"] + " to apply it",
                    subject,
                )
            )
        elif (r.get("corrected") or 0) > corrected_limit:
            out.append(
                check(
                    "ecc",
                    "degraded",
                    f"{r['corrected']} corrected volatile ECC errors (limit {corrected_limit})",
                    ACTION_FIX["watch"],
                    subject,
                )
            )
        else:
            out.append(check("ecc", "ok", "no ECC errors", subject=subject))
    return out


def _event_text(e):
    kind = e["kind"]
    if kind == "xid":
        return f"Xid {e['code']}: {e.get('meaning') or 'not in the Xid catalog'}"
    if kind == "gpu_lost":
        return "GPU has fallen off the bus"
    if kind == "init_failed":
        return f"GPU init failed: {e.get('text')}"
    if kind == "sxid":
        return f"NVSwitch SXid {e['code']} ({'fatal' if e.get('fatal') else 'non-fatal'}): {e.get('text')}"
    if kind == "probe_failed":
        return f"the NVIDIA probe failed for {e.get('devices')} device(s)"
    return e.get("meaning") or e.get("text") or kind


def check_kernel_log(gpu_facts, kernel, nic_bus_ids=()):
    """Each kernel-log event that calls for an action, classified by :data:`ACTION_STATUS`.

    ``kernel``: :func:`kernel_log` of the node's log. Events with action ``none`` (an
    unsupported GPU, a failed probe: the driver check reports those) give no check. AER events
    count only for this node's GPUs and ``nic_bus_ids``, and on a GPU-less node too (where an
    NVRM record gpu_kernel cannot read is no finding: there is no NVIDIA GPU to judge)."""
    kernel = kernel or {}
    nics = {_short_bus(b) for b in nic_bus_ids if b}
    gpu_buses = {_short_bus(x.get("bus_id")) for x in (gpu_facts or {}).get("pci_gpus") or []}
    events = kernel.get("events") or []
    mine = [e for e in events if e["kind"] != "aer" or _short_bus(e["bus_id"]) in nics | gpu_buses]
    gpu = has_gpu(gpu_facts)
    if not gpu and not [e for e in mine if e["kind"] == "aer"]:
        return _skipped_gpu(["kernel_log"])
    out = []
    if kernel.get("error") and gpu:
        out.append(
            check(
                "kernel_log",
                "degraded",
                f"the kernel log could not be read: {kernel['error']}",
                "read journalctl -k -b on the node by hand",
            )
        )
    for e in mine:
        if e["action"] == "none":
            continue
        status = ACTION_STATUS[e["action"]]
        cause = f"{_event_text(e)} ({e['action']})"
        out.append(check("kernel_log", status, cause, ACTION_FIX[e["action"]], e.get("bus_id") or ""))
    if not out:
        out.append(check("kernel_log", "ok", "no Xid or PCIe AER errors in the kernel log"))
    return out


def check_pcie_links(devices, lspci, kind):
    """Each device's LnkSta against its LnkCap (speed and width). ``devices``: [{"bus_id",
    "subject"}]; ``lspci``: :func:`parse_lspci_vv` output; ``kind``: "gpu" | "nic"."""
    name = f"{kind}_pcie_link"
    if lspci is None:
        return [
            check(
                name, "skipped", "lspci -vv not read (pciutils not installed)", subject=d.get("subject") or d["bus_id"]
            )
            for d in devices
        ]
    out = []
    for d in devices:
        bus = str(d["bus_id"]).lower()
        rec = (lspci or {}).get(bus)
        subject = d.get("subject") or bus
        if rec is None:
            out.append(
                check(name, "failed", f"{bus} not in lspci -vv", "check the device is on the bus (lspci -D)", subject)
            )
            continue
        cap, sta = rec.get("cap"), rec.get("sta")
        if not cap or not sta:
            out.append(check(name, "skipped", f"{bus}: lspci shows no LnkCap/LnkSta (run as root)", subject=subject))
            continue
        problems = []
        if sta["width"] < cap["width"] or sta.get("width_downgraded"):
            problems.append(f"width x{sta['width']} of x{cap['width']}")
        if (sta["speed_gts"] or 0) < (cap["speed_gts"] or 0) or sta.get("speed_downgraded"):
            problems.append(f"speed {sta['speed_gts']}GT/s of {cap['speed_gts']}GT/s")
        if problems:
            out.append(
                check(
                    name,
                    "degraded",
                    f"{bus} link downgraded: {', '.join(problems)}",
                    "reseat the card / riser, check the slot's BIOS link settings; a GPU idle in a low "
                    "power state may train down: read it again under load",
                    subject,
                )
            )
        else:
            out.append(check(name, "ok", f"{bus} at {sta['speed_gts']}GT/s x{sta['width']}", subject=subject))
    return out


FABRIC_STATUS = {"ok": "ok", "warn": "degraded", "unknown": "degraded", "fail": "failed"}


def check_fabric_manager(gpu_facts, profile, status_text):
    """nvidia-fabricmanager where the node has NVSwitches (gpu_facts' ``nvswitches``, from
    lspci) or the profile expects it, judged by ``gpu_fabric.fabricmanager_state`` on
    ``systemctl status nvidia-fabricmanager`` read by ``gpu_fabric.parse_fabricmanager``
    (the GPU component's readers; without FM CUDA fails with error 802 on NVSwitch systems)."""
    if not has_gpu(gpu_facts):
        return _skipped_gpu(["fabric_manager"])
    g = gpu_facts or {}
    nvswitches = g.get("nvswitches")
    expected = (profile or {}).get("fabric_manager")
    if expected is False:
        return [check("fabric_manager", "skipped", "the profile expects no Fabric Manager")]
    if expected is None and not nvswitches:
        why = "lspci was not read" if nvswitches is None else "lspci lists no NVSwitch"
        cause = f"no NVSwitch known on this node ({why}): Fabric Manager does not apply"
        return [check("fabric_manager", "skipped", cause)]
    if expected and nvswitches == []:
        return [
            check(
                "fabric_manager",
                "failed",
                "the profile expects Fabric Manager (an NVSwitch system) but lspci lists no NVSwitch",
                "check the node is the machine type of its host group; an HGX baseboard without visible "
                "NVSwitches needs service",
            )
        ]
    try:
        reading = parse_fabricmanager(status_text)
    except ValueError as exc:
        return [
            check(
                "fabric_manager",
                "degraded",
                f"systemctl status nvidia-fabricmanager could not be read: {exc}",
                "run systemctl status nvidia-fabricmanager on the node by hand",
            )
        ]
    state = fabricmanager_state(reading, nvswitches, (g.get("driver") or {}).get("version"))
    status = FABRIC_STATUS[state["severity"]]
    return [check("fabric_manager", status, f"{state['class']}: {state['reason']}", state["hint"] or "")]


def check_peer_memory(gpu_facts, gdr_configured, loaded_modules):
    """GPUDirect RDMA configured -> nvidia_peermem (or nv_peer_mem) must be loaded."""
    if not has_gpu(gpu_facts):
        return _skipped_gpu(["peer_memory"])
    if not gdr_configured:
        return [check("peer_memory", "skipped", "GPUDirect RDMA is not configured (gpudirect_enabled false)")]
    if loaded_modules:
        return [check("peer_memory", "ok", f"{', '.join(loaded_modules)} loaded")]
    return [
        check(
            "peer_memory",
            "failed",
            "GPUDirect RDMA is configured but no peer-memory module is loaded: NCCL runs without GDR",
            "modprobe nvidia_peermem (run the gpudirect stage)",
        )
    ]


def check_dcgm(gpu_facts, dcgmi_present, level, rc=None, output=""):
    """``dcgmi diag -r <level>``: rc 0 and no ``Fail`` result line -> ok."""
    if not has_gpu(gpu_facts):
        return _skipped_gpu(["dcgm"])
    if not dcgmi_present:
        return [check("dcgm", "skipped", "DCGM is not installed (no dcgmi): no diagnostics run")]
    fails = [ln.strip() for ln in str(output).splitlines() if re.search(r"\|\s*Fail\b|\bFail\s*$", ln)]
    if rc == 0 and not fails:
        return [check("dcgm", "ok", f"dcgmi diag -r {level} passed")]
    cause = f"dcgmi diag -r {level} exited {rc}" + (f": {'; '.join(fails[:5])}" if fails else "")
    return [check("dcgm", "failed", cause, "read the failing test in dcgmi diag output; drain the node")]


# --------------------------------------------------------------------------------------------
# NICs (real on every node)
# --------------------------------------------------------------------------------------------


def _iface(interface_facts, name):
    """Ansible's fact for interface ``name`` (facts key ``-``, ``.`` and ``:`` as ``_``)."""
    facts = interface_facts or {}
    return facts.get(name) or facts.get(re.sub(r"[-.:]", "_", name))


_PCI_ADDR = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# The netdev's device may be a child of the PCI function (virtio-net: .../0000:00:03.0/virtio0).
_PCI_IN_PATH = re.compile(r"(?<![0-9a-fA-F])([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?![0-9a-fA-F])")


def nic_pci_devices(nic_paths, rdma_netdevs=()):
    """PCI functions of the NICs: the data NICs' ``/sys/class/net/<if>/device`` targets
    (``<if> <resolved path>`` lines, ``readlink -f``; the last PCI address in the path, as a
    virtio-net device sits below its PCI function; a virtual interface such as veth has no
    device) and the RDMA netdevs' ``bus_id`` (rdma_facts). Returns ``([{"bus_id", "subject"}], [virtual names])``."""
    devices, virtual, seen = [], [], set()
    for line in str(nic_paths or "").splitlines():
        parts = line.split(None, 1)
        if not parts:
            continue
        found = _PCI_IN_PATH.findall(parts[1]) if len(parts) > 1 else []
        bus = found[-1].lower() if found else ""
        if bus:
            if bus not in seen:
                seen.add(bus)
                devices.append({"bus_id": bus, "subject": parts[0]})
        else:
            virtual.append(parts[0])
    for n in rdma_netdevs or []:
        bus = str(n.get("bus_id") or "").lower()
        if _PCI_ADDR.match(bus) and bus not in seen:
            seen.add(bus)
            devices.append({"bus_id": bus, "subject": f"{n.get('netdev') or n.get('hca')} ({n.get('hca')})"})
    return devices, virtual


def check_data_nics(data_interfaces, interface_facts, profile=None):
    """The data NICs the node was converged with: present, up, with IPv4, at the profile's rate.

    ``data_interfaces``: names (the nccl_env contract); ``interface_facts``: {name:
    ansible_facts[name]} (``active``, ``ipv4``, ``speed`` in Mb/s, -1 or absent when unknown).
    """
    profile = profile or {}
    if not data_interfaces:
        return [check("data_nics", "skipped", "no data NICs in the node's contract (nccl_env stage not run)")]
    out = []
    rate = profile.get("nic_rate_gbps")
    for name in data_interfaces:
        f = _iface(interface_facts, name)
        if not f:
            out.append(
                check("data_nics", "failed", f"{name} does not exist", "run the multi_nic stage; check the NIC", name)
            )
            continue
        if not f.get("active"):
            out.append(
                check(
                    "data_nics",
                    "failed",
                    f"{name} is down",
                    f"ip link set {name} up; check the cable/switch port",
                    name,
                )
            )
            continue
        addr = (f.get("ipv4") or {}).get("address")
        if not addr:
            out.append(check("data_nics", "failed", f"{name} has no IPv4 address", "run the multi_nic stage", name))
            continue
        speed = f.get("speed")
        msg = f"{name} up, {addr}" + (f", {speed} Mb/s" if isinstance(speed, int) and speed > 0 else "")
        if rate and isinstance(speed, int) and speed > 0 and speed < rate * 1000:
            out.append(
                check(
                    "data_nics",
                    "degraded",
                    f"{msg}: below the profile's {rate} Gbit/s",
                    "check the link partner / cable (ethtool)",
                    name,
                )
            )
        else:
            out.append(check("data_nics", "ok", msg, subject=name))
    return out


def check_rdma_ports(rdma_facts, profile=None):
    """RDMA ports ACTIVE, their count and rate against the profile."""
    profile = profile or {}
    ports = [(h.get("name"), p) for h in (rdma_facts or {}).get("hcas") or [] for p in h.get("ports") or []]
    want, rate = profile.get("nic_count"), profile.get("nic_rate_gbps")
    if not ports:
        if want:
            return [
                check(
                    "rdma_ports",
                    "failed",
                    f"no RDMA port; the profile expects {want}",
                    "run the rdma stage; check the HCAs (ibv_devinfo)",
                )
            ]
        return [check("rdma_ports", "skipped", "the node has no RDMA NIC")]
    out = []
    active = [(h, p) for h, p in ports if p.get("state") == "ACTIVE"]
    for h, p in ports:
        subject = f"{h}:{p.get('port')}"
        if p.get("state") != "ACTIVE":
            out.append(
                check(
                    "rdma_ports",
                    "failed",
                    f"port {p.get('state')}",
                    "check the cable, the switch port and the subnet manager",
                    subject,
                )
            )
        elif rate and (p.get("rate_gbps") or 0) < rate:
            out.append(
                check(
                    "rdma_ports",
                    "degraded",
                    f"{p.get('rate_gbps')} Gbit/s, profile expects {rate}",
                    "check the cable and the switch port speed",
                    subject,
                )
            )
        else:
            out.append(check("rdma_ports", "ok", f"ACTIVE {p.get('rate_gbps')} Gbit/s", subject=subject))
    if want and len(active) != want:
        out.append(
            check(
                "rdma_ports",
                "failed",
                f"{len(active)} ACTIVE RDMA ports, profile expects {want}",
                "check the missing HCA (ibv_devinfo, lspci)",
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# Inside the training container, as mpirun's ranks see them
# --------------------------------------------------------------------------------------------


def _kib(value):
    return "unlimited" if value == "unlimited" else int(value)


def check_container_limits(limits, shm_bytes, hugetlbfs_mounts, want):
    """Limits inside the training container.

    ``limits``: ``diagnose.parse_ulimit_a`` of ``ulimit -a`` run in the container (memlock in
    KiB); ``shm_bytes``: size of /dev/shm in bytes (``df -B1``) or None; ``hugetlbfs_mounts``:
    ``hugepages.parse_hugetlbfs_mounts`` of the container's /proc/mounts; ``want``:
    ``{"memlock": bytes or -1 (unlimited), "nofile_min": int, "shm_bytes": int or a Docker
    size such as "32g" (binary units, as docker's --shm-size),
    "hugepages_path": str or "" (not bound)}``.
    """
    out = []
    mem = limits.get("memlock")
    want_mem = int(want.get("memlock", -1))
    want_kib = "unlimited" if want_mem == -1 else want_mem // 1024
    if mem == want_kib:
        out.append(check("container_memlock", "ok", f"ulimit -l {mem}", subject="memlock"))
    else:
        out.append(
            check(
                "container_memlock",
                "failed",
                f"ulimit -l is {mem} in the container, the contract says {want_kib}"
                " (RDMA pins memory: ibv_create_cq ENOMEM)",
                "converge the training stage (training_image_ulimit_memlock); on the host raise the hard limit",
                "memlock",
            )
        )
    nofile = limits.get("nofile")
    floor = int(want.get("nofile_min", 0))
    if nofile == "unlimited" or (isinstance(nofile, int) and nofile >= floor):
        out.append(check("container_nofile", "ok", f"ulimit -n {nofile}", subject="nofile"))
    else:
        out.append(
            check(
                "container_nofile",
                "degraded",
                f"ulimit -n {nofile} < {floor} (NCCL and MPI open a socket per peer and channel)",
                "raise nofile for the container (docker --ulimit nofile=1048576)",
                "nofile",
            )
        )
    want_shm = want.get("shm_bytes") or 0
    want_shm = parse_size(want_shm) if isinstance(want_shm, str) else int(want_shm)
    if shm_bytes is None:
        out.append(
            check(
                "container_shm",
                "failed",
                "/dev/shm not mounted in the container",
                "run the container with --shm-size",
                "/dev/shm",
            )
        )
    elif shm_bytes < want_shm:
        out.append(
            check(
                "container_shm",
                "failed",
                f"/dev/shm {shm_bytes} bytes < {want_shm} configured (NCCL's shm transport fails: Bus error)",
                "converge the training stage (training_image_shm_size)",
                "/dev/shm",
            )
        )
    else:
        out.append(check("container_shm", "ok", f"/dev/shm {shm_bytes} bytes", subject="/dev/shm"))
    path = want.get("hugepages_path") or ""
    if not path:
        out.append(
            check(
                "container_hugepages",
                "skipped",
                "hugepages are not bound into the container (training_image_bind_hugepages false)",
            )
        )
    elif any(m["mountpoint"] == path for m in hugetlbfs_mounts or []):
        out.append(check("container_hugepages", "ok", f"hugetlbfs mounted at {path}", subject=path))
    else:
        out.append(
            check(
                "container_hugepages",
                "failed",
                f"no hugetlbfs at {path} in the container",
                "run the hugepages stage, then converge the training stage",
                path,
            )
        )
    return out


def check_container_running(name, info):
    """``community.docker.docker_container_info`` result -> one check (``msg`` of a failed
    call, e.g. no Docker on the node, becomes the cause)."""
    if info.get("exists") and ((info.get("container") or {}).get("State") or {}).get("Running"):
        return [check("container", "ok", f"{name} running", subject=name)]
    if info.get("failed") or (info.get("msg") and not info.get("exists")):
        why = f"Docker could not be asked about it ({str(info.get('msg')).strip().split('. ')[0][:200]})"
    elif info.get("exists"):
        why = f"it exists but is {((info.get('container') or {}).get('State') or {}).get('Status', 'not running')}"
    else:
        why = "it does not exist"
    return [
        check(
            "container",
            "failed",
            f"training container {name}: {why}; its limits cannot be read",
            f"run site.yml (training stage); see docker logs {name}",
            name,
        )
    ]


# --------------------------------------------------------------------------------------------
# Drift: the node as it is against the contract it was converged to
# --------------------------------------------------------------------------------------------


def drift(contract, container_env, interface_facts):
    """Compare the nccl_env local fact (``ansible_local.gpucluster.nccl``: container_env,
    data_interfaces, hcas) with the running container's environment (``NAME=value`` list of
    ``docker inspect .Config.Env``) and the node's interfaces.

    Returns ``[{"item", "contract", "actual", "status": "same"|"drifted"}]``; an empty
    contract returns one ``not converged`` item.
    """
    if not contract:
        return [
            {
                "item": "contract",
                "contract": None,
                "actual": None,
                "status": "not converged",
                "note": "no /etc/gpucluster/contract.d/nccl.json: the nccl_env stage never ran here",
            }
        ]
    actual_env = {}
    for pair in container_env or []:
        key, _, value = str(pair).partition("=")
        actual_env[key] = value
    out = []
    for key, value in sorted((contract.get("container_env") or {}).items()):
        got = actual_env.get(key)
        out.append(
            {
                "item": f"env {key}",
                "contract": str(value),
                "actual": got,
                "status": "same" if got == str(value) else "drifted",
            }
        )
    for name in contract.get("data_interfaces") or []:
        f = _iface(interface_facts, name)
        actual = "absent" if not f else ("up" if f.get("active") else "down")
        out.append(
            {
                "item": f"interface {name}",
                "contract": "up",
                "actual": actual,
                "status": "same" if actual == "up" else "drifted",
            }
        )
    return out


def drift_check(items):
    drifted = [i for i in items if i["status"] == "drifted"]
    if not items or items[0]["status"] == "not converged":
        return [check("drift", "skipped", "the node has no converged contract (nccl_env local fact missing)")]
    if drifted:
        return [
            check(
                "drift",
                "degraded",
                f"{len(drifted)} item(s) differ from the converged contract: "
                + ", ".join(i["item"] for i in drifted[:6]),
                "converge again (site.yml) or find who changed the node",
            )
        ]
    return [check("drift", "ok", f"{len(items)} items as converged")]


# --------------------------------------------------------------------------------------------
# Whole node
# --------------------------------------------------------------------------------------------


def evaluate(node):
    """All checks of one node from its collected inputs; returns the verdict dict plus
    ``drift``. ``node`` keys (all optional; a missing input yields a skipped check):
    ``profile``, ``gpu`` (gpucluster_gpu), ``rdma`` (gpucluster_rdma),
    ``kernel_log`` (:func:`kernel_log`), ``ecc`` (:func:`ecc_rows`), ``lspci``
    (parse_lspci_vv, None when not read), ``nic_paths`` (see :func:`nic_pci_devices`),
    ``fabric_manager_status`` (``systemctl status nvidia-fabricmanager``), ``gdr_configured``,
    ``peer_memory_modules``, ``dcgm``
    ({present, level, rc, output}), ``data_interfaces``, ``interface_facts``, ``container``
    ({name, info, env, want, and the texts read inside it: ulimit_text (``ulimit -a``),
    shm_text (``df -B1 --output=size /dev/shm``), mounts_text (``/proc/mounts``)}), ``contract``.
    """
    profile = node.get("profile") or {}
    gpu = node.get("gpu") or {}
    checks = []
    checks += check_profile_gpus(profile, gpu)
    checks += check_persistence(gpu)
    checks += check_ecc(gpu, node.get("ecc"), int(node.get("ecc_corrected_limit") or 0))
    nic_bus = [d["bus_id"] for d in nic_pci_devices(node.get("nic_paths"), (node.get("rdma") or {}).get("netdevs"))[0]]
    checks += check_kernel_log(gpu, node.get("kernel_log"), nic_bus)
    if has_gpu(gpu):
        devices = [{"bus_id": x["bus_id"], "subject": f"GPU {x['bus_id']}"} for x in gpu.get("pci_gpus") or []]
        checks += check_pcie_links(devices, node.get("lspci"), "gpu")
    else:
        checks += _skipped_gpu(["gpu_pcie_link"])
    nic_devices, virtual = nic_pci_devices(node.get("nic_paths"), (node.get("rdma") or {}).get("netdevs"))
    if nic_devices:
        checks += check_pcie_links(nic_devices, node.get("lspci"), "nic")
    for name in virtual:
        checks.append(
            check(
                "nic_pcie_link",
                "skipped",
                f"{name} is a virtual interface (no PCI device behind "
                f"/sys/class/net/{name}/device): no PCIe link to check",
                subject=name,
            )
        )
    if not nic_devices and not virtual:
        checks.append(check("nic_pcie_link", "skipped", "no data NIC or RDMA NIC to check"))
    checks += check_fabric_manager(gpu, profile, node.get("fabric_manager_status"))
    checks += check_peer_memory(gpu, node.get("gdr_configured"), node.get("peer_memory_modules") or [])
    d = node.get("dcgm") or {}
    checks += check_dcgm(gpu, d.get("present"), d.get("level"), d.get("rc"), d.get("output", ""))
    checks += check_data_nics(node.get("data_interfaces"), node.get("interface_facts"), profile)
    checks += check_rdma_ports(node.get("rdma"), profile)
    c = node.get("container") or {}
    running = check_container_running(c.get("name"), c.get("info") or {})
    checks += running
    if running[0]["status"] == "ok" and c.get("ulimit_text") is not None:
        checks += check_container_limits(
            parse_ulimit_a(c["ulimit_text"]),
            parse_df_bytes(c.get("shm_text") or ""),
            parse_hugetlbfs_mounts(c.get("mounts_text") or ""),
            c.get("want") or {},
        )
    items = drift(node.get("contract"), c.get("env"), node.get("interface_facts"))
    checks += drift_check(items)
    out = verdict(checks)
    out["drift"] = items
    return out


def parse_df_bytes(text):
    """Size in bytes from ``df -B1 --output=size <path>`` (header ``1B-blocks``), else None."""
    for line in str(text).splitlines():
        s = line.strip()
        if s.isdigit():
            return int(s)
    return None


def markdown(report):
    """Render ``{"generated": str, "nodes": {host: evaluate()}}`` as Markdown."""
    lines = [f"# Node health {report.get('generated', '')}", ""]
    lines += ["| node | verdict | failed | degraded | skipped |", "|---|---|---|---|---|"]
    for host, r in sorted(report["nodes"].items()):
        c = r["counts"]
        lines.append(f"| {host} | **{r['verdict']}** | {c['failed']} | {c['degraded']} | {c['skipped']} |")
    for host, r in sorted(report["nodes"].items()):
        lines += ["", f"## {host}: {r['verdict']}", ""]
        for cause in r["cause"]:
            lines.append(f"- cause: {cause}")
        for fix in r["fix"]:
            lines.append(f"- fix: {fix}")
        lines += ["", "| check | subject | status | cause | fix |", "|---|---|---|---|---|"]
        for c in r["checks"]:
            cells = [c["check"], c["subject"], c["status"], c["cause"], c["fix"]]
            lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
        lines += [
            "",
            "### Drift (as converged vs as it is)",
            "",
            "| item | contract | actual | status |",
            "|---|---|---|---|",
        ]
        for i in r.get("drift") or []:
            cells = [i["item"], i["contract"], i["actual"], i["status"]]
            lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Inputs the role hands over
# --------------------------------------------------------------------------------------------

PROFILE_KEYS = {
    "gpu_count": int,
    "gpu_model": str,
    "nvlink": bool,
    "nvswitch": bool,
    "nic_count": int,
    "nic_rate_gbps": int,
    "driver_branch": str,
    "fabric_manager": bool,
}


def profile_problems(profile):
    """Problems of a ``node_health_profile`` value (empty list: fine). See the module docstring."""
    if profile in (None, ""):
        return []
    if not isinstance(profile, dict):
        return [f"must be a mapping, got {type(profile).__name__} {profile!r}"]
    problems = []
    for key, value in profile.items():
        kind = PROFILE_KEYS.get(key)
        if kind is None:
            problems.append(f"unknown key {key!r} (known: {', '.join(sorted(PROFILE_KEYS))})")
        elif kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append(f"{key}={value!r} must be a whole number >= 0")
        elif kind is bool and not isinstance(value, bool):
            problems.append(f"{key}={value!r} must be true or false")
        elif kind is str and not (isinstance(value, (str, int)) and not isinstance(value, bool) and str(value)):
            problems.append(f"{key}={value!r} must be a non-empty string")
    return problems


def ecc_rows(text):
    """``nvidia-smi -q`` (read by ``gpu_smi.parse_smi_q``, the one -q reader) -> the input of
    :func:`check_ecc`: ``{"rows": [{"bus_id", "ecc_mode", "uncorrected", "corrected",
    "pending", "remap_failure"}], "error": None}``, or ``{"rows": [], "error": message}`` when
    the report cannot be read (the ECC check then says so instead of failing the run)."""
    try:
        report = parse_smi_q(text)
    except ValueError as exc:
        return {"rows": [], "error": str(exc)}
    rows = []
    for g in report["gpus"]:
        volatile = (g.get("ecc_errors") or {}).get("volatile") or {}
        retired = g.get("retired_pages") or {}
        remap = g.get("remapped_rows") or {}
        rows.append(
            {
                "bus_id": g["bus_id"],
                "ecc_mode": (g.get("ecc_mode") or {}).get("current"),
                "uncorrected": volatile.get("uncorrectable"),
                "corrected": volatile.get("correctable"),
                "pending": bool(retired.get("pending") or remap.get("pending")),
                "remap_failure": bool(remap.get("failure")),
            }
        )
    return {"rows": rows, "error": None}


def dcgm_packages(smi_q_text, major=4):
    """The DCGM package(s) to install from NVIDIA's CUDA repository (DCGM installation guide,
    https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/getting-started.html): DCGM 3.x is
    ``datacenter-gpu-manager``; DCGM 4.x is split per CUDA major, ``datacenter-gpu-manager-4-cuda<N>``
    where N is the major of the "CUDA Version" the driver reports (``nvidia-smi -q``, read by
    ``gpu_smi.parse_smi_q``; the guide reads the same line of ``nvidia-smi``).
    ValueError names the fix when the driver's CUDA version cannot be read."""
    if str(major) not in ("3", "4"):
        raise ValueError(f"node_health_dcgm_major={major!r}: use 3 (datacenter-gpu-manager) or 4 "
                         "(datacenter-gpu-manager-4-cuda<N>)")
    if str(major) == "3":
        return ["datacenter-gpu-manager"]
    try:
        cuda = parse_smi_q(smi_q_text or "").get("cuda_version")
    except ValueError as exc:
        raise ValueError(f"DCGM 4 is packaged per CUDA major, and nvidia-smi -q could not be read ({exc}): "
                         "load the NVIDIA driver (the nvidia_driver stage) or set node_health_dcgm_major: 3") from exc
    m = re.match(r"^(\d+)\.\d+", str(cuda or ""))
    if not m:
        raise ValueError(f"DCGM 4 is packaged per CUDA major, and nvidia-smi -q reports CUDA Version {cuda!r}: "
                         "load a driver that reports one, or set node_health_dcgm_major: 3")
    return [f"datacenter-gpu-manager-4-cuda{m.group(1)}"]
