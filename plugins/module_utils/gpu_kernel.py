"""NVIDIA messages in the kernel log: Xid events, GPUs fallen off the bus, failed adapter init.

Part of the GPU component (see ``gpu_pci``). Pure functions, stdlib only, Python 3.8+.
The one reader of ``NVRM:`` kernel lines; ``gpu_driver.driver_state`` uses it too.

Grammar and sources:

- Record prefixes, as the tools print them: ``dmesg`` (util-linux) ``[ 1843.308145] ``,
  ``dmesg -T`` ``[Mon Jun  2 13:13:04 2025] ``, ``dmesg -H`` / ``dmesg -e`` (``--reltime``)
  ``[Oct19 10:12] `` on the first record of a minute and ``[  +0.000012] `` (time since the
  record before) on the next ones (util-linux dmesg(1); the ``+`` form as pasted in
  NVIDIA/open-gpu-kernel-modules #393), ``dmesg -x`` ``kern  :err   : ``, syslog /
  ``journalctl -k`` short format ``<month> <day> <hh:mm:ss> <host> kernel: `` (the month in the
  node's locale: ``Jul``, ``11月``, ``nov.``), ``journalctl -o short-iso``
  ``2025-06-02T13:13:04+0000 <host> kernel: ``, or none (a bare ``NVRM: ...`` paste).
  dmesg prints the continuation lines of a multi-line printk without a prefix, indented to the
  message column (fixture N24); syslog gives every line its own prefix (fixture C14). Both are
  joined by the message grammar below, so lost indentation does not matter. A line that
  carries ``NVRM:`` or ``nvidia-nvswitchN:`` behind a prefix none of these forms matches is
  not guessed at: its line number goes to ``unread`` and the reading is not ``complete``.
- ``NVRM: Xid (PCI:dddd:bb:dd): <code>, pid=<pid>, name=<comm>, <text>``: NVIDIA driver
  (open-gpu-kernel-modules ``nvRmXid`` / ``nv_report_error``); ``pid=`` and ``name=`` appear
  from the R460-R525 drivers on (``pid='<unknown>'`` when no process), older drivers print
  ``Xid (dddd:bb:dd): <code>, <text>`` without ``PCI:``. The Xid carries domain:bus:device;
  the GPU is function 0, so the bus id reads ``dddd:bb:dd.0``.
- Xid meanings and the action each calls for: NVIDIA "Xid Errors" and the Xid Catalog
  (docs.nvidia.com/deploy/xid-errors, "Resolution Bucket (Immediate Action)": RESTART_APP ->
  ``restart_app``, RESET_GPU -> ``reset``, RESTART_BM / CHECK_MECHANICALS -> ``drain``,
  CONTACT_SUPPORT for a failed repair -> ``replace``), and "Dynamic Page Retirement" /
  "A100 GPU memory error management" (Xid 48/63/64: 64 means no spare rows are left, an RMA
  case). Xid 154 (R550+) names the recovery action itself: ``GPU recovery action changed from
  0x0 (None) to 0x2 (Node Reboot Required)``.
- GPU lost without an Xid (nv-pci.c, the GPU reads all-ones on the bus, fixture N24): ``The
  NVIDIA GPU <bus> (PCI ID: <vvvv:dddd>) installed in this system has fallen off the bus and is
  not responding to commands.``; newer drivers also print ``GPU <bus>: GPU has fallen off the
  bus.`` (NVIDIA/open-gpu-kernel-modules #1151). Same action as Xid 79: drain the node, check
  power, cooling and seating (open-gpu-kernel-modules #507), do not reinstall the driver.
- ``GPU <bus>: RmInitAdapter failed! (...)`` / ``rm_init_adapter failed`` (fixture C14).
- GPU the loaded driver refuses (open-gpu-kernel-modules ``rm_is_supported_device``, printed
  over several lines, each ``NVRM:``-prefixed, then a "Please see ..." tail that is not read):
  ``The NVIDIA GPU <bus> (PCI ID: <vvvv:dddd>) installed in this system is not supported by
  the NVIDIA <version> driver release.`` (R390 on); before it ``... is not supported by the
  <version> NVIDIA Linux driver release.`` (R367, Bumblebee-Project/Bumblebee #810); and from
  the open kernel module, for a GPU without a GSP (pre-Turing), ``... is not supported by open
  nvidia.ko because it does not include the required GPU System Processor (GSP).``
  (open-gpu-kernel-modules #587, #696). All three are ``unsupported_gpu`` events: reinstalling
  the same driver or changing the BIOS does not help; the fix is the proprietary kernel module
  (GSP case) or a driver branch that supports the PCI id.
- ``The NVIDIA probe routine failed for <n> device(s).``, the
  driver banner ``loading NVIDIA UNIX [Open ]Kernel Module for <arch>  <version>  ...`` (N24),
  ``GPU at PCI:<bus>: GPU-<uuid>`` (stable id of the GPU), and NVSwitch ``SXid (PCI:<bus>):
  <code>, Fatal|Non-fatal, <text>`` from ``nvidia-nvswitchN``.

Other kernel lines are not read (a kernel log is mostly other drivers). An ``NVRM:`` record
that starts like an Xid but does not follow its grammar raises ParseError naming the line.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_pci import normalize_bus_id
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    shorten,
    split_lines,
)

# Actions, mildest first. ``restart_app``: the GPU is fine, the job failed; ``reset``: reset the
# GPU (nvidia-smi -r, no process may hold it) before new work; ``drain``: take the node out of
# service and reboot / check power, cooling, seating; ``replace``: the GPU needs an RMA.
ACTIONS = ("none", "restart_app", "reset", "drain", "replace")

# code -> (meaning, action), NVIDIA Xid Catalog (see the module docstring). Codes not listed
# read as action "unknown" and are named in ``unknown_xids``.
XID_CATALOG = {
    8: ("GPU stopped processing (channel idle timeout)", "restart_app"),
    13: ("Graphics Engine Exception", "restart_app"),
    31: ("GPU memory page fault", "restart_app"),
    32: ("Invalid or corrupted push buffer stream", "restart_app"),
    38: ("Driver firmware error", "reset"),
    43: ("GPU stopped processing", "restart_app"),
    44: ("Graphics Engine fault during context switch", "reset"),
    45: ("Preemptive cleanup, due to previous errors", "restart_app"),
    48: ("Double Bit ECC Error", "reset"),
    61: ("Internal micro-controller breakpoint/warning", "reset"),
    62: ("Internal micro-controller halt", "reset"),
    63: ("ECC page retirement or row remapping recording event (reset to activate)", "reset"),
    64: ("ECC page retirement or row remapping failure (no spare rows)", "replace"),
    68: ("NVDEC0 Exception", "restart_app"),
    69: ("Graphics Engine class error", "restart_app"),
    74: ("NVLink Error", "reset"),
    79: ("GPU has fallen off the bus", "drain"),
    94: ("Contained memory error", "restart_app"),
    95: ("Uncontained memory error", "reset"),
    109: ("Context Switch Timeout Error", "restart_app"),
    119: ("GSP RPC Timeout", "reset"),
    120: ("GSP Error", "reset"),
    140: ("Unrecovered ECC Error", "reset"),
    154: ("GPU recovery action changed", None),  # action read from the text
}
# Xid 154 recovery actions (R550+ driver, nvmlDeviceGetRecoveryAction / NVML_GPU_RECOVERY_*).
_RECOVERY_ACTIONS = {0: "none", 1: "reset", 2: "drain", 3: "drain", 4: "drain"}

_HEX4 = r"[0-9a-fA-F]{4}"
_BUS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_XID_BUS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

_PREFIXES = (
    ("dmesg", re.compile(r"^\[\s*(?P<time>\d+\.\d+)\]\s?")),
    ("dmesg -T", re.compile(r"^\[(?P<time>[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} "
                            r"\d{2}:\d{2}:\d{2} \d{4})\]\s?")),
    # dmesg -H / --reltime: "[Oct19 10:12]" heads a minute, "[  +0.000012]" is the delta after.
    ("dmesg -H", re.compile(r"^\[\s*(?P<time>[A-Z][a-z]{2}\d{1,2} \d{2}:\d{2}|\+\d+\.\d+)\]\s?")),
    ("journal", re.compile(r"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\S*)\s+\S+\s+"
                           r"kernel:\s?(?:\[\s*\d+\.\d+\]\s?)?")),
    ("syslog", re.compile(r"^(?P<time>\S+\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+\S+\s+"
                          r"kernel:\s?(?:\[\s*\d+\.\d+\]\s?)?")),
)
_DMESG_X_RE = re.compile(r"^[a-z]+\s*:[a-z]+\s*:\s?")
_NVRM_RE = re.compile(r"^NVRM:\s?")
_NVSWITCH_RE = re.compile(r"^nvidia-nvswitch\d+:\s?")
# An NVIDIA kernel line behind a prefix that none of _PREFIXES matched (a known prefix before
# another driver's message that merely mentions NVRM is not one).
_UNREAD_RE = re.compile(r"(?:^|\s)(?:NVRM|nvidia-nvswitch\d+):")

_XID_RE = re.compile(rf"^Xid \((?:PCI:)?(?P<bus>{_XID_BUS})\):\s*(?P<code>\d+)(?P<rest>.*)$")
_XID_REST_RE = re.compile(
    r"^,\s*(?:pid=(?P<pid>'?<unknown>'?|\d+),\s*)?(?:name=(?P<name>[^,]*),\s*)?(?P<text>\S.*)$")
_XID154_RE = re.compile(r"from 0x([0-9a-fA-F]+) \([^)]*\) to 0x([0-9a-fA-F]+)")
_SXID_RE = re.compile(rf"^SXid \(PCI:(?P<bus>{_BUS})\):\s*(?P<code>\d+),\s*"
                      r"(?P<sev>Fatal|Non-fatal)\b,?\s*(?P<text>.*)$")
_LOST_SHORT_RE = re.compile(rf"^GPU (?P<bus>{_BUS}): GPU has fallen off the bus\.?$")
_INIT_FAIL_RE = re.compile(rf"^GPU (?P<bus>{_BUS}):\s*(?P<text>(?:RmInitAdapter|rm_init_adapter) "
                           r"failed.*)$")
_UUID_RE = re.compile(r"^GPU at PCI:(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
                      r":\s*(?P<uuid>GPU-[0-9a-fA-F-]{36})$")
_PROBE_RE = re.compile(r"^The NVIDIA probe routine failed for (?P<n>\d+) device\(s\)\.$")
_BANNER_RE = re.compile(r"^loading NVIDIA UNIX (?P<open>Open )?Kernel Module for (?P<arch>\S+)\s+"
                        r"(?P<version>\d+\.\d+(?:\.\d+)?)\s")
_BANNER_OLD_RE = re.compile(r"^loading NVIDIA UNIX (?P<arch>\S+) Kernel Module\s+"
                            r"(?P<version>\d+\.\d+(?:\.\d+)?)\s")

# Multi-line NVRM messages, as word sequences ("{bus}" / "{pci}" stand for one word each).
_TEMPLATES = {
    "gpu_lost": "The NVIDIA GPU {bus} (PCI ID: {pci}) installed in this system has fallen off "
                "the bus and is not responding to commands.",
    "unsupported_gpu": "The NVIDIA GPU {bus} (PCI ID: {pci}) installed in this system is not "
                       "supported by the NVIDIA {version} driver release.",
    "unsupported_gpu_r367": "The NVIDIA GPU {bus} (PCI ID: {pci}) installed in this system is "
                            "not supported by the {version} NVIDIA Linux driver release.",
    "unsupported_gpu_gsp": "The NVIDIA GPU {bus} (PCI ID: {pci}) installed in this system is not "
                           "supported by open nvidia.ko because it does not include the required "
                           "GPU System Processor (GSP).",
}
# A template's last word closes the message; the next sentence may follow on the same line
# ("driver release.  Please see 'Appendix", R367). The unsupported_gpu* templates give
# unsupported_gpu events.
_TEMPLATE_WORDS = {k: v.split() for k, v in _TEMPLATES.items()}
_SLOT_RES = {"{bus}": re.compile(rf"^{_BUS}$"), "{pci})": re.compile(rf"^{_HEX4}:{_HEX4}\)$"),
             "{version}": re.compile(r"^\d+\.\d+(?:\.\d+)?$")}
# Words that start the later lines of those messages: a record starting with one has lost its
# head (shuffled or cut paste).
_FRAGMENT_STARTS = ("(PCI ID:", "installed in this system", "fallen off the bus and",
                    "is not supported by the", "supported by the NVIDIA",
                    "nvidia.ko because it does not include", "System Processor (GSP)")


def _match_words(words, template):
    """How ``words`` fit ``template``: "complete" (all of it, perhaps with the next sentence
    after it), "open" (a proper prefix) or None."""
    for i, word in enumerate(words[:len(template)]):
        pattern = template[i]
        slot = _SLOT_RES.get(pattern)
        if (slot is not None and not slot.match(word)) or (slot is None and word != pattern):
            return None
    return "complete" if len(words) >= len(template) else "open"


def _template_state(message):
    """("complete", template) / ("open", None) / (None, None) for a joined NVRM message."""
    words = message.split()
    open_ = False
    for kind, template in _TEMPLATE_WORDS.items():
        fit = _match_words(words, template)
        if fit == "complete":
            return "complete", kind
        if fit == "open":
            open_ = True
    return ("open", None) if open_ else (None, None)


def _strip_prefix(line):
    """(time or None, rest, has_prefix) for one raw line."""
    body = _DMESG_X_RE.sub("", line, count=1) if _DMESG_X_RE.match(line) else line
    for _name, regex in _PREFIXES:
        m = regex.match(body)
        if m:
            return m.group("time"), body[m.end():], True
    return None, body, body is not line


def _records(lines):
    """Kernel records: dicts line, time, source ('NVRM' / 'nvswitch' / None), message."""
    records = []
    current = None  # the open NVRM record that may take continuation lines
    for lineno, raw in enumerate(lines, 1):
        time, rest, prefixed = _strip_prefix(" ".join(raw.split()))
        body = rest.strip()
        if not body:
            continue
        source = None
        if _NVRM_RE.match(body):
            source, body = "NVRM", _NVRM_RE.sub("", body, count=1).strip()
        elif _NVSWITCH_RE.match(body):
            source, body = "nvswitch", _NVSWITCH_RE.sub("", body, count=1).strip()
        if source is None and not prefixed and _UNREAD_RE.search(body):
            source = "unread"
        if current is not None and source == "NVRM" and (time is None or time == current["time"]):
            joined = current["message"] + " " + body
            if _template_state(joined)[0] is not None:
                current["message"] = joined
                current["lines"].append(lineno)
                if _template_state(joined)[0] == "complete":
                    current = None
                continue
        record = {"line": lineno, "lines": [lineno], "time": time, "source": source,
                  "message": body, "prefixed": prefixed}
        records.append(record)
        current = record if source == "NVRM" and _template_state(body)[0] == "open" else None
    return records


def _xid_bus(bus):
    return normalize_bus_id(bus if "." in bus.split(":")[-1] else bus + ".0")


def _xid_event(record):
    m = _XID_RE.match(record["message"])
    rest = _XID_REST_RE.match(m.group("rest"))
    if not rest:
        raise ParseError(f"kernel log line {record['line']}: Xid {m.group('code')} without its "
                         f"text: expected 'Xid (PCI:dddd:bb:dd): <code>, [pid=<pid>, name=<name>, ]"
                         f"<text>', got {shorten(record['message'])!r} (cut line?)")
    code = int(m.group("code"))
    meaning, action = XID_CATALOG.get(code, (None, "unknown"))
    text = rest.group("text").strip()
    if code == 154:
        recovery = _XID154_RE.search(text)
        action = _RECOVERY_ACTIONS.get(int(recovery.group(2), 16), "unknown") if recovery else "unknown"
    pid = rest.group("pid")
    return {"kind": "xid", "line": record["line"], "end_line": record["lines"][-1],
            "time": record["time"],
            "bus_id": _xid_bus(m.group("bus")), "code": code,
            "pid": int(pid) if pid and pid.isdigit() else None,
            "name": (rest.group("name") or "").strip() or None, "text": text,
            "meaning": meaning, "action": action}


def _event(kind, record, action, **fields):
    out = {"kind": kind, "line": record["line"], "end_line": record["lines"][-1],
           "time": record["time"], "action": action}
    out.update(fields)
    return out


def _unsupported_event(record, template, words, bus_id, pci_id, text):
    """An ``unsupported_gpu`` event: which driver refused the GPU and what fixes it."""
    if template == "unsupported_gpu_gsp":
        return _event("unsupported_gpu", record, "none", bus_id=bus_id, pci_id=pci_id, text=text,
                      module="open", driver_version=None,
                      reason="not supported by the installed (open) driver",
                      fix=f"the open kernel module drives only GPUs with a GSP (Turing or newer) "
                          f"and reports that {pci_id} has none: install the proprietary kernel module of the "
                          f"driver (the package without -open, e.g. nvidia-driver-<branch> "
                          f"instead of nvidia-driver-<branch>-open); the BIOS and a reinstall "
                          f"of the same module do not help")
    version = words[_TEMPLATE_WORDS[template].index("{version}")]
    return _event("unsupported_gpu", record, "none", bus_id=bus_id, pci_id=pci_id, text=text,
                  module=None, driver_version=version,
                  reason="not supported by the installed driver",
                  fix=f"driver {version} does not support PCI id {pci_id}: install a driver "
                      f"branch whose README 'Supported NVIDIA GPU Products' lists it (a legacy "
                      f"branch for an old GPU, a newer branch for a new one); the BIOS and a "
                      f"reinstall of the same driver do not help")


def _worst(actions):
    known = [a for a in actions if a in ACTIONS]
    return max(known, key=ACTIONS.index) if known else "none"


def parse_kernel_log(text):
    """NVIDIA GPU events in a kernel log (``dmesg``, ``dmesg -T``, ``journalctl -k``, syslog).

    Grammar and versions: see the module docstring (drivers R418 to R580, proprietary and open
    modules; dmesg, syslog and journal prefixes in any locale). Returns::

        {"events": [                             # in input order
            {"kind": "xid", "line": 3, "end_line": 3,   # first and last input line
             "time": "1843.308145" or "Jul 01 22:55:07" or None,
             "bus_id": "0000:3b:00.0", "code": 79, "pid": 1234 or None, "name": "python" or None,
             "text": "GPU has fallen off the bus.", "meaning": "GPU has fallen off the bus",
             "action": "drain"},                 # ACTIONS, or "unknown" (code not catalogued)
            {"kind": "gpu_lost", ..., "bus_id": "0000:b3:00.0", "pci_id": "10de:26b5" or None,
             "action": "drain"},                  # fallen off the bus, with or without Xid 79
            {"kind": "init_failed", ..., "bus_id": "0000:01:00.0", "text": "RmInitAdapter
             failed! (0x22:0x56:884)", "action": "drain"},
            {"kind": "unsupported_gpu", ..., "bus_id", "pci_id", "action": "none",
             "module": "open" or None,          # "open": refused by the open nvidia.ko (no GSP)
             "driver_version": "520.56.06" or None,   # the release that refuses the GPU
             "reason": "not supported by the installed (open) driver",
             "fix": "install the proprietary kernel module ..."},
            {"kind": "probe_failed", ..., "devices": 1, "action": "none"},
            {"kind": "sxid", ..., "bus_id": "0000:c6:00.0", "code": 20034, "fatal": True,
             "text": "...", "action": "drain" (fatal) or "none"}],
         "gpus": {"0000:b3:00.0": {"uuid": "GPU-..." or None, "pci_id": "10de:26b5" or None,
                                   "lost": True, "xids": [79], "action": "drain"}},
         "lost_bus_ids": ["0000:b3:00.0"],       # gpu_lost events and Xid 79
         "failed_bus_ids": ["0000:01:00.0"],     # init_failed / unsupported / lost
         "unknown_xids": [150],                  # Xid codes without a catalogue entry
         "driver": {"version": "570.158.01", "open": True, "arch": "x86_64"} or None,
         "action": "drain",                      # worst action of all events (ACTIONS)
         "records": 3,                           # kernel records read (lines joined)
         "truncated": False,    # the text ends inside a line or inside a multi-line message
         "incomplete": [],      # line numbers of NVRM messages cut or shuffled apart
         "unread": [],          # lines with NVRM:/nvidia-nvswitchN: behind an unknown prefix
         "complete": True}      # not truncated, nothing incomplete, nothing unread

    Every event names the GPU by its PCI bus id (``gpus`` adds the UUID when the log has the
    ``GPU at PCI:...: GPU-...`` line), never by a display name. Raises ParseError for an Xid
    record that does not follow the Xid grammar (e.g. cut after the code) and for input that
    is not text.
    """
    lines = split_lines(text, "kernel log")
    records = _records(lines)
    events = []
    gpus = {}
    driver = None
    incomplete = []
    unread = []

    def gpu(bus_id):
        return gpus.setdefault(bus_id, {"uuid": None, "pci_id": None, "lost": False, "xids": [],
                                        "action": "none"})

    for record in records:
        msg = record["message"]
        if record["source"] == "unread":
            unread.append(record["line"])
            continue
        if record["source"] == "nvswitch":
            m = _SXID_RE.match(msg)
            if m:
                fatal = m.group("sev") == "Fatal"
                events.append(_event("sxid", record, "drain" if fatal else "none",
                                     bus_id=normalize_bus_id(m.group("bus")),
                                     code=int(m.group("code")), fatal=fatal,
                                     text=m.group("text").strip()))
            continue
        if record["source"] != "NVRM":
            continue
        if _XID_RE.match(msg):
            event = _xid_event(record)
            events.append(event)
            entry = gpu(event["bus_id"])
            entry["xids"].append(event["code"])
            if event["code"] == 79:
                entry["lost"] = True
            continue
        if msg.startswith("Xid"):
            raise ParseError(f"kernel log line {record['line']}: expected 'Xid (PCI:dddd:bb:dd): "
                             f"<code>, <text>', got {shorten(msg)!r}")
        state, template = _template_state(msg)
        if state == "complete":
            words = msg.split()
            text_ = " ".join(words[:len(_TEMPLATE_WORDS[template])])
            bus_id = normalize_bus_id(words[3])
            pci_id = words[6].rstrip(")").lower()
            gpu(bus_id)["pci_id"] = pci_id
            if template == "gpu_lost":
                gpu(bus_id)["lost"] = True
                events.append(_event("gpu_lost", record, "drain", bus_id=bus_id, pci_id=pci_id,
                                     text=text_))
            else:
                events.append(_unsupported_event(record, template, words, bus_id, pci_id, text_))
            continue
        if state == "open":
            incomplete.append(record["line"])
            words = msg.split()
            if len(words) >= 4 and _SLOT_RES["{bus}"].match(words[3]):
                entry = gpu(normalize_bus_id(words[3]))
                if len(words) >= 7 and _SLOT_RES["{pci})"].match(words[6]):
                    entry["pci_id"] = words[6].rstrip(")").lower()
            continue
        if msg.startswith(_FRAGMENT_STARTS):
            incomplete.append(record["line"])
            continue
        m = _LOST_SHORT_RE.match(msg)
        if m:
            bus_id = normalize_bus_id(m.group("bus"))
            gpu(bus_id)["lost"] = True
            events.append(_event("gpu_lost", record, "drain", bus_id=bus_id, pci_id=None, text=msg))
            continue
        m = _INIT_FAIL_RE.match(msg)
        if m:
            bus_id = normalize_bus_id(m.group("bus"))
            gpu(bus_id)
            events.append(_event("init_failed", record, "drain", bus_id=bus_id,
                                 text=m.group("text").strip()))
            continue
        m = _UUID_RE.match(msg)
        if m:
            gpu(_xid_bus(m.group("bus")))["uuid"] = m.group("uuid")
            continue
        m = _PROBE_RE.match(msg)
        if m:
            events.append(_event("probe_failed", record, "none", devices=int(m.group("n"))))
            continue
        m = _BANNER_RE.match(msg) or _BANNER_OLD_RE.match(msg)
        if m:
            driver = {"version": m.group("version"), "arch": m.group("arch"),
                      "open": bool(m.groupdict().get("open"))}

    for event in events:
        bus_id = event.get("bus_id")
        if bus_id in gpus:
            gpus[bus_id]["action"] = _worst([gpus[bus_id]["action"], event["action"]])
    truncated = bool(text) and not text.endswith("\n")
    if records and records[-1]["line"] in incomplete:
        truncated = True
    lost = sorted(b for b, g in gpus.items() if g["lost"])
    failed = sorted({e["bus_id"] for e in events
                     if e["kind"] in ("gpu_lost", "init_failed", "unsupported_gpu")}
                    | {b for b, g in gpus.items() if g["pci_id"] and not g["xids"]})
    return {
        "events": events,
        "gpus": gpus,
        "lost_bus_ids": lost,
        "failed_bus_ids": failed,
        "unknown_xids": sorted({e["code"] for e in events
                                if e["kind"] == "xid" and e["action"] == "unknown"}),
        "driver": driver,
        "action": _worst(e["action"] for e in events),
        "records": len(records),
        "truncated": truncated,
        "incomplete": incomplete,
        "unread": unread,
        "complete": not truncated and not incomplete and not unread,
    }
