"""Every FilterModule of the collection, loaded as Ansible loads them (one per file)."""

from __future__ import annotations

import importlib
import pkgutil

from ansible_collections.gpucluster.cluster.plugins import filter as filter_pkg


def filter_modules() -> dict:
    """``{file stem: FilterModule().filters()}`` for every file under plugins/filter."""
    out = {}
    for info in pkgutil.iter_modules(filter_pkg.__path__):
        module = importlib.import_module(f"{filter_pkg.__name__}.{info.name}")
        if hasattr(module, "FilterModule"):
            out[info.name] = module.FilterModule().filters()
    return out


def all_filters() -> dict:
    """Every filter by its short name (names are unique across files: test_filter_catalog)."""
    out = {}
    for table in filter_modules().values():
        out.update(table)
    return out
