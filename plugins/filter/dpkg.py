"""Jinja filter over dpkg's installed set, as the ``dpkg_status`` module reads it.

The logic is ``plugins/module_utils/dpkg.py`` (the module's own); this wraps it, for a stage that
reads dpkg once before it knows the versions it wants (nvidia_driver: the installed version is an
input of the version choice, the install's condition an output).
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import dpkg
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


class FilterModule:
    """dpkg filters."""

    def filters(self):
        return {
            # {{ __dpkg.installed | gpucluster.cluster.dpkg_unsatisfied(['pkg=1.2-1', 'other=3.*']) }}
            "dpkg_unsatisfied": value_errors(dpkg.unsatisfied),
        }
