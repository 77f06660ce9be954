"""What the filter plugins share on the controller: ValueError mapping, plain arguments.

The core logic lives in ``plugins/module_utils`` and raises ``ValueError`` with the explanation;
a filter wraps it with :func:`value_errors` so a template fails with that explanation
(``AnsibleFilterError``) instead of a traceback. Filters import the core by its collection name
(``ansible_collections.gpucluster.cluster.plugins.module_utils.<component>``), which Ansible's
collection loader resolves wherever the collection is installed (or the checkout, through
``collections/`` in ``ansible.cfg``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def value_errors(func, named=False):
    """``func`` raising AnsibleFilterError where it raises ValueError, with the same message (led
    by ``func``'s name when ``named``), so that a template fails with the logic's explanation."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            raise AnsibleFilterError(f"{func.__name__}: {exc}" if named else str(exc)) from exc

    return wrapper


def refusal(func):
    """``func`` returning ``{"value": <result>, "refusal": ""}``, or ``{"value": None, "refusal":
    <the ValueError's explanation>}`` where it raises: a task asserts that ``refusal`` is empty and
    prints only the explanation, where a raising filter would bury it in Ansible's task-argument
    error ("Finalization of task args for 'set_fact' failed: ...")."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return {"value": func(*args, **kwargs), "refusal": ""}
        except ValueError as exc:
            return {"value": None, "refusal": str(exc)}

    return wrapper


def plain(value):
    """``value`` with Ansible's lazily templated containers (ansible-core >= 2.19) copied into
    plain dicts and lists, each element templated once.

    A lazy container templates an element again on every access, at a cost that grows with the
    variables in scope: a check that walks a settings dict a few times took 0.66 s per call in a
    site.yml run against 0.006 s on the plain copy (the docker stage's daemon.json check). Only
    for data (settings, facts): never for ``hostvars``, which it would template whole."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def plain_args(func):
    """``func`` called with its arguments passed through :func:`plain` (see there why)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*(plain(a) for a in args), **{k: plain(v) for k, v in kwargs.items()})

    return wrapper
