"""Machine-wide locks for work two gpucluster processes must not do at once on one Docker
engine (building the same cached image, starting the same infra container): the second waits,
then finds the first one's result."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def lock_path(name: str) -> Path:
    return Path(os.environ.get("GPUCLUSTER_LOCK_DIR") or tempfile.gettempdir()) / f"gpucluster-{name}.lock"


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """Hold the exclusive lock ``name`` (flock on a file; released when the process dies)."""
    path = lock_path(name)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def locked(name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator: run the function under :func:`host_lock`."""

    def wrap(func: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(func)
        def inner(*args, **kwargs) -> T:
            with host_lock(name):
                return func(*args, **kwargs)

        return inner

    return wrap
