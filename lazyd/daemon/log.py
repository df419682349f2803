"""The daemon's own log, `$XDG_STATE_HOME/lazyd/lazyd.log`: rotating, and readable by its owner only.

It holds servers' stderr tails and the daemon's decisions, so it is 0600 whatever the umask
(lazyd/host/privatefiles.py): created without following a link, tightened through its own
descriptor if wider, and every file a rotation opens made the same way. The rotation is
RotatingFileHandler's written out on a FileHandler: `logging.handlers` would bring in pickle and
the socket, queue and syslog handlers, resident for the daemon's life (docs/benchmarks.md).
"""

from __future__ import annotations

import io
import logging
import os
import stat
from pathlib import Path

from lazyd.host.privatefiles import PRIVATE_FILE_MODE


class PrivateRotatingFileHandler(logging.FileHandler):
    """A log that is renamed to `<name>.1` (older backups shifted up to `backup_count`) when the
    next record would take it to `max_bytes`, as RotatingFileHandler does; every file 0600."""

    def __init__(self, path: Path, max_bytes: int, backup_count: int) -> None:
        _tighten(Path(f"{path}.1"))
        self.max_bytes, self.backup_count = max_bytes, backup_count
        super().__init__(path, encoding="utf-8")

    def emit(self, record: logging.LogRecord) -> None:
        # The record is formatted once, for the size check and the write: a daemon taking back a
        # thousand sessions logs a few lines for each, and formatting was most of a line's cost.
        try:
            text = f"{self.format(record)}{self.terminator}"
            if self._full_with(text):
                self._rotate()
            if self.stream is None:
                self.stream = self._open()
            self.stream.write(text)
            self.flush()
        except Exception:
            self.handleError(record)

    def _full_with(self, text: str) -> bool:
        if self.max_bytes <= 0 or self.backup_count <= 0 or not os.path.isfile(self.baseFilename):
            return False  # as RotatingFileHandler: no limit or no backup, no rotation; nor a FIFO
        if self.stream is None:
            self.stream = self._open()
        self.stream.seek(0, os.SEEK_END)
        return self.stream.tell() + len(text) >= self.max_bytes

    def _rotate(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None  # FileHandler's own way of saying closed
        for n in range(self.backup_count - 1, 0, -1):
            older = f"{self.baseFilename}.{n}"
            if os.path.exists(older):
                os.replace(older, f"{self.baseFilename}.{n + 1}")
        os.replace(self.baseFilename, f"{self.baseFilename}.1")
        self.stream = self._open()

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
