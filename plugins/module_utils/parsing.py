"""What the fact parsers share (``gpu.py``, ``rdma.py``): their error and their line helpers.

Stdlib only, for Python 3.8+ on the managed node (``gpu_facts``, ``rdma_facts``) and for pytest
on the controller.
"""

from __future__ import annotations

import re


class ParseError(ValueError):
    """Input that is not what the tool prints: malformed, truncated, or an error text.

    The message says what was expected and where (1-based line number).
    """


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
