"""Jinja filters that explain failures: known failure outputs (``module_utils/diagnose.py``).

Errors (ValueError) become AnsibleFilterError with the same message.

Examples::

    {{ mpirun_output | gpucluster.cluster.diagnose_failure }}   -> {kind, message, fix, evidence}
    {{ result.stdout | gpucluster.cluster.gpucluster_explain }} -> diagnosis + the output's tail
"""

from __future__ import annotations

from ansible_collections.gpucluster.cluster.plugins.module_utils import diagnose
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors


def diagnose_failure(text, interfaces=None):
    """``output | diagnose_failure`` -> {kind, message, fix, evidence} or None when unknown."""
    found = diagnose.classify(text, interfaces)
    return found.as_dict() if found is not None else None


def memlock_check(limits, rdma=True, min_kib=None):
    """``ulimit_a_text | memlock_check`` -> diagnosis dict, or None when the limit is fine."""
    found = diagnose.check_memlock(limits, rdma, min_kib)
    return found.as_dict() if found is not None else None


def explain(output, limit=1500):
    """The tail of a failed command's output, led by a diagnosis when the failure is a known one
    (``module_utils/diagnose.py``: wrong sshd reached, host key unknown, memlock, ...)."""
    text = str(output or "")
    found = diagnose.classify(text)
    tail = text[-limit:].strip() or "(no output)"
    if found is None:
        return tail
    return f"{found.message} Fix: {found.fix} -- output: {tail}"


class FilterModule:
    """Diagnosis filters."""

    def filters(self):
        table = {
            "diagnose_failure": diagnose_failure,
            "nccl_transport_summary": diagnose.nccl_transport_summary,
            "parse_ulimit_a": diagnose.parse_ulimit_a,
            "memlock_check": memlock_check,
            "insecure_ssh_options": diagnose.find_insecure_ssh_options,
        }
        out = {name: value_errors(func, named=True) for name, func in table.items()}
        out["gpucluster_explain"] = explain
        return out
