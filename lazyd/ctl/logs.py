"""`lazyctl logs`: the last lines of a server's stderr log, and following it like `tail -f`.

The daemon only says where the log is; lazyctl reads it as the same user. The log rotates to
`<name>.log.1`, so a tail may span both files and a follower must notice a replaced file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import BinaryIO

READ_BLOCK_BYTES = 64 * 1024  # what a follower reads at a time
FOLLOW_POLL_S = 0.25  # tail -f's own default is 1 s; a quarter second feels live and costs nothing
MAX_TAIL_LINES = 100_000  # -n beyond this is a mistake; two rotated files never hold more anyway


def tail_with_rotation(path: str, count: int) -> list[str]:
    """The last `count` lines of `path` (without newlines), topped up from `<path>.1` when it holds
    fewer; [] if neither exists. Read whole: the daemon rotates a log at 1 MiB."""
    lines: list[str] = []
    for name in (path + ".1", path):
        try:
            with open(name, "rb") as f:
                lines += f.read().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            continue
    return lines[-count:] if count > 0 else []


def follow(path: str, emit: Callable[[str], None]) -> None:
    """Emit every line appended to `path` from its current end on, until interrupted (lazyctl:
    Ctrl-C). A rotated or truncated file is reopened from its start."""
    f = _open_at_start(path)
    if f is not None:
        f.seek(0, os.SEEK_END)
    pending = b""
    try:
        while True:
            chunk = f.read(READ_BLOCK_BYTES) if f is not None else b""
            if chunk:
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    emit(raw.decode("utf-8", "replace"))
                continue
            if f is None or _replaced(f, path):
                # Everything the old file held was read above; the new one is read from its start.
                if f is not None:
                    f.close()
                f = _open_at_start(path)
                if f is not None:
                    continue
            time.sleep(FOLLOW_POLL_S)
    finally:
        if f is not None:
            f.close()


def _open_at_start(path: str) -> BinaryIO | None:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        return None


def _replaced(f: BinaryIO, path: str) -> bool:
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return False  # between rotation's rename and the new file: keep reading the old one
    mine = os.fstat(f.fileno())
    return (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino) or current.st_size < f.tell()
