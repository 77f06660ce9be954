"""dpkg selections (hold / install) of many packages at once: read ``dpkg --get-selections``,
say what has to change, write it back in one ``dpkg --set-selections``. Pure functions, stdlib
only (module ``dpkg_holds``).

The grammar, from dpkg's own source (``src/main/select.c``, ``getselections``/``setselections``,
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
