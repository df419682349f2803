"""A server process's stdin as its runtime writes it: at once when it can, else a bounded queue.

A line goes straight into the pipe when nothing is queued (no task switch on the hot path); the
rest goes to a writer task, at most MAX_SERVER_BACKLOG_LINES: a server that leaves that many unread
is stuck, and `on_stuck` is told (the runtime kills it). While MAX_SERVER_BACKLOG_BYTES are queued or
MAX_WAITING_REQUESTS wait for a start, the sessions feeding the server are not read further
(`has_room`, `wait_for_room`), so backpressure reaches the clients' pipes instead of our memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from lazyd.daemon.process.child import ChildProcess

log = logging.getLogger("lazyd.server")

# Lines queued for a server's stdin. A server that leaves this many unread is stuck; it is killed
# (and restarted on the next request) rather than letting the queue grow without bound.
MAX_SERVER_BACKLOG_LINES = 10_000
# Bytes queued for a server's stdin, and requests the relay holds until a start completes, above
# which the sessions feeding this server are not read any further (backpressure, down to the
# clients' own pipes) instead of the daemon buffering whatever clients send faster than the server
# takes it.
MAX_SERVER_BACKLOG_BYTES = 32 * 1024 * 1024
MAX_WAITING_REQUESTS = 10_000


class _Backlog:
    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class ServerInput:
    """The stdin of the current process of one runtime (none between processes)."""

    def __init__(self, name: str, on_stuck: Callable[[str], None], waiting_requests: Callable[[], int],
                 note: Callable[[int], None]) -> None:
        self._name = name
        self._note = note  # each line's size, for the heap trimmer (lazyd/daemon/heap_trim.py)
        self._on_stuck = on_stuck
        self._waiting_requests = waiting_requests  # requests the relay holds until a start completes
        self._proc: ChildProcess | None = None
        self._queue: trio.MemorySendChannel[bytes | memoryview] | None = None  # lines (or rests), no newline
        self._busy = False  # lines are queued for the writer: new ones must queue behind them
        self._backlog = _Backlog()  # bytes queued for the current process's stdin
        self._room = trio.Event()  # set (and replaced) whenever the backlog may have shrunk

    def open(self, proc: ChildProcess, nursery: trio.Nursery) -> None:
        """A new process: its writer task starts in `nursery`."""
        send, receive = trio.open_memory_channel[bytes | memoryview](MAX_SERVER_BACKLOG_LINES)
        self._proc, self._queue, self._busy = proc, send, False
        nursery.start_soon(self._write, proc, receive)

    def close(self) -> None:
        """The process exited: whatever was queued died with it."""
        if self._queue is not None:
            self._queue.close()
        self._proc = self._queue = None
        self._backlog = _Backlog()

    def send(self, line: bytes) -> None:
        proc, queue = self._proc, self._queue
        if queue is None or proc is None:
            log.info("[%s] line for a server that is not running dropped", self._name)
            return
        self._note(len(line))
        data: bytes | memoryview = line
        if not self._busy:
            # Nothing queued: write straight into the pipe and skip a task switch; the line and
            # its newline go in one writev, and what did not fit is queued as a view, so a large
            # line is never copied to add a newline or to cut off what was written.
            written = proc.write_nowait(line, b"\n")
            if written > len(line):
                return
            data = memoryview(line)[written:]
        self._busy = True
        self._backlog.bytes += len(data) + 1
        try:
            queue.send_nowait(data)
        except trio.WouldBlock:
            self._on_stuck(f"stopped reading its stdin ({MAX_SERVER_BACKLOG_LINES} lines waiting)")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    @property
    def busy(self) -> bool:
        """Whether lines are queued for the writer (the pipe has not taken them all yet)."""
        return self._busy

    def has_room(self) -> bool:
        """Whether the sessions of this server may be read further."""
        return self._backlog.bytes < MAX_SERVER_BACKLOG_BYTES and self._waiting_requests() < MAX_WAITING_REQUESTS

    async def wait_for_room(self) -> None:
        while not self.has_room():
            await self._room.wait()

    def signal_room(self) -> None:
        """The backlog or the requests held may have shrunk: wake the sessions waiting for room."""
        if self.has_room():
            self._room.set()
            self._room = trio.Event()

    async def _write(self, proc: ChildProcess, receive: trio.MemoryReceiveChannel[bytes | memoryview]) -> None:
        backlog = self._backlog  # this process's: a later process gets its own
        async with receive:
            async for data in receive:
                try:
                    await proc.send_raw(data, b"\n")
                except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
                    return  # the reader sees the exit and handles it
                finally:
                    backlog.bytes -= len(data) + 1
                    if receive.statistics().current_buffer_used == 0:
                        self._busy = False
                    self.signal_room()
