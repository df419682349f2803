"""A server's stdout as its reader takes it: one task step per read when lines come one by one.

trio's `FdStream.receive_some` checkpoints before every read and reads until EAGAIN before it
waits: two task steps, a zero-timeout epoll and an empty `read` per line on the relay's hot path.
`StdoutReader.read_into` waits for readiness first only after a short read (the pipe was empty),
checkpoints only before a read that follows a full one (a flooding server still lets every task
run, and cancellation is seen), and reads into the daemon's read buffer
(lazyd/daemon/process/read_buffer.py) for the line cutter, without a `bytes` per read. Errors are
`receive_some`'s: `trio.ClosedResourceError` for a closed stream, any other the end.
"""

from __future__ import annotations

import errno
import mmap
from collections.abc import Callable

import trio

from lazyd.daemon.process.read_buffer import ReadBuffer

Sink = Callable[[mmap.mmap, int], None]  # (the read buffer, how many of its first bytes came)


class StdoutReader:
    """Reads of one stream, for its only reader."""

    def __init__(self, stream: trio.lowlevel.FdStream, chunk: int, buffer: ReadBuffer | None = None) -> None:
        self._stream = stream
        self._chunk = chunk
        self._buffer = buffer if buffer is not None else ReadBuffer()  # the daemon's, else its own
        self._drained = False  # the last read came up short: wait before the next one

    async def read_into(self, sink: Sink) -> bool:
        """Read once and give what came to `sink` (before anything else runs); False at the end
        of the stream (`sink` not called)."""
        stream = self._stream
        if self._drained:
            await trio.lowlevel.wait_readable(stream.fileno())
        else:
            await trio.lowlevel.checkpoint()
        while True:
            fd = stream.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("stdout was already closed")
            try:
                buffer, count = self._buffer.read_into(fd, self._chunk)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("stdout was already closed") from None
                return False
            if not count:
                return False
            self._drained = count < self._chunk
            sink(buffer, count)
            return True
