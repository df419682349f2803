"""The small JSON tables the daemon keeps in its state dir: read, or started anew; written privately.

A table that cannot be read is started again from nothing (what is in it is learned or recorded,
never configured), and one that cannot be written costs only what the next daemon would have
known: both are log lines, never a failure.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from lazyd.host.privatefiles import read_json, write_private

log = logging.getLogger("lazyd.state")


def load(path: Path, max_bytes: int, what: str) -> object:
    """The JSON value in `path`; None when it is missing, unreadable or corrupt (`what` is learned anew)."""
    try:
        return read_json(path, max_bytes)
    except OSError as exc:
        log.warning("%s unreadable (%s); learning %s anew", path, exc.strerror, what)
    except ValueError as exc:
        log.warning("%s is corrupt (%s); learning %s anew", path, exc, what)
    return None


def save(path: Path, data: object, *, durable: bool = True, sort_keys: bool = False) -> None:
    """Write `data` as JSON (0600, atomic), making its directory; a failure is logged."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, json.dumps(data, sort_keys=sort_keys).encode(), durable=durable)
    except OSError as exc:
        log.error("cannot write %s: %s", path, exc)
