"""plugins/filter/docker_engine.py and plugins/filter/container_toolkit.py: the engine version and the
CDI mode as filters."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.filter.container_toolkit import FilterModule as CtkFilters
from ansible_collections.gpucluster.cluster.plugins.filter.docker_engine import FilterModule as DockerFilters

VERSION = DockerFilters().filters()["docker_server_version"]
CTK = CtkFilters().filters()


def test_engine_version_then_plan_then_requests_as_the_roles_chain_them():
    engine = VERSION("20.10.24+dfsg1\n")
    assert engine == {"version": "20.10.24+dfsg1", "major": 20, "minor": 10, "patch": 24}
    plan = CTK["container_toolkit_plan"]("cdi", engine)
    assert plan["path"] == "legacy" and plan["fallback"]
    assert CTK["container_toolkit_device_requests"]("all", plan["path"])[0]["driver"] == "nvidia"
    plan = CTK["container_toolkit_plan"]("cdi", VERSION("27.5.1"))
    assert CTK["container_toolkit_device_requests"]("all", plan["path"]) == [
        {"driver": "cdi", "count": 0, "device_ids": ["nvidia.com/gpu=all"]}]


def test_bad_input_is_a_filter_error_with_the_explanation():
    with pytest.raises(AnsibleFilterError, match="did not answer"):
        VERSION("")
    with pytest.raises(AnsibleFilterError, match="nvidia_container_toolkit_mode: 'auto'"):
        CTK["container_toolkit_plan"]("auto", VERSION("28.3.2"))
    with pytest.raises(AnsibleFilterError, match="not a CDI device name"):
        CTK["container_toolkit_cdi_list"]("nvidia.com/gpu\n")
