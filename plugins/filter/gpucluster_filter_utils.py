"""What the filter plugins share: the import path to the project's Python code, and error mapping.

Importing this module makes the project's code importable on the controller, where Ansible runs
filters:

- ``ansible.module_utils.gpucluster`` (``plugins/module_utils``): Ansible ships module_utils to
  the node inside each module, but on the controller ``ansible.module_utils`` is ansible-core's
  own package, and the ``module_utils`` path of ansible.cfg is not added to it; so
  ``plugins/module_utils`` is appended to ``ansible.module_utils.__path__`` (once);
- ``gpucluster`` (``src``): when it is not installed (AWX / ansible-pull run from a checkout
  without ``pip install .``), ``src`` goes first on ``sys.path``.

Ansible loads filter plugin files by path, without their folder on ``sys.path``, so the filter
files (here and in ``roles/*/filter_plugins``) put this folder there when ``import
gpucluster_filter_utils`` fails, then import it; the tests have it on ``sys.path``
(``tests/conftest.py``). Ansible also loads this file as a filter plugin file: its FilterModule
has no filters.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys

import ansible.module_utils
from ansible.errors import AnsibleFilterError

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
SRC = os.path.join(ROOT, "src")

if MODULE_UTILS not in list(ansible.module_utils.__path__):
    ansible.module_utils.__path__.append(MODULE_UTILS)
if importlib.util.find_spec("gpucluster") is None:
    sys.path.insert(0, SRC)


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


class FilterModule:
    """No filters: this file only serves the filter plugin files."""

    def filters(self):
        return {}
