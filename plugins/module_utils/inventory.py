"""Checks of inventory values that types alone cannot express.

Each check returns a list of ``Problem``s naming the variable, what is wrong and the fix;
the preflight role prefixes the host. They run before any stage changes a node, so a bad
value never leaves a half-converged cluster.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import namedtuple
from pathlib import Path

from ansible.module_utils.parsing.convert_bool import boolean

Problem = namedtuple("Problem", "variable message fix")

#: What preflight's vars lookups return for a name the user did not set (``__preflight_unset`` in
#: roles/preflight/vars/main.yml, the one YAML spelling): the checks skip it.
UNSET = "__gpucluster_unset__"

# Docker image reference grammar (distribution/reference, reference.go):
#   reference := name [ ":" tag ] [ "@" digest ]
#   name      := [domain '/'] path-component ['/' path-component]*
#   domain    := host [':' port]; path components are lowercase alnum joined by [._-] separators.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:localhost|{_LABEL}(?:\.{_LABEL})*)(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
# Docker's --shm-size: a number of bytes with an optional unit b, k, m or g (docker run docs).
SIZE = re.compile(r"^[0-9]+(?:\.[0-9]+)?[bkmgBKMG]?$")


def parse_image_ref(ref):
    """Split an image reference into (domain, path, tag, digest); ValueError if malformed.

    A first component counts as a registry host when it has a '.' or ':' or is localhost
    (the Docker CLI rule); ``domain`` is None for Docker Hub names.
    """
    if not isinstance(ref, str) or not ref or len(ref) > 255:
        raise ValueError("empty or longer than 255 characters")
    m = IMAGE_REF.match(ref)
    if not m:
        raise ValueError("not of the form [registry[:port]/]name[:tag][@sha256:digest] (lowercase name)")
    domain = m.group("domain")
    path = m.group("path")
    if domain and not ("." in domain or ":" in domain or domain == "localhost"):
        if not re.match("^" + _COMPONENT + "$", domain):
            raise ValueError(f"{domain!r} is neither a registry host nor a lowercase repository name")
        path = domain + "/" + path
        domain = None
    return domain, path, m.group("tag"), m.group("digest")


def check_training_image(ref, shm_size, memlock, privileged, rdma_devices=0):
    out = []
    try:
        parse_image_ref(ref)
    except ValueError as exc:
        out.append(Problem(
            "training_image_ref", f"{ref!r} is not an image reference: {exc}",
            "set it to e.g. registry.example.com:5000/team/train:1.0",
        ))
    if not SIZE.match(str(shm_size)):
        out.append(Problem(
            "training_image_shm_size", f"{shm_size!r} is not a size",
            "use a number of bytes with an optional b/k/m/g unit, e.g. 32g",
        ))
    try:
        memlock_value = int(memlock)
    except (TypeError, ValueError):
        memlock_value = None
    if memlock_value is None or (memlock_value != -1 and memlock_value < 0):
        out.append(Problem(
            "training_image_ulimit_memlock", f"{memlock!r} is not -1 (unlimited) or a byte count",
            "use -1",
        ))
    elif rdma_devices and memlock_value != -1 and not privileged:
        # fixtures/mpi-containers/C36: 64 KiB memlock -> ibv_create_cq() ENOMEM.
        out.append(Problem(
            "training_image_ulimit_memlock",
            f"memlock is bounded at {memlock_value} bytes on a node with {rdma_devices} RDMA device(s); "
            "verbs cannot register memory (ibv_create_cq: Cannot allocate memory)",
            "use -1 (unlimited)",
        ))
    return out


def check_ssh_port(port, network_mode="host", node_ssh_port=22):
    try:
        value = int(port)
    except (TypeError, ValueError):
        return [Problem("container_ssh_port", f"{port!r} is not a port number", "use an integer 1-65535, e.g. 2222")]
    if not 1 <= value <= 65535:
        return [Problem("container_ssh_port", f"{value} is out of range", "use an integer 1-65535, e.g. 2222")]
    if network_mode == "host" and value == int(node_ssh_port):
        # fixtures/mpi-containers/C34: mpirun lands on the node's sshd -> "orted: No such file".
        return [Problem(
            "container_ssh_port",
            f"{value} is the node's own sshd port; with host networking mpirun would reach the node, not the container",
            "use a port of its own, e.g. 2222",
        )]
    return []


def check_gpus(gpu_count, require_gpu):
    # -e preflight_require_gpu=false arrives as the string "false": read it as Ansible does.
    try:
        require_gpu = boolean(require_gpu, strict=True)
    except TypeError:
        return [Problem("preflight_require_gpu", f"{require_gpu!r} is not a boolean", "use true or false")]
    if require_gpu and int(gpu_count) == 0:
        return [Problem(
            "preflight_require_gpu",
            "no NVIDIA GPU found on this node (lspci shows no device of vendor 10de)",
            "check the node is a GPU node; for a GPU-less node set preflight_require_gpu: false explicitly",
        )]
    return []


def format_problems(host, problems):
    """One message per problem: '<host>: <variable>: <what>. Fix: <fix>.'"""
    return [f"{host}: {p.variable}: {p.message}. Fix: {p.fix}." for p in problems]


# --- Variables that look like gpucluster settings but are none --------------------------
# A misspelt setting (hugepage_count, traning_image_ref, docker_daemon_option) is otherwise
# accepted silently: the role runs on its default and nothing says why.

#: Names Ansible itself puts among a host's variables (magic variables, facts as vars).
ANSIBLE_PREFIXES = ("ansible_", "inventory_", "__", "discovered_interpreter_", "molecule_")
ANSIBLE_NAMES = frozenset({
    "group_names", "groups", "hostvars", "omit", "playbook_dir", "play_hosts", "role_name", "role_names",
    "role_path", "role_uuid", "environment", "vars", "gather_subset", "module_setup",
})
#: Similarity (difflib ratio) above which an unknown name counts as a misspelling of a real one,
#: even without a known prefix: hugepage_count / hugepages_count is 0.97, container_ssh_prot /
#: container_ssh_port 0.94; unrelated names of other software stay well below.
CLOSE = 0.9
_NAME = re.compile(r"(?<![A-Za-z0-9_])[a-z][a-z0-9_]*")
_COMMENT = re.compile(r"\{#.*?#\}|(?:^|(?<=\s))#[^\n]*", re.S | re.M)


def known_settings(spec_options, texts=()):
    """Every name gpucluster reads or writes: the roles' argument-spec options (``spec_options``:
    names) plus every identifier in ``texts`` (the roles' tasks, vars, templates and the
    playbooks: cluster-wide settings like gpucluster_allow_reboot, the facts stages publish)."""
    known = set(spec_options)
    for text in texts:
        # Comments name examples and misspellings; only code counts.
        known.update(_NAME.findall(_COMMENT.sub("", text)))
    return known


def setting_suspects(names, known, prefixes, ignore=()):
    """Names among ``names`` (a host's variables) that look like a gpucluster setting but are none:
    a known prefix (``<role>_``, ``gpucluster_``) or within CLOSE of a known option. Sorted."""
    out = []
    for name in names:
        if (not isinstance(name, str) or name in known or name in ignore or name in ANSIBLE_NAMES
                or name.startswith(ANSIBLE_PREFIXES)):
            continue
        if name.startswith(tuple(f"{p}_" for p in prefixes)) or _closest(name, known, CLOSE):
            out.append(name)
    return sorted(out)


def _closest(name, known, cutoff):
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return match[0] if match else None


def check_setting_typos(values, options, prefixes):
    """A Problem per suspect (``values``: name -> value), naming the closest real option of
    ``options`` (the argument-spec options: the settings a user may set)."""
    out = []
    for name in sorted(values):
        closest = _closest(name, options, 0.6)
        value = values[name]
        shown = value if isinstance(value, (int, float, bool)) else repr(value)
        if closest:
            out.append(Problem(
                name, f"is not a gpucluster setting (value {shown}); did you mean {closest}",
                f"rename it to {closest} (or remove it; a variable of your own by this name goes in "
                "preflight_ignore_variables)"))
        else:
            out.append(Problem(
                name, f"is not a gpucluster setting (value {shown}), yet it carries the prefix of one "
                f"({', '.join(p for p in prefixes if name.startswith(p + '_'))}_)",
                "remove it, or look up the setting in the role's README; a variable of your own by this name "
                "goes in preflight_ignore_variables"))
    return out


def _safe_load(text):
    """YAML ``text`` through libyaml where PyYAML has it (CSafeLoader, about ten times faster: the
    specs are read in a forked worker per task, where no cache survives), else the pure loader."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 a safe loader


@functools.lru_cache(maxsize=8)
def load_role_specs(root, roles):
    """``{role: options}`` of the ``main`` entry point of each role's meta/argument_specs.yml."""
    out = {}
    for role in roles:
        spec = _safe_load((Path(root) / "roles" / role / "meta" / "argument_specs.yml").read_text()) or {}
        out[role] = ((spec.get("argument_specs") or {}).get("main") or {}).get("options") or {}
    return out


def _spec_fix(name, option, role):
    if option.get("choices"):
        want = "one of " + ", ".join(str(c) for c in option["choices"])
    else:
        kind = option.get("type", "str")
        want = {"int": "a whole number", "bool": "true or false", "str": "a string", "list": "a list",
                "dict": "a mapping", "float": "a number", "path": "a path", "raw": "a value"}.get(kind, f"a {kind}")
        if kind == "list" and option.get("elements"):
            want += f" of {option['elements']}"
    about = str(option.get("description") or "").split(". ")[0].strip().rstrip(".")
    return f"give {name} {want} ({role}: {about})" if about else f"give {name} {want} (role {role})"


def spec_problems(values, specs):
    """Each stage's argument spec against the values the user set (``values``: name -> value) ->
    ``Problem``s naming the variable, its value, what the spec wants and the option's own
    description; the same validator Ansible's ``validate_argument_spec`` runs
    (``ArgumentSpecValidator``), for every stage at once."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    out = []
    for role, options in specs.items():
        provided = {k: v for k, v in values.items() if k in options}
        result = ArgumentSpecValidator(options).validate(provided)
        for message in result.error_messages:
            for name, value in provided.items():  # a secret's value never reaches the output
                if options[name].get("no_log") and str(value):
                    message = message.replace(str(value), "********")
            name = next((n for n in sorted(options, key=len, reverse=True)
                         if re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message)), None)
            if name is None:
                out.append(Problem(role, message, f"see roles/{role}/meta/argument_specs.yml"))
                continue
            shown = ("not set" if name not in provided else
                     "(a secret, not shown)" if options[name].get("no_log") else repr(provided[name]))
            out.append(Problem(name, f"{shown}: refused by the {role} stage's argument spec ({message})",
                               _spec_fix(name, options[name], role)))
    return out


@functools.lru_cache(maxsize=4)
def load_known_settings(root):
    """``(options, known, prefixes)`` of the checkout or installed collection at ``root``: the
    argument-spec options of every role, every name the roles and playbooks use
    (known_settings), and the prefixes of settings (the role names and ``gpucluster``)."""
    root = Path(root)
    options = set()
    for spec in sorted(root.glob("roles/*/meta/argument_specs.yml")):
        for entry in (_safe_load(spec.read_text()) or {}).get("argument_specs", {}).values():
            options.update((entry or {}).get("options") or {})
    texts = [p.read_text() for pattern in ("roles/*/tasks/*.yml", "roles/*/handlers/*.yml", "roles/*/vars/*.yml",
                                           "roles/*/defaults/*.yml", "roles/*/templates/*.j2", "playbooks/**/*.yml")
             for p in sorted(root.glob(pattern))]
    prefixes = sorted({p.parent.name for p in root.glob("roles/*/tasks")} | {"gpucluster"})
    return tuple(sorted(options)), frozenset(known_settings(options, texts)), tuple(prefixes)
