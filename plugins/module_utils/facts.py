"""What the facts modules (``gpu_facts``, ``rdma_facts``) share: how they run a node's tools and
how they fail on output the parsers cannot read.

Stdlib only (the module passes its AnsibleModule in), for Python 3.8+ on the managed node.
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError


def run_tool(module, argv):
    """``module.run_command(argv)`` -> ``(rc, stdout, stderr)``, the arguments passed as written
    (``expand_user_and_vars=False``: dpkg-query's ``${Package}`` must reach the tool unexpanded)."""
    return module.run_command(argv, expand_user_and_vars=False)


def parse_or_fail(module, message, func, *args):
    """``func(*args)``; on ParseError the module fails with ``"<message>: <the parser's error>"``."""
    try:
        return func(*args)
    except ParseError as exc:
        module.fail_json(msg=f"{message}: {exc}")
        raise  # not reached: fail_json exits
