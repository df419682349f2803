"""A server's stdout cut into lines: a bounded line buffer, pure (bytes in, lines out).

Lines are returned without their newline and blank ones dropped. A line over the limit fails the
stream for good (`LineTooLong`, once the buffer passes the limit: at most the limit plus one read
is held), after the lines before it. A last line without newline is returned at the end.
"""

from __future__ import annotations

import mmap
from collections import deque

from lazyd.errors import LineTooLong


class StdoutLines:
    """Bytes of one stdout stream in, complete non-blank lines out, in order."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._pending: deque[bytes] = deque()
        self.error: LineTooLong | None = None  # set once, for good, by an overlong line
        self.ended = False

    def feed(self, data: bytes | bytearray | mmap.mmap, end: int | None = None) -> None:
        """Take `data[:end]` (all of it by default). Each line is copied once: out of `data` when
        it lies there whole (the usual case: a line per read), else joined once from the buffer
        and the read that ends it (a large line comes in two reads or more)."""
        if self.error is not None or self.ended:
            return
        end = len(data) if end is None else end
        limit = self.limit
        buf = self._buf
        pos = 0
        if buf:
            # The buffer holds the start of a line and no newline: scan only what just arrived.
            nl = data.find(b"\n", 0, end)
            if nl < 0:
                with memoryview(data) as view:
                    buf += view[:end]
                if len(buf) > limit:
                    self._fail()
                return
            if len(buf) + nl > limit:
                self._fail()
                return
            with memoryview(data) as view:
                line = b"".join((buf, view[:nl]))  # not appended first: that grows the buffer
            buf.clear()
            if not line.isspace():
                self._pending.append(line)
            pos = nl + 1
        while (nl := data.find(b"\n", pos, end)) >= 0:
            if nl - pos > limit:
                self._fail()
                return
            self._take(data, pos, nl)
            pos = nl + 1
        if pos < end:
            with memoryview(data) as view:
                buf += view[pos:end]
            if len(buf) > limit:
                self._fail()

    def _take(self, data: bytes | bytearray | mmap.mmap, start: int, stop: int) -> None:
        with memoryview(data) as view:
            line = bytes(view[start:stop])
        if line and not line.isspace():
            self._pending.append(line)

    def end(self) -> None:
        """The stream ended: a last line without its newline counts."""
        self.ended = True
        rest = bytes(self._buf)
        self._buf.clear()
        if rest and not rest.isspace():
            self._pending.append(rest)

    def next_line(self) -> bytes | None:
        """The next complete line, or None until more is fed (or for good, once ended or failed:
        see `ended` and `error`)."""
        return self._pending.popleft() if self._pending else None

    def leftover(self) -> bytes:
        """What was fed and not handed out yet, as bytes to feed a new buffer with (a successor
        daemon's, after an upgrade): the complete lines, each with its newline, then the start of
        the next."""
        return b"".join(line + b"\n" for line in self._pending) + bytes(self._buf)

    def _fail(self) -> None:
        # The stream can't be resynchronised: drop the buffer now, and fail every later read.
        self._buf = bytearray()
        self.error = LineTooLong(f"server wrote a stdout line longer than {self.limit} bytes")
