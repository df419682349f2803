"""A server's stdout as its reader takes it: one task step per read when lines come one by one.

trio's `FdStream.receive_some` checkpoints before every read and reads until EAGAIN before it
waits: for a server answering one request at a time that is two task steps, a zero-timeout
epoll and an empty `read` per line, on the relay's hot path. `StdoutReader.read_into` keeps what
matters of that and drops the rest:

- a read that came up short means the pipe was empty a moment ago, so the next read waits for
  readiness first instead of trying (and failing) first;
- a checkpoint is taken only before a read that follows a full one (no wait in between), so a
  server that floods its stdout still lets every other task run, and cancellation is still seen
  at every read;
- the bytes go into the daemon's read buffer (lazyd/daemon/process/read_buffer.py) and from there
  straight to the line cutter, without a `bytes` object per read;
- a closed stream raises `trio.ClosedResourceError`, any other error reads as the end of the
  stream (trio's `BrokenResourceError`), as with `receive_some`.

Any other kind of stream (not a pipe) is read with `receive_some`.
"""

from __future__ import annotations

import errno
import mmap
from collections.abc import Callable

import trio

from lazyd.daemon.heap_trim import TRIMMER
from lazyd.daemon.process.read_buffer import ReadBuffer
from lazyd.host.heapkeep import LARGE_BYTES

__all__ = ["StdoutReader"]

Sink = Callable[[bytes | mmap.mmap, int], None]  # (buffer, how many of its first bytes came)


class StdoutReader:
    """Reads of one stream, for its only reader."""

    def __init__(self, stream: trio.abc.ReceiveStream, chunk: int, buffer: ReadBuffer | None = None) -> None:
        self._stream = stream
        self._chunk = chunk
        self._buffer = buffer if buffer is not None else ReadBuffer()  # the daemon's, else its own
        self._drained = False  # the last read came up short: wait before the next one

    async def read_into(self, sink: Sink) -> bool:
        """Read once and give what came to `sink` (before anything else runs); False at the end
        of the stream (`sink` not called)."""
        stream = self._stream
        if not isinstance(stream, trio.lowlevel.FdStream):
            try:
                data = await stream.receive_some(self._chunk)
            except trio.BrokenResourceError:
                return False
            if data:
                sink(bytes(data), len(data))
            return bool(data)
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
            TRIMMER.note(count)  # a read this large is part of a large line
            if count >= LARGE_BYTES:
                TRIMMER.later(self._buffer.release)  # its pages go back once large lines are over
            sink(buffer, count)
            return True
