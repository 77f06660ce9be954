"""Role-embedded filter plugins (roles/<role>/filter_plugins/*.py), imported by file path."""

from __future__ import annotations

import importlib.util

from tests.conftest import ROOT


def load_role_plugin(role: str, name: str):
    """The module ``roles/<role>/filter_plugins/<name>.py``, imported by file path."""
    path = ROOT / "roles" / role / "filter_plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpucluster_role_{role}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
