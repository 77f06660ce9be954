"""Checks of the stages' settings against the node and each other, before any stage runs.

Preflight calls these (``plugins/filter/inventory.py`` ``inventory_errors``) on the values the
user set, with the facts preflight gathered for the plan, so that a setting a later stage would
refuse - or, worse, apply and break the node with - stops the run while every node is still as it
was. Each check returns ``inventory.Problem``s (variable, what is wrong with the value, the fix);
preflight prefixes the host. Where a stage has its own reader of the same value (the secondary
NICs' resolution, NCCL_SOCKET_IFNAME's semantics), the check calls it rather than a copy.

What a check can know at preflight: the node as it is before the run. A NIC that a stage of this
run will create (a cloud ENI, ``cloud_eni_provider`` set) is not there yet, so names and MACs are
only checked against the node when no stage adds NICs.

Sources: capability names, capabilities(7) (Linux 5.9: 41 capabilities, CAP_CHECKPOINT_RESTORE
the last) and Docker's ``--cap-add`` (``CAP_`` prefix optional, any case, ``ALL``);
NCCL_SOCKET_IFNAME's grammar, NCCL's environment variable documentation (``^`` excludes, ``=``
matches exactly, comma-separated prefixes).
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils import multi_nic, nccl, netstage
from ansible_collections.gpucluster.cluster.plugins.module_utils.inventory import Problem

#: capabilities(7), in number order (CAP_CHOWN = 0 .. CAP_CHECKPOINT_RESTORE = 40).
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
)

#: Environment variable names (POSIX: letters, digits, underscore; not starting with a digit).
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: NCCL variables whose value is an interface or HCA list in NCCL_SOCKET_IFNAME's grammar.
_IFNAME_VARS = ("NCCL_SOCKET_IFNAME",)


def _names(value):
    return [str(n) for n in value] if isinstance(value, (list, tuple)) else None


def check_capabilities(caps, variable="training_image_capabilities"):
    """Names Docker's ``--cap-add`` would refuse ("unknown capability"): it recreates the training
    container with them, so a bad one leaves every node without its container."""
    names = _names(caps)
    if names is None:
        return [Problem(variable, f"{caps!r} is not a list of capability names",
                        "give a list, e.g. [SYS_PTRACE, IPC_LOCK]")]
    bad = [n for n in names if n.upper() != "ALL" and re.sub(r"^CAP_", "", n.upper()) not in CAPABILITIES]
    if not bad:
        return []
    return [Problem(
        variable, f"{', '.join(repr(n) for n in bad)} {'is not a' if len(bad) == 1 else 'are not'} Linux "
        "capabilit" + ("y" if len(bad) == 1 else "ies") + " (Docker would refuse to create the training container)",
        "use names from capabilities(7) with or without CAP_, e.g. SYS_PTRACE, IPC_LOCK, NET_ADMIN")]


def check_registry_login(username, password):
    """A registry user without a password: docker login would fail on every node, and Ansible
    hides the value (no_log), so the refusal comes here with the variable named."""
    user = "" if username is None else str(username)
    secret = "" if password is None else str(password)
    if user and not secret:
        return [Problem(
            "training_image_registry_password", f"is empty while training_image_registry_username is {user!r}",
            "put the password in the vault (ansible-vault encrypt_string) as training_image_registry_password, "
            "or unset training_image_registry_username for a registry without login")]
    if secret and not user:
        return [Problem(
            "training_image_registry_username", "is empty while training_image_registry_password is set",
            "set training_image_registry_username to the registry user the password belongs to")]
    return []


def check_gpudirect_mode(mode, gpus):
    """``gpudirect_mode: required`` on a node without an NVIDIA GPU on its PCI bus can never be met."""
    if str(mode) == "required" and int(gpus or 0) == 0:
        return [Problem(
            "gpudirect_mode",
            "required, but this node has no NVIDIA GPU on its PCI bus, so GPUDirect RDMA cannot work here",
            "set gpudirect_mode: auto (configured where a GPU and an RDMA device are present) or off for this host")]
    return []


def check_data_interfaces(value, node_nics, nics_may_appear=False, variable="nccl_env_data_interfaces"):
    """NIC names for NCCL and Open MPI: names, never NCCL's own list syntax (``^docker0``, ``=eth0``),
    never lo/docker*/veth*/virbr*, and on the node unless a stage of this run adds NICs."""
    names = _names(value)
    if names is None:
        return [Problem(variable, f"{value!r} is not a list of NIC names", "give a list, e.g. [ens1f0, ens2f0]")]
    out = []
    syntax = [n for n in names if n[:1] in "^=" or "," in n or ":" in n]
    if syntax:
        out.append(Problem(
            variable, f"{', '.join(repr(n) for n in syntax)}: this list names the data NICs to use; "
            "'^', '=', ',' and ':' are NCCL_SOCKET_IFNAME syntax, and an exclusion alone leaves NCCL free to pick "
            "lo or a Docker bridge",
            "name the data NICs, e.g. [ens1f0], or leave it unset: every up NIC with an IPv4 address is used, "
            "never lo, docker*, veth* or virbr*"))
    never = [n for n in names if n not in syntax and multi_nic.never_used(n)]
    if never:
        out.append(Problem(
            variable, f"{', '.join(repr(n) for n in never)} never carr{'ies' if len(never) == 1 else 'y'} NCCL or MPI "
            "traffic (loopback, Docker bridge, veth or libvirt bridge: peers cannot reach it)",
            "name the node's data NICs instead"))
    if not nics_may_appear:
        missing = [n for n in names if n not in syntax and n not in never and n not in node_nics]
        if missing:
            out.append(Problem(
                variable, f"{', '.join(repr(n) for n in missing)} {'is' if len(missing) == 1 else 'are'} not on this "
                f"node (its NICs: {', '.join(sorted(node_nics)) or 'none'})",
                "correct the name, or set it per host where NIC names differ"))
    return out


def check_nccl_extra(extra, variable="nccl_env_extra"):
    """Extra NCCL variables: a mapping of variable names to scalar values; an interface list
    (NCCL_SOCKET_IFNAME) is read as NCCL reads it (``nccl.check_socket_ifname``), since it goes to
    /etc/nccl.conf and the training container over the one nccl_env computed."""
    if not isinstance(extra, dict):
        return [Problem(variable, f"{extra!r} is not a mapping of NCCL variables", "give e.g. {NCCL_DEBUG: WARN}")]
    out = []
    for key, value in extra.items():
        if not _ENV_NAME.match(str(key)):
            out.append(Problem(variable, f"{key!r} is not an environment variable name", "use names like NCCL_DEBUG"))
        elif isinstance(value, (dict, list, tuple)) or value is None:
            out.append(Problem(variable, f"{key}: {value!r} is not a single value",
                               f"give {key} a string or number, e.g. {key}: \"1\""))
        elif key in _IFNAME_VARS:
            findings = nccl.check_socket_ifname(str(value))
            if findings:
                out.append(Problem(
                    variable, f"{key}={value}: {'; '.join(findings)}",
                    "leave NCCL_SOCKET_IFNAME to nccl_env (it lists the data NICs exactly), or name the NICs to use "
                    "in nccl_env_data_interfaces"))
    return out


def check_nccl_values(values):
    """nccl_env's settings that need no node (``nccl.check_values``, which the stage's render runs
    too): the socket transport's threads against NCCL's limits, the plugin name, the GDR level."""
    names = ("nccl_env_gdr_level", "nccl_env_net_plugin", "nccl_env_socket_nthreads", "nccl_env_nsocks_perthread")
    given = {n: values.get(n) for n in names}
    if not any(v not in (None, "", 0) for v in given.values()):
        return []
    try:
        nccl.check_values(given["nccl_env_gdr_level"] or None, given["nccl_env_net_plugin"] or None,
                          given["nccl_env_socket_nthreads"] or None, given["nccl_env_nsocks_perthread"] or None)
    except nccl.NcclEnvError as exc:
        text = str(exc)
        named = {"GDR_LEVEL": "nccl_env_gdr_level", "NET_PLUGIN": "nccl_env_net_plugin",
                 "NTHREADS": "nccl_env_socket_nthreads", "NSOCKS": "nccl_env_nsocks_perthread"}
        variable = next((n for key, n in named.items() if key in text), "nccl_env_socket_nthreads")
        return [Problem(variable, text, "use a value NCCL accepts (roles/nccl_env/README.md), or leave it unset")]
    return []


def check_secondary_nics(specs, facts, nics_may_appear=False, variable="multi_nic_interfaces"):
    """The secondary NICs resolved against the node as the multi_nic stage resolves them
    (``netstage.resolve_secondary_nics``: by name or MAC, not the primary NIC, no NIC or address
    twice, an address to give it); skipped where a stage of this run attaches NICs (cloud ENIs)."""
    if nics_may_appear or not specs:
        return []
    try:
        netstage.resolve_secondary_nics(specs, facts)
    except netstage.NetStageError as exc:
        where, sep, text = str(exc).partition(": ")
        if not (sep and where.startswith(variable)):
            where, text = variable, str(exc)
        return [Problem(where, text, "name NICs the node has (by name or MAC), or set the list per host")]
    return []


def node_nic_names(facts):
    """The node's interface names from ``ansible_facts``."""
    return [i["name"] for i in multi_nic.interfaces_from_ansible_facts(facts or {})]


def stage_problems(values, facts=None, gpus=0):
    """Every check above over one host's set values (``values``: name -> value, only what the
    user set) and its facts -> list of ``Problem``."""
    facts = facts or {}
    nics_may_appear = bool(values.get("cloud_eni_provider"))
    out = []
    if "training_image_capabilities" in values:
        out += check_capabilities(values["training_image_capabilities"])
    if "training_image_registry_username" in values or "training_image_registry_password" in values:
        out += check_registry_login(values.get("training_image_registry_username"),
                                    values.get("training_image_registry_password"))
    if "gpudirect_mode" in values:
        out += check_gpudirect_mode(values["gpudirect_mode"], gpus)
    if "nccl_env_data_interfaces" in values:
        out += check_data_interfaces(values["nccl_env_data_interfaces"], node_nic_names(facts), nics_may_appear)
    if "nccl_env_extra" in values:
        out += check_nccl_extra(values["nccl_env_extra"])
    out += check_nccl_values(values)
    if "multi_nic_interfaces" in values:
        out += check_secondary_nics(values["multi_nic_interfaces"], facts, nics_may_appear)
    return out
