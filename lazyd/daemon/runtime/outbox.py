"""Where a server runtime sends a client's lines: a bounded outbox, with flow control.

Runtimes deliver JSON-RPC lines (`deliver(line, done)`), never wire bytes. `ConnectionOutbox`
(one shim connection) encodes each as a `line` frame as it takes it; the connection's writer task
takes the frames out, and while nothing is queued a frame goes straight into the socket (a task
switch saved). `LineOutbox` (a hub call's internal session) queues the lines themselves, so the
daemon never encodes msgpack to talk to itself.

A connection's bounds, by the bytes queued now: past CLIENT_PAUSE_BYTES (or _FRAMES) the
connection stops reading the client's requests, so a slow reader is slowed down, not cut off;
past MAX_CLIENT_BACKLOG_BYTES (or _FRAMES) it is disconnected, so one that stops reading never
blocks the server or other clients, nor holds unbounded memory.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import trio

from lazyd.protocol import wire
from lazyd.core.relay.jsonrpc import JsonId

log = logging.getLogger("lazyd.server")

# Frames queued for one client (docs/reliability.md): room for what a paused client can still be
# owed in tiny frames (the pause below, plus answers to the requests already on their way).
MAX_CLIENT_BACKLOG_FRAMES = 32_768
# Bytes queued for one client and not yet in its socket: frames may be 16 MiB, so the count alone
# would let a client that stops reading hold gigabytes; four maximal lines leave room for a burst.
MAX_CLIENT_BACKLOG_BYTES = 64 * 1024 * 1024
# Bytes queued above which the client's own requests wait until it took its answers. With the
# server backlog bound, what a paused client can still be owed stays under the bound above unless
# answers are far larger than their requests: only a client that does not read is disconnected.
CLIENT_PAUSE_BYTES = 16 * 1024 * 1024
CLIENT_PAUSE_FRAMES = 1_024  # the same, counted in frames (a flood of tiny answers)


class Outbox(Protocol):
    """What a runtime holds of an attached session (`ServerRuntime.sessions`)."""

    cid: int
    pid: int

    def deliver(self, line: bytes, done: JsonId | None = None) -> None:
        """Queue `line` for the client; `done` is the client's request id it answers, if final."""

    def close(self) -> None:
        """No more lines: the reader sees the end (the session was detached)."""


class Backlog:
    """What one client is owed and has not taken yet, with the bounds of the module docstring;
    a connection's outbox and a hand-off session's hold one each."""

    def __init__(self) -> None:
        self.bytes = 0
        self.frames = 0
        # Set (and replaced) when a paused reader may go on, only while one waits: no event per write.
        self._drained = trio.Event()
        self._paused = False

    def add(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.frames += 1

    def over(self) -> bool:
        """Whether the client is past the bounds: it stopped reading, it is to be dropped."""
        return self.bytes > MAX_CLIENT_BACKLOG_BYTES or self.frames > MAX_CLIENT_BACKLOG_FRAMES

    def took(self, nbytes: int, nframes: int) -> None:
        """The client took `nbytes` more, ending `nframes` frames; wakes a paused reader once it may go on."""
        self.bytes -= nbytes
        self.frames -= nframes
        if self._paused and not self.should_pause():
            self._paused = False
            self._drained.set()
            self._drained = trio.Event()

    def should_pause(self) -> bool:
        """Whether this client's requests should wait until it has read its answers."""
        return self.bytes >= CLIENT_PAUSE_BYTES or self.frames >= CLIENT_PAUSE_FRAMES

    async def wait_drained(self) -> None:
        """Until the client has read enough of its answers (see CLIENT_PAUSE_BYTES)."""
        while self.should_pause():
            self._paused = True
            await self._drained.wait()


class ConnectionOutbox:
    """One attached shim connection, as the runtime sees it: a bounded outbox and a way to drop it."""

    def __init__(self, cid: int, pid: int, on_overflow: Callable[[], None]) -> None:
        self.cid = cid
        self.pid = pid
        self.fd: int | None = None  # the socket once the welcome was sent: frames may go straight in
        # From a frame queued until the writer drained the queue: frames queue too, never overtake.
        self.busy = False
        # Frames, or the unwritten rest of one as a view (a large frame is not copied to cut it).
        self.send_channel, self.receive_channel = trio.open_memory_channel[bytes | memoryview](MAX_CLIENT_BACKLOG_FRAMES)
        # In the outbox and the writer's current send: added by deliver, taken off by the writer.
        self.backlog = Backlog()
        self._on_overflow = on_overflow
        self.dropped = False

    def deliver(self, line: bytes, done: JsonId | None = None) -> None:
        if self.dropped:
            return
        frame: bytes | memoryview = wire.encode_line(line, done)  # the connection's boundary: wire bytes from here on
        if self.fd is not None and not self.busy:
            # Nothing queued: straight into the socket (a task switch saved); the rest via the writer.
            try:
                written = os.write(self.fd, frame)
            except BlockingIOError:
                written = 0
            except OSError:
                self.dropped = True
                self._on_overflow()
                return
            if written == len(frame):
                return
            frame = memoryview(frame)[written:]  # the rest, not a copy of it
        self.busy = True
        self.backlog.add(len(frame))
        if self.backlog.over():
            self.dropped = True
            log.warning("client %d (shim pid %d) stopped reading: disconnecting it (%d frames, %d bytes queued)",
                        self.cid, self.pid, self.backlog.frames - 1, self.backlog.bytes - len(frame))
            self._on_overflow()
            return
        try:
            self.send_channel.send_nowait(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.dropped = True

    def close(self) -> None:
        self.send_channel.close()


class LineOutbox:
    """The outbox of a session inside the daemon: lines as they are, bounded like a connection's
    (a reader that falls behind by the backlog bounds is dropped, `on_overflow`)."""

    def __init__(self, cid: int, pid: int, on_overflow: Callable[[], None]) -> None:
        self.cid = cid
        self.pid = pid
        # As many lines as the backlog lets queue: the backlog, not the channel, decides the drop.
        self._send, self._receive = trio.open_memory_channel[tuple[bytes, JsonId | None]](MAX_CLIENT_BACKLOG_FRAMES)
        self.backlog = Backlog()  # the lines queued and not yet taken by the reader
        self._on_overflow = on_overflow
        self.dropped = False

    def deliver(self, line: bytes, done: JsonId | None = None) -> None:
        if self.dropped:
            return
        self.backlog.add(len(line))
        if self.backlog.over():
            self.dropped = True
            self.backlog.took(len(line), 1)  # not queued
            log.warning("internal session %d fell behind: dropping it (%d bytes queued)", self.cid, self.backlog.bytes)
            self._send.close()  # its reader sees the end once it has taken what was queued
            self._on_overflow()
            return
        try:
            self._send.send_nowait((line, done))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.dropped = True

    def close(self) -> None:
        self._send.close()

    async def lines(self) -> AsyncIterator[tuple[bytes, JsonId | None]]:
        """Each (line, done) in order, until the outbox is closed or dropped."""
        async for line, done in self._receive:
            self.backlog.took(len(line), 1)
            yield line, done
