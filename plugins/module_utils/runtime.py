"""Runtime profiles: the communication settings a training container gets.

Two runtimes are supported, each a set of environment variables with validated values:

``lightcc``
    The vendor's communication library (``light-horovod``), tuned by ``LIGHT_*`` variables.
    Defaults are the vendor-documented ones:

    - ``LIGHT_2D_ALLREDUCE`` = 0: flag, 2-D (intra-node, then inter-node) allreduce;
    - ``LIGHT_INTRA_SIZE`` = GPUs per node (8 on the vendor's nodes): ranks in one
      intra-node group; must divide the GPUs per node;
    - ``LIGHT_HIERARCHICAL_THRESHOLD`` = 1073741824 bytes (1 GiB): tensors at least this
      large use the hierarchical algorithm;
    - ``LIGHT_TOPK_ALLREDUCE`` = 0: flag, top-k sparsified allreduce;
    - ``LIGHT_TOPK_RATIO`` = 0.01: fraction of gradient elements top-k keeps, in (0, 1];
    - ``LIGHT_TOPK_THRESHOLD`` = 1048576 bytes (1 MiB): smaller tensors are sent dense;
    - ``LIGHT_TOPK_FP16`` = 0: flag, send the top-k values as FP16.

    ``light-horovod`` is a Horovod build, so a LightCC profile may also carry the Horovod
    variables below; they are emitted only when set explicitly.

``horovod``
    Open-source Horovod. Defaults are those of Horovod's current source (horovod/horovod
    master): ``horovodrun --help``
    in ``horovod/runner/launch.py`` ("Fusion buffer threshold in MB ... (default: 128)",
    "Cycle time in ms ... (default: 1") and ``horovod/common/operations.cc``
    (``SetTensorFusionThresholdBytes(128 * 1024 * 1024)``, ``SetCycleTimeMs(1)``,
    hierarchical allreduce off unless ``HOROVOD_HIERARCHICAL_ALLREDUCE`` > 0). Horovod's
    ``docs/tensor-fusion.rst`` still says "Default fusion buffer size is 64 MB", which was the
    default of older releases (together with a 5 ms cycle time); the code is what runs, so the
    profile follows it and writes the value explicitly.

    - ``HOROVOD_FUSION_THRESHOLD`` = 134217728 bytes (128 MiB): tensor-fusion buffer, 0 disables;
    - ``HOROVOD_CYCLE_TIME`` = 1 ms between tensor-fusion cycles (fractions allowed, e.g. 3.5);
    - ``HOROVOD_HIERARCHICAL_ALLREDUCE`` = 0: flag, hierarchical allreduce;
    - ``HOROVOD_MPI_THREADS_DISABLE`` = 0: flag, initialise MPI without ``MPI_THREAD_MULTIPLE``.

The rendered environment (:func:`RuntimeProfile.env`) is written once as an env file
(:func:`render_env_file`, Docker ``--env-file`` format) that the training container and the
launcher both read, and it is the runtime part of the job environment that
:mod:`gpucluster.launch` turns into ``mpirun -x`` flags and MPIJob container env.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RUNTIMES = ("lightcc", "horovod")

#: GPUs per node assumed when the caller does not say (the vendor's 8-GPU nodes).
DEFAULT_GPUS_PER_NODE = 8

# Kinds of value a variable takes; each has one validator below.
FLAG = "flag"  # 0 or 1
BYTES = "bytes"  # non-negative integer, bytes
RATIO = "ratio"  # float in (0, 1]
MILLISECONDS = "ms"  # non-negative number, milliseconds
INTRA = "intra"  # positive integer dividing GPUs per node


@dataclass(frozen=True)
class Variable:
    """One runtime variable: its name, kind, default and a one-line description."""

    name: str
    kind: str
    default: int | float | None
    description: str


LIGHTCC_VARIABLES: tuple[Variable, ...] = (
    Variable("LIGHT_2D_ALLREDUCE", FLAG, 0, "2-D allreduce (intra-node then inter-node)"),
    Variable("LIGHT_INTRA_SIZE", INTRA, None, "ranks per intra-node group; default GPUs per node"),
    Variable("LIGHT_HIERARCHICAL_THRESHOLD", BYTES, 1073741824, "bytes; hierarchical allreduce from here"),
    Variable("LIGHT_TOPK_ALLREDUCE", FLAG, 0, "top-k sparsified allreduce"),
    Variable("LIGHT_TOPK_RATIO", RATIO, 0.01, "fraction of gradient elements kept by top-k"),
    Variable("LIGHT_TOPK_THRESHOLD", BYTES, 1048576, "bytes; smaller tensors are sent dense"),
    Variable("LIGHT_TOPK_FP16", FLAG, 0, "send top-k values as FP16"),
)

HOROVOD_VARIABLES: tuple[Variable, ...] = (
    Variable("HOROVOD_FUSION_THRESHOLD", BYTES, 134217728, "bytes; tensor-fusion buffer, 0 disables"),
    Variable("HOROVOD_CYCLE_TIME", MILLISECONDS, 1, "milliseconds between tensor-fusion cycles"),
    Variable("HOROVOD_HIERARCHICAL_ALLREDUCE", FLAG, 0, "hierarchical allreduce"),
    Variable("HOROVOD_MPI_THREADS_DISABLE", FLAG, 0, "initialise MPI without thread support"),
)

_BY_NAME = {v.name: v for v in LIGHTCC_VARIABLES + HOROVOD_VARIABLES}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ProfileError(ValueError):
    """A runtime profile value is wrong; the message names each variable and the fix."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid runtime profile:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class RuntimeProfile:
    """A validated runtime profile.

    ``values`` maps variable name to its typed value (int, or float for ratios and cycle
    time) in the documented order; :meth:`env` renders it as strings.
    """

    runtime: str
    gpus_per_node: int
    values: dict[str, int | float] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """The profile as environment variables, ``{NAME: "value"}``, in documented order."""
        return {name: format_value(value) for name, value in self.values.items()}


def format_value(value: int | float) -> str:
    """Render a profile value for the environment: ints as digits, floats without noise.

    ``0.01`` -> ``"0.01"``, ``1.0`` -> ``"1"``, ``3.5`` -> ``"3.5"``.
    """
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return repr(value)
    return str(value)


def _as_int(value: Any) -> int | None:
    """An integer from an int or a decimal-digit string (YAML/Jinja may hand strings); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value.strip())
    return None


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _check(var: Variable, value: Any, gpus_per_node: int) -> tuple[int | float | None, str | None]:
    """Validate one value; returns (typed value, None) or (None, problem message)."""
    name = var.name
    if var.kind == FLAG:
        if isinstance(value, bool):
            return int(value), None
        n = _as_int(value)
        if n in (0, 1):
            return n, None
        return None, f"{name}={value!r} is not a flag: set it to 0 (off) or 1 (on)"
    if var.kind == BYTES:
        n = _as_int(value)
        if n is None:
            return None, (
                f"{name}={value!r} is not a whole number of bytes: give a non-negative integer, "
                f"e.g. {var.default} (default)"
            )
        if n < 0:
            return None, f"{name}={n} is negative: give a non-negative number of bytes, e.g. {var.default}"
        return n, None
    if var.kind == RATIO:
        x = _as_number(value)
        if x is None or not math.isfinite(x):
            return None, f"{name}={value!r} is not a number: give a fraction in (0, 1], e.g. {var.default}"
        if not 0 < x <= 1:
            return None, (
                f"{name}={x:g} is out of range: it is the fraction of gradient elements top-k "
                f"keeps and must be in (0, 1], e.g. {var.default} (default)"
            )
        return x, None
    if var.kind == MILLISECONDS:
        x = _as_number(value)
        if x is None or not math.isfinite(x) or x < 0:
            return None, (
                f"{name}={value!r} is not a non-negative number of milliseconds: "
                f"give e.g. {var.default} (default) or 3.5"
            )
        return (int(x) if x.is_integer() else x), None
    if var.kind == INTRA:
        n = _as_int(value)
        if n is None or n < 1:
            return None, (
                f"{name}={value!r} is not a positive integer: give the number of ranks per "
                f"intra-node group, e.g. {gpus_per_node} (GPUs per node)"
            )
        if gpus_per_node % n:
            divisors = [d for d in range(1, gpus_per_node + 1) if gpus_per_node % d == 0]
            return None, (
                f"{name}={n} does not divide the {gpus_per_node} GPUs per node: "
                f"choose one of {divisors}"
            )
        return n, None
    raise ValueError(f"{name}: unknown variable kind {var.kind!r}")


def _canonical(key: str) -> str:
    return str(key).strip().upper()


def build_profile(
    runtime: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> RuntimeProfile:
    """Build and validate the profile of ``runtime`` (``"lightcc"`` or ``"horovod"``).

    ``overrides`` maps variable names (case-insensitive, e.g. ``LIGHT_TOPK_RATIO`` or
    ``light_topk_ratio``) to values; every problem is collected and raised together as one
    :class:`ProfileError`. A LightCC profile accepts the Horovod variables too (light-horovod
    is a Horovod build); a Horovod profile refuses ``LIGHT_*`` variables, which only LightCC
    reads.
    """
    if runtime not in RUNTIMES:
        raise ProfileError([f"runtime={runtime!r} is unknown: set runtime to one of {list(RUNTIMES)}"])
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise ProfileError([f"gpus_per_node={gpus_per_node!r} must be a positive integer (GPUs per node)"])

    problems: list[str] = []
    given: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        name = _canonical(key)
        if name not in _BY_NAME:
            known = ", ".join(v.name for v in (LIGHTCC_VARIABLES if runtime == "lightcc" else ())
                              + HOROVOD_VARIABLES)
            problems.append(
                f"{key} is not a {runtime} profile variable (known: {known}); "
                "put other variables under the job's env"
            )
            continue
        if runtime == "horovod" and name.startswith("LIGHT_"):
            problems.append(
                f"{name} is read only by LightCC but runtime is horovod: "
                "remove it, or set runtime: lightcc"
            )
            continue
        if name in given:
            problems.append(f"{name} is given twice (as {key!r} and another spelling): keep one")
            continue
        given[name] = value

    values: dict[str, int | float] = {}
    variables = LIGHTCC_VARIABLES + HOROVOD_VARIABLES if runtime == "lightcc" else HOROVOD_VARIABLES
    for var in variables:
        if var.name in given:
            checked, problem = _check(var, given[var.name], gpus_per_node)
            if problem:
                problems.append(problem)
                continue
            assert checked is not None
            values[var.name] = checked
        elif runtime == "lightcc" and var.name.startswith("HOROVOD_"):
            continue  # Horovod knobs ride along in a LightCC profile only when set.
        elif var.kind == INTRA:
            values[var.name] = gpus_per_node
        else:
            assert var.default is not None
            values[var.name] = var.default
    if problems:
        raise ProfileError(problems)
    return RuntimeProfile(runtime=runtime, gpus_per_node=gpus_per_node, values=values)


def render_env_file(env: Mapping[str, str], *, header: str | None = None) -> str:
    """Render ``env`` as an env file: one ``KEY=VALUE`` line each, in the mapping's order.

    The format is Docker's ``--env-file`` (and systemd ``EnvironmentFile=``) subset: no
    quoting, the value is everything after the first ``=``. ``header`` becomes ``#`` comment
    lines on top. Names must be shell identifiers and values single-line; anything else is a
    :class:`ValueError` naming the variable.
    """
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(
                f"environment variable name {name!r} is not a valid identifier ([A-Za-z_][A-Za-z0-9_]*)"
            )
        text = str(value)
        if "\n" in text or "\r" in text or "\0" in text:
            raise ValueError(
                f"{name}: value contains a newline or NUL; an env file holds one line per variable"
            )
        lines.append(f"{name}={text}")
    return "\n".join(lines) + "\n"


def parse_env_file(text: str) -> dict[str, str]:
    """Read an env file written by :func:`render_env_file` (comments and blank lines skipped)."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise ValueError(f"env file line {number} is not KEY=VALUE: {line!r}")
        env[name] = value
    return env
