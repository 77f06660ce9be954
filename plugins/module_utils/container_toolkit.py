"""NVIDIA Container Toolkit failures and Docker's runtime registration, read from pasted output.

Stdlib only, Python 3.8+. One state per thing: :func:`read_toolkit_error` (what a failed
``docker run --gpus``/``--runtime=nvidia`` or an in-container ``nvidia-smi`` says),
:func:`parse_docker_info_runtimes` (what the running dockerd knows), and
:func:`runtime_registration` (daemon.json against the live daemon).

Grammar and sources:

- dockerd (moby daemon/runtime.go, docker 19.03 .. 27): ``Error response from daemon: unknown or
  invalid runtime name: <name>``; ``could not select device driver "" with capabilities:
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
  generation error is only logged (NVIDIA/nvidia-container-toolkit #1537, fixture N06).
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


_RUNTIME_UNKNOWN = re.compile(_loose("unknown or invalid runtime name:") + r"\s*([\w.\-]+)")
_NO_DRIVER = re.compile(_loose('could not select device driver "" with capabilities:') + r"\s*(\[\[[^\]]*\]\])")
_CDI = re.compile(_loose("unresolvable CDI devices") + r"\s+((?:[\w.\-]+/[\w.\-]+=[\w.\-:,]+?)(?:,\s*[\w.\-]+/[\w.\-]+=[\w.\-]+)*)(?::|\s|$)")  # noqa: E501
_CLI = re.compile(r"nvidia-container-cli: (\w+) error: (.+?)(?::\s*unknown\.?|\\n|\"|$)", re.M)
_BIN_MISSING = re.compile(r"fork/exec (\S*nvidia-container-runtime\S*): no such file or directory"
                          r"|exec: \"(nvidia-container-runtime[\w-]*)\": executable file not found in \$PATH")
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
        device = re.sub(r"\s+", "", m.group(1))
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
        stage, message = m.group(1), m.group(2).strip()
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
        req = re.search(r"unsatisfied condition: (\S+?),", message)
        if stage == "requirement" and req:
            return _finding("CUDA_REQUIREMENT_UNMET", "fail",
                            f"the image requires {req.group(1)}, newer than the host driver supports",
                            "update the host driver, or use an image built for an older CUDA",
                            stage=stage, message=message, requirement=req.group(1))
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
