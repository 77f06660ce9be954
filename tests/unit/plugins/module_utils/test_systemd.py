"""module_utils/systemd.py: ``systemctl show`` read as systemctl prints it (systemctl(1)):
Name=value lines in systemd's own order, a value may hold ``=`` or be empty."""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils.systemd import parse_show

# systemctl show -p LoadState -p UnitFileState -p ActiveState -p Environment docker.service
SHOW = "Environment=DOCKER_OPTS=--debug A=b\nLoadState=loaded\nActiveState=inactive\nUnitFileState=\n"


def test_values_are_everything_after_the_first_equals_sign():
    assert parse_show(SHOW) == {"Environment": "DOCKER_OPTS=--debug A=b", "LoadState": "loaded",
                                "ActiveState": "inactive", "UnitFileState": ""}


def test_the_properties_asked_for_exactly_and_empty_for_one_not_printed():
    assert parse_show("LoadState=not-found\n", ("LoadState", "ActiveState")) == {"LoadState": "not-found",
                                                                                "ActiveState": ""}
    assert parse_show("", ("LoadState",)) == {"LoadState": ""}


def test_the_filter_is_the_same_reader():
    from ansible_collections.gpucluster.cluster.plugins.filter.nvidia_driver import FilterModule

    assert FilterModule().filters()["nvidia_driver_systemctl_show"](SHOW)["LoadState"] == "loaded"
