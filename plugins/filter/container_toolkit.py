"""Jinja filters of the nvidia_container_toolkit and training_image roles: the CDI mode.

The logic is ``plugins/module_utils/container_toolkit.py`` (its docstrings name the sources),
tested in ``tests/unit/plugins/module_utils/test_container_toolkit.py``.

Examples::

    {{ 'cdi' | gpucluster.cluster.container_toolkit_plan(docker_engine_version) }}  -> {"path": "cdi", ...}
    {{ 'all' | gpucluster.cluster.container_toolkit_device_requests('cdi') }}
        -> [{"driver": "cdi", "device_ids": ["nvidia.com/gpu=all"]}]
    {{ stdout | gpucluster.cluster.container_toolkit_cdi_list }}                    -> {"devices": [...], ...}
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import container_toolkit as ctk
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


class FilterModule:
    def filters(self):
        return {
            "container_toolkit_plan": value_errors(ctk.gpu_request_plan),
            "container_toolkit_device_requests": value_errors(ctk.container_device_requests),
            "container_toolkit_cdi_list": value_errors(ctk.parse_cdi_list),
            "container_toolkit_cdi_missing": value_errors(ctk.cdi_missing_devices),
            "container_toolkit_spec_action": value_errors(ctk.cdi_spec_action),
            "container_toolkit_mode_problem": ctk.mode_problem,
        }
