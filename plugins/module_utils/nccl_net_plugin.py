"""NCCL's external network plugin, read from an ``NCCL_DEBUG=INFO`` log: one net-plugin state.

Which plugin was requested (``NCCL_NET_PLUGIN``, ``NCCL_NET``), which library NCCL opened,
which ``ncclNetPlugin_vN`` symbol it found (or why it gave up), and which network NCCL ended
up using. Stdlib only, Python 3.8+ (managed nodes and the controller).

Grammar (the ``INFO``/``WARN`` format strings of NVIDIA/nccl ``src/init.cc``, ``src/net.cc``,
``src/plugin/net.cc`` and ``src/plugin/plugin_open.cc``, read at tags v2.4.8 .. v2.27.7):

- every line is ``<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <message>`` (``NCCL WARN`` for
  warnings); ``NCCL version <x.y.z>[+cudaX.Y]`` is printed once by rank 0, without a prefix up
  to 2.21 and behind it from 2.22; a launcher may put its own prefix before each line (Open
  MPI's ``--tag-output`` ``[1,0]<stdout>:``, horovodrun's ``[0]<stdout>:``, pdsh's ``host: ``,
  ``srun --label``'s ``0: ``);
- 2.4 .. 2.12: ``NET/Plugin : No plugin found (libnccl-net.so)[, using internal
  implementation]``, ``NET/Plugin : Plugin load returned <errno> : <dlerror>.``,
  ``Plugin name set by env to libnccl-net-<X>.so`` (2.11 .. 2.20, without the tag), ``NET/Plugin: Failed to find
  ncclNetPlugin_v<N> symbol.``; a loaded plugin shows only as ``Using network <name>``;
- 2.13 .. 2.22: ``NET/Plugin: Loaded net plugin <name> (v<N>)``, ``Loaded coll plugin <name>
  (v<N>)``, the fallback chain ``Failed to find ncclNetPlugin_v<N> symbol.`` (tried from the
  newest API down), ``Failed to find ncclNetPlugin symbol (v4 or v5).`` (2.13 .. 2.18) and
  ``Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not
  supported.`` (2.19+) - both printed only after a successful dlopen; 2.18: ``NET/Plugin :
  Plugin load (<lib>) returned <errno> : <dlerror>`` and ``No plugin found, using internal
  implementation``; 2.19/2.20: ``NET/Plugin : dlerror=<text> No plugin found (<lib>), using
  internal implementation``; 2.21: ``NET/Plugin: Plugin load returned <errno> : <dlerror> when
  loading <lib>``, ``NET/Plugin: No plugin found (<lib>)``, ``Using internal network plugin.``;
- 2.23 .. 2.27: ``NET/Plugin: Could not find: <lib> [<lib>]. Using internal network plugin.``
  (``... internal net plugin.`` from 2.26)
  (every name that gave ENOENT), ``NET/Plugin: <dlerror text>`` for any other dlopen failure
  (missing dependency, undefined symbol), ``NET/Plugin: Plugin name set by env to <lib>``,
  ``Loaded collnet plugin`` (2.23+ spelling), ``Closing net plugin '<name>'``; 2.27:
  ``Initialized NET plugin <name>``, ``Assigned NET plugin <name> to comm``, ``WARN Failed to
  initialize any NET plugin``;
- all versions: ``Using network <IB|Socket|plugin name>`` (init.cc), ``Error: network <X> not
  found.`` (WARN, NCCL_NET names a network that no plugin offers), ``<VAR> set by environment
  to <value>`` (2.20+ ncclGetEnv), HPC-X's plugin prints ``Plugin Path : <path>`` and ``P2P
  plugin <name>`` (nccl-rdma-sharp-plugins).

Classes (``cls``): ``PLUGIN_LOADED``, ``PLUGIN_LOADED_OLDER_API`` (a newer symbol was missing,
an older one loaded: the compat path, not a failure - fixture N01), ``FOUND_BUT_INCOMPATIBLE``
(library opened, no supported symbol, NCCL unloads it and uses its internal transports - fixture
N02; the maintainer on NVIDIA/nccl #1292: "not indicative of a failure"), ``PLUGIN_NOT_FOUND``
(no library: internal transports), ``INTERNAL_NETWORK`` (``Using network IB|Socket`` without
any loader line: the log does not say why), ``PLUGIN_LOAD_ERROR`` (dlopen failed for another reason),
``NET_NOT_FOUND``, ``NO_NET_INITIALIZED``, ``UNKNOWN`` (the log stops before a decisive line).
Severity ``ok``/``warn``/``fail``: not finding or not using a plugin is ``ok`` unless a plugin
is expected (``expect_plugin``, or ``NCCL_NET_PLUGIN`` in the log), then ``fail``.

A ``NET/Plugin`` line that starts like one of the messages above but does not complete it
(a cut paste) raises :class:`ParseError` naming the line: never a guessed plugin name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import (
    ParseError,
    shorten,
    split_lines,
    strip_launcher_prefix,
)

INTERNAL_NETWORKS = ("IB", "Socket")

# NCCL's own prefix, found after whatever a launcher or a log collector put before it (a label
# like pdsh's ``host: ``, srun --label's ``0: ``, a timestamp); Open MPI's and horovodrun's
# bracketed prefixes are stripped first (parsing.strip_launcher_prefix).
_PREFIX = re.compile(r"(?:^|(?<=[\s:\]>]))(?P<host>[^\s:\[\]<>]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\S+:\d+ )?NCCL (?P<lvl>INFO|WARN)(?: |$)")  # noqa: E501
_BARE = re.compile(r"^NCCL (?P<lvl>INFO|WARN) ")
_VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+(?:\+cuda\d+\.\d+)?)$")
_VERSION_START = re.compile(r"^NCCL version\b")
_PLUGIN = re.compile(r"^NET/Plugin ?: ?(.*)$")

_LOADED = re.compile(r"^Loaded (net|coll|collnet) plugin (.+) \(v(\d+)\)$")
_SYMBOL = re.compile(r"^Failed to find nccl(Net|CollNet)Plugin_v(\d+) symbol\.$")
_NO_SYMBOL = re.compile(r"^Failed to find nccl(Net|CollNet)Plugin symbol \((?:v4 or v5|>= v5)\)\.")
_NOT_FOUND = re.compile(r"^(?:dlerror=(?P<err>.*?) )?No plugin found(?: \((?P<lib>[^)]+)\))?(?:, using internal implementation)?\.?$")  # noqa: E501
_LOAD_RET = re.compile(r"^Plugin load(?: \((?P<lib>[^)]+)\))? returned (?P<errno>\d+) : (?P<err>.*?)(?:\.| when loading (?P<lib2>\S+))?$")  # noqa: E501
_RECENT_RET = re.compile(r"^Most recent plugin load returned (?P<errno>\d+) : (?P<err>.*?)\. All attempts to load '(?P<lib>[^']*)' also failed\.$")  # noqa: E501
_COULD_NOT = re.compile(r"^Could not find:(?P<libs>(?: \S+?)+?)\.(?: Using internal (?:network|net) plugin\.)?$")
_ENV_NAME = re.compile(r"^Plugin name set by env to (\S+)$")
_INTERNAL = "Using internal network plugin."
_CLOSING = re.compile(r"^Closing (?:net|coll|collnet) plugin '[^']*'$")
# Fixed starts of the messages above: a line that is a proper prefix of one was cut.
_STARTS = ("Loaded net plugin ", "Loaded coll plugin ", "Loaded collnet plugin ", "Failed to find ncclNetPlugin",
           "Failed to find ncclCollNetPlugin", "No plugin found", "Plugin load", "Could not find:",
           "Plugin name set by env to ", _INTERNAL, "Closing ", "dlerror=", "Most recent plugin load returned ")

_USING_NET = re.compile(r"^Using network (\S.*?)$")
_INIT_NET = re.compile(r"^(Initialized|Assigned) NET plugin (\S.*?)(?: to comm)?$")
_NET_NOT_FOUND = re.compile(r"^Error: network (.*?) not found\.$")
_ENV_SET = re.compile(r"^(NCCL_\w+) set by environment to (.*)$")
_PLUGIN_PATH = re.compile(r"^Plugin Path ?: ?(\S+)$")
_P2P = re.compile(r"^P2P plugin (\S+)$")
_BOOTSTRAP = re.compile(r"^Bootstrap ?: ?Using (?:\[\d+\])?([\w.\-]+):(\S+?)<\d+>")
_CUDA_DRIVER = re.compile(r"^cudaDriverVersion (\d+)$")
_CUDA_FAIL = re.compile(r"Cuda failure '([^']+)'")

SEVERITY_RANK = {"ok": 0, "warn": 1, "fail": 2}


@dataclass
class RankPlugin:
    """What one process (host, pid) logged about its net plugin, in log order."""

    host: str | None
    pid: int | None
    device: int | None = None
    requested: str | None = None
    missing_symbols: list = field(default_factory=list)  # [("net"|"coll", version)]
    no_symbol: bool = False
    loaded: dict | None = None  # {"name", "api"}
    coll: dict | None = None
    not_found: list = field(default_factory=list)  # library names that gave ENOENT
    load_errors: list = field(default_factory=list)  # dlerror texts
    internal: bool = False
    network: str | None = None
    path: str | None = None
    p2p_plugin: str | None = None

    @property
    def state(self) -> str | None:
        if self.loaded:
            newer = [v for kind, v in self.missing_symbols if kind == "net" and v > self.loaded["api"]]
            return "PLUGIN_LOADED_OLDER_API" if newer else "PLUGIN_LOADED"
        if self.network and self.network not in INTERNAL_NETWORKS:
            return "PLUGIN_LOADED"  # NCCL < 2.13 names a loaded plugin only in "Using network"
        if self.no_symbol:
            return "FOUND_BUT_INCOMPATIBLE"
        if self.load_errors:
            return "PLUGIN_LOAD_ERROR"
        if self.not_found or self.internal:
            return "PLUGIN_NOT_FOUND"
        if self.missing_symbols:
            return "UNKNOWN"  # opened, fallback chain started, the log stops before its end
        if self.network in INTERNAL_NETWORKS:
            return "INTERNAL_NETWORK"  # no loader line: why no plugin is in use is not in the log
        return None

    def as_dict(self) -> dict:
        net_missing = [v for kind, v in self.missing_symbols if kind == "net"]
        return {"host": self.host, "pid": self.pid, "device": self.device, "state": self.state,
                "requested": self.requested, "plugin": dict(self.loaded) if self.loaded else None,
                "coll_plugin": dict(self.coll) if self.coll else None,
                "highest_api_asked": max(net_missing) if net_missing else None,
                "not_found": list(self.not_found), "load_errors": list(self.load_errors),
                "network": self.network, "path": self.path, "p2p_plugin": self.p2p_plugin}


def nccl_line_prefix(line):
    """The match of NCCL's ``<host>:<pid>:<tid> [<dev>] NCCL INFO|WARN`` prefix in ``line``
    (groups ``host``, ``pid``, ``tid``, ``dev``, ``lvl``), wherever a launcher's label leaves it;
    None for a line without one. Strip Open MPI's and horovodrun's bracketed prefix first
    (``parsing.strip_launcher_prefix``)."""
    return _PREFIX.search(line)


def _normalise(line):
    return re.sub(r"[ \t]+", " ", line.strip())


def _read_plugin_message(rank, msg, lineno, raw):
    m = _LOADED.match(msg)
    if m:
        entry = {"name": m.group(2), "api": int(m.group(3))}
        if m.group(1) == "net":
            rank.loaded = entry
        else:
            rank.coll = entry
        return
    m = _SYMBOL.match(msg)
    if m:
        rank.missing_symbols.append(("net" if m.group(1) == "Net" else "coll", int(m.group(2))))
        return
    m = _NO_SYMBOL.match(msg)
    if m:
        if m.group(1) == "Net":
            rank.no_symbol = True
        return
    m = _NOT_FOUND.match(msg)
    if m:
        rank.not_found.append(m.group("lib") or "libnccl-net.so")
        rank.internal = True
        if m.group("err") and "No such file" not in m.group("err"):
            rank.load_errors.append(m.group("err"))
        return
    m = _LOAD_RET.match(msg) or _RECENT_RET.match(msg)
    if m:
        lib = m.groupdict().get("lib") or m.groupdict().get("lib2")
        err = m.group("err")
        if m.group("errno") == "2" and (not lib or "No such file" in err or lib in err):
            rank.not_found.append(lib or "libnccl-net.so")
        else:
            rank.load_errors.append(err)
        return
    m = _COULD_NOT.match(msg)
    if m:
        rank.not_found.extend(m.group("libs").split())
        rank.internal = True
        return
    m = _ENV_NAME.match(msg)
    if m:
        rank.requested = m.group(1)
        return
    if msg == _INTERNAL:
        rank.internal = True
        return
    if _CLOSING.match(msg):
        return
    for start in _STARTS:
        if start.startswith(msg) or msg.startswith(start):
            raise ParseError(f"NCCL log line {lineno}: NET/Plugin message cut or not in the NCCL 2.4-2.27 "
                             f"grammar: {shorten(raw)!r}")
    # 2.23+: any other NET/Plugin text is the dlerror() string of a failed dlopen.
    if re.search(r"\.so\b.*: ", msg):
        rank.load_errors.append(msg)
        return
    raise ParseError(f"NCCL log line {lineno}: unknown NET/Plugin message {shorten(raw)!r}")


@dataclass
class NetPluginState:
    """The net-plugin state of one NCCL log (see the module docstring for the classes)."""

    cls: str
    severity: str
    cause: str
    fix: str | None
    nccl_version: str | None
    cuda_driver_version: int | None
    requested_plugin: str | None
    requested_network: str | None
    plugin: dict | None
    coll_plugin: dict | None
    highest_api_asked: int | None
    networks: list
    bootstrap: list
    ranks: list
    env: dict
    cuda_failures: dict
    evidence: tuple = ()

    def as_dict(self) -> dict:
        return {"class": self.cls, "severity": self.severity, "cause": self.cause, "fix": self.fix,
                "nccl_version": self.nccl_version, "cuda_driver_version": self.cuda_driver_version,
                "requested_plugin": self.requested_plugin, "requested_network": self.requested_network,
                "plugin": self.plugin, "coll_plugin": self.coll_plugin,
                "highest_api_asked": self.highest_api_asked, "networks": list(self.networks),
                "bootstrap": list(self.bootstrap), "ranks": list(self.ranks), "env": dict(self.env),
                "cuda_failures": dict(self.cuda_failures), "evidence": list(self.evidence)}


def has_plugin_lines(text) -> bool:
    """Whether ``text`` holds any line this reader decides a state from."""
    return bool(re.search(r"NET/Plugin ?:|Using network |NET plugin |Error: network .* not found|"
                          r"Failed to initialize any NET plugin", str(text)))


def read_net_plugin(text, expect_plugin=None) -> NetPluginState:
    """The net-plugin state of an ``NCCL_DEBUG=INFO`` log (ranks may be interleaved).

    ``expect_plugin``: the plugin the cluster profile wants (a library or plugin name, or True
    for "any external plugin"); None takes ``NCCL_NET_PLUGIN`` from the log's ``set by
    environment`` lines, if any. Raises ParseError for a cut or unknown ``NET/Plugin`` line, and
    when the text has no line this reader decides from.
    """
    lines = split_lines(text, "NCCL log")
    ranks = {}
    version = None
    cuda_driver = None
    env = {}
    bootstrap = []
    net_not_found = []
    none_initialised = False
    cuda_failures = {}
    evidence = []
    for lineno, raw in enumerate(lines, 1):
        line = _normalise(strip_launcher_prefix(raw))
        if not line:
            continue
        pm = _PREFIX.search(line) or _BARE.match(line)
        # Rank 0 prints the version bare up to 2.21 and behind its prefix from 2.22 on.
        text = line[pm.end():].strip() if pm else line
        m = _VERSION.match(text)
        if m:
            version = m.group(1)
            continue
        if _VERSION_START.match(text):
            raise ParseError(f"NCCL log line {lineno}: 'NCCL version' line cut: {shorten(raw)!r}")
        if not pm:
            continue
        key = (pm.groupdict().get("host"), int(pm.group("pid")) if pm.groupdict().get("pid") else None)
        msg = text
        rank = ranks.get(key)
        if rank is None:
            dev = pm.groupdict().get("dev")
            rank = ranks[key] = RankPlugin(key[0], key[1], int(dev) if dev is not None else None)
        if pm.group("lvl") == "WARN":
            m = _CUDA_FAIL.search(msg)
            if m:
                cuda_failures[m.group(1)] = cuda_failures.get(m.group(1), 0) + 1
            m = _NET_NOT_FOUND.match(msg)
            if m:
                net_not_found.append(m.group(1))
                evidence.append(line)
            if msg.startswith("Failed to initialize any NET plugin"):
                none_initialised = True
                evidence.append(line)
            continue
        m = _PLUGIN.match(msg)
        if m:
            _read_plugin_message(rank, m.group(1).strip(), lineno, raw)
            evidence.append(line)
            continue
        # 2.11 .. 2.20 print the requested name without the NET/Plugin tag (src/net.cc).
        m = _ENV_NAME.match(msg)
        if m:
            rank.requested = m.group(1)
            evidence.append(line)
            continue
        m = _USING_NET.match(msg) or _INIT_NET.match(msg)
        if m:
            rank.network = m.group(m.lastindex)
            evidence.append(line)
            continue
        m = _ENV_SET.match(msg)
        if m:
            env[m.group(1)] = m.group(2).strip()
            continue
        m = _PLUGIN_PATH.match(msg)
        if m:
            rank.path = m.group(1)
            continue
        m = _P2P.match(msg)
        if m:
            rank.p2p_plugin = m.group(1)
            continue
        m = _BOOTSTRAP.match(msg)
        if m:
            item = {"host": key[0], "interface": m.group(1), "address": m.group(2)}
            if item not in bootstrap:
                bootstrap.append(item)
            continue
        m = _CUDA_DRIVER.match(msg)
        if m:
            cuda_driver = int(m.group(1))

    # A plugin path or P2P name logged by a helper thread (same pid) belongs to that process.
    seen = [r for r in ranks.values() if r.state is not None or r.network]
    if not seen and not net_not_found and not none_initialised:
        raise ParseError("NCCL log: no net-plugin line (NET/Plugin, 'Using network', 'NET plugin') found; "
                         "run with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS including INIT,NET)")
    return _verdict(ranks, version, cuda_driver, env, bootstrap, net_not_found, none_initialised,
                    cuda_failures, tuple(evidence), expect_plugin)


_ORDER = ("NO_NET_INITIALIZED", "NET_NOT_FOUND", "PLUGIN_LOAD_ERROR", "FOUND_BUT_INCOMPATIBLE",
          "PLUGIN_NOT_FOUND", "INTERNAL_NETWORK", "PLUGIN_LOADED_OLDER_API", "PLUGIN_LOADED", "UNKNOWN")


def _verdict(ranks, version, cuda_driver, env, bootstrap, net_not_found, none_initialised, cuda_failures,
             evidence, expect_plugin):
    per_rank = [r.as_dict() for r in ranks.values() if r.state is not None or r.network or r.path]
    states = [r["state"] for r in per_rank if r["state"]]
    requested = next((r["requested"] for r in per_rank if r["requested"]), None) or env.get("NCCL_NET_PLUGIN")
    expected = expect_plugin if expect_plugin is not None else requested
    if none_initialised:
        cls = "NO_NET_INITIALIZED"
    elif net_not_found:
        cls = "NET_NOT_FOUND"
    else:
        cls = next((c for c in _ORDER if c in states), "UNKNOWN")
    loaded = next((r["plugin"] for r in per_rank if r["plugin"]), None)
    coll = next((r["coll_plugin"] for r in per_rank if r["coll_plugin"]), None)
    asked = [r["highest_api_asked"] for r in per_rank if r["highest_api_asked"]]
    networks = []
    for r in per_rank:
        if r["network"] and r["network"] not in networks:
            networks.append(r["network"])
    path = next((r["path"] for r in per_rank if r["path"]), None)
    if loaded is None and cls == "PLUGIN_LOADED" and networks:
        loaded = {"name": next(n for n in networks if n not in INTERNAL_NETWORKS), "api": None}
    if loaded is not None and path:
        loaded = dict(loaded, path=path)
    unknown_ranks = [r for r in per_rank if r["state"] == "UNKNOWN"]
    where = f"NCCL {version}" if version else "NCCL (version not in the log)"
    ncclnet = env.get("NCCL_NET")
    severity, cause, fix = "ok", "", None
    if cls == "NO_NET_INITIALIZED":
        severity = "fail"
        cause = f"{where}: no network plugin could be initialised (neither an external plugin nor IB/Socket)"
        fix = "check NCCL_NET / NCCL_NET_PLUGIN, libibverbs and the interfaces NCCL_SOCKET_IFNAME allows"
    elif cls == "NET_NOT_FOUND":
        severity = "fail"
        cause = (f"{where}: NCCL_NET={net_not_found[0]} names a network no loaded plugin offers "
                 f"(available: {', '.join(networks) or 'IB/Socket'})")
        fix = ("set NCCL_NET to a network that exists (IB, Socket, or the plugin's name, e.g. 'AWS Libfabric'), "
               "or install the plugin that provides it and make sure it loads (NCCL_NET_PLUGIN)")
    elif cls == "PLUGIN_LOAD_ERROR":
        err = next(e for r in per_rank for e in r["load_errors"])
        severity = "fail" if expected else "warn"
        cause = f"{where}: the net plugin library exists but dlopen failed: {err}"
        fix = ("install the plugin's dependencies (ldd on the plugin library: libfabric, HPC-X/UCX, CUDA "
               "runtime) in the image, or remove the broken libnccl-net*.so from LD_LIBRARY_PATH")
    elif cls == "FOUND_BUT_INCOMPATIBLE":
        severity = "fail" if expected else "ok"
        cause = (f"{where}: a libnccl-net.so was opened but exports no supported ncclNetPlugin symbol "
                 "(plugin ABI older than v5, or not a net plugin), so NCCL unloaded it and uses its internal "
                 "IB/Socket transport")
        if not expected:
            cause += "; not a failure when no external plugin is wanted"
        fix = ("install a plugin built for this NCCL's net API (v5..v8 for NCCL 2.19/2.20), or remove the "
               "stray libnccl-net.so from the library path")
    elif cls == "PLUGIN_NOT_FOUND":
        severity = "fail" if expected else "ok"
        libs = sorted({lib for r in per_rank for lib in r["not_found"]})
        cause = f"{where}: no net plugin library found ({', '.join(libs) or 'libnccl-net.so'}); internal transports"
        fix = (f"install the plugin NCCL_NET_PLUGIN={expected} names and put its directory on "
               "LD_LIBRARY_PATH" if expected else None)
    elif cls == "INTERNAL_NETWORK":
        severity = "fail" if expected else "ok"
        cause = f"{where}: NCCL uses its internal transport; the log has no plugin-loader line saying why"
        fix = (f"NCCL_NET_PLUGIN={expected} is set but not in use: rerun with NCCL_DEBUG=INFO "
               "NCCL_DEBUG_SUBSYS=INIT,NET to see the loader lines" if expected else None)
    elif cls == "PLUGIN_LOADED_OLDER_API":
        severity = "warn"
        cause = (f"{where} asks for net API v{max(asked)}; plugin '{loaded['name']}' loaded through the "
                 f"v{loaded['api']} compat path (not a failure)")
        fix = "match the plugin release (HPC-X / nccl-rdma-sharp-plugins, aws-ofi-nccl) to the NCCL version"
    elif cls == "PLUGIN_LOADED":
        cause = f"{where}: net plugin '{loaded['name']}' loaded" + (f" (v{loaded['api']})" if loaded["api"] else "")
    else:
        cause = f"{where}: the log stops before NCCL says which net plugin it uses"
        fix = "capture the whole NCCL_DEBUG=INFO output of rank 0's init"
    if unknown_ranks and cls != "UNKNOWN":
        cause += "; state unknown (log cut) for " + ", ".join(
            f"{r['host']} pid {r['pid']} [{r['device']}]" for r in unknown_ranks)
    if networks:
        cause += f"; using network {', '.join(networks)}"
        if ncclnet and ncclnet not in networks:
            cause += f" (NCCL_NET={ncclnet})"
    return NetPluginState(cls=cls, severity=severity, cause=cause, fix=fix, nccl_version=version,
                          cuda_driver_version=cuda_driver, requested_plugin=requested, requested_network=ncclnet,
                          plugin=loaded, coll_plugin=coll, highest_api_asked=max(asked) if asked else None,
                          networks=networks, bootstrap=bootstrap, ranks=per_rank, env=env,
                          cuda_failures=cuda_failures, evidence=evidence)
