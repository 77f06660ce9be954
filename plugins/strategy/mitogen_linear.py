# gpucluster: mitogen's linear strategy (the `mitogen` package, pinned in pyproject.toml), found
# through ansible.cfg's strategy_plugins = plugins/strategy, so no path into the virtual
# environment's site-packages is written anywhere. mitogen keeps one Python interpreter per node
# and sends modules over it instead of an SSH round trip and a new interpreter per task: the
# bench (README "Speed") measured fresh 104 -> 61 s and no-op 50 -> 29 s at one node.
# Set ANSIBLE_STRATEGY=linear to run without it.
#
# It also imports this collection's filter, test and action plugins once, in the controller's
# main process, before any worker is forked. Ansible forks a worker per task and host; a
# worker that templates `gpucluster.cluster.<filter>` or runs the contract action imports that
# plugin and the module_utils it uses, and the collection loader compiles their source anew in
# every worker (no bytecode cache), only for the worker to exit. The plugin loader reuses a
# module already in sys.modules (PluginLoader._load_module_source), which the fork inherits.
#
# And it lists the installed collections once, likewise before the first fork: mitogen's
# planner lists them again (ansible.collections.list.list_collection_dirs, a walk over every
# collection the `ansible` package installs) for each collection module a worker runs - 3,040
# directory scans and 3.4 of 26.5 worker CPU-seconds in a no-op run at one node.
from __future__ import annotations

import importlib
import pathlib

import ansible.collections.list
import ansible_mitogen.loaders
import ansible_mitogen.planner
import ansible_mitogen.strategy
from ansible.utils.display import Display

display = Display()

DOCUMENTATION = """
name: mitogen_linear
short_description: Ansible's linear strategy over mitogen connections
description:
  - The linear strategy with mitogen's connection multiplexer (mitogen's own mitogen_linear);
    this file only makes it loadable from the checkout.
  - Imports the collection's filter, test and action plugins in the controller process before
    the first worker is forked, so no worker compiles them again.
  - Lists the installed collections once there too, for mitogen's planner, which would walk them
    again for every collection module a worker runs.
author: gpucluster
"""

COLLECTION = "gpucluster.cluster"
PRELOADED_KINDS = ("filter", "test", "action")
PLUGINS_DIR = pathlib.Path(__file__).resolve().parents[1]


def preload_plugins(plugins_dir: pathlib.Path = PLUGINS_DIR, collection: str = COLLECTION) -> list[str]:
    """Import every plugin file of PRELOADED_KINDS under the name the plugin loader gives it
    (ansible_collections.<ns>.<name>.plugins.<kind>.<file>); return the names imported. A file
    that fails to import is left to the worker, which reports the error where it is used."""
    loaded = []
    for kind in PRELOADED_KINDS:
        for path in sorted((plugins_dir / kind).glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = f"ansible_collections.{collection}.plugins.{kind}.{path.stem}"
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 the worker that uses the plugin reports it
                display.vvv(f"gpucluster: {name} not preloaded ({exc}); the worker that uses it loads it")
                continue
            loaded.append(name)
    return loaded


def cache_collection_dirs(planner=ansible_mitogen.planner) -> tuple[bytes, ...]:
    """List the installed collections' directories now and hand mitogen's planner that list
    instead of a new walk per module (``planner._load_collections``, which adds each to the
    invocation's extra ``sys.path`` entries); return the list. A mitogen without that function
    is left as it is."""
    dirs = tuple(ansible.collections.list.list_collection_dirs())
    if not callable(getattr(planner, "_load_collections", None)):
        return dirs

    def _load_collections(invocation):
        for path in dirs:
            invocation._extra_sys_paths.add(path.decode("utf-8"))

    planner._load_collections = _load_collections
    return dirs


class StrategyModule(ansible_mitogen.strategy.StrategyMixin,
                     ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)):
    """linear, with mitogen's connection handling mixed in."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        preload_plugins()
        cache_collection_dirs()
