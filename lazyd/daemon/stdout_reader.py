"""A server's stdout as its reader takes it: one task step per read when lines come one by one.

trio's `FdStream.receive_some` checkpoints before every read and reads until EAGAIN before it
waits: for a server answering one request at a time that is two task steps, a zero-timeout
epoll and an empty `read` per line, on the relay's hot path. `StdoutReader.read` keeps what
matters of that and drops the rest:

- a read that came up short means the pipe was empty a moment ago, so the next read waits for
  readiness first instead of trying (and failing) first;
- a checkpoint is taken only before a read that follows a full one (no wait in between), so a
  server that floods its stdout still lets every other task run, and cancellation is still seen
  at every read;
- a closed stream raises `trio.ClosedResourceError`, any other error reads as the end of the
  stream (trio's `BrokenResourceError`), as with `receive_some`.

Any other kind of stream (not a pipe) is read with `receive_some`.
"""

from __future__ import annotations

import errno
import os

import trio

__all__ = ["StdoutReader"]


class StdoutReader:
    """Reads of one stream, for its only reader."""

    def __init__(self, stream: trio.abc.ReceiveStream, chunk: int) -> None:
        self._stream = stream
        self._chunk = chunk
        self._drained = False  # the last read came up short: wait before the next one

    async def read(self) -> bytes:
        """The next bytes (at most one chunk), or b"" at the end of the stream."""
        stream = self._stream
        if not isinstance(stream, trio.lowlevel.FdStream):
            try:
                return bytes(await stream.receive_some(self._chunk))
            except trio.BrokenResourceError:
                return b""
        if self._drained:
            await trio.lowlevel.wait_readable(stream.fileno())
        else:
            await trio.lowlevel.checkpoint()
        while True:
            fd = stream.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("stdout was already closed")
            try:
                data = os.read(fd, self._chunk)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("stdout was already closed") from None
                return b""
            self._drained = len(data) < self._chunk
            return data
