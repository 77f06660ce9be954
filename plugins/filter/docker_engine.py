"""Jinja filters of the docker role: the engine's version (``gpucluster.cluster.docker_server_version``)
and what dockerd would refuse in the daemon.json a run would write (``docker_daemon_problems``).

The docker role owns the fact (``tasks/engine.yml`` sets ``docker_engine_version``); the reader is
``plugins/module_utils/daemon_json.py`` ``server_version``, tested in
``tests/unit/plugins/filter/test_docker_engine.py``. Not ``docker.py``: a plugin file of that
name would shadow the Docker SDK's ``docker`` package (tests/unit/test_no_path_hacks.py).
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils.daemon_json import (
    plan_problems,
    root_move_problem,
    server_version,
)
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import plain_args, value_errors


def docker_daemon_problems(contributions):
    """``[{name, settings}]`` in merge order -> what dockerd would refuse in their merged daemon.json
    (conflicting sources, unknown keys, wrong types, registry values), each with the fix."""
    return plan_problems([(c["name"], c["settings"]) for c in contributions])


class FilterModule:
    def filters(self):
        return {"docker_server_version": value_errors(server_version),
                "docker_daemon_problems": plain_args(docker_daemon_problems),
                "docker_root_move_problem": root_move_problem}
