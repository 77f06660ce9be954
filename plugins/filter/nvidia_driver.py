"""Jinja filters of the nvidia_driver role: apt sources, driver versions, branch checks.

Pure functions over text the node prints (apt source files, ``apt-cache madison``),
unit-tested in ``tests/unit/roles/test_nvidia_driver_filters.py``.

Sources of the formats:

- one-line sources: sources.list(5), "ONE-LINE-STYLE FORMAT":
  ``deb [ option1=value1 option2=value2 ] uri suite [component1] [component2] [...]``;
- deb822 sources: sources.list(5), "DEB822-STYLE FORMAT": stanzas of ``Types``, ``URIs``,
  ``Suites``, ``Components``, ``Signed-By`` (possibly a multi-line inline key), separated by
  blank lines; ``Enabled: no`` disables a stanza;
- ``apt-cache madison``: ``<package> | <version> | <uri> <suite>/<component> <arch> Packages``,
  newest version first (apt-cache(8));
- Debian versions: ``[epoch:]upstream[-revision]`` (deb-version(7)); NVIDIA's upstream is
  ``<branch>.<minor>[.<patch>]`` (535.261.03, 550.54.15).
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.systemd import parse_show
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import value_errors

BRANCH_MIN, BRANCH_MAX = 100, 999
_VERSION_RE = re.compile(r"^(\d{3})\.\d+(?:\.\d+)?$")


class SourcesError(ValueError):
    """A source file that cannot be read (a stanza without URIs, a cut one-line entry)."""


def _split_deb822(text):
    stanzas, cur = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                stanzas.append(cur)
                cur = []
            continue
        cur.append(line)
    if cur:
        stanzas.append(cur)
    return stanzas


def _parse_deb822(text, path):
    entries = []
    for lines in _split_deb822(text):
        fields, key = {}, None
        for line in lines:
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line
                continue
            if ":" not in line:
                raise SourcesError(f"{path}: expected 'Field: value', got {line.strip()!r}")
            key, value = line.split(":", 1)
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "uris" not in fields or "suites" not in fields:
            raise SourcesError(f"{path}: a stanza without URIs or Suites: {lines[0].strip()!r}")
        entries.append({
            "file": path,
            "types": fields.get("types", "deb").split(),
            "uris": fields["uris"].split(),
            "suites": fields["suites"].split(),
            "components": fields.get("components", "").split(),
            "signed_by": fields.get("signed-by", ""),
        })
    return entries


_ONE_LINE_RE = re.compile(r"^(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)((?:\s+\S+)*)\s*$")


def _parse_one_line(text, path):
    entries = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _ONE_LINE_RE.match(line)
        if not m:
            raise SourcesError(f"{path} line {lineno}: expected 'deb [options] uri suite components', "
                               f"got {raw.strip()!r}")
        options = dict(o.split("=", 1) for o in (m.group(2) or "").split() if "=" in o)
        entries.append({
            "file": path,
            "types": [m.group(1)],
            "uris": [m.group(3)],
            "suites": [m.group(4)],
            "components": m.group(5).split(),
            "signed_by": options.get("signed-by", ""),
        })
    return entries


def parse_sources(files):
    """Every apt source entry in ``files`` ({path: text}); ``.sources`` files are deb822.

    Returns a list of ``{"file", "types", "uris", "suites", "components", "signed_by"}``.
    Raises SourcesError on a line or stanza apt would not read either.
    """
    entries = []
    for path in sorted(files):
        text = files[path] or ""
        if path.endswith(".sources"):
            entries.extend(_parse_deb822(text, path))
        else:
            entries.extend(_parse_one_line(text, path))
    return entries


def sources_missing_components(files, codename, components, exclude_files=()):
    """The deb822 stanzas that add ``components`` to the node's own archive for ``codename``.

    For every (URI, suite) of a ``deb`` entry whose suite is ``codename`` or
    ``codename-<pocket>`` (updates, security ...) and which carries ``main``, the components
    of ``components`` that no entry for that (URI, suite) has yet. URIs and Signed-By are
    copied, so apt sees the same repository with the same key (apt refuses two Signed-By
    values for one source). ``exclude_files``: this role's own file, read back on a rerun.

    Returns ``[{"uris": [...], "suites": [...], "components": [...], "signed_by": "..."}]``,
    empty when every component is already there. Raises SourcesError when no such archive
    entry exists (the node has no source to copy).
    """
    entries = [e for e in parse_sources({p: t for p, t in files.items() if p not in exclude_files})
               if "deb" in e["types"]]
    have, keys, archive = {}, {}, []
    suite_re = re.compile(rf"^{re.escape(codename)}(?:-[a-z]+)?$")
    for e in entries:
        for uri in e["uris"]:
            for suite in e["suites"]:
                if not suite_re.match(suite):
                    continue
                key = (uri.rstrip("/"), suite)
                have.setdefault(key, set()).update(e["components"])
                keys.setdefault(key, e["signed_by"])
                if "main" in e["components"] and key not in archive:
                    archive.append(key)
    if not archive:
        raise SourcesError(f"no apt source for {codename!r} with component main: nothing to add "
                           f"{' '.join(components)} to")
    grouped = {}
    for key in archive:
        missing = [c for c in components if c not in have[key]]
        if not missing:
            continue
        uri, suite = key
        group = (uri, keys[key], tuple(missing))
        grouped.setdefault(group, []).append(suite)
    return [{"uris": [uri], "suites": suites, "components": list(missing), "signed_by": signed_by}
            for (uri, signed_by, missing), suites in grouped.items()]


def upstream(version):
    """Upstream part of a Debian version: ``1:535.261.03-1~deb12u1`` -> ``535.261.03``."""
    v = str(version).strip()
    v = v.split(":", 1)[1] if ":" in v else v
    return v.rsplit("-", 1)[0] if "-" in v else v


def madison_versions(text):
    """Versions in ``apt-cache madison`` output, newest first, without duplicates."""
    out = []
    for lineno, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or not parts[1]:
            raise SourcesError(f"apt-cache madison line {lineno}: expected 'package | version | source', "
                               f"got {line.strip()!r}")
        if parts[1] not in out:
            out.append(parts[1])
    return out


def branch_problems(branch, version=""):
    """What is wrong with a driver branch and exact version (empty list when both fit).

    A branch is NVIDIA's three-digit major (R535 -> 535); a version is
    ``<branch>.<minor>[.<patch>]`` of that branch (NVIDIA driver release notes).
    """
    problems = []
    try:
        b = int(branch)
    except (TypeError, ValueError):
        return [f"nvidia_driver_branch: {branch!r} is not a driver branch. Fix: the three-digit major, "
                f"e.g. 535 or 570"]
    if not BRANCH_MIN <= b <= BRANCH_MAX:
        problems.append(f"nvidia_driver_branch: {branch!r} is not a driver branch (three digits, like 535 "
                        f"for R535). Fix: e.g. 535 or 570")
    if version:
        m = _VERSION_RE.match(str(version))
        if not m:
            problems.append(f"nvidia_driver_version: {version!r} is not an NVIDIA driver version. Fix: the "
                            f"upstream version as nvidia-smi prints it, e.g. 535.261.03, or empty")
        elif int(m.group(1)) != b:
            problems.append(f"nvidia_driver_version: {version} is not of branch {b}. Fix: set "
                            f"nvidia_driver_branch: {m.group(1)} or a {b}.x version")
    return problems


def _keeps_installed(branch, wanted, installed):
    return not wanted and bool(installed) and upstream(installed).startswith(f"{int(branch)}.")


def needs_sources(branch, wanted="", installed=""):
    """Whether :func:`pick_version` needs what the sources offer (``apt-cache madison``): not
    when it keeps the installed version (no version asked, the installed one of the branch)."""
    return not _keeps_installed(branch, wanted, installed)


def pick_version(madison_text, branch, wanted="", installed=""):
    """The full package version to install and pin, or raise SourcesError naming what exists.

    Rule: an exact ``wanted`` upstream version if given; else the installed version when it
    is of the branch (a rerun never upgrades on its own: the packages are held; ``madison_text``
    is not read then, see :func:`needs_sources`); else the newest version of the branch the
    sources offer.
    """
    if _keeps_installed(branch, wanted, installed):
        return installed
    versions = madison_versions(madison_text)
    prefix = f"{int(branch)}."
    if wanted:
        for v in versions:
            if upstream(v) == wanted:
                return v
        raise SourcesError(f"the apt sources offer no driver {wanted}; they have "
                           f"{', '.join(upstream(v) for v in versions) or 'none'}")
    for v in versions:
        if upstream(v).startswith(prefix):
            return v
    raise SourcesError(f"the apt sources offer no driver of branch {int(branch)}; they have "
                       f"{', '.join(sorted({upstream(v) for v in versions})) or 'none'}")


class FilterModule:
    def filters(self):
        return {
            "nvidia_driver_missing_components": value_errors(sources_missing_components),
            "nvidia_driver_pick_version": value_errors(pick_version),
            "nvidia_driver_needs_sources": value_errors(needs_sources),
            "nvidia_driver_branch_problems": value_errors(branch_problems),
            "nvidia_driver_upstream": value_errors(upstream),
            # `systemctl show` of the persistence daemon (node_read's output): module_utils/systemd.py
            "nvidia_driver_systemctl_show": value_errors(parse_show),
        }
