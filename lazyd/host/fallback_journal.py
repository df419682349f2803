"""The fallback journal: every shim that ran its server directly says so in a file beside the socket.

A shim that cannot have the daemon runs the server itself (fail open): the client works, without
sharing, cache or lazy start. An operator must see that, and the daemon may not know of it, so the
shim appends one JSON line to ``<socket>.fallbacks`` just before it execs the server, and `lazyctl
status` counts the lines since the daemon started by kind: ``refused`` (the daemon refused the
hello) or ``unreachable`` (no daemon could be had). Best effort and cheap for the shim (one
``O_APPEND`` write, never an error); bounded (past ``MAX_JOURNAL_BYTES`` it moves to
``.fallbacks.1``, one generation kept); reading skips lines it cannot parse.
"""

from __future__ import annotations

import json
import os
import time

MAX_JOURNAL_BYTES = 256 * 1024  # far more than a day of walls, and cheap to read
MAX_REASON_CHARS = 300
KINDS = ("refused", "unreachable")

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the shim imports this, and typing costs start-up time
if TYPE_CHECKING:
    from typing import Any


def journal_path(socket_path: str) -> str:
    return f"{socket_path}.fallbacks"


def kind_of(reason: str) -> str:
    """The kind of a shim's reason for running its server directly."""
    return "refused" if reason.startswith("refused by the daemon") else "unreachable"


def record(socket_path: str, reason: str, command: str) -> None:
    """Append one fallback (`reason`, the server's `command` name) to the journal; never raises."""
    path = journal_path(socket_path)
    line = json.dumps({"at": time.time(), "pid": os.getpid(), "kind": kind_of(reason),
                       "reason": reason[:MAX_REASON_CHARS], "command": os.path.basename(command)[:100]})
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return  # no runtime dir (no daemon ever ran here): nobody to tell
    try:
        if os.fstat(fd).st_size > MAX_JOURNAL_BYTES:
            os.replace(path, path + ".1")  # this descriptor still writes the old one: this line goes there
        os.write(fd, line.encode("utf-8", "replace") + b"\n")
    except OSError:
        pass
    finally:
        os.close(fd)


def since(socket_path: str, started_at: float) -> dict[str, Any]:
    """Fallbacks recorded at or after `started_at`: per kind, the count and the last reason."""
    counts: dict[str, Any] = {}
    path = journal_path(socket_path)
    for name in (path + ".1", path):
        try:
            with open(name, "rb", opener=lambda path, flags: os.open(path, flags | os.O_NOFOLLOW)) as journal:
                data = journal.read(2 * MAX_JOURNAL_BYTES)
        except OSError:
            continue
        for raw in data.splitlines():
            try:
                entry = json.loads(raw)
                at, kind, reason = float(entry["at"]), str(entry["kind"]), str(entry["reason"])
            except (ValueError, KeyError, TypeError):
                continue
            if at < started_at or kind not in KINDS:
                continue
            row = counts.setdefault(kind, {"count": 0, "last_at": at, "last_reason": reason})
            row["count"] += 1
            if at >= row["last_at"]:
                row["last_at"], row["last_reason"] = at, reason
    return counts
