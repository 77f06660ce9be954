"""Merge, never overwrite, Docker's ``/etc/docker/daemon.json``, and run the checks dockerd
itself runs when it starts, before the file is written.

Pure functions over text (stdlib only, Python 3.8+: this runs on managed nodes), used by the
``docker_daemon_json`` module and tested on real captured files (tests/fixtures/docker-daemon-json).

Shapes
------
- ``decode(data, path, version=None)``: bytes -> str (UTF-8, strict; UTF-16 with a byte order mark
  too where ``version`` is a dockerd that reads it, 23.0 and later).
- ``load(text, path, version=None)``: str -> dict (the one top-level JSON object; empty file -> ``{}``).
  ``version`` (everywhere): the dockerd release that reads the file: ``server_version``'s dict, its
  text (``"20.10.24+dfsg1"``) or ``(major, minor)``; None when unknown, and then only what every
  release from 20.10 to 28.5 refuses is refused.
  Invalid JSON raises ``DaemonJsonError`` with ``.path``, ``.problems`` (list of ``Problem``:
  1-based line, column, what is wrong, the fix), ``.lineno`` / ``.colno`` of the first problem.
- ``merge(existing, desired, remove=())``: dict, dict, iterable of dotted paths -> new dict.
- ``get_path(cfg, path)``: value at a dotted path / key list, None when absent.
- ``render(cfg, indent=2)``: dict -> text (insertion order kept, trailing newline).
- ``order_unit_files(paths)``: docker.service + drop-in paths -> the ones systemd applies, in order.
- ``environment_files(unit_texts)``: -> paths named by ``EnvironmentFile=``.
- ``dockerd_flags(unit_texts, env_files=None)``: [(path, text)] of docker.service and its drop-ins
  -> list of ``DockerdFlag`` (name, key, value, source, text), the flags dockerd is started with.
- ``conflicts(cfg, flags)``: -> list of ``Conflict`` (key, path, flag, source, message).
- ``missing_runtimes(cfg, which, flags=())``: -> list of ``MissingRuntime`` (name, path, source,
  default, message).
- ``known_keys(version=None)``: key -> JSON type of the daemon.json keys that release accepts.
- ``check_keys(cfg, keys=None, known=None, version=None)``: -> list of ``KeyProblem`` (key, message).

Sources
-------
- Docker daemon configuration overview, docs.docker.com/config/daemon/ ("You can use both of
  these options together as long as you don't specify the same option both as a flag and in
  the JSON file. If that happens, the Docker daemon won't start and prints an error message.")
  and docs.docker.com/config/daemon/troubleshoot/ (the hosts / ``-H fd://`` example of C15).
- moby daemon/config/config.go (20.10): ``getConflictFreeConfiguration`` reads the file with Go's
  encoding/json (one value, no comments, no trailing commas, no BOM; 23.0 and later first drop a
  UTF-8 or UTF-16 byte order mark: commit d42495033e7a, backported to 23.0 as 0b2eecdc8a,
  ``unicode.BOMOverride``), ``configValuesSet``
  flattens nested objects except ``flatOptions``, ``findConfigurationConflicts`` fails with
  "the following directives are specified both as a flag and in the configuration file: <key>"
  for every flag that was set on the command line and whose name (or NamedOption name, e.g.
  ``--add-runtime`` -> ``runtimes``) is a key of the file. ``skipDuplicates = {"runtimes"}``
  since Docker 18.09 (moby/moby#37871): flag and file runtimes are merged; before that any
  ``--add-runtime`` plus a ``runtimes`` key refused to start (fixture C17).
- systemd.service(5) / systemd.unit(5): ``ExecStart=`` (empty) resets the list, ``\\``
  continues a line, ``$VAR`` as a whole word expands to several words, ``${VAR}`` to one;
  drop-ins ``<unit>.d/*.conf`` apply in file-name order after the unit file; a unit in
  /etc/systemd/system masks the same name in /run and /lib (/usr/lib).
"""

from __future__ import annotations

import copy
import json
import os
import re
import unicodedata
from collections import namedtuple

Problem = namedtuple("Problem", "line column message fix")
DockerdFlag = namedtuple("DockerdFlag", "name key value source text")
Conflict = namedtuple("Conflict", "key path flag source message")
MissingRuntime = namedtuple("MissingRuntime", "name path source default message")

DEFAULT_PATH = "/etc/docker/daemon.json"


class DaemonJsonError(ValueError):
    """daemon.json cannot be read; the message names the file, line, column, problem and fix."""

    def __init__(self, path, problems, parser_message="", verdict="dockerd would refuse to start with it too"):
        self.path = path
        self.verdict = verdict
        self.problems = list(problems)
        self.parser_message = parser_message
        first = self.problems[0] if self.problems else Problem(1, 1, "", "")
        self.lineno = first.line
        self.colno = first.column
        super().__init__(self._format())

    def _format(self):
        lines = [
            f"{self.path}: not valid JSON, refusing to edit it (the file is left untouched; "
            f"{self.verdict})."
        ]
        for p in self.problems:
            lines.append(f"  line {p.line}, column {p.column}: {p.message} Fix: {p.fix}")
        if self.parser_message:
            lines.append(f"  (JSON parser: {self.parser_message})")
        lines.append(f"Correct {self.path} by hand, then rerun.")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# load / decode
# --------------------------------------------------------------------------------------------

# Typographic quotes that word processors, chat tools and web pages put in place of '"'.
_SMART_QUOTES = frozenset("\u201c\u201d\u201e\u201f\u2018\u2019\u201a\u201b\u2033\u00ab\u00bb\uff02")


def _line_col(text, offset):
    """1-based (line, column) of ``offset``; columns count characters, as Python's json does."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


#: The first dockerd release that drops a byte order mark before parsing daemon.json (UTF-8, UTF-16 LE
#: or BE): moby commit d42495033e7a "daemon/config: support alternate (common) unicode encodings using
#: a BOM", in v23.0.0 through its backport 0b2eecdc8a (moby/moby#44832); daemon/config/config.go
#: getConflictFreeConfiguration, ``transform.Chain(unicode.BOMOverride(transform.Nop), ...)``.
#: dockerd 20.10 (Debian 12's docker.io) hands the bytes to encoding/json as they are and refuses.
BOM_RELEASE = (23, 0)
_UTF16_BOMS = ((b"\xff\xfe", "utf-16-le", "FF FE, UTF-16 LE"), (b"\xfe\xff", "utf-16-be", "FE FF, UTF-16 BE"))


def decode(data, path=DEFAULT_PATH, version=None):
    """UTF-8 bytes -> str; DaemonJsonError naming line/column of the first undecodable byte.

    UTF-16 with a byte order mark is decoded where ``version`` is dockerd 23.0 or later (which
    reads it); a UTF-8 byte order mark is left in the text for ``load`` to judge.
    """
    for bom, codec, name in _UTF16_BOMS:
        if not data.startswith(bom):
            continue
        rel = _release(version)
        if rel is not None and rel >= BOM_RELEASE:
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                break  # not UTF-16 after all: reported as the bytes it is below
        who = (f"dockerd {_fmt(rel)} reads daemon.json as UTF-8 only" if rel is not None else
               "dockerd older than 23.0 (Debian 12's 20.10 included) reads daemon.json as UTF-8 only; "
               "23.0 and later decode it")
        raise DaemonJsonError(path, [Problem(
            1, 1, f"UTF-16 text (byte order mark {name}); {who}.",
            "re-save the file as UTF-8 without BOM (e.g. `iconv -f utf-16 -t utf-8`).",
        )], verdict=_bom_verdict(rel))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = data[: exc.start].decode("utf-8", errors="replace")
        line, col = _line_col(head, len(head))
        raise DaemonJsonError(path, [Problem(
            line, col, f"byte 0x{data[exc.start]:02x} is not UTF-8 (dockerd reads daemon.json as UTF-8).",
            "re-save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`).",
        )]) from None


def _bom_verdict(rel):
    if rel is None:
        return "dockerd older than 23.0 would refuse to start with it; 23.0 and later skip the byte order mark"
    return f"dockerd {_fmt(rel)} would refuse to start with it too"


def _scan(text):
    """Problems a JSON lexer would trip on, outside string literals: [(offset, message, fix)].

    Finds comments (``//``, ``/* */``, ``#``), trailing commas before ``}``/``]``, typographic
    quotes and single quotes. A raw newline ends a string (JSON forbids it) so that one
    unterminated string does not hide the rest of the file.
    """
    found = []
    smart, single = {}, {}  # line -> [offsets]
    i, n = 0, len(text)
    in_string = False
    last_comma = None
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch in '"\n':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
            last_comma = None
        elif ch in " \t\r\n":
            pass
        elif text.startswith("//", i) or ch == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            found.append((i, f"comment {text[i:end].strip()!r}; JSON has no comments.",
                          "delete the comment (or the whole line)."))
            i = end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            found.append((i, "/* ... */ comment; JSON has no comments.", "delete the comment."))
            i = n if end < 0 else end + 2
            continue
        elif ch in _SMART_QUOTES:
            smart.setdefault(_line_col(text, i)[0], []).append(i)
            last_comma = None
        elif ch == "'":
            single.setdefault(_line_col(text, i)[0], []).append(i)
            last_comma = None
        elif ch == ",":
            last_comma = i
        elif ch in "}]":
            if last_comma is not None:
                found.append((last_comma, f"trailing comma before '{ch}'; JSON allows no comma after "
                                          "the last member.", "delete this comma."))
            last_comma = None
        else:
            last_comma = None
        i += 1
    for offsets in smart.values():
        chars = sorted({text[o] for o in offsets})
        cols = ", ".join(str(_line_col(text, o)[1]) for o in offsets)
        names = ", ".join(f"{c} U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in chars)
        plural = "s" if len(offsets) > 1 else ""
        found.append((offsets[0], f"typographic (\"smart\") quotes at column{plural} {cols} ({names}) "
                                  "instead of ASCII \".",
                      "retype them as plain double quotes \" (an editor or chat tool replaced them)."))
    for offsets in single.values():
        cols = ", ".join(str(_line_col(text, o)[1]) for o in offsets)
        found.append((offsets[0], f"single quotes (') at column{'s' if len(offsets) > 1 else ''} {cols}; "
                                  "JSON strings and keys need double quotes.", "replace ' with \"."))
    return sorted(found)


def load(text, path=DEFAULT_PATH, version=None):
    """Parse daemon.json text into a dict, or raise ``DaemonJsonError`` that says exactly why not.

    Empty or whitespace-only text is ``{}`` (dockerd does the same: bytes.TrimSpace, len 0).
    Refused, each with line and column: two JSON objects one after the other (the typical result
    of ``cat >> daemon.json``), typographic quotes, trailing commas, comments, single quotes, a
    top level that is not an object, any other JSON syntax error; and a UTF-8 byte order mark,
    unless ``version`` is dockerd 23.0 or later, which skips it (``BOM_RELEASE``). With no version
    the BOM is refused, saying which releases refuse it. ``render`` never writes one.
    """
    problems = []
    body = text
    verdict = "dockerd would refuse to start with it too"
    if text.startswith("\ufeff"):
        rel = _release(version)
        if rel is None or rel < BOM_RELEASE:
            who = (f"dockerd {_fmt(rel)} (older than 23.0) hands it to Go's JSON parser, which rejects it"
                   if rel is not None else "dockerd older than 23.0 (Debian 12's 20.10 included) rejects it; "
                   "23.0 and later skip it")
            problems.append(Problem(1, 1, f"UTF-8 byte order mark (BOM) at the start; {who}.",
                                    "save the file as UTF-8 without BOM."))
            verdict = _bom_verdict(rel)
        body = " " + text[1:]  # same length, so offsets stay those of ``text``
    if not body.strip():
        if problems:
            raise DaemonJsonError(path, problems, verdict=verdict)
        return {}
    try:
        cfg = json.loads(body)
    except json.JSONDecodeError as exc:
        parser = f"{exc.msg}: line {exc.lineno} column {exc.colno}"
        specific = []
        if exc.msg.startswith("Extra data"):
            start = len(body) - len(body.lstrip())
            _, end = json.JSONDecoder().raw_decode(body, start)
            end_line, end_col = _line_col(body, end - 1)
            if body[exc.pos] == "{":
                specific.append((
                    exc.pos,
                    f"a second JSON object starts here; the first one ended at line {end_line}, column "
                    f"{end_col}. daemon.json must hold exactly one object (two usually come from `>>`).",
                    "merge the keys of both objects into the first {...} and delete the second.",
                ))
            else:
                specific.append((
                    exc.pos,
                    f"text after the end of the JSON object (it ended at line {end_line}, column {end_col}).",
                    "delete it, or move it inside the object.",
                ))
        specific.extend(_scan(body))
        if not specific:
            specific.append((exc.pos, exc.msg + ".", "correct the JSON syntax here (look for a missing "
                                                     "comma, brace or double quote just before it)."))
        for off, msg, fix in sorted(set(specific)):
            line, col = _line_col(body, off)
            problems.append(Problem(line, col, msg, fix))
        raise DaemonJsonError(path, problems, parser) from None
    if problems:
        raise DaemonJsonError(path, problems, verdict=verdict)
    if not isinstance(cfg, dict):
        start = len(text) - len(text.lstrip())
        line, col = _line_col(text, start)
        raise DaemonJsonError(path, [Problem(
            line, col, f"the top level is a JSON {type(cfg).__name__}, dockerd needs one object {{...}}.",
            "wrap the settings in { }.",
        )])
    return cfg


# --------------------------------------------------------------------------------------------
# merge / render
# --------------------------------------------------------------------------------------------


def _split_path(path):
    if isinstance(path, (list, tuple)):
        return [str(p) for p in path]
    return str(path).split(".")


def get_path(cfg, path):
    """Value at ``path`` (dotted string or sequence of keys) in ``cfg``, or None when absent."""
    node = cfg
    parts = _split_path(path)
    while parts:
        if not isinstance(node, dict):
            return None
        for i in range(len(parts), 0, -1):
            key = ".".join(parts[:i])
            if key in node:
                node, parts = node[key], parts[i:]
                break
        else:
            return None
    return node


def _merge_into(dst, src):
    for key, value in src.items():
        if key in dst and isinstance(dst[key], dict) and isinstance(value, dict):
            _merge_into(dst[key], value)
        elif key in dst and isinstance(dst[key], list) and isinstance(value, list):
            for item in value:
                if item not in dst[key]:
                    dst[key].append(copy.deepcopy(item))
        else:
            dst[key] = copy.deepcopy(value)


def _remove(node, parts):
    """Delete ``parts`` from ``node``; prune the objects this empties. True if something went."""
    if not isinstance(node, dict):
        return False
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key not in node:
            continue
        if i == len(parts):
            del node[key]
            return True
        child = node[key]
        if _remove(child, parts[i:]):
            if not child:
                del node[key]
            return True
    return False


def merge(existing, desired, remove=()):
    """New dict = ``existing`` with ``desired`` merged in and ``remove`` taken out; inputs untouched.

    Rules: objects merge recursively; lists become the union, existing items first in their
    order, then the new items of ``desired`` not already present; for anything else (scalars,
    or a type change) ``desired`` wins. Keys only in ``existing`` (what the user or another
    package put there) are kept, in their order; new keys follow in ``desired``'s order.

    ``remove`` is applied after the merge: each entry is a dotted path (``"runtimes.nvidia"``)
    or a list of keys. Keys that contain dots themselves (runtime names such as
    ``io.containerd.runsc.v1``) are matched longest-first. An object left empty by a removal is
    removed too (``runtimes: {}`` would still count as a ``runtimes`` key for dockerd < 18.09).
    """
    if not isinstance(existing, dict) or not isinstance(desired, dict):
        raise TypeError("merge() needs two dicts (the daemon.json top level is an object)")
    out = copy.deepcopy(existing)
    _merge_into(out, desired)
    for path in remove:
        _remove(out, _split_path(path))
    return out


def render(cfg, indent=2):
    """daemon.json text: ``indent`` spaces, keys in insertion order, UTF-8 kept, final newline.

    Deterministic for a given dict, so a rerun renders byte-identical text and changes nothing.
    """
    return json.dumps(cfg, indent=indent, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------------------------
# systemd units -> dockerd flags
# --------------------------------------------------------------------------------------------

# dockerd flags whose daemon.json key differs from the flag name (opts.NamedOption in moby:
# the key is the option's Name()). Every other flag's key is its long name (--data-root ->
# "data-root", --default-runtime, --log-driver, --storage-driver, --default-shm-size ...).
FLAG_KEYS = {
    "add-runtime": "runtimes",
    "allow-nondistributable-artifacts": "allow-nondistributable-artifacts",
    "authorization-plugin": "authorization-plugins",
    "cdi-spec-dir": "cdi-spec-dirs",
    "cluster-store-opt": "cluster-store-opts",
    "default-address-pool": "default-address-pools",
    "default-ulimit": "default-ulimits",
    "dns-opt": "dns-opts",
    "exec-opt": "exec-opts",
    "feature": "features",
    "host": "hosts",
    "insecure-registry": "insecure-registries",
    "label": "labels",
    "log-opt": "log-opts",
    "node-generic-resource": "node-generic-resources",
    "registry-mirror": "registry-mirrors",
    "storage-opt": "storage-opts",
}
# dockerd shorthands (dockerd --help, Docker 20.10).
SHORT_FLAGS = {"H": "host", "s": "storage-driver", "g": "graph", "b": "bridge", "D": "debug",
               "l": "log-level", "G": "group", "p": "pidfile", "v": "version", "h": "help"}
# Flags that take no separate value (``--flag`` or ``--flag=false``).
BOOL_FLAGS = frozenset((
    "cri-containerd", "debug", "experimental", "help", "icc", "init", "ip-forward", "ip-forward-no-drop",
    "ip-masq", "ip6tables", "iptables", "ipv6", "live-restore", "no-new-privileges", "raw-logs",
    "rootless", "selinux-enabled", "tls", "tlsverify", "userland-proxy", "validate", "version",
    "disable-legacy-registry", "allow-direct-routing", "bridge-accept-fwmark",
))
# Value flags whose value may start with '-'.
_NEGATIVE_VALUES = frozenset(("oom-score-adjust", "cpu-rt-period", "cpu-rt-runtime", "mtu"))
# Flags that are not daemon.json settings.
NOT_CONFIG = frozenset(("config-file", "help", "version", "validate"))
# Objects dockerd does NOT flatten before the conflict check (flatOptions, config.go).
FLAT_OPTIONS = frozenset(("cluster-store-opts", "log-opts", "runtimes", "default-ulimits", "features",
                          "builder", "default-network-opts"))
# Runtimes dockerd always has; "runc" is reserved (config.go StockRuntimeName, builtinRuntimes).
BUILTIN_RUNTIMES = frozenset(("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"))

_VAR_WORD = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_VAR_BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _pairs(unit_texts):
    if isinstance(unit_texts, dict):
        return list(unit_texts.items())
    return [(p, t) for p, t in unit_texts]


def _logical_lines(text):
    """(first line number, line) after comments are dropped and ``\\`` continuations joined."""
    buf, start = None, 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith(("#", ";")) or (not line and buf is None):
            continue
        if buf is None:
            start = no
        if line.endswith("\\"):
            buf = (buf or "") + line[:-1] + " "
            continue
        yield start, (buf or "") + line
        buf = None
    if buf is not None:
        yield start, buf


def _assignments(text):
    """(section, key, value, line) of a unit file. Lines before any [Section] count as [Service],
    so ``grep dockerd`` excerpts of a drop-in read like the file they came from."""
    section = None
    for no, line in _logical_lines(text):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, eq, value = line.partition("=")
        if eq:
            yield section, key.strip(), value.strip(), no


def _split_words(value):
    """systemd word splitting: whitespace separates, "..." and '...' group, backslash escapes.
    Returns [(word, quoted)]."""
    words, cur, quoted, quote, in_word = [], [], False, None, False
    i = 0
    while i < len(value):
        ch = value[i]
        if quote:
            if ch == "\\" and i + 1 < len(value):
                cur.append(value[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
        elif ch in " \t":
            if in_word:
                words.append(("".join(cur), quoted))
                cur, quoted, in_word = [], False, False
        elif ch in "\"'":
            quote, quoted, in_word = ch, True, True
        elif ch == "\\" and i + 1 < len(value):
            cur.append(value[i + 1])
            in_word = True
            i += 2
            continue
        else:
            cur.append(ch)
            in_word = True
        i += 1
    if in_word:
        words.append(("".join(cur), quoted))
    return words


def _parse_env_file(text):
    """KEY=VALUE lines of a systemd EnvironmentFile (comments, quotes, continuations)."""
    out = {}
    for _, line in _logical_lines(text):
        key, eq, value = line.partition("=")
        if not eq:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def environment_files(unit_texts):
    """Paths named by ``EnvironmentFile=`` in the units (leading ``-`` = optional, stripped)."""
    out = []
    for _, text in _pairs(unit_texts):
        for section, key, value, _ in _assignments(text):
            if section in (None, "Service") and key == "EnvironmentFile" and value:
                path = value.lstrip("-").strip()
                if path not in out:
                    out.append(path)
    return out


def order_unit_files(paths):
    """Order docker.service files the way systemd applies them: the one effective unit file
    (/etc/systemd/system over /run over /usr/local/lib, /usr/lib, /lib; other directories
    after those, in the order given), then drop-ins (``*.conf``) sorted by file name, a drop-in in
    a higher-precedence directory masking one with the same name."""
    rank_dirs = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
                 "/usr/lib/systemd/system", "/lib/systemd/system")

    def rank(path, index):
        d = os.path.dirname(path)
        if path.endswith(".conf"):
            d = os.path.dirname(d)
        return (rank_dirs.index(d) if d in rank_dirs else len(rank_dirs), index)

    units = sorted((rank(p, i), p) for i, p in enumerate(paths) if not p.endswith(".conf"))
    dropins = {}
    for i, p in enumerate(paths):
        if p.endswith(".conf"):
            name = os.path.basename(p)
            if name not in dropins or rank(p, i) < dropins[name][0]:
                dropins[name] = (rank(p, i), p)
    return [p for _, p in units[:1]] + [dropins[n][1] for n in sorted(dropins)]


def _exec_args(value, env, source):
    """ExecStart value -> [(arg, source)] after the binary, or None when it does not run dockerd."""
    words = _split_words(value)
    if not words:
        return None
    first = words[0][0]
    prefix = re.match(r"^[-@:+!]*", first).group(0)
    first = first[len(prefix):]
    rest = words[1:]
    if "@" in prefix and rest:
        rest = rest[1:]  # '@': the next word is argv[0], not an argument
    base = os.path.basename(first)
    if base == "docker" and rest and rest[0][0] == "daemon":
        rest = rest[1:]  # Docker < 1.12: `docker daemon ...`
    elif not base.startswith("dockerd"):
        return None
    args = []
    for word, quoted in rest:
        m = _VAR_WORD.match(word)
        if m and not quoted:
            val, src = env.get(m.group(1), ("", source))
            args.extend((w, src) for w, _ in _split_words(val))
            continue
        src = source
        for name in _VAR_BRACED.findall(word):
            if name in env:
                src = env[name][1]
        word = _VAR_BRACED.sub(lambda mm: env.get(mm.group(1), ("", ""))[0], word)
        if word:
            args.append((word, src))
    return args


def _parse_flags(args):
    """pflag parsing of dockerd arguments: --name=v, --name v, -Hv, -H v, -H=v, bool flags."""
    out = []
    i = 0
    while i < len(args):
        arg, src = args[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            text = arg
        elif arg.startswith("-") and len(arg) > 1:
            name = SHORT_FLAGS.get(arg[1], arg[1])
            rest = arg[2:]
            eq, value, text = "", "", arg
            if rest.startswith("="):
                eq, value = "=", rest[1:]
            elif rest and name not in BOOL_FLAGS:
                eq, value = "=", rest
        else:
            continue  # positional argument
        if not eq:
            if name in BOOL_FLAGS:
                value = "true"
            elif i < len(args) and (name in _NEGATIVE_VALUES or not args[i][0].startswith("-")):
                value = args[i][0]
                text = f"{arg} {value}"
                i += 1
            else:
                value = ""
        key = None if name in NOT_CONFIG else FLAG_KEYS.get(name, name)
        out.append(DockerdFlag(name, key, value, src, text))
    return out


def dockerd_flags(unit_texts, env_files=None):
    """Flags dockerd gets from docker.service and its drop-ins.

    ``unit_texts``: [(path, text)] (or an ordered dict) in systemd order, see
    ``order_unit_files``; ``env_files``: {path: text} of the ``EnvironmentFile=`` files (see
    ``environment_files``). ``ExecStart=`` with an empty value resets the command list; every
    remaining ExecStart that runs dockerd counts (systemd refuses two for Type=notify, so more
    than one means the drop-in forgot the reset line; all their flags are kept, erring on the side
    of reporting a conflict). Returns ``DockerdFlag(name, key, value, source, text)``: long flag
    name, daemon.json key (None for --config-file and the like), value (``"true"`` for a bare
    bool flag), the file it came from (the EnvironmentFile when it came through ``$VAR``), and
    the flag as written.
    """
    env_files = env_files or {}
    plain, from_files, execs = {}, {}, []
    for path, text in _pairs(unit_texts):
        for section, key, value, _ in _assignments(text):
            if section not in (None, "Service"):
                continue
            if key == "ExecStart":
                if value:
                    execs.append((value, path))
                else:
                    execs = []
            elif key == "Environment":
                for word, _ in _split_words(value):
                    name, eq, val = word.partition("=")
                    if eq:
                        plain[name] = (val, path)
            elif key == "EnvironmentFile" and value:
                name = value.lstrip("-").strip()
                if name in env_files:
                    for k, v in _parse_env_file(env_files[name]).items():
                        from_files[k] = (v, name)
    env = dict(plain)
    env.update(from_files)
    flags = []
    for value, path in execs:
        args = _exec_args(value, env, path)
        if args is not None:
            flags.extend(_parse_flags(args))
    return flags


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------


def _flatten_like_dockerd(cfg):
    """{key dockerd sees: path in cfg}: nested objects are flattened one level unless flat."""
    out = {}
    for key, value in cfg.items():
        if isinstance(value, dict) and key not in FLAT_OPTIONS:
            for inner in value:
                out[inner] = (key, inner)
        else:
            out[key] = (key,)
    return out


def _remove_flag_fix(flag):
    if flag.source.endswith(".conf"):
        where = f"remove {flag.text} from the drop-in {flag.source} (then `systemctl daemon-reload`)"
    elif "/systemd/" in flag.source or flag.source.endswith(".service"):
        where = (f"override ExecStart in a drop-in (/etc/systemd/system/docker.service.d/*.conf: "
                 f"`ExecStart=` then the command without {flag.text}; then `systemctl daemon-reload`)")
    else:
        where = f"remove {flag.text} from {flag.source}"
    return where


def conflicts(cfg, flags):
    """daemon.json keys that dockerd also gets as a command-line flag -> ``Conflict`` list.

    dockerd refuses to start on these: "unable to configure the Docker daemon with file
    /etc/docker/daemon.json: the following directives are specified both as a flag and in the
    configuration file: <key>". ``runtimes`` is the exception since Docker 18.09 (flag and file
    runtimes are merged), so only a runtime *name* defined in both places is reported: Docker
    < 18.09 refuses to start, later versions keep one of the two definitions silently.
    ``Conflict.path`` is the key path in ``cfg`` (``("runtimes", "nvidia")``, ``("hosts",)``).
    """
    present = _flatten_like_dockerd(cfg)
    groups = {}  # (path, source) -> [flags], so -H a -H b in one file is one conflict
    for flag in flags:
        if flag.key is None:
            continue
        if flag.key == "runtimes":
            name = flag.value.partition("=")[0]
            runtimes = cfg.get("runtimes")
            if not isinstance(runtimes, dict) or name not in runtimes:
                continue
            path = ("runtimes", name)
        elif flag.key in present:
            path = present[flag.key]
        else:
            continue
        groups.setdefault((path, flag.source), []).append(flag)
    out = []
    for (path, source), group in groups.items():
        key = group[0].key
        text = " ".join(f.text for f in group)
        fix = _remove_flag_fix(group[0]._replace(text=text))
        dotted = ".".join(path)
        if key == "runtimes":
            message = (
                f"runtime '{path[1]}' is defined twice: in daemon.json ({dotted}) and by the dockerd "
                f"flag {text} in {source}. Docker < 18.09 refuses to start (\"the following "
                "directives are specified both as a flag and in the configuration file: runtimes\"); later "
                f"versions merge both and silently keep only one definition. Fix: define it in one place: "
                f"{fix}, or remove {dotted} from daemon.json (remove_keys: ['{dotted}'])."
            )
        else:
            message = (
                f"daemon.json key '{dotted}' is also set by the dockerd flag {text} in {source}; "
                f"dockerd refuses to start (\"the following directives are specified both as a flag and "
                f"in the configuration file: {key}\"). Fix: {fix}, or remove "
                f"'{dotted}' from daemon.json (remove_keys: ['{dotted}'])."
            )
        out.append(Conflict(key, path, text, source, message))
    return out


def missing_runtimes(cfg, which, flags=()):
    """Runtimes the config uses whose binary ``which(path)`` cannot find -> ``MissingRuntime`` list.

    Looks at ``default-runtime`` and every ``runtimes.<name>.path`` in ``cfg``, plus
    ``--add-runtime name=path`` / ``--default-runtime`` among ``flags`` (a daemon.json entry wins
    over a flag of the same name). ``which`` is ``shutil.which``-like: path or bare name -> path
    or None. dockerd starts fine without the binary, then every ``docker run`` using the runtime
    fails: 'exec: "nvidia-container-runtime": executable file not found in $PATH' (fixture C19),
    and with it as ``default-runtime`` that is every container. A default runtime that is not
    defined at all stops dockerd ("specified default runtime '<name>' does not exist").
    Runtimes given by ``runtimeType`` (containerd shims, Docker >= 23) have no path to check.
    """
    defined = {}
    runtimes = cfg.get("runtimes")
    if isinstance(runtimes, dict):
        for name, spec in runtimes.items():
            path = spec.get("path") if isinstance(spec, dict) else None
            defined[name] = (path, "daemon.json")
    default, default_source = cfg.get("default-runtime"), "daemon.json"
    for flag in flags:
        if flag.key == "runtimes":
            name, _, path = flag.value.partition("=")
            if name and name not in defined:
                defined[name] = (path or None, flag.source)
        elif flag.key == "default-runtime" and not default:
            default, default_source = flag.value, flag.source
    out = []
    if default and default not in BUILTIN_RUNTIMES and default not in defined:
        out.append(MissingRuntime(default, None, default_source, True, (
            f"default-runtime '{default}' ({default_source}) is not defined in runtimes nor by "
            f"--add-runtime: dockerd refuses to start (\"specified default runtime '{default}' does not "
            f"exist\"). Fix: add runtimes.{default}.path, or remove default-runtime "
            "(remove_keys: ['default-runtime'])."
        )))
    for name, (path, source) in defined.items():
        if not path or which(path):
            continue
        is_default = name == default
        if is_default:
            effect = "it is the default-runtime, so EVERY `docker run` fails"
        else:
            effect = f"`docker run --runtime {name}` fails"
        if source == "daemon.json":
            keys = [f"runtimes.{name}"] + (["default-runtime"] if is_default else [])
            undo = f"remove {' and '.join(keys)} from daemon.json (remove_keys: {keys!r})"
        else:
            undo = f"remove --add-runtime={name}=... from {source}"
        out.append(MissingRuntime(name, path, source, is_default, (
            f"runtime '{name}' ({source}) points to '{path}', which is not an executable on dockerd's PATH; "
            f"{effect} with 'exec: \"{path}\": executable file not found in $PATH'. Fix: install it "
            f"(for nvidia: the NVIDIA Container Toolkit), or {undo}."
        )))
    return out


# --------------------------------------------------------------------------------------------
# dockerd's own keys and types (Docker 20.10 .. 28.5)
# --------------------------------------------------------------------------------------------
#
# From moby daemon/config/config.go, config_linux.go, config_unix.go (the ``json:"..."`` tags of
# Config, CommonConfig, BridgeConfig, CommonTLSOptions, DNSConfig, LogConfig,
# registry.ServiceOptions) at v20.10.24, plus the keys later releases added (marked with the
# release). dockerd refuses an unknown top-level key at start ("the following directives
# don't match any configuration option"), and a value of the wrong JSON type ("json: cannot
# unmarshal ..."); Debian 12's dockerd has no --validate, so these are checked here first.
# dockerd's test for "unknown" is ``flags.Lookup(key) == nil`` and not a NamedOption's name and not
# in ``skipValidateOptions`` (findConfigurationConflicts, config.go:484 @v20.10.24, :584 @v28.3.2),
# so a key is known exactly while its flag exists: the flags of cmd/dockerd/config.go,
# config_unix.go, config_common_unix.go and options.go were compared at every minor release tag
# from v20.10.24 to v28.5.2 (KEY_RELEASES: the keys not in all of them).
# Types: string, bool, int, strings (array of strings), string-map (object of strings),
# bool-map (object of bools), object, objects (array of objects).
KNOWN_KEYS = {
    "allow-direct-routing": "bool",  # 28.2
    "allow-nondistributable-artifacts": "strings", "api-cors-header": "string",
    "authorization-plugins": "strings", "bip": "string",
    "bip6": "string",  # 28.0
    "bridge": "string", "builder": "object",
    "cdi-spec-dirs": "strings",  # 25.0
    "cgroup-parent": "string", "cluster-advertise": "string", "cluster-store": "string",  # to 23.0
    "cluster-store-opts": "string-map", "containerd": "string", "containerd-namespace": "string",
    "containerd-plugins-namespace": "string", "cpu-rt-period": "int", "cpu-rt-runtime": "int",
    "cri-containerd": "bool", "data-root": "string", "debug": "bool",
    "default-address-pools": "objects", "default-cgroupns-mode": "string", "default-gateway": "string",
    "default-gateway-v6": "string", "default-ipc-mode": "string",
    "default-network-opts": "object",  # 24.0
    "default-runtime": "string", "default-shm-size": "string", "default-ulimits": "object",
    "deprecated-key-path": "string",  # skipValidateOptions: accepted and ignored
    "dns": "strings", "dns-opts": "strings", "dns-search": "strings", "exec-opts": "strings",
    "exec-root": "string", "experimental": "bool", "features": "bool-map", "fixed-cidr": "string",
    "fixed-cidr-v6": "string",
    "graph": "string",  # to 23.0: a hidden flag; the file's "graph" only logs a deprecation warning
    "group": "string", "host-gateway-ip": "string",
    "host-gateway-ips": "strings",  # 28.0
    "hosts": "strings",
    "icc": "bool", "init": "bool", "init-path": "string", "insecure-registries": "strings", "ip": "string",
    "ip-forward": "bool",
    "ip-forward-no-drop": "bool",  # 28.0
    "ip-masq": "bool", "ip6tables": "bool", "iptables": "bool", "ipv6": "bool",
    "labels": "strings", "live-restore": "bool", "log-driver": "string",
    "log-format": "string",  # 25.0
    "log-level": "string", "log-opts": "string-map", "max-concurrent-downloads": "int",
    "max-concurrent-uploads": "int", "max-download-attempts": "int", "metrics-addr": "string",
    "mtu": "int", "network-control-plane-mtu": "int",
    "network-diagnostic-port": "int",  # a hidden flag
    "no-new-privileges": "bool",
    "node-generic-resources": "strings", "oom-score-adjust": "int",  # to 25.0
    "pidfile": "string",
    "proxies": "object",  # 23.0
    "raw-logs": "bool", "registry-mirrors": "strings", "rootless": "bool", "runtimes": "object",
    "seccomp-profile": "string", "selinux-enabled": "bool", "shutdown-timeout": "int",
    "storage-driver": "string", "storage-opts": "strings", "swarm-default-advertise-addr": "string",
    "tls": "bool", "tlscacert": "string", "tlscert": "string", "tlskey": "string", "tlsverify": "bool",
    "userland-proxy": "bool", "userland-proxy-path": "string", "userns-remap": "string",
}

#: The releases the table was checked at (the flags change only at minor releases): the oldest and
#: newest. Outside them a version-gated verdict is not claimed as that release's.
OLDEST_RELEASE, NEWEST_RELEASE = (20, 10), (28, 5)

#: Keys (and flag names, see FLAG_NAME_KEYS) not accepted by every release from 20.10 to 28.5:
#: key -> (first release that accepts it, last release that accepts it); None = no bound.
#: moby cmd/dockerd/config*.go at each tag: cluster-* and graph flags removed in 24.0,
#: oom-score-adjust in 26.0; the proxy flags (and so the "proxies" object, which configValuesSet
#: flattens into them) arrived in 23.0, default-network-opt in 24.0, cdi-spec-dir and log-format in
#: 25.0, feature in 27.3, bip6, ip-forward-no-drop and host-gateway-ips in 28.0, allow-direct-routing
#: in 28.2; validate in 23.0, identity gone in 23.0.
KEY_RELEASES = {
    "allow-direct-routing": ((28, 2), None), "bip6": ((28, 0), None), "cdi-spec-dirs": ((25, 0), None),
    "cluster-advertise": (None, (23, 0)), "cluster-store": (None, (23, 0)), "cluster-store-opts": (None, (23, 0)),
    "default-network-opts": ((24, 0), None), "graph": (None, (23, 0)), "host-gateway-ips": ((28, 0), None),
    "ip-forward-no-drop": ((28, 0), None), "log-format": ((25, 0), None), "oom-score-adjust": (None, (25, 0)),
    "proxies": ((23, 0), None),
    # flag names
    "cdi-spec-dir": ((25, 0), None), "cluster-store-opt": (None, (23, 0)), "default-network-opt": ((24, 0), None),
    "feature": ((27, 3), None), "http-proxy": ((23, 0), None), "https-proxy": ((23, 0), None),
    "identity": (None, (20, 10)), "no-proxy": ((23, 0), None), "validate": ((23, 0), None),
}

#: Flag names dockerd's key check accepts (``flags.Lookup`` finds them) but that no field of its
#: configuration has: dockerd starts and ignores them. -> the daemon.json key that does the job
#: ("" when there is none): FLAG_KEYS' flags, the proxy flags (in the file they go inside
#: "proxies"), and flags that are no setting at all.
FLAG_NAME_KEYS = dict({f: k for f, k in FLAG_KEYS.items() if f != k},
                      **{"http-proxy": "proxies", "https-proxy": "proxies", "no-proxy": "proxies",
                         "config-file": "", "restart": "", "version": "", "validate": "", "identity": ""})


def _fmt(rel):
    return f"{rel[0]}.{rel[1]}"


def _release(version):
    """(major, minor) of ``version``: ``server_version``'s dict, its text, or a pair; None stays None."""
    if version is None:
        return None
    if isinstance(version, dict):
        return int(version["major"]), int(version["minor"])
    if isinstance(version, (tuple, list)):
        return int(version[0]), int(version[1])
    v = server_version(str(version))
    return v["major"], v["minor"]


def _accepts(key, rel):
    """Whether dockerd ``rel`` ((major, minor)) passes ``key``; outside the table, the nearest release."""
    first, last = KEY_RELEASES.get(key, (None, None))
    rel = min(max(rel, OLDEST_RELEASE), NEWEST_RELEASE)
    return (first is None or rel >= first) and (last is None or rel <= last)


def _span(key):
    """The releases that accept ``key``, in words."""
    first, last = KEY_RELEASES.get(key, (None, None))
    if first and last:
        return f"dockerd {_fmt(first)} to {_fmt(last)}"
    if first:
        return f"dockerd {_fmt(first)} and later"
    if last:
        return f"dockerd up to {_fmt(last)}"
    return f"every dockerd from {_fmt(OLDEST_RELEASE)} on"


def known_keys(version=None):
    """key -> JSON type of the daemon.json keys dockerd ``version`` accepts; every release's keys
    (``KNOWN_KEYS``) when the version is unknown, so that no key some release accepts is refused."""
    rel = _release(version)
    if rel is None:
        return dict(KNOWN_KEYS)
    return {k: t for k, t in KNOWN_KEYS.items() if _accepts(k, rel)}


_TYPE_WORDS = {
    "string": 'a string ("...")', "bool": "true or false", "int": "a whole number (no quotes)",
    "strings": 'an array of strings (["..."])', "string-map": 'an object of strings ({"k": "v"}; '
    'numbers quoted)', "bool-map": "an object of true/false values", "object": "an object ({...})",
    "objects": "an array of objects ([{...}])",
}

KeyProblem = namedtuple("KeyProblem", "key message")

# Registry values, as dockerd's registry service reads them at start (moby registry/config.go,
# 20.10 and later: LoadInsecureRegistries / newServiceConfig, LoadMirrors / ValidateMirror,
# LoadAllowNondistributableArtifacts, validateHostPort with distribution/reference's
# DomainRegexp, ValidateIndexName). A bad one stops dockerd ("insecure registry x is not valid").
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST_PORT = re.compile(rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$")


def _ip(text):
    import ipaddress

    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _cidr(text):
    import ipaddress

    if "/" not in text:
        return False
    try:
        ipaddress.ip_network(text, strict=False)
        return True
    except ValueError:
        return False


def _host_port_problem(value):
    """dockerd's validateHostPort: None when ``value`` is host[:port] (or an IP), else why not."""
    host, port = value, ""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            return f'invalid host "{value}"'
    elif value.count(":") == 1:
        host, port = value.split(":")
    if not _HOST_PORT.match(value) and not _ip(host):
        return f'invalid host "{host}"'
    if port:
        if not port.isdigit():
            return f'invalid port "{port}"'
        if int(port) > 65535:
            return f'invalid port "{port}"'
    return None


def registry_problem(key, value):
    """Why dockerd refuses one entry of ``insecure-registries``, ``allow-nondistributable-artifacts``
    or ``registry-mirrors`` at start, with the fix; None when it accepts it."""
    if not isinstance(value, str) or not value:
        return f"'{key}' entry {json.dumps(value)} is not a registry"
    if key == "registry-mirrors":
        from urllib.parse import urlsplit

        try:
            uri = urlsplit(value)
        except ValueError:
            uri = None
        if uri is None or uri.scheme not in ("http", "https") or not uri.netloc:
            return (f"'registry-mirrors' entry {json.dumps(value)} is not an http(s) URL (dockerd: invalid mirror). "
                    "Fix: give the mirror as https://host[:port]")
        if uri.path not in ("", "/") or uri.query or uri.fragment or uri.username or uri.password:
            return (f"'registry-mirrors' entry {json.dumps(value)} has a path, query, fragment or credentials "
                    "(dockerd: invalid mirror). Fix: give only https://host[:port]")
        return None
    name = value
    if name.lower().startswith("index."):
        name = name[len("index."):]
    if name.startswith("-") or name.endswith("-"):
        return (f"'{key}' entry {json.dumps(value)} begins or ends with a hyphen (dockerd: invalid index name). "
                "Fix: give host[:port] or a CIDR")
    if "://" in name:
        scheme, _, rest = name.partition("://")
        if key == "insecure-registries" and scheme.lower() in ("http", "https"):
            name = rest  # dockerd strips it, with a warning
        else:
            return (f"'{key}' entry {json.dumps(value)} should not contain '://' (dockerd refuses to start). "
                    "Fix: give host[:port] or a CIDR, without a scheme")
    if _cidr(name):
        return None
    why = _host_port_problem(name)
    if why:
        return (f"'{key}' entry {json.dumps(value)} is not valid: {why} (dockerd refuses to start). "
                "Fix: give host[:port] (e.g. registry.example.com:5000) or a CIDR (e.g. 10.0.0.0/8)")
    return None


REGISTRY_KEYS = ("insecure-registries", "allow-nondistributable-artifacts", "registry-mirrors")

#: The log drivers dockerd has built in (daemon/logger/*; a plugin is named with a "/" or ":tag").
LOG_DRIVERS = ("json-file", "local", "journald", "syslog", "gelf", "fluentd", "awslogs", "splunk", "gcplogs",
               "logentries", "etwlogs", "none")
# The log options of the drivers gpucluster configures (moby daemon/logger/jsonfilelog and local:
# ValidateLogOpt's accepted keys; New() reads max-size with go-units' RAMInBytes and max-file with
# Atoi, at least 1). dockerd takes the file, but every container it then creates fails to start
# its logger, the training container included.
LOG_OPTS = {
    "json-file": ("max-file", "max-size", "compress", "labels", "labels-regex", "env", "env-regex", "tag"),
    "local": ("max-file", "max-size", "compress"),
}
#: Options of every log driver (but "none"), taken out before the driver's own validator runs: moby
#: daemon/logger/factory.go ``builtInLogOpts`` (v20.10.24 .. v28.3.2) and ValidateLogOpts, which
#: dockerd also runs on the daemon.json defaults at start (daemon/logs.go setupDefaultLogConfig:
#: "failed to set log opts: ...").
BUILTIN_LOG_OPTS = ("mode", "max-buffer-size")
LOG_MODES = ("blocking", "non-blocking")
_RAM_IN_BYTES = re.compile(r"^(\d+(\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?$")


def log_opts_problems(driver, opts):
    """Why containers under ``driver`` with ``opts`` (daemon.json ``log-opts``) would not start, with
    the fix. The built-in ``mode`` and ``max-buffer-size`` are checked for every driver but "none";
    the driver's own options only for json-file and local, the ones this knows."""
    if not isinstance(opts, dict) or driver == "none":
        return []
    out = []
    mode = opts.get("mode", "")
    if mode not in ("",) + LOG_MODES:
        out.append(f"'log-opts.mode' is {json.dumps(mode)}; dockerd refuses to start (\"failed to set log opts: "
                   f"logger: logging mode not supported: {mode}\"). Fix: give \"blocking\" (the default) or "
                   "\"non-blocking\"")
    elif "max-buffer-size" in opts and mode != "non-blocking":
        out.append("'log-opts.max-buffer-size' is set without mode \"non-blocking\"; dockerd refuses to start "
                   "(\"logger: max-buffer-size option is only supported with 'mode=non-blocking'\"). Fix: add "
                   "\"mode\": \"non-blocking\", or remove max-buffer-size")
    elif "max-buffer-size" in opts and not _RAM_IN_BYTES.match(str(opts["max-buffer-size"])):
        out.append(f"'log-opts.max-buffer-size' is {json.dumps(opts['max-buffer-size'])}, not a size; dockerd refuses "
                   "to start (\"error parsing option max-buffer-size\"). Fix: give a size such as \"4m\"")
    if driver not in LOG_OPTS:
        return out
    for key, value in opts.items():
        if key in BUILTIN_LOG_OPTS:
            continue
        if key not in LOG_OPTS[driver]:
            out.append(f"'log-opts.{key}' is not an option of the {driver} log driver (\"unknown log opt '{key}' "
                       f"for {driver} log driver\"). Fix: use one of {', '.join(LOG_OPTS[driver] + BUILTIN_LOG_OPTS)}, "
                       "or remove it")
        elif key == "max-size" and not _RAM_IN_BYTES.match(str(value)):
            out.append(f"'log-opts.max-size' is {json.dumps(value)}, not a size; every container would fail to "
                       "start its logger. Fix: give a size such as \"100m\" (docker_log_max_size)")
        elif key == "max-file" and not (str(value).isdigit() and int(value) >= 1):
            out.append(f"'log-opts.max-file' is {json.dumps(value)}; the {driver} driver needs a whole number of at "
                       "least 1. Fix: give e.g. \"3\" (docker_log_max_file)")
        elif key == "compress" and str(value).lower() not in ("1", "t", "true", "0", "f", "false"):
            out.append(f"'log-opts.compress' is {json.dumps(value)}, not true or false. "
                       "Fix: give \"true\" or \"false\"")
    return out


def _json_type(value):
    """The JSON type of a decoded value, as dockerd's decoder names it (Ansible's tagged str is a str)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def _type_ok(kind, value):
    if kind == "string":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "string-map":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    if kind == "bool-map":
        return isinstance(value, dict) and all(isinstance(v, bool) for v in value.values())
    if kind == "object":
        return isinstance(value, dict)
    if kind == "objects":
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    return True


def check_keys(cfg, keys=None, known=None, version=None):
    """dockerd's check of daemon.json keys and value types -> list of ``KeyProblem``.

    ``keys``: the top-level keys to check (default: all of ``cfg``); ``known``: key -> type
    (default ``known_keys(version)``); ``version``: the dockerd release that reads the file (see
    ``_release``), None when unknown: then a key is refused only when no release from 20.10 to 28.5
    accepts it. An unknown key gets the closest known names as the fix; a flag's name (``label``,
    ``insecure-registry``) is accepted by dockerd and ignored, and reported as such; a wrong type
    names the type dockerd's JSON decoder needs. Nested checks: ``default-ulimits.<n>`` needs
    ``Name`` (string), ``Hard``/``Soft`` (whole numbers), ``runtimes.<n>`` an object with a
    ``path`` string or a ``runtimeType``.
    """
    import difflib

    rel = _release(version)
    known = known_keys(version) if known is None else known
    out = []
    for key in (cfg if keys is None else keys):
        if key not in cfg:
            continue
        value = cfg[key]
        if key in FLAG_NAME_KEYS and (rel is None or _accepts(key, rel)):
            target = FLAG_NAME_KEYS[key]
            hint = f" Did you mean {target!r}?" if target else ""
            out.append(KeyProblem(key, (
                f"'{key}' is the name of dockerd's flag --{key}, not a daemon.json setting: dockerd starts but ignores "
                f"it (no configuration field reads it).{hint} Fix: "
                + (f"use '{target}' (docs.docker.com/reference/cli/dockerd/#daemon-configuration-file)."
                   if target else "remove it.")
                + (f" Only {_span(key)} accept the key at all; older or newer ones refuse to start."
                   if key in KEY_RELEASES else ""))))
            continue
        if key not in known:
            near = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
            if rel is None:
                who = (f"no dockerd from {_fmt(OLDEST_RELEASE)} to {_fmt(NEWEST_RELEASE)} knows it, and dockerd "
                       "refuses to start")
            elif rel > NEWEST_RELEASE or rel < OLDEST_RELEASE:
                who = (f"no dockerd from {_fmt(OLDEST_RELEASE)} to {_fmt(NEWEST_RELEASE)} knows it (dockerd "
                       f"{_fmt(rel)} is outside that range: `dockerd --validate` has the last word)")
            elif key in KNOWN_KEYS or key in FLAG_NAME_KEYS:
                who = f"dockerd {_fmt(rel)} does not know it (only {_span(key)} do) and refuses to start"
            else:
                who = f"dockerd {_fmt(rel)} does not know it and refuses to start"
            out.append(KeyProblem(key, (
                f"'{key}' is not a daemon.json key: {who} (\"the following "
                f"directives don't match any configuration option: {key}\").{hint} Fix: correct or remove it "
                "(docs.docker.com/reference/cli/dockerd/#daemon-configuration-file lists the keys).")))
            continue
        kind = known[key]
        if not _type_ok(kind, value):
            out.append(KeyProblem(key, (
                f"'{key}' is {json.dumps(value)} ({_json_type(value)}); dockerd needs {_TYPE_WORDS[kind]} "
                f"and refuses to start (\"json: cannot unmarshal\"). Fix: give '{key}' {_TYPE_WORDS[kind]}.")))
            continue
        if key == "graph" and "data-root" in cfg:
            # config.go @v20.10.24: `cannot specify both "graph" and "data-root" config file options`
            out.append(KeyProblem(key, (
                "'graph' and 'data-root' are both set; dockerd refuses to start (\"cannot specify both \\\"graph\\\" "
                "and \\\"data-root\\\" config file options\"). Fix: keep 'data-root' only ('graph' is its deprecated "
                "name, gone in 24.0).")))
        if key in ("bip", "fixed-cidr", "fixed-cidr-v6") and value and not _cidr(value):
            out.append(KeyProblem(key, (
                f"'{key}' is {json.dumps(value)}, not an address with its prefix length (dockerd refuses to start). "
                f"Fix: give CIDR notation, e.g. \"172.26.0.1/16\"")))
        if key == "default-address-pools":
            for pool in value:
                if not _cidr(str(pool.get("base", ""))) or not isinstance(pool.get("size"), int):
                    out.append(KeyProblem(key, (
                        f"'default-address-pools' entry {json.dumps(pool)} needs a CIDR \"base\" and a whole-number "
                        "\"size\" (dockerd refuses to start). Fix: e.g. {\"base\": \"10.203.0.0/16\", \"size\": 24}")))
        if key == "log-driver" and value not in LOG_DRIVERS and not re.search(r"[/:]", value):
            near = difflib.get_close_matches(value, LOG_DRIVERS, n=1, cutoff=0.6)
            out.append(KeyProblem(key, (
                f"'log-driver' is {json.dumps(value)}, a log driver dockerd does not have (it refuses to start)."
                f"{' Did you mean ' + repr(near[0]) + '?' if near else ''} Fix: use one of {', '.join(LOG_DRIVERS)} "
                "(docker_log_driver), or a plugin's name with its tag.")))
        if key == "log-opts":
            driver = cfg.get("log-driver", "json-file")
            out.extend(KeyProblem(key, why + ".") for why in log_opts_problems(driver, value))
        if key in REGISTRY_KEYS:
            for entry in value:
                why = registry_problem(key, entry)
                if why:
                    out.append(KeyProblem(key, why + "."))
        if key == "default-ulimits":
            for name, spec in value.items():
                bad = not isinstance(spec, dict) or any(
                    k in spec and not (isinstance(spec[k], int) and not isinstance(spec[k], bool))
                    for k in ("Hard", "Soft")) or not isinstance(spec.get("Name", name), str)
                if bad:
                    out.append(KeyProblem(key, (
                        f"'default-ulimits.{name}' is {json.dumps(spec)}; dockerd needs "
                        f'{{"Name": "{name}", "Hard": <whole number>, "Soft": <whole number>}} (-1: unlimited). '
                        "Fix: give Hard and Soft as numbers, not strings.")))
        if key == "runtimes":
            for name, spec in value.items():
                if not isinstance(spec, dict) or not (isinstance(spec.get("path"), str)
                                                      or isinstance(spec.get("runtimeType"), str)):
                    out.append(KeyProblem(key, (
                        f"'runtimes.{name}' is {json.dumps(spec)}; dockerd needs an object with a \"path\" "
                        "string (and optional \"runtimeArgs\" array). Fix: "
                        f'"runtimes": {{"{name}": {{"path": "/usr/bin/<runtime>"}}}}.')))
    return out


# --------------------------------------------------------------------------------------------
# ownership: which keys gpucluster manages, what a rerun removes
# --------------------------------------------------------------------------------------------

Ownership = namedtuple("Ownership", "config changed removed kept taken_over")


def leaves(cfg, prefix=()):
    """[(path tuple, value)]: non-empty objects recurse, anything else (lists too) is a leaf."""
    out = []
    for key, value in cfg.items():
        path = prefix + (key,)
        if isinstance(value, dict) and value:
            out.extend(leaves(value, path))
        else:
            out.append((path, value))
    return out


_MISSING = object()


def _get_exact(cfg, path):
    node = cfg
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _delete_exact(cfg, path):
    """Delete ``path``; objects left empty by it are deleted too."""
    parents = [cfg]
    for key in path[:-1]:
        parents.append(parents[-1][key])
    del parents[-1][path[-1]]
    for depth in range(len(path) - 1, 0, -1):
        if parents[depth]:
            break
        del parents[depth - 1][path[depth - 1]]


def dotted(path):
    return ".".join(path)


def merge_contributions(contributions):
    """[(name, dict)] in order -> one dict; raises ValueError when two set one leaf differently.

    Lists are unioned (as ``merge`` does); two contributions giving one scalar leaf different
    values is a conflict between roles that no order should silently settle.
    """
    out, owner = {}, {}
    for name, cfg in contributions:
        if not isinstance(cfg, dict):
            raise ValueError(f"contribution '{name}' is a {type(cfg).__name__}, not a JSON object")
        for path, value in leaves(cfg):
            if isinstance(value, list):
                continue
            prev = _get_exact(out, path)
            if prev is not _MISSING and prev != value:
                raise ValueError(
                    f"'{dotted(path)}' is {json.dumps(prev)} from '{owner[path]}' and {json.dumps(value)} "
                    f"from '{name}'; one daemon.json key has one owner. Fix: set it in one of them only.")
            owner[path] = name
        out = merge(out, cfg)
    return out


def root_move_problem(probe, wanted):
    """Why a new ``data-root`` (``wanted``) would lose the running engine's data, with the fix; None
    when it would not.

    ``probe``: ``"<DockerRootDir> <Containers> <Images> <populated>"`` as the docker role reads it
    (``docker info``; ``populated`` is 1 when ``wanted``/containers already holds entries), or empty
    when no engine answers. dockerd started on another root finds none of the containers, images
    and volumes of the old one (they stay on disk there), so the training container and every
    other container vanish from ``docker ps``. A new root that already holds an engine's data was
    moved there on purpose, and is accepted.
    """
    parts = str(probe or "").split()
    if len(parts) < 3 or not wanted:
        return None
    root, containers, images = parts[0].rstrip("/") or "/", parts[1], parts[2]
    populated = len(parts) > 3 and parts[3] == "1"
    if root == str(wanted).rstrip("/") or populated:
        return None
    if not (containers.isdigit() and images.isdigit()) or int(containers) + int(images) == 0:
        return None
    return (f"data-root {wanted} would move dockerd off {root}, where its {containers} container(s) and {images} "
            f"image(s) are: dockerd would start on an empty root and they would vanish from it (the training "
            f"container included; the files stay under {root}). Fix: stop docker and copy the old root first "
            f"(rsync -aHX {root}/ {str(wanted).rstrip('/')}/), or set the data-root back to {root}")


#: Storage drivers Docker deprecated, then disabled (23.0) and removed: docker/cli
#: docs/deprecated.md (legacy overlay and aufs removed in 24.0, devicemapper in 25.0). dockerd 23
#: and later does not start on them; overlay2 is the default everywhere since 18.09.
REMOVED_STORAGE_DRIVERS = {"overlay": "24.0", "aufs": "24.0", "devicemapper": "25.0"}


def storage_driver_problem(config):
    """What is wrong with the ``storage-driver`` this run would write (``config``: the merged keys of
    gpucluster's sources; a driver only in the user's own file is theirs), or ``""``."""
    driver = config.get("storage-driver") if isinstance(config, dict) else None
    if driver not in REMOVED_STORAGE_DRIVERS:
        return ""
    return (f"'storage-driver' is {json.dumps(driver)}, deprecated since Docker 18.09, disabled in 23.0 and removed "
            f"in {REMOVED_STORAGE_DRIVERS[driver]}: dockerd 23 and later does not start on it. Fix: use \"overlay2\" "
            "(the default; leave storage-driver out), moving the images over with docker save/load.")


def plan_problems(contributions, version=None):
    """What dockerd would refuse in the daemon.json that ``contributions`` ([(name, dict)], in
    merge order) make, before any file or node is touched -> list of messages with the fix.
    ``version``: the dockerd release, where known (``check_keys``); preflight knows none.

    The docker role's own check (``docker_daemon_json``) runs the same two steps when it writes
    the file; preflight runs them first so that a bad key stops the run before any stage.
    """
    try:
        merged = merge_contributions(contributions)
        return [p.message for p in check_keys(merged, version=version)] + [
            m for m in [storage_driver_problem(merged)] if m]
    except ValueError as exc:  # two sources disagree: report that, and what each source has wrong
        out = [str(exc)]
        for _name, cfg in contributions:
            out += [p.message for p in check_keys(cfg, version=version) if p.message not in out] if isinstance(
                cfg, dict) else []
        return out


def own(existing, desired, previous=None, remove=()):
    """daemon.json after this run, given what gpucluster managed before -> ``Ownership``.

    ``existing``: the file now; ``desired``: every key gpucluster wants this run (the docker role's
    settings merged with the other roles' contributions); ``previous``: what it wanted on the last
    run (the record on the node, ``{}`` on the first run); ``remove``: paths to take out anyway.

    Rules, per leaf (an object's scalar members and lists; see ``leaves``):
    - a leaf gpucluster set before and not now is deleted, if the file still holds the value
      gpucluster wrote; one the user changed by hand since is kept (``kept``) and reported;
    - list items gpucluster added before and not now are taken out of the list; the user's items stay;
    - a desired leaf wins over the file's value; a value that was the user's before (not in
      ``previous``) is reported in ``taken_over`` (the backup keeps it);
    - every other key, the user's, is left as it is, in its place.
    ``changed``: dotted top-level keys whose value differs between ``existing`` and ``config``.
    """
    previous = previous or {}
    out = copy.deepcopy(existing)
    want = dict(leaves(desired))
    removed, kept, taken = [], [], []
    for path, old in leaves(previous):
        cur = _get_exact(out, path)
        if cur is _MISSING:
            continue
        new = want.get(path, _MISSING)
        if isinstance(old, list) and isinstance(cur, list):
            gone = [x for x in old if not (isinstance(new, list) and x in new)]
            left = [x for x in cur if x not in gone]
            if not left and new is _MISSING:
                _delete_exact(out, path)  # the list was all gpucluster's: the key goes
                removed.append(dotted(path))
            elif left != cur:
                parent = _get_exact(out, path[:-1]) if len(path) > 1 else out
                parent[path[-1]] = left
                removed.append(dotted(path))
            continue
        if new is not _MISSING:
            continue
        if cur == old:
            _delete_exact(out, path)
            removed.append(dotted(path))
        else:
            kept.append(dotted(path))
    for path, value in want.items():
        cur = _get_exact(existing, path)
        if cur is _MISSING or isinstance(value, list) or cur == value:
            continue
        if _get_exact(previous, path) is _MISSING:
            taken.append((dotted(path), cur, value))
    out = merge(out, desired, remove)
    changed = [k for k in dict.fromkeys(list(existing) + list(out))
               if existing.get(k, _MISSING) != out.get(k, _MISSING)]
    return Ownership(out, changed, removed, kept, taken)


#: ``docker info --format '{{.ServerVersion}}'`` (moby API ``/info`` ``ServerVersion``): the engine's
#: version as its packager built it: ``20.10.24+dfsg1`` (Debian 12 docker.io), ``26.1.3`` (Ubuntu),
#: ``28.3.2`` (docker-ce), ``17.03.2-ce`` (old docker-ce); a source build may print ``dev``.
_SERVER_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:[-+~][0-9A-Za-z.+~-]*)?$")


def server_version(text):
    """``{"version", "major", "minor", "patch"}`` of the engine's ``ServerVersion`` output.

    ValueError naming the text when it is empty (dockerd not answering) or not a release version
    (a ``dev`` build), so that no version-gated decision is taken on a guess.
    """
    if not isinstance(text, str):
        raise ValueError(f"Docker server version: expected text, got {type(text).__name__}")
    value = text.strip()
    if not value:
        raise ValueError("Docker server version: empty output; dockerd did not answer `docker info` "
                         "(systemctl status docker)")
    m = _SERVER_VERSION.match(value)
    if not m:
        raise ValueError(f"Docker server version: {value!r} is not a release version (major.minor[.patch]); "
                         "a development build has no version to gate features on")
    return {"version": value, "major": int(m.group(1)), "minor": int(m.group(2)), "patch": int(m.group(3) or 0)}
