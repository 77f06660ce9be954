"""Jinja filters of the version manifest (roles/versions): the checks preflight runs on every node
before any change, and the unattended-upgrades blacklist of held packages.

The logic is ``plugins/module_utils/versions.py``; these wrap it (``value_errors``).
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import versions
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


class FilterModule:
    """Version manifest filters."""

    def filters(self):
        return {
            "versions_problems": value_errors(versions.version_problems),
            "versions_fabric_manager_problems": value_errors(versions.fabric_manager_problems),
            "versions_blacklist_patterns": value_errors(versions.blacklist_patterns),
        }
