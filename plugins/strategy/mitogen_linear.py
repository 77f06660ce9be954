# gpucluster: mitogen's linear strategy (the `mitogen` package, pinned in pyproject.toml), found
# through ansible.cfg's strategy_plugins = plugins/strategy, so no path into the virtual
# environment's site-packages is written anywhere. mitogen keeps one Python interpreter per node
# and sends modules over it instead of an SSH round trip and a new interpreter per task: the
# bench (README "Speed") measured fresh 104 -> 61 s and no-op 50 -> 29 s at one node.
# Set ANSIBLE_STRATEGY=linear to run without it.
from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

DOCUMENTATION = """
name: mitogen_linear
short_description: Ansible's linear strategy over mitogen connections
description:
  - The linear strategy with mitogen's connection multiplexer (mitogen's own mitogen_linear);
    this file only makes it loadable from the checkout.
author: gpucluster
"""


class StrategyModule(ansible_mitogen.strategy.StrategyMixin,
                     ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)):
    """linear, with mitogen's connection handling mixed in."""
