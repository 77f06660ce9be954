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

import posixpath
import re
import shlex

from ansible_collections.gpucluster.cluster.plugins.module_utils import container_toolkit, multi_nic, nccl, netstage
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


#: URL settings and the schemes the module that fetches each one takes (get_url: http, https, ftp,
#: file; apt's deb822 sources and keys: http, https).
URL_SCHEMES = {
    "nccl_net_plugin_url": ("http", "https", "ftp", "file"),
}
_URL_DEFAULT_SCHEMES = ("http", "https")
#: Node paths that must be absolute. A relative one is taken relative to the remote user's home by
#: some modules and as a Docker volume name by a bind mount, so it lands nowhere the stage reads.
_PATH_SUFFIXES = ("_path", "_dir", "_file", "_dropin", "_hostfile", "_conf_path", "_cdi_spec")
_NOT_PATHS = frozenset(("docker_log_max_file",))  # a count of log files
#: Docker's container-name rule (daemon/names: ``^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$``).
_CONTAINER_NAME = re.compile(r"^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+\Z")
#: Bind-mount modes Docker's volume parser takes (volume/mounts/linux_parser.go).
_VOLUME_MODES = frozenset(("ro", "rw", "z", "Z", "shared", "rshared", "slave", "rslave", "private", "rprivate",
                           "nocopy", "consistent", "cached", "delegated"))
#: Linux routing tables a table number must not take: unspec 0 and the reserved 253-255 (default,
#: main, local; iproute2's rt_tables).
_RESERVED_TABLES = frozenset((0, 253, 254, 255))


def check_urls(values):
    """URL settings (names ending in ``_url`` or ``_mirror``): a scheme the fetching module takes and
    a host; without one, get_url or apt fails on the node, apt for every source of the node."""
    from urllib.parse import urlsplit

    out = []
    for name, value in sorted(values.items()):
        if not name.endswith(("_url", "_mirror")) or not isinstance(value, str) or not value:
            continue
        schemes = URL_SCHEMES.get(name, _URL_DEFAULT_SCHEMES)
        parts = urlsplit(value)
        if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "file"):
            out.append(Problem(name, f"{value!r} is not a {'/'.join(schemes)} URL",
                               f"give the full URL with its scheme, e.g. https://{value.split('://')[-1].lstrip('/')}"))
    return out


def check_paths(values):
    """Node paths (names ending in ``_path``, ``_dir``, ``_file``, ...): absolute; sysctl files end in
    ``.conf`` (systemd-sysctl reads nothing else) and the GRUB drop-in in ``.cfg`` under
    /etc/default/grub.d (grub-mkconfig reads nothing else)."""
    out = []
    for name, value in sorted(values.items()):
        if not name.endswith(_PATH_SUFFIXES) or name in _NOT_PATHS or not isinstance(value, str) or not value:
            continue
        if not value.startswith("/"):
            example = ("/root/" + value[2:]) if value.startswith("~/") else "/" + value.lstrip("./")
            out.append(Problem(name, f"{value!r} is a relative path; the stage and the training container would look "
                               "for it in different places", f"give an absolute path, e.g. {example}"))
        elif name.endswith("_sysctl_file") and not value.endswith(".conf"):
            out.append(Problem(name, f"{value!r} does not end in .conf, so systemd-sysctl never reads it and the "
                               "settings are lost at reboot", "name it /etc/sysctl.d/<NN>-<name>.conf"))
        elif name == "hugepages_grub_dropin" and not (
                value.startswith("/etc/default/grub.d/") and value.endswith(".cfg")):
            out.append(Problem(name, f"{value!r} is not a .cfg file in /etc/default/grub.d, the only drop-ins "
                               "grub-mkconfig reads (the kernel would never get the hugepage arguments)",
                               "use /etc/default/grub.d/<NN>-<name>.cfg"))
    return out


def check_training_container(values):
    """The training container's settings Docker (or community.docker) would refuse when the
    training stage recreates the container, which leaves the node without one."""
    out = []
    name = values.get("training_image_container_name")
    if name is not None and not _CONTAINER_NAME.match(str(name)):
        out.append(Problem("training_image_container_name", f"{name!r} is not a Docker container name",
                           "use letters, digits and _.- (starting with a letter or digit), e.g. gpucluster-train"))
    gpus = values.get("training_image_gpus")
    if gpus is not None:
        try:
            container_toolkit.container_device_requests(str(gpus), "legacy")
        except ValueError as exc:
            out.append(Problem("training_image_gpus", str(exc).split(": ", 2)[-1],
                               'use all, a comma list of indices (0,1) or GPU-/MIG- UUIDs, or "" for none'))
    request = values.get("training_image_gpu_request", "legacy")  # only what the user set: null is a value
    if container_toolkit.mode_problem(request):
        out.append(Problem("training_image_gpu_request", container_toolkit.mode_problem(request),
                           "leave it unset (the nvidia_container_toolkit stage decides), or legacy / cdi"))
    shm = values.get("training_image_shm_size")
    if shm is not None and re.match(r"^0+(\.0+)?[bkmgBKMG]?$", str(shm)):
        out.append(Problem("training_image_shm_size", f"{shm!r} is no size: Docker falls back to 64 MiB of /dev/shm, "
                           "too little for NCCL's shared-memory transport", "use e.g. 32g"))
    stack = values.get("training_image_ulimit_stack")
    if stack is not None and str(stack).lstrip("-").isdigit() and int(stack) != -1 and int(stack) < 1048576:
        out.append(Problem("training_image_ulimit_stack", f"{stack!r} bytes of stack cannot run sshd, the container's "
                           "main process", "use 67108864 (the vendor's value) or -1"))
    env = values.get("training_image_env")
    if env is not None:
        if not isinstance(env, dict):
            out.append(Problem("training_image_env", f"{env!r} is not a mapping", "give e.g. {NCCL_DEBUG: INFO}"))
        else:
            for key, value in env.items():
                if not _ENV_NAME.match(str(key)):
                    out.append(Problem("training_image_env", f"{key!r} is not an environment variable name",
                                       "use letters, digits and _, not starting with a digit"))
                elif not isinstance(value, str):
                    out.append(Problem("training_image_env", f"{key}: {value!r} is not a string (Docker's API takes "
                                       "only strings)", f'quote it: {key}: "{value}"'))
    volumes = values.get("training_image_extra_volumes")
    for n, spec in enumerate(volumes if isinstance(volumes, list) else []):
        parts = str(spec).split(":")
        where = f"training_image_extra_volumes[{n}]"
        if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
            out.append(Problem(where, f"{spec!r} is not SRC:/absolute/destination[:MODE]",
                               "give e.g. /data:/data:ro (a host path or a volume name, then the container's path)"))
        elif len(parts) == 3 and not set(parts[2].split(",")) <= _VOLUME_MODES:
            out.append(Problem(where, f"{spec!r} has a mode Docker does not know ({parts[2]})",
                               "use ro or rw (optionally with z, Z or a propagation such as rslave)"))
    return out


def abs_path(path):
    """An absolute path as the kernel resolves it (``//data/``, ``/data/.`` and ``/data`` are
    ``/data``); ``''`` for a relative one."""
    text = str(path or "")
    return "/" + posixpath.normpath(text).lstrip("/") if text.startswith("/") else ""


def parse_mount(spec):
    """``(source, target, spec)`` of a Docker volume ``"src:dest[:mode]"``: ``source`` as written (a
    node path, or a named volume's name), ``target`` the container path by :func:`abs_path` (``''``
    when relative); ``None`` for a spec without both parts."""
    parts = str(spec).split(":")
    return (parts[0], abs_path(parts[1]), str(spec)) if len(parts) >= 2 else None


def duplicate_mounts(volumes):
    """Container paths that two of ``volumes`` ("src:dest[:mode]", the training container's whole
    list: the role's own mounts and ``training_image_extra_volumes``) mount at -> one message each,
    the paths compared as the kernel resolves them (``//data``, ``/data/`` and ``/data`` are one).
    Docker refuses the container ("Duplicate mount point"), after the old one is already removed."""
    seen = {}
    for mount in filter(None, map(parse_mount, volumes or ())):
        if mount[1]:
            seen.setdefault(mount[1], []).append(mount[2])
    return [f"{dest} is mounted twice ({', '.join(specs)})" for dest, specs in seen.items() if len(specs) > 1]


def check_network_mode(values, defaults=None):
    """``training_image_network_mode``: the training containers reach each other at the nodes'
    addresses - container_ssh's sshd listens there on its own port (no port is published), mpirun
    connects to it, and NCCL and Open MPI use the data NICs the nccl_env stage chose, which must
    be in the container. Only the node's network namespace gives that: ``host``, or
    ``container:<name>`` sharing the namespace of a container that has it. Docker's ``bridge``,
    ``none``, ``default`` or a user network - and a misspelt ``host``, which Docker takes for a
    network name - would leave every container unreachable after the training stage recreated it.
    Nor the training container's own name: Docker refuses to create a container that joins its
    own namespace (and the old one is gone by then)."""
    if "training_image_network_mode" not in values:
        return []
    mode = values["training_image_network_mode"]
    text = mode if isinstance(mode, str) else ""
    if text == "host":
        return []
    other = text.split(":", 1)[1] if text.startswith("container:") else ""
    own = values.get("training_image_container_name", (defaults or {}).get("training_image_container_name"))
    if other and _CONTAINER_NAME.match(other) and other.lstrip("/") == str(own or "").lstrip("/"):
        return [Problem("training_image_network_mode", f"{mode!r} names the training container itself "
                        f"(training_image_container_name), which cannot share its own network namespace: Docker "
                        f"would refuse to create it after the old container was removed",
                        "name the container that runs with host networking (container:<its name>), or leave it "
                        "unset (host, the vendor's --net=host)")]
    if other and _CONTAINER_NAME.match(other):
        return []
    why = {"bridge": "Docker's bridge network", "default": "Docker's bridge network", "none": "no network at all"}
    if text.startswith("container:"):
        return [Problem("training_image_network_mode", f"{mode!r} names no valid container to share the network of",
                        "give container:<name> with a Docker container name (letters, digits and _.-), or leave it "
                        "unset (host, the vendor's --net=host)")]
    said = why.get(text, f"the Docker network named {text!r}" if text else "no mode")
    return [Problem("training_image_network_mode", f"{mode!r} gives the training container {said}, not the node's: "
                    "its sshd (container_ssh_port) would not answer at the node's addresses and NCCL would not see "
                    "the data NICs", "leave it unset (host, the vendor's --net=host), or container:<name> to share "
                    "the network namespace of a container that runs with host networking")]


def check_container_command(values):
    """A ``training_image_command`` that leaves the container no command of its own runs the
    image's (Docker's ``Cmd`` when the create request has none): not the sshd on the cluster port
    (container_ssh) that mpirun reaches the other nodes' containers through. An empty word is
    passed to exec as an empty program name or argument."""
    if "training_image_command" not in values:
        return []
    command = values["training_image_command"]
    words = shlex.split(command) if isinstance(command, str) else command
    fix = "leave it unset (the container's sshd on container_ssh_port), or give the full command, one word per item"
    if not isinstance(words, list) or not words:
        return [Problem("training_image_command", f"{command!r} is no command: the container would run the image's "
                        "own command, not the sshd mpirun reaches it through", fix)]
    if any(not isinstance(w, str) or not w.strip() for w in words):
        return [Problem("training_image_command", f"{command!r} has an empty word", fix)]
    return []


#: Where NCCL reads its configuration file on its own (NCCL's environment documentation and
#: ``initEnv``: ``$HOME/.nccl.conf``, then ``/etc/nccl.conf``); root's or a user's home.
_NCCL_CONF = re.compile(r"^(?:/etc/nccl\.conf|/root/\.nccl\.conf|/home/[^/]+/\.nccl\.conf)$")


def check_nccl_conf_path(values):
    """``nccl_env_conf_path``: a file NCCL reads by itself. Any other file is written and never
    read (``NCCL_CONF_FILE`` would have to be in every job's own environment, which gpucluster
    does not set up: in ``nccl_env_extra`` it only reaches the file itself and the container)."""
    if "nccl_env_conf_path" not in values:
        return []
    path = values["nccl_env_conf_path"]
    text = path if isinstance(path, str) else ""
    if text.startswith("/") and _NCCL_CONF.match(posixpath.normpath(text)) and text == text.strip() \
            and not text.endswith("/"):
        return []
    if text and not text.startswith("/"):
        return []  # a relative path (or ~): check_paths says so
    if text != text.strip() or (text.endswith("/") and _NCCL_CONF.match(posixpath.normpath(text.strip()))):
        fix = f"write it without the trailing {'space' if text != text.strip() else '/'}: " \
              f"{posixpath.normpath(text.strip())}"
    else:
        fix = "leave it unset (/etc/nccl.conf, which NCCL reads on every node), or a user's own ~/.nccl.conf " \
              "(/root/.nccl.conf, /home/<user>/.nccl.conf)"
    return [Problem("nccl_env_conf_path", f"{path!r} is not a file NCCL reads (/etc/nccl.conf, or ~/.nccl.conf of "
                    "the user a job runs as): the settings would never reach NCCL", fix)]


def check_ssh_dir(values, defaults=None):
    """``training_image_ssh_dir`` defaults to the directory the container_ssh stage set up
    (``container_ssh_dir``, in the node contract); set to anything else, the container's sshd would
    read a configuration and keys that stage never wrote, and not start. ``defaults``: the spec
    defaults (``container_ssh_dir``'s, where the user left it unset)."""
    if "training_image_ssh_dir" not in values:
        return []
    mounted = values["training_image_ssh_dir"]
    where = values.get("container_ssh_dir", (defaults or {}).get("container_ssh_dir"))
    same = isinstance(mounted, str) and isinstance(where, str) and mounted.startswith("/") \
        and posixpath.normpath(mounted) == posixpath.normpath(where)
    if same:
        return []
    source = "container_ssh_dir" if "container_ssh_dir" in values else "container_ssh_dir's default"
    fix = (f"set container_ssh_dir: {mounted} instead (the container follows it), and leave training_image_ssh_dir "
           "unset") if isinstance(mounted, str) and mounted.startswith("/") else "leave training_image_ssh_dir unset"
    return [Problem("training_image_ssh_dir", f"{mounted!r} is not the directory the container_ssh stage sets up "
                    f"({where!r}, {source}): the container's sshd would find no configuration or keys there", fix)]


def check_numbers(values):
    """Counts and numbers whose type is right but whose value breaks what they feed."""
    out = []
    table = values.get("multi_nic_table_base")
    if table is not None and str(table).isdigit():
        hit = sorted(t for t in range(int(table), int(table) + 17) if t in _RESERVED_TABLES)
        if int(table) < 1 or hit:
            out.append(Problem("multi_nic_table_base", f"{table}: the NICs' tables (base + 1, + 2, ...) would reach "
                               f"the kernel's reserved table {hit[0] if hit else 0} (253 default, 254 main, 255 local)",
                               "use a base between 1 and 236, e.g. 100"))
    prio = values.get("multi_nic_rule_priority")
    if prio is not None and str(prio).isdigit() and not 1 <= int(prio) < 32766:
        out.append(Problem("multi_nic_rule_priority", f"{prio}: the rules would come after the main table's (32766), "
                           "so no packet ever reaches the NICs' tables", "use a priority below 32766, e.g. 1000"))
    for name in ("container_ssh_slots", "gpucluster_reboot_timeout"):
        value = values.get(name)
        if value is not None and str(value).lstrip("-").isdigit() and int(value) < 1:
            out.append(Problem(name, f"{value} is not a positive number", "give a whole number of at least 1"))
    for name in ("node_health_ecc_corrected_limit",):
        value = values.get(name)
        if value is not None and str(value).lstrip("-").isdigit() and int(value) < 0:
            out.append(Problem(name, f"{value} is negative: every GPU would be judged over the limit",
                               "give 0 or more"))
    options = values.get("hugepages_mount_options")
    for option in options if isinstance(options, list) else []:
        key, _, value = str(option).partition("=")
        if key in ("uid", "gid") and not value.isdigit():
            out.append(Problem("hugepages_mount_options",
                               f"{option!r}: hugetlbfs takes a numeric {key}, so the remount fails and "
                               "/dev/hugepages is left unmounted", f"give the number: {key}=$(id -{key[0]} ...)"))
        elif key == "mode" and not re.match(r"^[0-7]{3,4}$", value):
            out.append(Problem("hugepages_mount_options", f"{option!r} is not an octal mode", "give e.g. mode=1770"))
    spec = values.get("nvidia_container_toolkit_cdi_spec")
    if isinstance(spec, str) and spec.startswith("/"):
        opts = values.get("docker_daemon_options")
        dirs = ["/etc/cdi", "/var/run/cdi"] + list((opts if isinstance(opts, dict) else {}).get("cdi-spec-dirs") or [])
        if spec.rsplit("/", 1)[0].rstrip("/") not in [str(d).rstrip("/") for d in dirs]:
            out.append(Problem("nvidia_container_toolkit_cdi_spec", f"{spec!r} is outside the directories Docker reads "
                               f"CDI specs from ({', '.join(dirs)}): the GPU request would be unresolvable",
                               "put it in /etc/cdi, or add its directory to docker_daemon_options['cdi-spec-dirs']"))
    mtu = values.get("multi_nic_mtu")
    if mtu not in (None, 0, "0", "") and not (str(mtu).isdigit() and 68 <= int(mtu) <= 65535):
        out.append(Problem("multi_nic_mtu", f"{mtu!r} is outside 68-65535", "use e.g. 9000, or 0 to leave MTUs alone"))
    user = values.get("container_ssh_user")
    if user is not None and not re.match(r"^[a-z_][a-z0-9_-]*$", str(user)):
        out.append(Problem("container_ssh_user", f"{user!r} is not a user name sshd's AllowUsers and ssh_config's User "
                           "read as one", "use a POSIX user name, e.g. root or mpiuser"))
    prefix = values.get("multi_nic_networkd_prefix")
    if prefix is not None and not re.match(r"^[A-Za-z0-9._-]+$", str(prefix)):
        out.append(Problem("multi_nic_networkd_prefix", f"{prefix!r} is not a file-name prefix (the .network and .link "
                           "files would land in a missing directory or be split)", "use e.g. 10-gpucluster"))
    hcas = values.get("nccl_env_hcas")
    for entry in hcas if isinstance(hcas, list) else []:
        name, _, port = str(entry).lstrip("^=").partition(":")
        if not name or (port and not port.isdigit()):
            out.append(Problem("nccl_env_hcas", f"{entry!r} is not an HCA name with an optional port number",
                               "give e.g. [mlx5_0:1, mlx5_1:1]"))
    success = values.get("nccl_net_plugin_setup_success")
    if isinstance(success, str) and success:
        try:
            re.compile(success)
        except re.error as exc:
            out.append(Problem("nccl_net_plugin_setup_success", f"{success!r} is not a regular expression ({exc})",
                               "escape regex characters, e.g. setup ok \\("))
    return out


#: Resource ID formats of the providers' APIs: AWS EC2 IDs are a prefix and 8 or 17 hex digits
#: (EC2 User Guide, "Resource IDs"); Tencent Cloud's a prefix and 8 lowercase letters or digits.
_CLOUD_IDS = {
    "aws": {"cloud_eni_instance_id": r"i-([0-9a-f]{8}|[0-9a-f]{17})",
            "cloud_eni_subnet_id": r"subnet-([0-9a-f]{8}|[0-9a-f]{17})",
            "cloud_eni_security_groups": r"sg-([0-9a-f]{8}|[0-9a-f]{17})",
            "cloud_eni_region": r"[a-z]{2}(-[a-z]+)+-[0-9]+"},
    "tencentcloud": {"cloud_eni_instance_id": r"ins-[a-z0-9]{8}", "cloud_eni_subnet_id": r"subnet-[a-z0-9]{8}",
                     "cloud_eni_security_groups": r"sg-[a-z0-9]{8}", "cloud_eni_region": r"[a-z]{2,3}(-[a-z0-9]+)+"},
}


def check_cloud_eni(values):
    """The ENI settings the cloud or the network stage would refuse only after ENIs were created and
    attached: IDs and region in the provider's format, the subnet in CIDR form with the gateway in
    it (``netstage.eni_interfaces``, the stage's own reader), the MTU, the first device index."""
    provider = values.get("cloud_eni_provider")
    if not provider:
        return []
    out = []
    for name, pattern in _CLOUD_IDS.get(str(provider), {}).items():
        value = values.get(name)
        for item in (value if isinstance(value, list) else [value] if value else []):
            if not re.fullmatch(pattern, str(item)):
                what = {"cloud_eni_instance_id": "instance ID", "cloud_eni_subnet_id": "subnet ID",
                        "cloud_eni_security_groups": "security group ID", "cloud_eni_region": "region"}[name]
                out.append(Problem(name, f"{item!r} is not {provider}'s form of a {what} (expected {pattern})",
                                   "copy the ID or region from the cloud console or CLI (a group's ID, not its name)"))
    cidr = values.get("cloud_eni_subnet_cidr")
    if cidr:
        try:
            netstage.eni_interfaces([], cidr, values.get("cloud_eni_gateway") or None)
        except (netstage.NetStageError, ValueError) as exc:
            out.append(Problem("cloud_eni_subnet_cidr" if "gateway" not in str(exc) else "cloud_eni_gateway", str(exc),
                               "give the subnet as the cloud shows it (e.g. 10.0.64.0/20) and a gateway inside it"))
    mtu = values.get("cloud_eni_mtu")
    if mtu not in (None, 0, "0", "") and not (str(mtu).isdigit() and 68 <= int(mtu) <= 9001):
        out.append(Problem("cloud_eni_mtu", f"{mtu!r} is outside 68-9001 (the largest MTU a cloud ENI carries)",
                           "use 9001 (AWS jumbo frames), 1500, or 0 to leave it alone"))
    start = values.get("cloud_eni_device_index_start")
    if start is not None and str(start).lstrip("-").isdigit() and int(start) < 1:
        out.append(Problem("cloud_eni_device_index_start", f"{start}: device index 0 is the instance's primary ENI",
                           "start at 1"))
    return out


def check_secondary_nics(specs, facts, nics_may_appear=False, variable="multi_nic_interfaces", mtu=0):
    """The secondary NICs resolved against the node as the multi_nic stage resolves them
    (``netstage.resolve_secondary_nics``: by name or MAC, not the primary NIC, no NIC or address
    twice, an address to give it); skipped where a stage of this run attaches NICs (cloud ENIs)."""
    if nics_may_appear or not specs:
        return []
    try:
        # an MTU out of range is refused as multi_nic_mtu (check_numbers), not once per NIC
        valid_mtu = int(mtu) if str(mtu or 0).isdigit() and 68 <= int(mtu) <= 65535 else 0
        netstage.resolve_secondary_nics(specs, facts, valid_mtu)
    except netstage.NetStageError as exc:
        where, sep, text = str(exc).partition(": ")
        if not (sep and where.startswith(variable)):
            where, text = variable, str(exc)
        return [Problem(where, text, "name NICs the node has (by name or MAC), or set the list per host")]
    return []


def node_nic_names(facts):
    """The node's interface names from ``ansible_facts``."""
    return [i["name"] for i in multi_nic.interfaces_from_ansible_facts(facts or {})]


def stage_problems(values, facts=None, gpus=0, defaults=None):
    """Every check above over one host's set values (``values``: name -> value, only what the
    user set) and its facts -> list of ``Problem``. ``defaults``: the stages' spec defaults, for
    the checks of one setting against another the user left unset."""
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
        out += check_secondary_nics(values["multi_nic_interfaces"], facts, nics_may_appear,
                                    mtu=values.get("multi_nic_mtu", 0))
    out += check_urls(values) + check_paths(values) + check_training_container(values) + check_numbers(values)
    out += check_container_command(values) + check_nccl_conf_path(values) + check_ssh_dir(values, defaults)
    out += check_network_mode(values, defaults)
    out += check_cloud_eni(values)
    return out
