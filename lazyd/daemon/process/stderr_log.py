"""The bounded stderr log of one server: a rotating file on disk and a tail in memory.

A server may write anything to stderr (floods, megabytes without a newline, bytes that are not
UTF-8); this keeps it harmless. The file is rotated to `<name>.1` before a write would pass
`max_bytes` (at most twice that on disk); a line without newline is cut at `MAX_LINE_BYTES`, and
the tail keeps `TAIL_LINES` lines of `TAIL_LINE_CHARS`; each line is stamped in UTC, to match the
daemon's log. A log that cannot be written never stops the server: `error` keeps why, disk writes
stop, the tail goes on. No pipes and no trio here: lazyd/daemon/process/child.py feeds the bytes,
one `write` per chunk.
"""

from __future__ import annotations

import contextlib
import collections
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

MAX_LOG_BYTES = 1024 * 1024
"""Rotation bound of one log file: a day of chatter from a normal server, and 2 MiB per server on disk."""

MAX_LINE_BYTES = 8 * 1024
"""Longest line kept whole: fits any traceback line; a longer run without newline is cut here."""

TAIL_LINES = 20
"""Lines of stderr kept in memory for an exit report: enough for a short Python traceback."""

TAIL_LINE_CHARS = 500
"""Characters kept per tail line: an exit report is read by a human, not parsed."""

_TAIL_LINE_BYTES = TAIL_LINE_CHARS * 4
# A UTF-8 character is at most 4 bytes, so this many bytes always decode to >= TAIL_LINE_CHARS chars.

_LAZYD_TAG = b"[lazyd] "
# Lines the daemon itself writes into a server's log (start, exit) carry this tag.


def utc_now() -> datetime:
    """The default clock of a log: aware UTC time."""
    return datetime.now(timezone.utc)


def _stamp(now: datetime) -> bytes:
    return now.strftime("%Y-%m-%dT%H:%M:%S.").encode() + b"%03dZ " % (now.microsecond // 1000)


class LogRing:
    """Append stderr bytes of one server to `path`, rotating, and remember the last lines: `feed`
    what the pipe returned, `note` the daemon's own lines, `finish` at EOF, `close` the file."""

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = MAX_LOG_BYTES,
        max_line_bytes: int = MAX_LINE_BYTES,
        tail_lines: int = TAIL_LINES,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        if max_line_bytes < 1 or max_bytes < max_line_bytes + 64:
            raise ValueError("max_bytes must hold at least one full line and its timestamp")
        self.path = path
        self.max_bytes = max_bytes
        self.max_line_bytes = max_line_bytes
        self.error: OSError | None = None
        """The first error that stopped writing to disk, if any (the tail still works)."""
        self._now = now
        self._partial = bytearray()
        self._tail: collections.deque[bytes] = collections.deque(maxlen=tail_lines)
        self._fd: int | None = None
        self._size = 0
        self._open()

    # -- public ------------------------------------------------------------------------------

    def feed(self, data: bytes | bytearray) -> None:
        """Take one chunk of stderr: complete lines are written and kept in the tail."""
        if not data:
            return
        self._partial += data
        lines = bytes(self._partial).split(b"\n")
        self._partial = bytearray(lines.pop())
        if len(self._partial) > self.max_line_bytes:
            # A run without newline: emit it in bounded pieces so memory never follows the peer.
            cut = len(self._partial) - len(self._partial) % self.max_line_bytes
            pieces = self._partial[:cut]
            del self._partial[:cut]
            lines.extend(self._split(bytes(pieces)))
        if lines and max(map(len, lines)) > self.max_line_bytes:
            lines = [piece for line in lines for piece in self._split(line)]
        self._emit(lines)

    def note(self, text: str) -> None:
        """Write a line of the daemon's own (a start or an exit) into this server's log."""
        line = _LAZYD_TAG + text.encode("utf-8", "replace")
        # Not in the tail: the tail reports what the *server* said.
        self._emit(self._split(line), keep_tail=False)

    def finish(self) -> None:
        """The stream ended: write the trailing line that had no newline, if any."""
        if self._partial:
            rest = bytes(self._partial)
            self._partial.clear()
            self._emit(self._split(rest))

    def tail(self) -> tuple[str, ...]:
        """The last lines of stderr (oldest first), decoded leniently and cut to TAIL_LINE_CHARS."""
        return tuple(
            raw.decode("utf-8", "replace")[:TAIL_LINE_CHARS].rstrip("\r") for raw in self._tail
        )

    def close(self) -> None:
        """Release the file; later feeds only update the tail."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- internals ---------------------------------------------------------------------------

    def _split(self, line: bytes) -> list[bytes]:
        n = self.max_line_bytes
        if len(line) <= n:
            return [line]
        return [line[i : i + n] for i in range(0, len(line), n)]

    def _emit(self, lines: list[bytes], keep_tail: bool = True) -> None:
        if not lines:
            return
        maxlen = self._tail.maxlen or 0
        if keep_tail and maxlen:
            # Only the last lines can survive in the tail: don't slice megabytes of flood for nothing.
            self._tail.extend(line[:_TAIL_LINE_BYTES] for line in lines[-maxlen:])
        if self._fd is None:
            return
        # One timestamp per chunk: all its lines arrived in the same read.
        prefix = _stamp(self._now())
        out = prefix + (b"\n" + prefix).join(lines) + b"\n"
        if len(out) <= self.max_bytes:
            self._write(out)
            return
        # Rare (tiny max_bytes, or a chunk of many empty lines): write in groups that each fit.
        group: list[bytes] = []
        size = 0
        for line in lines:
            entry = prefix + line + b"\n"
            if size + len(entry) > self.max_bytes:
                self._write(b"".join(group))
                group, size = [], 0
            group.append(entry)
            size += len(entry)
        if group:
            self._write(b"".join(group))

    def _write(self, out: bytes) -> None:
        try:
            if self._size + len(out) > self.max_bytes and self._size > 0:
                self._rotate()
            assert self._fd is not None
            view = memoryview(out)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
                self._size += written
        except OSError as exc:
            self._fail(exc)

    def _rotate(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):  # someone removed the log by hand: start a fresh one
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._open()
        if self._fd is None and self.error is not None:
            raise self.error

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # O_NOFOLLOW: a planted symlink must not redirect a server's log onto another file.
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            self._fail(exc)
            return
        try:
            os.fchmod(fd, 0o600)
            self._size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            self._fail(exc)
            return
        self._fd = fd

    def _fail(self, exc: OSError) -> None:
        if self.error is None:
            self.error = exc
        self.close()
