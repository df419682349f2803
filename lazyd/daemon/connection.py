"""One accepted connection: peer check, hello, then a shim session or a control channel.

Per connection a reader (this task) and a writer task draining the session's bounded outbox. A bad
frame closes this connection only (the decoder is never reused after an error). Every way out of
a session detaches it from its server, which cancels its in-flight requests upstream.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio

from lazyd import wire
from lazyd.daemon.registry import Refused, Registry
from lazyd.daemon.runtime import peer_credentials
from lazyd.daemon.supervisor import Session

log = logging.getLogger("lazyd.conn")

HELLO_TIMEOUT_S = 10.0  # a peer that connects and says nothing is cut loose (slowloris)
READ_BYTES = 256 * 1024
MAX_CONNECTIONS = 256  # beyond this, connections are accepted and closed at once (RELIABILITY 34)
# Frames written in one send: batching cuts syscalls when a server streams many small lines.
WRITE_BATCH_FRAMES = 64

ControlHandler = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, Any, str | None]]]


class _Frames:
    """Frames from a stream through one decoder; a WireError poisons the connection."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = wire.FrameDecoder()
        self.pending: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any] | None:
        while not self.pending:
            data = await self.stream.receive_some(READ_BYTES)
            if not data:
                return None
            self.pending = self.decoder.feed(data)
        return self.pending.pop(0)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        while (frame := await self.next()) is not None:
            yield frame


class ConnectionHandler:
    def __init__(self, registry: Registry, control: ControlHandler) -> None:
        self.registry = registry
        self.control = control
        self.active = 0

    async def __call__(self, stream: trio.SocketStream) -> None:
        self.active += 1
        try:
            await self._serve(stream)
        except wire.WireError as exc:
            log.warning("closing a connection after a bad frame: %s", exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        finally:
            self.active -= 1
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve(self, stream: trio.SocketStream) -> None:
        pid, uid, _ = peer_credentials(stream.socket)  # type: ignore[arg-type]
        if uid != os.getuid():
            log.warning("refused a connection from uid %d (pid %d): not our user", uid, pid)
            return
        if self.active > MAX_CONNECTIONS:
            log.warning("refused a connection from pid %d: %d connections open", pid, self.active)
            return
        frames = _Frames(stream)
        with trio.move_on_after(HELLO_TIMEOUT_S) as scope:
            hello = await frames.next()
        if scope.cancelled_caught or hello is None:
            return
        if hello["t"] != "hello":
            raise wire.WireError(f"expected a hello frame, got {hello['t']!r}")
        if hello["v"] != wire.WIRE_VERSION:
            message = (f"wire version {hello['v']} is not this daemon's {wire.WIRE_VERSION}: "
                       "restart the daemon (lazyctl stop) so the new version runs")
            await stream.send_all(wire.encode({"t": "refused", "v": wire.WIRE_VERSION, "code": "version", "message": message}))
            return
        if hello["role"] == "ctl":
            await self._control(stream, frames)
        else:
            await self._session(stream, frames, hello)

    async def _session(self, stream: trio.SocketStream, frames: _Frames, hello: dict[str, Any]) -> None:
        cancel = trio.CancelScope()
        try:
            runtime, session = await self.registry.open_session(hello, cancel.cancel)
        except Refused as exc:
            log.warning("refused a session from pid %s: %s", hello.get("pid"), exc.message)
            await stream.send_all(wire.encode({"t": "refused", "v": wire.WIRE_VERSION, "code": exc.code, "message": exc.message}))
            return
        try:
            await stream.send_all(wire.encode({"t": "welcome", "v": wire.WIRE_VERSION, "session": session.cid,
                                               "name": runtime.name, "daemon_pid": os.getpid()}))
            with cancel:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, stream, session, cancel)
                    session.fd = stream.socket.fileno()
                    async for frame in frames:
                        if frame["t"] != "line":
                            raise wire.WireError(f"unexpected {frame['t']!r} frame in a session")
                        runtime.client_line(session.cid, frame["d"])
                    nursery.cancel_scope.cancel()
        finally:
            runtime.detach(session.cid)

    async def _writer(self, stream: trio.SocketStream, session: Session, cancel: trio.CancelScope) -> None:
        receive = session.receive_channel
        try:
            async for frame in receive:
                batch = [frame]
                while len(batch) < WRITE_BATCH_FRAMES:
                    try:
                        batch.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                await stream.send_all(b"".join(batch) if len(batch) > 1 else frame)
                if receive.statistics().current_buffer_used == 0:
                    session.busy = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        session.fd = None
        cancel.cancel()  # the outbox closed (detached or overflowed) or the peer went away

    async def _control(self, stream: trio.SocketStream, frames: _Frames) -> None:
        await stream.send_all(wire.encode({"t": "welcome", "v": wire.WIRE_VERSION, "session": 0,
                                           "name": "control", "daemon_pid": os.getpid()}))
        async for frame in frames:
            if frame["t"] != "ctl":
                raise wire.WireError(f"unexpected {frame['t']!r} frame on a control connection")
            ok, data, error = await self.control(frame["op"], frame["args"])
            reply: dict[str, Any] = {"t": "reply", "ok": ok, "data": data}
            if error is not None:
                reply["error"] = error
            await stream.send_all(wire.encode(reply))
