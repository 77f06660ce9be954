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


class _CountingMapping(dict):
    """Stands in for Ansible's lazy dict: every read of a value is counted (a template render)."""

    reads = 0

    def __getitem__(self, key):
        type(self).reads += 1
        return super().__getitem__(key)

    def items(self):
        return ((k, self[k]) for k in self)


def test_plain_copies_nested_containers_reading_each_element_once():
    _CountingMapping.reads = 0
    lazy = _CountingMapping({"log-opts": _CountingMapping({"max-size": "100m", "max-file": "3"}),
                             "registry-mirrors": ["https://m.example"], "pair": (1, 2)})
    copy = fu.plain(lazy)
    assert copy == {"log-opts": {"max-size": "100m", "max-file": "3"}, "registry-mirrors": ["https://m.example"],
                    "pair": (1, 2)}
    assert type(copy) is dict and type(copy["log-opts"]) is dict and type(copy["pair"]) is tuple
    assert _CountingMapping.reads == 5  # 3 top-level values + 2 nested, each once
    # The copy is detached: reading it templates nothing more.
    copy["log-opts"]["max-size"]
    assert _CountingMapping.reads == 5


def test_plain_args_hands_the_filter_plain_values():
    seen = []

    def check(settings, name, extra=None):
        """Doc."""
        seen.append((type(settings), type(extra)))
        return name

    wrapped = fu.plain_args(check)
    assert wrapped(_CountingMapping({"a": 1}), "host", extra=_CountingMapping({"b": [1]})) == "host"
    assert seen == [(dict, dict)]
    assert wrapped.__name__ == "check" and wrapped.__doc__ == "Doc."
