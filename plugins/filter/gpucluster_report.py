"""Filters that build the validation report on the controller (``gpucluster.allreduce``)."""

from __future__ import annotations

import ipaddress
import json

from ansible_collections.gpucluster.cluster.plugins.module_utils import allreduce, diagnose


def allreduce_report(stdout):
    """Parse the benchmark's JSON line (the last line that is a JSON object) into the report."""
    lines = [ln for ln in str(stdout).splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise ValueError("the allreduce benchmark printed no JSON result; see its output above")
    return allreduce.report(json.loads(lines[-1]))


def allreduce_table(stdout):
    lines = [ln for ln in str(stdout).splitlines() if ln.strip().startswith("{")]
    return allreduce.table(json.loads(lines[-1])).splitlines()


def explain(output, limit=1500):
    """The tail of a failed command's output, led by a diagnosis when the failure is a known one
    (``module_utils/diagnose.py``: wrong sshd reached, host key unknown, memlock, ...)."""
    text = str(output or "")
    found = diagnose.classify(text)
    tail = text[-limit:].strip() or "(no output)"
    if found is None:
        return tail
    return f"{found.message} Fix: {found.fix} -- output: {tail}"


def cidr(ipv4_fact):
    """Network of an Ansible ``default_ipv4``-style fact as CIDR, e.g. '172.18.0.0/16'."""
    return str(ipaddress.ip_network(f"{ipv4_fact['address']}/{ipv4_fact['netmask']}", strict=False))


class FilterModule:
    def filters(self):
        return {
            "gpucluster_allreduce_report": allreduce_report,
            "gpucluster_allreduce_table": allreduce_table,
            "gpucluster_cidr": cidr,
            "gpucluster_explain": explain,
        }
