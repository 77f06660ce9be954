"""systemd's answers read without python bindings. Pure functions, stdlib only.

``systemctl show -p A -p B <unit>`` (systemctl(1), ``--property``): one ``Name=value`` line per
property asked for, in systemd's own order (not the order of ``-p``); the value is everything
after the first ``=`` (it may hold ``=`` itself) and may be empty. Used on the node
(docker_daemon_json) and on the controller (the ``nvidia_driver_systemctl_show`` filter, over a node_read
command's output).
"""

from __future__ import annotations


def parse_show(text: str, properties=None) -> dict[str, str]:
    """``{name: value}`` of ``systemctl show`` output; with ``properties``, exactly those names,
    ``""`` for one systemctl did not print."""
    got = dict(line.split("=", 1) for line in (text or "").splitlines() if "=" in line)
    return got if properties is None else {name: got.get(name, "") for name in properties}
