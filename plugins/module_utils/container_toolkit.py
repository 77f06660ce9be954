"""NVIDIA Container Toolkit failures and Docker's runtime registration, read from pasted output.

Stdlib only, Python 3.8+. One state per thing: :func:`read_toolkit_error` (what a failed
``docker run --gpus``/``--runtime=nvidia`` or an in-container ``nvidia-smi`` says),
:func:`parse_docker_info_runtimes` (what the running dockerd knows), and
:func:`runtime_registration` (daemon.json against the live daemon).

Grammar and sources:

- dockerd (moby daemon/runtime.go, docker 23 .. 27): ``Error response from daemon: unknown or
  invalid runtime name: <name>``; docker 19.03 / 20.10 (Debian 12's docker.io) say ``Unknown runtime
  specified <name>`` for the same thing (moby v20.10.24 daemon/daemon_unix.go:712, v19.03.15
  :678); ``could not select device driver "" with capabilities:
  [[gpu]]`` (daemon/devices.go: no ``--gpus`` driver registered, i.e. no nvidia toolkit hook);
  ``fork/exec <path>: no such file or directory`` / ``exec: "<name>": executable file not found
  in $PATH`` when the runtime binary a config names is missing (fixture C19).
- libnvidia-container 1.x (``src/cli/*.c``: ``nvidia-container-cli: <stage> error: <text>``),
  stages ``initialization`` (``nvml error: driver not loaded``, ``load library failed:
  libnvidia-ml.so.1: cannot open shared object file``), ``requirement`` (``unsatisfied
  condition: cuda>=X.Y``), ``mount``, ``ldcache``, ``device``.
- nvidia-container-toolkit 1.14 .. 1.18 CDI (``internal/modifier/cdi.go`` and tags.cncf.io CDI
  ``pkg/cdi``): ``failed to inject CDI devices: unresolvable CDI devices <kind>=<name>``; the
  kind ``runtime.nvidia.com/gpu`` is the toolkit's automatic (just-in-time) spec, whose
  generation error is only logged (NVIDIA/nvidia-container-toolkit #1537, fixture N06). Several
  devices are joined with ``", "`` (CDI ``pkg/cdi/cache.go`` InjectDevices). dockerd 25+ injects CDI
  devices itself: ``CDI device injection failed: unresolvable CDI devices ...`` (moby v26.1.0
  daemon/cdi.go:39/94), and the docker CLI ends daemon errors with ``.``.
- NVML inside a container: ``Failed to initialize NVML: Unknown Error`` after ``systemctl
  daemon-reload`` with the systemd cgroup driver (device rules re-applied without /dev/char
  links; NVIDIA/nvidia-container-toolkit #48, fixture N05).
- ``docker info`` (docker CLI 17.06+ text format): `` Runtimes: a b c`` and `` Default Runtime:
  x``; ``WARNING:`` lines are its stderr.
- ``nvidia-smi -L``: ``GPU <i>: <name> (UUID: GPU-<uuid>)`` (all drivers since 3xx), used to
  compare what the host sees with what a container sees.

Terminal wraps that split a word (``CDI de          vices``) are tolerated: matching ignores
white space inside the fixed phrases.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError, shorten, split_lines


def _loose(phrase):
    """Regex matching ``phrase`` with any white space (or none) between its characters."""
    return r"\s*".join(re.escape(ch) for ch in phrase if not ch.isspace())


_RUNTIME_UNKNOWN = re.compile("(?:" + _loose("unknown or invalid runtime name:") + "|"
                              + _loose("Unknown runtime specified") + r")\s*([\w.\-]+)")
_NO_DRIVER = re.compile(_loose('could not select device driver "" with capabilities:') + r"\s*(\[\[[^\]]*\]\])")
_CDI = re.compile(_loose("unresolvable CDI devices") + r"\s+((?:[\w.\-]+/[\w.\-]+=[\w.\-:,]+?)(?:,\s*[\w.\-]+/[\w.\-]+=[\w.\-]+)*)(?::|\s|$)")  # noqa: E501
_CLI = re.compile(r"nvidia-container-cli: (\w+) error: (.+?)(?::\s*unknown\.?|\\n|\"|$)", re.M)
_BIN_MISSING = re.compile(r"fork/exec (\S*nvidia-container-runtime\S*): no such file or directory"
                          r"|exec: \"(nvidia-container-runtime[\w-]*)\": executable file not found in \$PATH")
# libnvidia-container's requirement check (src/dsl.c): 1.0.0 betas print the failed condition as
# "cuda >= 9.1" (NVIDIA/nvidia-docker #688), 1.0.x "cuda>=10.0" with nothing after it
# (Xilinx/Vitis-AI #103), 1.3+ "cuda>=11.0, please update your driver ..." (nvidia-docker #1442).
_CUDA_REQ = re.compile(_loose("unsatisfied condition:") + r"\s*(cuda\s*[<>=!]+\s*[\d.]*\d)")
_NVML_UNKNOWN = re.compile(r"Failed to initialize NVML: Unknown Error")
_GPU_L = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)$")


def _finding(cls, severity, cause, fix, **facts):
    out = {"class": cls, "severity": severity, "cause": cause, "fix": fix}
    out.update(facts)
    return out


def read_toolkit_error(text) -> dict:
    """Class, cause and fix of a container-toolkit failure output; ParseError when none is in it.

    Classes: ``RUNTIME_NOT_REGISTERED``, ``RUNTIME_BINARY_MISSING``, ``NO_GPU_DEVICE_DRIVER``,
    ``CDI_DEVICE_UNRESOLVABLE`` (``device``, ``automatic`` = the toolkit's JIT spec),
    ``NVML_DRIVER_NOT_LOADED``, ``NVML_LIBRARY_MISSING``, ``CUDA_REQUIREMENT_UNMET``
    (``requirement``), ``NVIDIA_CONTAINER_CLI_ERROR`` (``stage``, ``message``),
    ``CONTAINER_LOST_GPU_ACCESS``.
    """
    lines = split_lines(text, "container toolkit output")
    flat = " ".join(line.strip() for line in lines)
    m = _RUNTIME_UNKNOWN.search(flat)
    if m:
        name = m.group(1).rstrip(".")
        return _finding(
            "RUNTIME_NOT_REGISTERED", "fail",
            f"the running dockerd has no runtime named '{name}' (daemon.json not applied, or no 'runtimes' entry)",
            f"register it (nvidia-ctk runtime configure --runtime=docker), restart docker (systemctl restart "
            f"docker) and check that 'docker info' lists {name} under Runtimes",
            runtime=name)
    m = _BIN_MISSING.search(flat)
    if m:
        binary = m.group(1) or m.group(2)
        return _finding(
            "RUNTIME_BINARY_MISSING", "fail",
            f"dockerd is configured to run {binary}, which does not exist (toolkit removed or not on dockerd's PATH)",
            "reinstall nvidia-container-toolkit, or remove the nvidia runtime/default-runtime from daemon.json and "
            "restart docker", binary=binary)
    m = _NO_DRIVER.search(flat)
    if m:
        return _finding(
            "NO_GPU_DEVICE_DRIVER", "fail",
            f"dockerd has no device driver for capabilities {m.group(1)}: the NVIDIA Container Toolkit is not "
            "installed or not configured for this daemon",
            "install nvidia-container-toolkit, run nvidia-ctk runtime configure --runtime=docker, restart docker",
            capabilities=m.group(1))
    m = _CDI.search(flat)
    if m:
        # One name, or several joined with ", "; the docker CLI's closing "." is not part of the last one.
        device = ",".join(d.rstrip(".") for d in re.sub(r"\s+", "", m.group(1)).split(",") if d.rstrip("."))
        auto = device.startswith("runtime.nvidia.com/")
        cause = (f"CDI device {device} could not be resolved: "
                 + ("the toolkit's automatic CDI spec generation failed (its error is only in the "
                    "nvidia-container-runtime log)" if auto else
                    "no CDI spec in /etc/cdi or /var/run/cdi provides it"))
        fix = ("read the nvidia-container-runtime log or run 'nvidia-ctk cdi generate' by hand to see the error; "
               "or generate a static spec (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml) and check it "
               "with 'nvidia-ctk cdi list'; do not retry blindly")
        return _finding("CDI_DEVICE_UNRESOLVABLE", "fail", cause, fix, device=device, automatic=auto)
    m = _CLI.search(flat)
    if m:
        # Docker 19.03's nested quoting leaves the escapes of "\\n" before the cut: not part of the message.
        stage, message = m.group(1), m.group(2).strip().rstrip("\\").rstrip()
        if stage == "initialization" and "driver not loaded" in message:
            return _finding("NVML_DRIVER_NOT_LOADED", "fail",
                            "nvidia-container-cli: the NVIDIA kernel driver is not loaded on the host",
                            "load the driver on the host (nvidia-smi must work there first; modprobe nvidia)",
                            stage=stage, message=message)
        if stage == "initialization" and "libnvidia-ml" in message:
            return _finding("NVML_LIBRARY_MISSING", "fail",
                            "nvidia-container-cli cannot load libnvidia-ml.so.1: the host's user-space driver "
                            "is missing or not in the ld cache",
                            "install the driver's user-space libraries on the host and run ldconfig",
                            stage=stage, message=message)
        req = _CUDA_REQ.search(message)
        if stage == "requirement" and req:
            requirement = re.sub(r"\s+", "", req.group(1))
            return _finding("CUDA_REQUIREMENT_UNMET", "fail",
                            f"the image requires {requirement}, newer than the host driver supports",
                            "update the host driver, or use an image built for an older CUDA",
                            stage=stage, message=message, requirement=requirement)
        return _finding("NVIDIA_CONTAINER_CLI_ERROR", "fail", f"nvidia-container-cli {stage} error: {message}",
                        "run 'nvidia-container-cli -k -d /dev/tty info' on the host to see the failing step",
                        stage=stage, message=message)
    if _NVML_UNKNOWN.search(flat):
        return _finding(
            "CONTAINER_LOST_GPU_ACCESS", "fail",
            "NVML loads but cannot open the GPU device nodes: inside a running container this is the device "
            "cgroup rewritten by 'systemctl daemon-reload' (systemd cgroup driver, no /dev/char links)",
            "recreate the affected containers; prevent it with 'nvidia-ctk system create-dev-char-symlinks "
            "--create-all' at boot (udev rule 71-nvidia-dev-char.rules), or pass --device=/dev/nvidia*, or use "
            "docker's cgroupfs driver")
    first = next((ln for ln in lines if ln.strip()), "")
    raise ParseError(f"container toolkit output: no known toolkit/dockerd error in it (line 1: {shorten(first)!r})")


def parse_docker_info_runtimes(text) -> dict:
    """``{"runtimes": [...], "default_runtime": str|None}`` from ``docker info`` (whole or grepped).

    ``WARNING:`` lines (docker info's stderr) and other fields are skipped. ParseError when there
    is no ``Runtimes:`` line.
    """
    runtimes = None
    default = None
    for lineno, raw in enumerate(split_lines(text, "docker info"), 1):
        line = re.sub(r"[ \t]+", " ", raw.strip())
        m = re.match(r"^Runtimes:\s*(.*)$", line)
        if m:
            runtimes = m.group(1).split()
            if not runtimes:
                raise ParseError(f"docker info line {lineno}: empty 'Runtimes:' line {shorten(raw)!r}")
            continue
        m = re.match(r"^Default Runtime:\s*(\S+)\s*$", line)
        if m:
            default = m.group(1)
    if runtimes is None:
        raise ParseError("docker info: no 'Runtimes:' line; pass the output of 'docker info' (or "
                         "'docker info | grep -i runtime')")
    return {"runtimes": runtimes, "default_runtime": default}


def runtime_registration(daemon_json_cfg, docker_info, wanted=None) -> dict:
    """Daemon.json's runtimes against the running daemon's (``parse_docker_info_runtimes``).

    ``wanted``: the runtime a failing command asked for (e.g. from RUNTIME_NOT_REGISTERED).
    Classes: ``DAEMON_CONFIG_APPLIED`` (ok), ``DAEMON_CONFIG_NOT_APPLIED`` (the file names a
    runtime or default the live daemon lacks: dockerd not restarted, or another daemon answers),
    ``RUNTIME_NOT_REGISTERED`` (neither the file nor the daemon has ``wanted``).
    """
    configured = sorted((daemon_json_cfg or {}).get("runtimes", {}) or {})
    default_cfg = (daemon_json_cfg or {}).get("default-runtime")
    live = docker_info["runtimes"]
    missing = [r for r in configured if r not in live]
    facts = {"configured_runtimes": configured, "configured_default": default_cfg, "live_runtimes": list(live),
             "live_default": docker_info.get("default_runtime"), "missing_in_daemon": missing}
    if wanted and wanted not in configured and wanted not in live:
        return _finding("RUNTIME_NOT_REGISTERED", "fail",
                        f"runtime '{wanted}' is neither in daemon.json nor in the running daemon",
                        "nvidia-ctk runtime configure --runtime=docker, then systemctl restart docker", **facts)
    wrong_default = default_cfg and docker_info.get("default_runtime") not in (None, default_cfg)
    if missing or wrong_default:
        what = []
        if missing:
            what.append(f"runtimes {', '.join(missing)} in daemon.json are not in the daemon's ({', '.join(live)})")
        if wrong_default:
            what.append(f"default-runtime is '{default_cfg}' in daemon.json but "
                        f"'{docker_info.get('default_runtime')}' in the daemon")
        paths = [v.get("path") for v in ((daemon_json_cfg or {}).get("runtimes") or {}).values()
                 if isinstance(v, dict) and v.get("path")]
        return _finding("DAEMON_CONFIG_NOT_APPLIED", "fail",
                        "; ".join(what) + ": dockerd has not reloaded daemon.json (or a different daemon/context "
                        "answers, e.g. Docker Desktop instead of the WSL/host engine)",
                        "systemctl restart docker, then check that 'docker info' lists the runtimes; check that "
                        + (", ".join(paths) if paths else "the runtime binary") + " resolves in dockerd's PATH",
                        **facts)
    return _finding("DAEMON_CONFIG_APPLIED", "ok", "the running daemon has every runtime daemon.json names", None,
                    **facts)


def parse_nvidia_smi_list(text) -> list:
    """GPUs of ``nvidia-smi -L``: ``[{"index", "name", "uuid"}]``; ParseError on a cut line or none."""
    out = []
    for lineno, raw in enumerate(split_lines(text, "nvidia-smi -L"), 1):
        line = re.sub(r"[ \t]+", " ", raw.strip())
        if not line.startswith("GPU "):
            continue
        m = _GPU_L.match(line)
        if not m:
            if re.match(r"^GPU \d+:", line):
                raise ParseError(f"nvidia-smi -L line {lineno}: cut or unknown GPU line {shorten(raw)!r}")
            continue
        out.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3)})
    if not out:
        raise ParseError("nvidia-smi -L: no 'GPU <i>: <name> (UUID: ...)' line")
    return out


# --- CDI mode (nvidia_container_toolkit_mode) ----------------------------------------------------
#
# Sources:
# - moby v25.0 (daemon/cdi.go): the ``cdi`` device driver, opt-in with daemon.json
#   ``"features": {"cdi": true}``; docker CLI 25 turns ``--device vendor/class=name`` (a qualified
#   CDI name) into ``DeviceRequest{Driver: "cdi", DeviceIDs: [name]}`` (what community.docker's
#   ``device_requests`` sends); Docker 28 enables the feature by default. Older engines know no
#   ``cdi`` driver: ``could not select device driver "cdi"``.
# - nvidia-ctk (cmd/nvidia-ctk/cdi/generate, list): ``cdi generate --output=/etc/cdi/nvidia.yaml``
#   writes the spec of kind ``nvidia.com/gpu`` (devices by index and by UUID, plus ``all``);
#   ``cdi list`` logs ``Found <n> CDI devices`` (logrus, stderr: ``INFO[0000] ...`` on a terminal,
#   ``time="..." level=info msg="..."`` otherwise), registry errors as warnings, and prints one
#   qualified device name per line on stdout.

MODES = ("cdi", "legacy")
CDI_MIN_ENGINE = (25, 0)
CDI_DEFAULT_ENGINE = (28, 0)
CDI_KIND = "nvidia.com/gpu"

_CDI_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*/[a-zA-Z0-9][a-zA-Z0-9_.\-]*=[a-zA-Z0-9][a-zA-Z0-9_.:\-]*$")
_LOGRUS = re.compile(r"^(?:(?:INFO|WARN|WARNING|ERRO|ERROR|DEBU|DEBUG|FATA|TRAC)\[\d+\]|time=\"[^\"]*\" level=\w+)")
_GPU_ID = re.compile(r"^(?:\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-fA-F-]+|\d+:\d+)$")


def mode_problem(mode) -> str:
    """``""`` for a GPU request mode this module knows (``MODES``), else what is wrong with it: the
    one check of ``nvidia_container_toolkit_mode`` and ``training_image_gpu_request``'s values."""
    return "" if mode in MODES else f"{mode!r} is not one of {', '.join(MODES)}"


def gpu_request_plan(mode, engine) -> dict:
    """How the node's containers get GPUs: ``mode`` (``cdi``|``legacy``) against the engine's version.

    ``engine``: ``daemon_json.server_version``'s dict (``major``, ``minor``, ``version``). Returns
    ``{"mode", "path": "cdi"|"legacy", "engine", "daemon_settings", "fallback", "message"}``:
    ``daemon_settings`` is what the toolkit hands the docker role for daemon.json (``features.cdi``
    on the CDI path: needed on 25..27, explicit on 28+, where it is the default). ``cdi`` on an
    engine older than 25 falls back to the legacy runtime path with ``fallback`` true and a message
    naming the version and the fix (the issue's rule: older engines keep the legacy path).
    ValueError for a mode that is neither.
    """
    if mode_problem(mode):
        raise ValueError(f"nvidia_container_toolkit_mode: {mode_problem(mode)}")
    version = (int(engine["major"]), int(engine["minor"]))
    out = {"mode": mode, "engine": engine["version"], "daemon_settings": {}, "fallback": False}
    if mode == "legacy":
        out.update(path="legacy", message=f"legacy: containers get GPUs through the nvidia runtime hook (--gpus), "
                                          f"Docker {engine['version']}")
        return out
    if version < CDI_MIN_ENGINE:
        out.update(path="legacy", fallback=True, message=(
            f"nvidia_container_toolkit_mode: cdi, but Docker {engine['version']} is older than "
            f"{CDI_MIN_ENGINE[0]}.{CDI_MIN_ENGINE[1]}, the first engine with CDI devices: containers keep the legacy "
            f"path (--gpus through the nvidia runtime hook). Fix: install Docker >= {CDI_MIN_ENGINE[0]} "
            "(docker_package_source: docker) and rerun, or set nvidia_container_toolkit_mode: legacy"))
        return out
    out.update(path="cdi", daemon_settings={"features": {"cdi": True}}, message=(
        f"cdi: containers get GPUs by CDI name ({CDI_KIND}=...) from Docker {engine['version']}"
        + ("" if version >= CDI_DEFAULT_ENGINE else " (features.cdi turned on in daemon.json)")))
    return out


def container_device_requests(gpus, path) -> list:
    """``device_requests`` of ``community.docker.docker_container`` for ``training_image_gpus``.

    ``gpus``: ``""`` (none), ``all``, or a comma list of indices / ``GPU-<uuid>`` / ``MIG-<uuid>``.
    ``legacy``: the ``--gpus`` request (driver nvidia, capability gpu, count -1 or device ids);
    ``cdi``: one ``cdi`` request (count 0) naming ``nvidia.com/gpu=<id>`` for each (``=all`` for
    all), what ``docker run --device nvidia.com/gpu=all`` sends. ValueError for anything else.
    """
    if mode_problem(path):
        raise ValueError(f"GPU request path {mode_problem(path)}")
    gpus = (gpus or "").strip()
    if not gpus:
        return []
    ids = None if gpus == "all" else [g.strip() for g in gpus.split(",")]
    bad = [g for g in ids or () if not _GPU_ID.match(g)]
    if bad:
        raise ValueError(f"training_image_gpus: {gpus!r}: {', '.join(repr(b) for b in bad)} is no GPU index or UUID; "
                         "use all, a comma list of indices (0,1) or GPU-/MIG- UUIDs, or \"\" for none")
    if path == "legacy":
        req = {"driver": "nvidia", "capabilities": [["gpu"]]}
        req.update({"count": -1} if ids is None else {"device_ids": ids})
        return [req]
    # count 0 as dockerd stores it (moby daemon/cdi.go refuses any other count for the cdi driver);
    # given explicitly so community.docker's comparison (every given key equal) sees no change on a rerun.
    return [{"driver": "cdi", "count": 0, "device_ids": [f"{CDI_KIND}={g}" for g in (ids or ["all"])]}]


def parse_cdi_list(text) -> dict:
    """``{"devices": [...], "count": int|None, "warnings": [...]}`` of ``nvidia-ctk cdi list``.

    stdout and stderr together or stdout alone; log lines (``Found <n> CDI devices``, warnings) are
    read apart from the device names. ParseError on a line that is neither (a cut name).
    """
    devices, warnings, count = [], [], None
    for lineno, raw in enumerate(split_lines(text, "nvidia-ctk cdi list"), 1):
        line = raw.strip()
        if not line:
            continue
        if _LOGRUS.match(line):
            m = re.search(r"Found (\d+) CDI devices", line)
            if m:
                count = int(m.group(1))
            elif re.match(r"^(?:WARN|WARNING|ERRO|ERROR)\[|.*level=(?:warning|error)", line):
                warnings.append(line)
            continue
        if not _CDI_NAME.match(line):
            raise ParseError(f"nvidia-ctk cdi list line {lineno}: not a CDI device name (vendor/class=name): "
                             f"{shorten(raw)!r}")
        devices.append(line)
    return {"devices": devices, "count": count, "warnings": warnings}


def cdi_missing_devices(listing, device_requests) -> list:
    """The CDI names ``device_requests`` (``container_device_requests``) asks for that the
    ``parse_cdi_list`` result lacks: a container asking for one would fail with
    ``unresolvable CDI devices`` (fixture N06)."""
    have = set(listing["devices"])
    wanted = [d for r in device_requests if r.get("driver") == "cdi" for d in r.get("device_ids", [])]
    return [d for d in wanted if d not in have]


def cdi_spec_action(driver, gpu_count, spec_exists, spec_driver) -> dict:
    """Whether to (re)generate the CDI spec: ``{"generate": bool, "reason": str}``.

    ``driver``: gpu_facts' driver dict (``state``, ``version``); ``spec_driver``: the driver
    version the spec on the node was generated for (the role's local fact), None when unknown.
    Generated when the driver is ready and the spec is missing or was made for another driver
    (libraries and device nodes are versioned); never on a node without a ready driver: nvidia-ctk
    reads the devices through NVML.
    """
    state = (driver or {}).get("state")
    version = (driver or {}).get("version")
    if state != "ready" or not gpu_count:
        return {"generate": False, "reason": f"no CDI spec generated: the NVIDIA driver is {state or 'absent'} with "
                                             f"{gpu_count or 0} GPU(s) (nvidia-ctk cdi generate reads them through "
                                             "NVML); it is generated on the first run with a loaded driver"}
    if not spec_exists:
        return {"generate": True, "reason": f"CDI spec missing; generated for driver {version}"}
    if spec_driver != version:
        return {"generate": True, "reason": f"the CDI spec was made for driver {spec_driver or 'unknown'}, the "
                                            f"driver is {version}: regenerated"}
    return {"generate": False, "reason": f"CDI spec current (driver {version})"}
