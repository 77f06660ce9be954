"""Reading an Ansible task result's message (the controller side: filters, callbacks)."""

from __future__ import annotations


def reason(msg):
    """The line of a task's or a connection's error message that says why; "" for none.

    Ansible prefixes a failure with "Task failed: ". Most messages say why on their first line
    (the ssh plugin: "Failed to connect to the host via ssh: ssh: connect to host ... Connection
    refused"); one that opens with a header ending in ":" says it last (mitogen's connection:
    "EOF on stream; last 100 lines received:", then ssh's own last words).
    """
    text = str(msg or "").strip().removeprefix("Task failed: ")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].endswith(":") and len(lines) > 1 else lines[0]
