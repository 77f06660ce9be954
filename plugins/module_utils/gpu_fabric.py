"""NVIDIA Fabric Manager (``nvidia-fabricmanager.service``): its state and whether it applies.

Part of the GPU component (see ``gpu_pci``). Pure functions, stdlib only, Python 3.8+.

Grammar and sources:

- ``systemctl start`` failure text (systemd ``src/systemctl``: ``Job for <unit> failed because
  the control process exited with error code.``), ``systemctl status`` (``Loaded:``,
  ``Active: failed (Result: exit-code) since ...``, ``Process: <pid> ExecStart=...
  (code=exited, status=1/FAILURE)``, ``Main PID:``), systemd 219 to 255. These labels are not
  translated by systemd. systemd 219 (RHEL/CentOS 7) writes the exit line in lower case
  (``<unit>: control process exited, code=exited, status=1/FAILURE``, then ``Unit <unit>
  entered failed state.`` and ``<unit> failed.``; esnet/oscars #137); systemd 250 and later
  name the unit before its description (``Starting|Started|Stopping|Stopped <unit> -
  <description>...``, ``Failed to start <unit> - <description>.``).
- Journal lines (``journalctl -u nvidia-fabricmanager``, syslog): ``<month> <day> <hh:mm:ss>
  <host> <ident>[<pid>]: <message>`` with the month in the node's locale (``Nov``, ``11月``,
  ``nov.``; fixture N21 is zh_CN), or ``-o short-iso``. systemd's unit messages (``Starting
  ...``, ``Started ...``, ``<unit>: Control process exited, code=exited, status=1/FAILURE``,
  ``<unit>: Failed with result 'exit-code'.``, ``Failed to start ...``, ``Stopped ...``,
  ``<unit>: Deactivated successfully.``) give the state.
- Fabric Manager's own messages (``nv-fabricmanager[<pid>]:`` in the journal, or
  ``/var/log/fabricmanager.log`` lines ``[<date>] [ERROR] [tid <n>] <message>``): the NVIDIA
  return token in brackets (``[NV_WARN_NOTHING_TO_DO]``), the version line ``Fabric Manager
  version is : 535.104.05``. NVIDIA Fabric Manager User Guide: FM is needed only on NVSwitch
  systems (HGX/DGX A100, H100, ...); ``NV_WARN_NOTHING_TO_DO`` means the NVSwitch driver found
  no NVSwitch. On a PCIe box with an NVLink bridge (fixture N21, 2x A40) that means FM does
  not apply; on an NVSwitch box (lspci lists NVIDIA bridges, class 0680) it is a failure
  (NVSwitches not visible to FM; on Blackwell, NVLSM missing, siderolabs/extensions #717).
  FM must run the same version as the driver (FM User Guide, "Software version"); when it
  does not, FM exits with ``fabric manager NVIDIA GPU driver interface version <FM version>
  don't match with driver version <driver version>. Please update with matching NVIDIA driver
  package.`` (R450-R550, NVIDIA/gpu-operator #544, siderolabs/pkgs #720) or, newer, ``...
  doesn't match with driver version <driver version>. Please update with the matching NVIDIA
  driver package.`` (akash-network/website #632).
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    shorten,
    split_lines,
)

UNIT = "nvidia-fabricmanager.service"
STATES = ("running", "activating", "failed", "inactive", "not-found")

_EN_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug",
                                          "sep", "oct", "nov", "dec"), 1)}
_JOURNAL_RE = re.compile(
    r"^(?P<month>\S+)\s+(?P<day>\d{1,2})\s+(?P<time>\d{2}:\d{2}:\d{2})\s+(?P<host>\S+)\s+"
    r"(?P<ident>[^\s\[:]+)(?:\[(?P<pid>\d+)\])?:\s?(?P<msg>.*)$")
_JOURNAL_ISO_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})T(?P<time>\d{2}:\d{2}:\d{2})\S*\s+(?P<host>\S+)\s+"
    r"(?P<ident>[^\s\[:]+)(?:\[(?P<pid>\d+)\])?:\s?(?P<msg>.*)$")
_FMLOG_RE = re.compile(r"^\[(?P<stamp>[^\]]+)\]\s*\[(?P<level>[A-Z]+)\]\s*(?:\[tid (?P<pid>\d+)\]\s*)?"
                       r"(?P<msg>.*)$")
_JOB_FAILED_RE = re.compile(r"^Job for (?P<unit>\S+) failed because (?P<why>.*?)\.?$")
_ACTIVE_RE = re.compile(r"^Active:\s*(?P<state>[a-z-]+)(?:\s*\((?P<sub>[^)]*)\))?")
_LOADED_RE = re.compile(r"^Loaded:\s*(?P<loaded>[a-z-]+)")
_PROCESS_RE = re.compile(r"^(?:Process|Main PID):\s*(?P<pid>\d+)\b.*\(code=(?P<code>\w+), "
                         r"status=(?P<status>\d+)")
_EXITED_RE = re.compile(r"(?:[Cc]ontrol|[Mm]ain) process exited, code=(?P<code>\w+), "
                        r"status=(?P<status>\d+)")
_TOKEN_RE = re.compile(r"\[(NV_[A-Z0-9_]+)\]")
_VERSION_RE = re.compile(r"Fabric Manager version(?: is)?\s*:?\s*(\d+\.\d+(?:\.\d+)?)")
_MISMATCH_RE = re.compile(r"fabric manager NVIDIA GPU driver interface version "
                          r"(?P<fm>\d+\.\d+(?:\.\d+)?) (?:don|doesn)['\u2019]t match with driver "
                          r"version (?P<driver>\d+\.\d+(?:\.\d+)?)", re.I)
_UNIT_NOT_FOUND_RE = re.compile(r"Unit (?P<unit>\S+?)(?:\.service)? (?:could not be found|not found)")

# Lifecycle messages of systemd -> state, and their rank inside one second: a failure in the
# same second as a start or a restart is that start failing (systemd logs "Starting" before the
# exit, "Scheduled restart job" before "Start request repeated too quickly").
_LIFECYCLE = (
    (re.compile(r"^Starting NVIDIA fabric manager|^Starting nvidia-fabricmanager", re.I),
     "activating", 0),
    (re.compile(r"^Started NVIDIA fabric manager|^Started nvidia-fabricmanager", re.I),
     "running", 1),
    (_EXITED_RE, "failed", 3),
    (re.compile(r"Failed with result|^Failed to start", re.I), "failed", 3),
    (re.compile(r"^Stopping NVIDIA fabric manager|^Stopping nvidia-fabricmanager", re.I),
     "activating", 0),
    (re.compile(r"^Stopped NVIDIA fabric manager|^Stopped nvidia-fabricmanager|"
                r"Deactivated successfully|: Succeeded\.?$", re.I), "inactive", 2),
    (re.compile(r"Scheduled restart job", re.I), "activating", 0),
    (re.compile(r"Start request repeated too quickly|entered failed state|\.service failed\.?$",
                re.I), "failed", 3),
)
# systemd messages about the unit that say nothing about its state.
_IGNORED_SYSTEMD = re.compile(r"Consumed .* CPU time|Killing process|Found left-over process|"
                              r"Current command vanished|Unit configuration has changed", re.I)


def _month(token):
    digits = re.match(r"^(\d{1,2})", token)
    if digits:
        return int(digits.group(1))
    return _EN_MONTHS.get(token[:3].lower(), 0)


def _is_fm(ident):
    return ident in ("nv-fabricmanager", "nvidia-fabricmanager", "fabricmanager")


def parse_fabricmanager(text):
    """Read ``systemctl start|status nvidia-fabricmanager``, its journal, or the FM log.

    One paste may hold several of these (fixture N21: the ``systemctl start`` error, then the
    journal). Grammar and versions: see the module docstring (systemd 219-255, Fabric Manager
    R450-R580, journal month names in any locale). Returns::

        {"unit": "nvidia-fabricmanager.service",
         "state": "failed",    # STATES, or None when the paste says nothing about it
         "start_failed": True,  # "Job for ... failed" was printed
         "exit_status": 1 or None,            # status= of the exited process
         "loaded": "loaded" or None,          # systemctl status Loaded:
         "tokens": ["NV_WARN_NOTHING_TO_DO"],  # NVIDIA return tokens FM logged
         "errors": [{"line": 2, "pid": 4177, "text": "request to query NVSwitch device
                     information from NVSwitch driver failed with error:WARNING Nothing to do
                     [NV_WARN_NOTHING_TO_DO]", "token": "NV_WARN_NOTHING_TO_DO"}],
         "nothing_to_do": True,      # NV_WARN_NOTHING_TO_DO: the driver found no NVSwitch
         "version": "520.61.05" or None,     # Fabric Manager version line, or the FM version
                                             # of its version-mismatch message
         "driver_version": "550.120" or None,  # the driver FM found, from that message
         "version_mismatch": False,  # FM said its version does not match the driver's
         "pids": [4177],
         "truncated": False,   # the text ends inside a line
         "complete": True}

    The state is ``systemctl status``'s ``Active:`` line (the present), else the last systemd
    lifecycle message by time stamp (in one second: activating < running < inactive < failed,
    a failure in the second of a start is that start failing), else the ``systemctl start``
    error (failed). Lines of other programs are skipped; a
    journal line of the FM unit or of FM that this reader cannot place raises ParseError naming
    the line, as does a paste with nothing of Fabric Manager in it.
    """
    lines = split_lines(text, "fabric manager output")
    out = {"unit": UNIT, "state": None, "start_failed": False, "exit_status": None,
           "loaded": None, "tokens": [], "errors": [], "nothing_to_do": False,
           "version": None, "driver_version": None, "version_mismatch": False, "pids": [],
           "truncated": bool(text) and not text.endswith("\n"),
           "complete": True}
    lifecycle = []  # (sort key, state)
    active = None
    seen = False
    for lineno, raw in enumerate(lines, 1):
        line = " ".join(raw.replace("\u25cf", " ").replace("\u00d7", " ").split())
        if not line:
            continue
        m = _JOB_FAILED_RE.match(line)
        if m:
            if m.group("unit") != UNIT:
                continue
            seen = True
            out["start_failed"] = True
            continue
        m = _UNIT_NOT_FOUND_RE.search(line)
        if m and m.group("unit").startswith("nvidia-fabricmanager"):
            seen = True
            active = "not-found"
            continue
        m = _ACTIVE_RE.match(line)
        if m:
            seen = True
            state = m.group("state")
            if state == "active":
                state = "running"
            elif state == "deactivating":
                state = "activating"
            elif state not in STATES:
                raise ParseError(f"fabric manager line {lineno}: unknown Active: state {state!r}")
            active = state
            continue
        m = _LOADED_RE.match(line)
        if m:
            seen = True
            out["loaded"] = m.group("loaded")
            if m.group("loaded") == "not-found":
                active = "not-found"
            continue
        m = _PROCESS_RE.match(line)
        if m:
            seen = True
            out["exit_status"] = int(m.group("status"))
            continue
        m = _JOURNAL_RE.match(line)
        key = None
        if m:
            key = (_month(m.group("month")), int(m.group("day")), m.group("time"))
        else:
            m = _JOURNAL_ISO_RE.match(line)
            if m:
                key = (m.group("date"), m.group("time"))
        if m:
            ident, msg = m.group("ident"), m.group("msg").strip()
            if ident == "systemd":
                if not ("fabric manager" in msg.lower() or "fabricmanager" in msg.lower()):
                    continue
                seen = True
                for regex, state, order in _LIFECYCLE:
                    hit = regex.search(msg)
                    if hit:
                        lifecycle.append(((key, order, lineno), state))
                        if regex is _EXITED_RE:
                            out["exit_status"] = int(hit.group("status"))
                        break
                else:
                    if _IGNORED_SYSTEMD.search(msg):
                        continue
                    raise ParseError(f"fabric manager line {lineno}: a systemd message about "
                                     f"the unit this reader cannot place: {shorten(msg)!r}")
                continue
            if not _is_fm(ident):
                continue
            seen = True
            _fm_message(out, lineno, int(m.group("pid")) if m.group("pid") else None, msg)
            continue
        m = _FMLOG_RE.match(line)
        if m:
            seen = True
            if m.group("level") in ("ERROR", "WARNING", "FATAL") or _TOKEN_RE.search(line):
                _fm_message(out, lineno, int(m.group("pid")) if m.group("pid") else None,
                            m.group("msg").strip(), always=True)
            else:
                v = _VERSION_RE.search(m.group("msg"))
                if v:
                    out["version"] = v.group(1)
            continue
        if _TOKEN_RE.search(line) or _VERSION_RE.search(line) or _MISMATCH_RE.search(line):
            seen = True
            _fm_message(out, lineno, None, line)
    if not seen:
        raise ParseError("fabric manager output: no line of systemctl, the journal or the "
                         "Fabric Manager log about nvidia-fabricmanager")
    if active is not None:
        out["state"] = active
    elif lifecycle:
        out["state"] = sorted(lifecycle)[-1][1]
    elif out["start_failed"]:
        out["state"] = "failed"
    out["tokens"] = sorted(set(out["tokens"]))
    out["pids"] = sorted(set(out["pids"]))
    out["nothing_to_do"] = "NV_WARN_NOTHING_TO_DO" in out["tokens"]
    out["complete"] = not out["truncated"]
    return out


def _fm_message(out, lineno, pid, msg, always=False):
    if pid is not None:
        out["pids"].append(pid)
    v = _VERSION_RE.search(msg)
    if v:
        out["version"] = v.group(1)
    mismatch = _MISMATCH_RE.search(msg)
    if mismatch:
        out["version"], out["driver_version"] = mismatch.group("fm"), mismatch.group("driver")
        out["version_mismatch"] = True
    token = _TOKEN_RE.search(msg)
    if token or always or mismatch or re.search(r"\b(?:error|failed)\b", msg, re.I):
        out["errors"].append({"line": lineno, "pid": pid, "text": msg,
                              "token": token.group(1) if token else None})
        if token:
            out["tokens"].append(token.group(1))


def fabricmanager_state(reading, nvswitches=None, driver_version=None):
    """Class, reason and fix for a :func:`parse_fabricmanager` reading, with hardware context.

    ``nvswitches``: ``gpu_pci.parse_lspci_nvswitches`` result (a list, ``[]`` = no NVSwitch) or
    None when unknown; ``driver_version``: the loaded driver (``gpu_driver``), optional.
    Returns ``{"class", "severity", "reason", "hint", "version_mismatch"}`` with class:

    - ``FABRIC_MANAGER_RUNNING`` (ok): running on an NVSwitch system (or hardware unknown);
    - ``FABRIC_MANAGER_NOT_APPLICABLE`` (ok): no NVSwitch on the node and FM failed or says
      NV_WARN_NOTHING_TO_DO (fixture N21: PCIe GPUs with an NVLink bridge). Fix: disable and
      remove FM; GPUs and bridge work without it;
    - ``FABRIC_MANAGER_NVSWITCH_NOT_VISIBLE`` (fail): NV_WARN_NOTHING_TO_DO although lspci lists
      NVSwitch bridges;
    - ``FABRIC_MANAGER_NOTHING_TO_DO`` (unknown): NV_WARN_NOTHING_TO_DO and no hardware context:
      the string alone cannot decide; run ``lspci -nn`` and pass its NVSwitches;
    - ``FABRIC_MANAGER_FAILED`` (fail): failed for another reason on an NVSwitch system;
    - ``FABRIC_MANAGER_NOT_RUNNING`` (fail, NVSwitch present) / (ok, none): inactive or missing.

    ``version_mismatch`` is True when FM and the driver report different versions (FM must
    match the driver exactly), or FM itself said so (its "driver interface version ... doesn't
    match with driver version" message, read without ``driver_version``); it makes an ok
    class a ``warn``, and a failure's hint is then to install FM of the driver's version.
    """
    has_switch = None if nvswitches is None else bool(nvswitches)
    state = reading.get("state")
    failed = state == "failed" or reading.get("start_failed")
    version = reading.get("version")
    driver_version = driver_version or reading.get("driver_version")
    mismatch = bool(reading.get("version_mismatch")
                    or (version and driver_version and version != driver_version))
    if reading.get("nothing_to_do") or (failed and has_switch is False):
        if has_switch is False:
            out = ("FABRIC_MANAGER_NOT_APPLICABLE", "ok",
                   "nvidia-fabricmanager found no NVSwitch (NV_WARN_NOTHING_TO_DO) and lspci "
                   "lists none: Fabric Manager is only for NVSwitch systems",
                   "do not run Fabric Manager here: systemctl disable --now "
                   "nvidia-fabricmanager and remove the package; the GPUs and an NVLink bridge "
                   "work without it")
        elif has_switch:
            out = ("FABRIC_MANAGER_NVSWITCH_NOT_VISIBLE", "fail",
                   f"nvidia-fabricmanager found no NVSwitch (NV_WARN_NOTHING_TO_DO) although "
                   f"lspci lists {len(nvswitches)}",
                   "check that the NVSwitch driver sees the switches (dmesg | grep -i nvswitch), "
                   "that FM and the driver are one version, and on Blackwell that NVLSM is "
                   "installed")
        else:
            out = ("FABRIC_MANAGER_NOTHING_TO_DO", "unknown",
                   "nvidia-fabricmanager says NV_WARN_NOTHING_TO_DO (no NVSwitch found)",
                   "run lspci -nn: without NVIDIA bridges (class 0680) FM does not apply and "
                   "should be disabled; with them, the NVSwitches are not visible to FM")
    elif failed and mismatch:
        out = ("FABRIC_MANAGER_FAILED", "fail",
               f"nvidia-fabricmanager failed (exit status {reading.get('exit_status')})",
               f"install nvidia-fabricmanager of the driver's exact version ({driver_version}), "
               f"or the driver of Fabric Manager's version ({version}), from one repository, "
               f"and hold both packages (apt-mark hold) so they move together")
    elif failed:
        out = ("FABRIC_MANAGER_FAILED", "fail",
               f"nvidia-fabricmanager failed (exit status {reading.get('exit_status')}; "
               f"{', '.join(reading.get('tokens') or []) or 'no NVIDIA error token'})",
               "read journalctl -u nvidia-fabricmanager and /var/log/fabricmanager.log; FM "
               "must be the driver's exact version")
    elif state == "running":
        out = ("FABRIC_MANAGER_RUNNING", "ok", "nvidia-fabricmanager is running", None)
    else:
        severity = "fail" if has_switch else "ok"
        out = ("FABRIC_MANAGER_NOT_RUNNING", severity,
               f"nvidia-fabricmanager is {state or 'not reported'}",
               "start it (systemctl enable --now nvidia-fabricmanager): NVSwitch systems need it "
               "before CUDA can use the GPUs" if has_switch else None)
    klass, severity, reason, hint = out
    if mismatch:
        reason += f"; Fabric Manager {version} does not match driver {driver_version}"
        if severity == "ok":
            severity = "warn"
    return {"class": klass, "severity": severity, "reason": reason, "hint": hint,
            "version_mismatch": mismatch}
