r"""dpkg's own answers about packages, read without python-apt. Pure functions, stdlib only.

- Which wanted packages are not installed (at their version): :func:`parse_query` and
  :func:`unsatisfied` read one ``dpkg-query -W`` (module ``dpkg_status``),
  so a stage whose packages are all in place skips its apt task, which opens the whole apt cache
  (python-apt) even when it has nothing to do.
- Selections (hold / install) of many packages at once: read ``dpkg --get-selections``, say
  what has to change, write it back in one ``dpkg --set-selections`` (module ``dpkg_holds``).

``dpkg-query -W -f '${binary:Package}\t${Version}\t${db:Status-Abbrev}\n' <name>...`` (dpkg-query(1);
``db:Status-Abbrev`` since dpkg 1.16.2): one line per package instance known to dpkg, the name
with ``:<arch>`` for Multi-Arch: same and foreign packages, the version, and the three status
letters (desired, current, error; ``ii `` = wanted and installed, ``rc `` = removed with its
configuration files left, ``hi `` = held and installed, ``iU `` = unpacked, not configured). A name
dpkg does not know gives ``dpkg-query: no packages found matching <name>`` on stderr and exit
status 1, and the other names are still printed.

The selections grammar, from dpkg's own source (``src/main/select.c``, ``getselections``/``setselections``,
dpkg 1.17 to 1.22, and Debian's dpkg(1)):

- ``--get-selections [pattern...]`` prints one line per package whose selection is known:
  the name, a run of tabs (``6 - len(name) // 8`` of them, at least one) and the selection, one
  of ``install``, ``hold``, ``deinstall``, ``purge`` (``unknown`` is never printed). The name is
  ``pkg_name(pnaw_nonambig)``: it carries ``:<arch>`` when the package is Multi-Arch: same or of a
  foreign architecture (``libc6:amd64``), even when the query named it without one.
- a pattern that matches nothing prints ``dpkg: no packages found matching <pattern>`` on stderr
  and the exit status stays 0.
- ``--set-selections`` reads ``<package> <selection>`` lines (any white space between, ``#``
  comments and blank lines ignored); a package that dpkg knows neither as installed nor as
  available is skipped with a warning, so a hold asked for such a package would silently not
  happen: :func:`plan_selections` refuses it instead.
"""

from __future__ import annotations

SELECTIONS = ("install", "hold", "deinstall", "purge")
QUERY_FORMAT = "${binary:Package}\t${Version}\t${db:Status-Abbrev}\n"


def parse_query(text: str) -> dict[str, str]:
    """``{package: version}`` of the packages that are installed (current status ``i``: ``ii``,
    ``hi``) in ``dpkg-query -W -f QUERY_FORMAT`` output; an architecture-qualified name is also
    recorded under its bare name. Half-installed, unpacked or removed packages are left out."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3:
            continue
        name, version, status = fields[0].strip(), fields[1].strip(), fields[2]
        if len(status) < 2 or status[1] != "i" or not name or not version:
            continue
        out[name] = version
        if ":" in name:
            out.setdefault(name.split(":", 1)[0], version)
    return out


# db:Status-Abbrev's first letter, the desired state: dpkg's selection (dpkg-query(1)).
WANT = {"u": "unknown", "i": "install", "h": "hold", "r": "deinstall", "p": "purge"}


def parse_wants(text: str) -> dict[str, str]:
    """``{package: selection}`` (``install``, ``hold``, ``deinstall``, ``purge``, ``unknown``) of
    every package instance in ``dpkg-query -W -f QUERY_FORMAT`` output, installed or not, from the
    desired-state letter of ``db:Status-Abbrev``: what ``dpkg --get-selections`` prints for it. An
    architecture-qualified name is also recorded under its bare name (the first instance's)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or not fields[0].strip() or not fields[2]:
            continue
        name, want = fields[0].strip(), WANT.get(fields[2][0])
        if want is None:
            continue
        out[name] = want
        if ":" in name:
            out.setdefault(name.split(":", 1)[0], want)
    return out


def unsatisfied(installed: dict[str, str], wanted: list[str]) -> list[str]:
    """The entries of ``wanted`` (apt's ``name``, ``name=version`` or ``name=version*``) that
    ``installed`` (:func:`parse_query`) does not satisfy, in their order. ``version*`` is a prefix,
    as apt reads it."""
    out = []
    for entry in wanted:
        name, _, version = str(entry).partition("=")
        have = installed.get(name)
        if have is None:
            out.append(entry)
        elif version.endswith("*"):
            if not have.startswith(version[:-1]):
                out.append(entry)
        elif version and have != version:
            out.append(entry)
    return out


def parse_selections(text: str) -> dict[str, str]:
    """``{package: selection}`` from ``dpkg --get-selections`` output. A name printed with its
    architecture (``libc6:amd64``) is also recorded under its bare name, so a query by bare name
    finds it; lines that are not ``<name> <selection>`` (stderr mixed in) are ignored."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 2 or fields[1] not in SELECTIONS:
            continue
        name, selection = fields
        out[name] = selection
        if ":" in name:
            out.setdefault(name.split(":", 1)[0], selection)
    return out


def plan_selections(names: list[str], selection: str, current: dict[str, str]) -> dict[str, object]:
    """What ``dpkg --set-selections`` has to be given so that every package of ``names`` has
    ``selection`` (``hold`` or ``install``).

    Returns ``{"changes": [(name, before, after)], "missing": [names dpkg does not know]}``, in
    the order of ``names`` without repeats. A package dpkg does not know needs nothing for
    ``install`` (nothing to release) and is ``missing`` for ``hold`` (dpkg would skip it)."""
    if selection not in ("hold", "install"):
        raise ValueError(f"selection {selection!r}: use hold or install")
    changes: list[tuple[str, str, str]] = []
    missing: list[str] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        before = current.get(name)
        if before is None:
            if selection == "hold":
                missing.append(name)
            continue
        if before != selection:
            changes.append((name, before, selection))
    return {"changes": changes, "missing": missing}


def set_selections_input(changes: list[tuple[str, str, str]]) -> str:
    """stdin of ``dpkg --set-selections`` for ``changes``."""
    return "".join(f"{name} {after}\n" for name, _before, after in changes)


def render(selections: dict[str, str], names: list[str]) -> str:
    """``name selection`` lines of ``names`` (diff text); an unknown package reads ``-``."""
    return "".join(f"{n} {selections.get(n, '-')}\n" for n in dict.fromkeys(names))


def command(binary: str, admindir: str | None) -> list[str]:
    """argv prefix of dpkg or dpkg-query at ``binary``, on ``admindir`` when given."""
    return [binary] + ([f"--admindir={admindir}"] if admindir else [])
