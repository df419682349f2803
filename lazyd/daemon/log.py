"""The daemon's own log, `$XDG_STATE_HOME/lazyd/lazyd.log`: rotating, and readable by its owner only.

It holds what servers wrote to stderr around their exits (the stderr tail in every exit line) and
the daemon's decisions, so it gets the mode of every other file lazyd writes (0600,
lazyd/privatefiles.py), whatever the umask: the file is created 0600 without following a symbolic
link, an existing one with wider bits is tightened through its own descriptor when it is opened,
and every file a rotation opens is made the same way (the backup `lazyd.log.1` is the renamed log,
and a backup left wider by an older daemon is tightened at start).
"""

from __future__ import annotations

import io
import logging.handlers
import os
import stat
from pathlib import Path

from lazyd.privatefiles import PRIVATE_FILE_MODE

__all__ = ["PrivateRotatingFileHandler"]


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose every file is 0600 (see the module docstring)."""

    def __init__(self, path: Path, max_bytes: int, backup_count: int) -> None:
        _tighten(Path(f"{path}.1"))
        super().__init__(path, maxBytes=max_bytes, backupCount=backup_count, encoding="utf-8")

    def _open(self) -> io.TextIOWrapper:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.baseFilename, flags, PRIVATE_FILE_MODE)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) & ~PRIVATE_FILE_MODE:
                os.fchmod(fd, PRIVATE_FILE_MODE)
            return open(fd, "a", encoding=self.encoding, errors=self.errors)
        except BaseException:
            os.close(fd)
            raise


def _tighten(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return  # missing (the usual case), or a link: never followed, never written
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) & ~PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
