"""Membership of the training group: declared by the inventory, never inferred from who answered.

The training stage writes every node's MPI hostfile and known_hosts. Built from the hosts that
happen to be alive, a node that failed an earlier stage (or is unreachable) silently drops out
of the others' files and the cluster shrinks. Here the world is the inventory group minus the
nodes the operator excludes on purpose (``gpucluster_excluded_nodes``); any other member that
is not in the run stops the stage on every node before a file is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ansible_collections.gpucluster.cluster.plugins.module_utils import task_result

EXCLUDE_VAR = "gpucluster_excluded_nodes"


def check_excluded(excluded, members):
    """Problems with ``gpucluster_excluded_nodes`` (``excluded``) against the group ``members``."""
    if excluded is None or excluded == "":
        return []
    if isinstance(excluded, (str, bytes, Mapping)) or not isinstance(excluded, (list, tuple)):
        return [f"{EXCLUDE_VAR}: {excluded!r} is not a list of node names. "
                f"Fix: give a list, e.g. {EXCLUDE_VAR}: [node-3] or -e '{{\"{EXCLUDE_VAR}\": [\"node-3\"]}}'"]
    out = []
    for name in excluded:
        if not isinstance(name, str) or name not in members:
            close = difflib.get_close_matches(str(name), list(members), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            out.append(f"{EXCLUDE_VAR}: {name!r} is not a node of the training group ({', '.join(members)}){hint}. "
                       f"Fix: name inventory hosts of the group only")
    return out


def world(members, excluded):
    """The MPI world: the declared members minus the excluded ones, sorted."""
    excluded = set(excluded or [])
    return sorted(h for h in members if h not in excluded)


def declared(host, group, members, excluded):
    """``(membership, errors)``: what the inventory declares the training group to be.

    ``membership`` is ``{"group", "members", "excluded", "world"}`` (members: the group's hosts,
    sorted; world: the members less the excluded ones). Preflight computes it once per run
    (``gpucluster_membership``, roles/preflight/tasks/membership.yml) from the inventory alone, so a
    malformed or unknown ``gpucluster_excluded_nodes`` is refused before any stage changes a node;
    the training stage reads it instead of deriving the world again. A malformed list excludes
    nothing here (it is refused in ``errors``).
    """
    members = sorted(str(h) for h in members or ())
    problems = check_excluded(excluded, members)
    names = sorted(h for h in excluded or () if isinstance(h, str) and h in members) if (
        isinstance(excluded, (list, tuple))) else []
    membership = {"group": group, "members": members, "excluded": names, "world": world(members, names)}
    if not members:
        problems.append(f"the training group {group!r} has no host in the inventory. Fix: put the training nodes in "
                        f"inventory group {group}, or set container_ssh_group to the group that holds them")
    return membership, [f"{host}: {p}." for p in problems]


def missing(members, excluded, play_hosts_all, play_hosts, play_batch, unreachable=None):
    """``{node: why}`` for every member of the world that is not taking part in this run.

    ``play_hosts_all`` / ``play_hosts`` / ``play_batch`` are Ansible's magic variables of the
    training play: every host the play targets (``--limit`` ignored), those not yet failed or
    unreachable, and those of this run (``--limit`` applied). ``unreachable`` maps a node to the
    error of a connection tried now (a probe of the nodes the run lost); a lost node that
    answered the probe failed in an earlier stage.
    """
    unreachable = unreachable or {}
    out = {}
    for host in world(members, excluded):
        if host not in play_hosts_all:
            out[host] = "not in this run (--limit, or not a host of the training play)"
        elif host not in play_hosts:
            if host in unreachable:
                out[host] = f"unreachable ({unreachable[host]})" if unreachable[host] else "unreachable"
            else:
                out[host] = "failed in an earlier stage of this run (its error is above)"
        elif host not in play_batch:
            out[host] = "not in this run (--limit)"
    return out


def membership_errors(host, group, members, excluded, play_hosts_all, play_hosts, play_batch, unreachable=None):
    """Messages that stop the training stage on ``host``; [] when the whole world is present."""
    problems = check_excluded(excluded, members)
    if problems:
        return [f"{host}: {p}." for p in problems]
    lost = missing(members, excluded, play_hosts_all, play_hosts, play_batch, unreachable)
    if not lost:
        return []
    names = sorted(lost)
    why = "; ".join(f"{h}: {lost[h]}" for h in names)
    return [
        f"{host}: member(s) {', '.join(names)} of the training group {group} are not in this run ({why}). "
        f"The training stage stops on every node and writes nothing, so no hostfile or known_hosts "
        f"loses them. Fix: bring {', '.join(names)} back and rerun, or leave them out on purpose with "
        f"-e '{{\"{EXCLUDE_VAR}\": [{', '.join(repr(n).replace(chr(39), chr(34)) for n in names)}]}}'."
    ]


def probe_unreachable(results):
    """``{node: message}`` from a looped, delegated ``ping`` (``ignore_unreachable``) registered result."""
    out = {}
    for r in (results or {}).get("results", []):
        if r.get("unreachable"):
            out[r["item"]] = task_result.reason(r.get("msg"))
    return out

