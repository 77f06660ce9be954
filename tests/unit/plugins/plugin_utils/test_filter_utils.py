"""plugin_utils/filter_utils: ValueError -> AnsibleFilterError with the logic's message."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.plugin_utils import filter_utils as fu


def test_value_errors_keeps_the_message_and_the_name():
    def upstream(version):
        """Doc."""
        raise ValueError(f"bad version {version}")

    with pytest.raises(AnsibleFilterError, match=r"^bad version 1$"):
        fu.value_errors(upstream)(1)
    with pytest.raises(AnsibleFilterError, match=r"^upstream: bad version 2$"):
        fu.value_errors(upstream, named=True)(2)
    assert fu.value_errors(upstream).__name__ == "upstream"
    assert fu.value_errors(upstream).__doc__ == "Doc."


def test_other_errors_pass_through():
    def broken():
        raise KeyError("x")

    with pytest.raises(KeyError):
        fu.value_errors(broken)()
