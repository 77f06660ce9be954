"""What the parsers share (``gpu.py``, ``rdma.py``, the log readers): their error and their line helpers.

Stdlib only, for Python 3.8+ on the managed node (``gpu_facts``, ``rdma_facts``) and for pytest
on the controller.
"""

from __future__ import annotations

import re


class ParseError(ValueError):
    """Input that is not what the tool prints: malformed, truncated, or an error text.

    The message says what was expected and where (1-based line number).
    """


#: What a launcher puts before each line of a rank's output: Open MPI's ``--tag-output``
#: ``[<jobid>,<rank>]<stdout>:`` (``<stderr>``; v1 .. v4), with ``--timestamp-output``'s ctime
#: before it (``Thu May  7 10:39:20 2020[1,1]<stdout>:``); Open MPI 5 / PRRTE's ``--output tag``
#: ``[<jobid or nspace>,<rank>]<stdout>: `` (``[prterun-node1-100629@1,0]``), ``tag-detailed``'s
#: ``[<jobid>,<rank>][<host>:<pid>]<stdout>: `` and ``rank``'s ``[<rank>]<stdout>``
#: (openpmix/prrte #1406); horovodrun's (Gloo) ``[<rank>]<stdout>:``. Labels without brackets
#: (pdsh's ``host: ``, ``srun --label``'s ``0: ``) are not stripped here: they look like any
#: ``word:`` a tool prints, so a reader finds its own line grammar after them instead.
LAUNCHER_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"
    r"\[(?:[^\]\[,\s]+,)?\d+\](?:\[[^\]\[\s]+:\d+\])?<std(?:out|err|diag)>:? ?")


def strip_launcher_prefix(line):
    """``line`` without a launcher's per-rank prefix (:data:`LAUNCHER_PREFIX`), if it has one."""
    return LAUNCHER_PREFIX.sub("", line, count=1)


def split_lines(text, what):
    """The lines of ``text``, a tool's output; ParseError naming ``what`` when it is not text."""
    if text is None:
        raise ParseError(f"{what}: no input (None)")
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    return text.splitlines()


def shorten(line, limit=120):
    """``line`` without trailing white space, cut at ``limit`` characters (``...`` marks the cut),
    for quoting it in a ParseError."""
    line = line.rstrip()
    return line if len(line) <= limit else line[:limit] + "..."


def natural_key(name):
    """Sort key so that ``GPU2 < GPU10`` and ``mlx5_2 < mlx5_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(name))]
