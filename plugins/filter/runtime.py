"""Filters for the runtime profile role and ``playbooks/runtime.yml`` (``gpucluster.runtime``).

The profile logic (variables, vendor defaults, validation, env-file format) lives in
``plugins/module_utils/runtime.py``; these filters adapt it to the role's variables and add the
pure decisions the runtime switch takes on each node:

- which runtime a node runs, read from its training container (installed distributions);
- which packages to uninstall and install, and from where (wheel, index, find-links), or a
  message naming the package, the source and the variable to set when none can work;
- whether the nodes of one cluster would end up on different runtimes (refused: Horovod and
  light-horovod ranks cannot join one job).

Examples::

    {{ values | gpucluster_runtime_problems(8) }}            -> [] or ["LIGHT_TOPK_RATIO=0 is out of range ..."]
    {{ values | gpucluster_runtime_env('lightcc', 8) }}      -> {"LIGHT_2D_ALLREDUCE": "0", ...}
    {{ env | gpucluster_runtime_env_file('header') }}        -> "# header\\nLIGHT_2D_ALLREDUCE=0\\n..."
    {{ probe | gpucluster_runtime_detect }}                   -> "lightcc" | "horovod" | "none" | "both"
    {{ probe | gpucluster_runtime_plan('horovod', sources) }} -> {"uninstall": [...], "install": {...}, "error": ""}
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.module_utils import runtime, stage_settings

#: The distribution each runtime is (pip names). light-horovod is the vendor's Horovod build and
#: imports as ``horovod`` too, so the two cannot be installed side by side.
PACKAGES = {"lightcc": "light-horovod", "horovod": "horovod"}

#: Build flags the vendor manual uses for open-source Horovod on GPUs (Horovod docs/gpus.rst:
#: ``HOROVOD_GPU_OPERATIONS=NCCL``; docs/mpi.rst: ``HOROVOD_WITH_MPI=1``).
HOROVOD_BUILD_ENV = {"HOROVOD_WITH_MPI": "1", "HOROVOD_GPU_OPERATIONS": "NCCL"}

_HOROVOD_DEFAULTS = {v.name: v.default for v in runtime.HOROVOD_VARIABLES}
_LIGHT_NAMES = tuple(v.name for v in runtime.LIGHTCC_VARIABLES)


def _normalise(name: str) -> str:
    """PEP 503 name normalisation: ``Light_Horovod`` -> ``light-horovod``."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def _same(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b))
    except (TypeError, ValueError):
        return str(a) == str(b)


def _overrides(values: Mapping[str, Any], runtime_name: str) -> dict[str, Any]:
    """The ``build_profile`` overrides for ``runtime_name`` from the role's values.

    ``values`` maps every variable name (LIGHT_* and HOROVOD_*) to the role's value.
    ``LIGHT_INTRA_SIZE`` 0 (or empty) means "GPUs per node". For LightCC the HOROVOD_*
    variables are passed on only where they differ from open-source Horovod's defaults:
    light-horovod keeps its own defaults unless the inventory changes one.
    """
    if not isinstance(values, Mapping):
        raise AnsibleFilterError(f"runtime profile values must be a mapping NAME: value, got {values!r}")
    out: dict[str, Any] = {}
    for name, value in values.items():
        key = str(name).upper()
        if key == "LIGHT_INTRA_SIZE" and value in (0, "0", "", None):
            continue
        if key.startswith("LIGHT_"):
            if runtime_name == "lightcc":
                out[key] = value
            continue
        if runtime_name == "lightcc" and key in _HOROVOD_DEFAULTS and _same(value, _HOROVOD_DEFAULTS[key]):
            continue
        out[key] = value
    return out


def _gpus(gpus_per_node: Any) -> int:
    try:
        n = int(gpus_per_node)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(
            f"runtime_profile_gpus_per_node={gpus_per_node!r} is not a number: give the GPUs per node, e.g. 8"
        ) from exc
    return n


def runtime_problems(values: Mapping[str, Any], gpus_per_node: Any) -> list[str]:
    """Every problem in the profile values, whichever runtime is active: both the LightCC and
    the Horovod profile are built, so a bad value fails before a later switch trips on it."""
    try:
        gpus = int(gpus_per_node)
    except (TypeError, ValueError):
        return [f"GPUs per node {gpus_per_node!r} is not a number: set runtime_profile_gpus_per_node, e.g. 8"]
    if gpus < 1:
        return [
            f"GPUs per node is {gpus}: LIGHT_INTRA_SIZE needs at least 1; set runtime_profile_gpus_per_node "
            "(or gpucluster_slots_per_node on a node without GPUs)"
        ]
    problems: list[str] = []
    for name in runtime.RUNTIMES:
        try:
            runtime.build_profile(name, _overrides(values, name), gpus_per_node=gpus)
        except runtime.ProfileError as exc:
            problems += [p for p in exc.problems if p not in problems]
    # Led by the inventory variable that sets the value (LIGHT_TOPK_RATIO: runtime_profile_light_topk_ratio).
    return [re.sub(r"^((LIGHT|HOROVOD)_\w+)", lambda m: f"runtime_profile_{m.group(1).lower()}: {m.group(1)}", p)
            for p in problems]


def runtime_env(values: Mapping[str, Any], runtime_name: str, gpus_per_node: Any) -> dict[str, str]:
    """The validated profile of ``runtime_name`` as ``{NAME: "value"}`` (documented order)."""
    try:
        profile = runtime.build_profile(str(runtime_name), _overrides(values, str(runtime_name)),
                                        gpus_per_node=_gpus(gpus_per_node))
    except runtime.ProfileError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return profile.env()


def runtime_env_file(env: Mapping[str, Any], header: str | None = None) -> str:
    """``env`` as an env file (Docker ``--env-file`` / systemd ``EnvironmentFile=`` format)."""
    try:
        return runtime.render_env_file({str(k): str(v) for k, v in env.items()}, header=header)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def runtime_parse_env_file(text: str) -> dict[str, str]:
    """Read an env file back into ``{NAME: "value"}``."""
    try:
        return runtime.parse_env_file(str(text))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def runtime_recorded(text: Any) -> str | None:
    """The runtime a node records (first non-comment word of its record file), or None when
    the file is empty or names no known runtime."""
    for line in str(text or "").splitlines():
        word = line.split("#", 1)[0].strip()
        if word:
            return word if word in runtime.RUNTIMES else None
    return None


def runtime_effective(desired: str, recorded_text: Any, keep_recorded: bool = True) -> str:
    """The runtime the role writes: the recorded one when ``keep_recorded`` and the node has a
    valid record (a switch made with playbooks/runtime.yml survives a later site.yml), else
    ``desired``."""
    if desired not in runtime.RUNTIMES:
        raise AnsibleFilterError(
            f"runtime_profile_runtime={desired!r} is unknown: set it to one of {list(runtime.RUNTIMES)}"
        )
    recorded = runtime_recorded(recorded_text)
    if keep_recorded and recorded:
        return recorded
    return desired


def runtime_mixed(runtime_by_host: Mapping[str, Any]) -> str:
    """"" when every host has the same runtime, else a message naming each group of hosts.

    ``runtime_by_host`` maps host name to runtime (None/"" = unknown, counted as its own group).
    """
    groups: dict[str, list[str]] = {}
    for host, name in runtime_by_host.items():
        groups.setdefault(str(name or "unknown"), []).append(str(host))
    if len(groups) <= 1:
        return ""
    parts = [f"{', '.join(sorted(hosts))} on {name}" for name, hosts in sorted(groups.items())]
    return (
        "nodes would run different runtimes (" + "; ".join(parts) + "): light-horovod and Horovod ranks "
        "cannot join one job. Switch every node with playbooks/runtime.yml -e runtime=<lightcc|horovod> "
        "and no --limit"
    )


def runtime_detect(probe: Mapping[str, Any]) -> str:
    """Which runtime a training container runs, from the probe's installed distributions.

    ``probe["packages"]`` maps distribution name to version (None when absent). Returns
    ``lightcc`` (light-horovod), ``horovod`` (horovod only), ``both`` (a broken mix: both
    distributions claim the ``horovod`` module) or ``none``.
    """
    packages = {_normalise(k): v for k, v in (probe or {}).get("packages", {}).items()}
    light = packages.get(PACKAGES["lightcc"])
    hvd = packages.get(PACKAGES["horovod"])
    if light and hvd:
        return "both"
    if light:
        return "lightcc"
    if hvd:
        return "horovod"
    return "none"


_WHEEL = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[0-9][^-]*)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def runtime_wheel_version(path: str, package: str) -> str:
    """The version in a wheel's file name (PEP 427: ``name-version[-build]-py-abi-platform.whl``),
    checked to be a wheel of ``package``."""
    base = os.path.basename(str(path))
    m = _WHEEL.match(base)
    if not m:
        raise AnsibleFilterError(
            f"{path}: not a wheel file name (name-version-python-abi-platform.whl); give the path of a .whl"
        )
    if _normalise(m.group("name")) != _normalise(package):
        raise AnsibleFilterError(f"{path} is a wheel of {m.group('name')}, not of {package}")
    return m.group("version")


def _source(cfg: Mapping[str, Any], which: str, wheel_dir: str) -> tuple[list[str], str, str | None]:
    """(pip arguments naming the source, description, problem) for one package's source."""
    wheel = cfg.get(f"{which}_wheel") or ""
    index = cfg.get(f"{which}_index_url") or ""
    find_links = cfg.get("find_links") or ""
    if wheel:
        dest = f"{wheel_dir.rstrip('/')}/{os.path.basename(wheel)}"
        return [dest], f"the wheel {wheel} (runtime_{which}_wheel)", None
    if find_links:
        return (["--no-index", "--find-links", str(find_links)],
                f"the local wheel directory {find_links} (runtime_find_links)", None)
    if index:
        return ["--index-url", str(index)], f"the index {index} (runtime_{which}_index_url)", None
    return [], "", "no source"


def runtime_plan(probe: Mapping[str, Any], target: str, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What the switch to ``target`` does in one training container, or why it cannot.

    ``probe``: the container probe (``packages``, ``pip``, ``nvcc``, ``nccl``, ``python``).
    ``cfg``: ``host``, ``container``, ``pip`` (argv), ``pip_wheel``, ``pip_extra_args``,
    ``wheel_dir``, ``find_links``, ``horovod_version``, ``horovod_build_env`` (merged over
    HOROVOD_WITH_MPI=1 HOROVOD_GPU_OPERATIONS=NCCL), ``horovod_index_url``, ``horovod_wheel``,
    ``lightcc_version``, ``lightcc_index_url``, ``lightcc_wheel``.

    Returns ``{"now", "target", "package", "uninstall": [dist, ...], "install": None |
    {"package", "spec", "version", "argv", "env", "flags", "what", "source"}, "error": "" |
    message}``. ``install.argv`` is the whole pip command; ``env`` the build environment
    (Horovod's flags for horovod, also as ``flags`` text); ``what`` names the package with its
    flags and ``source`` where it comes from, for messages.
    """
    if target not in runtime.RUNTIMES:
        raise AnsibleFilterError(f"runtime={target!r} is unknown: run with -e runtime=lightcc or -e runtime=horovod")
    host = cfg.get("host", "this node")
    container = cfg.get("container", "the training container")
    packages = {_normalise(k): v for k, v in (probe or {}).get("packages", {}).items()}
    now = runtime_detect(probe)
    other = "horovod" if target == "lightcc" else "lightcc"
    package = PACKAGES[target]
    which = target  # variable stem: runtime_lightcc_* / runtime_horovod_*
    wheel_dir = str(cfg["wheel_dir"])
    plan: dict[str, Any] = {"now": now, "target": target, "package": package, "uninstall": [], "install": None,
                            "error": ""}
    if packages.get(PACKAGES[other]):
        plan["uninstall"].append(PACKAGES[other])

    wanted = str(cfg.get(f"{which}_version") or "")
    wheel = str(cfg.get(f"{which}_wheel") or "")
    if wheel:
        wanted = runtime_wheel_version(wheel, package)
    installed = packages.get(package)
    # Both distributions ship the ``horovod`` module: removing the other one deletes files the
    # target installed too, so the target is then reinstalled.
    reinstall = bool(plan["uninstall"]) and bool(installed)
    if installed and (not wanted or installed == wanted) and not reinstall:
        return plan

    build_env: dict[str, str] = {}
    if target == "horovod":
        build_env = dict(HOROVOD_BUILD_ENV)
        build_env.update({str(k): str(v) for k, v in (cfg.get("horovod_build_env") or {}).items()})
    flags = " ".join(f"{k}={v}" for k, v in build_env.items())
    spec = f"{package}=={wanted}" if wanted else package
    what = f"{spec}" + (f" (built with {flags})" if flags else "")

    args, source, problem = _source(cfg, which, wheel_dir)
    if problem and target == "lightcc":
        plan["error"] = (
            f"{host}: cannot install {what} in {container}: {package} is the vendor's package and is not on "
            f"PyPI, and no source is set. Set runtime_lightcc_wheel to its wheel file on the controller, or "
            f"runtime_lightcc_index_url to the vendor's package index, or runtime_find_links to a directory "
            f"holding its wheel (or use the vendor's training image, which ships it)."
        )
        return plan
    if problem:
        plan["error"] = (
            f"{host}: cannot install {what} in {container}: no source. Set runtime_horovod_wheel (a wheel "
            f"file on the controller), runtime_horovod_index_url (default https://pypi.org/simple) or "
            f"runtime_find_links."
        )
        return plan
    from_index = not wheel and not cfg.get("find_links")
    if target == "horovod" and from_index and not (probe.get("nvcc") and probe.get("nccl")):
        missing = " and ".join(x for x, ok in (("no nvcc (CUDA toolkit)", probe.get("nvcc")),
                                              ("no libnccl (NCCL)", probe.get("nccl"))) if not ok)
        plan["error"] = (
            f"{host}: cannot install {what} from {source}: pip builds Horovod from source there, and a "
            f"GPU build (HOROVOD_GPU_OPERATIONS=NCCL) compiles against CUDA and NCCL, but {container} has "
            f"{missing}. Use a training image with the CUDA toolkit and NCCL, or set runtime_horovod_wheel "
            f"to a horovod wheel built for this image."
        )
        return plan
    pip = [str(a) for a in (cfg.get("pip") or ["python3", "-m", "pip"])]
    pip_wheel = str(cfg.get("pip_wheel") or "")
    if pip_wheel:
        pip = ["python3", f"{wheel_dir.rstrip('/')}/{os.path.basename(pip_wheel)}/pip"]
    elif not probe.get("pip"):
        plan["error"] = (
            f"{host}: cannot install {what} from {source}: {container} has no pip ({shlex.join(pip)} fails). "
            f"Set runtime_pip_wheel to a pip wheel on the controller (pip runs from its wheel, e.g. "
            f"/usr/share/python-wheels/pip-*.whl on Debian) or runtime_pip to the image's pip command."
        )
        return plan
    extra = [str(a) for a in (cfg.get("pip_extra_args") or [])]
    argv = pip + ["install", "--no-cache-dir", *extra]
    if reinstall:
        argv += ["--force-reinstall", "--no-deps"]
    argv += args if wheel else [*args, spec]
    plan["install"] = {"package": package, "spec": spec, "version": wanted or None, "argv": argv,
                       "env": build_env, "flags": flags, "what": what, "source": source}
    return plan


def runtime_pip_uninstall(plan: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[str]:
    """The pip argv that removes ``plan["uninstall"]`` (empty list when nothing to remove)."""
    if not plan.get("uninstall"):
        return []
    pip = [str(a) for a in (cfg.get("pip") or ["python3", "-m", "pip"])]
    if cfg.get("pip_wheel"):
        wheel_dir = str(cfg["wheel_dir"])
        pip = ["python3", f"{wheel_dir.rstrip('/')}/{os.path.basename(str(cfg['pip_wheel']))}/pip"]
    extra = [str(a) for a in (cfg.get("pip_extra_args") or [])]
    return pip + ["uninstall", "-y", *extra, *plan["uninstall"]]


def runtime_wheel_dir_problem(volumes: Sequence[str] | None, wheel_dir: str, host: str, container: str) -> str:
    """Why pip in the training container could not read wheels copied to ``wheel_dir`` on the node
    ('' when it can). ``volumes`` are the container's mounts as Docker writes them
    (``source:target[:opts]``, the training stage's contract). What the container sees at
    ``wheel_dir`` is the deepest mount whose target holds it: that mount must be a bind mount of the
    same node path (a deeper mount of another directory, or a named volume, hides the wheels)."""
    if volumes is None:
        return (f"{host}: the node contract's training stage lists no mounts of {container} (it was published by an "
                f"older gpucluster), so where pip in it can read wheels is unknown. Fix: rerun site.yml on the node, "
                f"then the switch.")
    want = stage_settings.abs_path(wheel_dir)
    fix = ("Fix: leave runtime_wheel_dir unset (wheels/ under the container's bin_dir), or set it to an absolute "
           "directory whose deepest mount in the container is a bind mount of the same node path.")
    mounts = ", ".join(str(v) for v in volumes or []) or "none"
    if not want:
        return (f"{host}: runtime_wheel_dir is {wheel_dir!r}, not an absolute path, so the training container "
                f"{container} cannot see it at the same path (its mounts: {mounts}). {fix}")
    best = None  # the deepest (source, target, spec) whose target holds want
    for source, target, spec in filter(None, map(stage_settings.parse_mount, volumes or [])):
        holds = bool(target) and (want == target or want.startswith(target.rstrip("/") + "/"))
        if holds and (best is None or len(target) >= len(best[1])):
            best = (source, target, spec)
    if best is not None and stage_settings.abs_path(best[0]) == best[1]:
        return ""
    if best is None:
        why = f"no mount of it holds {want} (its mounts: {mounts})"
    elif not stage_settings.abs_path(best[0]):
        why = f"the deepest mount that holds it is the named volume {best[2]!r}, not the node's directory"
    else:
        why = f"the deepest mount that holds it, {best[2]!r}, shows another node directory there"
    return (f"{host}: runtime_wheel_dir is {wheel_dir!r}, which the training container {container} does not see at "
            f"the same path: {why}, so pip in it could not read the wheels copied there. {fix}")


def runtime_plugin_placement(state: Mapping[str, Any]) -> str:
    """Where a node's NCCL net plugin library is, in words, from runtime_node_state's placement
    (plugin_in_place, plugin_aside and both paths, as tasks/main.yml read them)."""
    if state.get("plugin_in_place") is True:
        return f"in place at {state.get('plugin_path')}"
    if state.get("plugin_aside") is True:
        return f"moved aside to {state.get('plugin_aside_path')}"
    return f"absent ({state.get('plugin_path')})"


def runtime_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per node: ``node-1  runs horovod  (recorded horovod; horovod 0.28.1; NCCL net plugin
    moved aside to ...)``."""
    out = []
    width = max([len(str(r.get("host", ""))) for r in rows] + [4])
    for r in rows:
        pkgs = ", ".join(f"{k} {v}" for k, v in (r.get("packages") or {}).items() if v) or "no Horovod package"
        out.append(f"{str(r.get('host', '')).ljust(width)}  runs {r.get('runtime')}  "
                   f"(recorded {r.get('recorded') or 'nothing'}; {pkgs}; "
                   f"NCCL net plugin {runtime_plugin_placement(r)})")
    return out


class FilterModule:
    def filters(self):
        return {
            "gpucluster_runtime_problems": runtime_problems,
            "gpucluster_runtime_env": runtime_env,
            "gpucluster_runtime_env_file": runtime_env_file,
            "gpucluster_runtime_parse_env_file": runtime_parse_env_file,
            "gpucluster_runtime_recorded": runtime_recorded,
            "gpucluster_runtime_effective": runtime_effective,
            "gpucluster_runtime_mixed": runtime_mixed,
            "gpucluster_runtime_detect": runtime_detect,
            "gpucluster_runtime_wheel_version": runtime_wheel_version,
            "gpucluster_runtime_plan": runtime_plan,
            "gpucluster_runtime_pip_uninstall": runtime_pip_uninstall,
            "gpucluster_runtime_table": runtime_table,
            "gpucluster_runtime_plugin_placement": runtime_plugin_placement,
            "gpucluster_runtime_wheel_dir_problem": runtime_wheel_dir_problem,
        }
