"""Serving a connection a predecessor daemon handed over (lazyd/daemon/upgrade/connection_state.py says what one is).

What was owed to the peer is written first, what was read and not handled is decoded before
anything more is read, and then it is served as any other connection. A session goes on as it
was: same client id and route, no welcome, no handshake. One whose hello was not read yet is served
from its hello on.
"""

from __future__ import annotations

from collections import deque
from functools import partial

import trio

from lazyd.protocol import wire

from lazyd.daemon.upgrade.connection_state import ConnectionState, Live
from lazyd.daemon.connections.listener import FRAME_DEADLINE_S, ConnectionHandler, Frames
from lazyd.daemon.runtime.era_lanes import EraRoute
from lazyd.daemon.handoff.session import HandoffSession
from lazyd.daemon.runtime.outbox import ConnectionOutbox

__all__ = ["serve_inherited", "serve_handed_off"]


async def serve_inherited(handler: ConnectionHandler, stream: trio.SocketStream, state: ConnectionState,
                        session: ConnectionOutbox | None, route: EraRoute | None, cancel: trio.CancelScope) -> None:
    """Serve one handed-over connection until it ends (errors as ConnectionHandler.__call__)."""
    handler.active += 1
    pid = state.session.pid if state.session is not None else -1
    frames = Frames(stream, FRAME_DEADLINE_S, handler.registry.reading)

    async def serve() -> None:
        if state.inbound:
            frames.feed(state.inbound)  # what the predecessor read comes first, batch by batch
        if state.outbound:
            await stream.send_all(state.outbound)
        if state.kind == "fresh":
            await handler.serve_from_hello(stream, pid, frames)
        elif session is not None and route is not None:
            await _session(handler, stream, frames, session, route, cancel)

    # Judged, counted out and closed as every connection is; a bad frame among the bytes carried
    # over costs this connection only.
    await handler.guarded(stream, pid, serve)


async def serve_handed_off(handler: ConnectionHandler, stream: trio.SocketStream, session: HandoffSession,
                           route: EraRoute) -> None:
    """Serve a hand-off session handed over (the client's pipes and its region came along)."""
    handler.active += 1
    handler.live[id(stream)] = Live(stream, wire.FrameDecoder(), deque(), "handoff", route, None, session)
    await handler.guarded(stream, session.pid, partial(session.carry_on, route))


async def _session(handler: ConnectionHandler, stream: trio.SocketStream, frames: Frames, session: ConnectionOutbox,
                   route: EraRoute, cancel: trio.CancelScope) -> None:
    # As a session after its welcome: the same read loop, the same steps in the same order.
    handler.live[id(stream)] = Live(stream, frames.decoder, frames.pending, "session", route, session)
    try:
        await handler.relay_session(stream, frames, session, route, cancel)
    finally:
        route.detach(session.cid)
