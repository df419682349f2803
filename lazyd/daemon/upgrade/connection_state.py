"""Client connections as a successor daemon takes them over: a descriptor, its bytes, its session.

A `ConnectionState` is plain data: the socket; `inbound`, what was read and not yet handled
(decoded before the successor reads more); `outbound`, what was owed and not written; and the
session with its route; written and read by lazyd/core/state_codec.py. Kinds: `session`, `handoff`
(its client's pipes and region come too: lazyd/daemon/handoff/session.py), `fresh` (its hello not
read yet). Other connections are closed: their peers reconnect or see the end (the `lazyctl
upgrade` connection is the envelope's `reply`).
`Live` is the daemon's own view of an open connection while it runs (what the freeze reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import trio

from lazyd.protocol import wire
from lazyd.protocol.frames import AnyFrame

if TYPE_CHECKING:
    from lazyd.daemon.runtime.era_lanes import EraRoute
    from lazyd.daemon.handoff.session import HandoffSession
    from lazyd.daemon.hub.server import HubSession
    from lazyd.daemon.runtime.outbox import ConnectionOutbox


@dataclass
class Live:
    """One open connection as the freeze sees it; the handler keeps it current."""

    stream: trio.SocketStream
    decoder: wire.FrameDecoder
    pending: Any  # the frames decoded and not handled yet (a deque of frames)
    kind: str = "fresh"  # fresh | opening | session | control | hub | handoff
    route: EraRoute | HubSession | None = None
    session: ConnectionOutbox | None = None
    handoff: HandoffSession | None = None  # kind "handoff": the session serving the client's own pipes


def inbound_bytes(decoder: wire.FrameDecoder, pending: list[AnyFrame]) -> bytes:
    """What was read and not handled, as bytes a new decoder turns into the same frames."""
    return b"".join(wire.encode(frame) for frame in pending) + decoder.unconsumed()


@dataclass
class SessionState:
    cid: int
    pid: int  # the shim's
    primary: str  # the registry key of the registration's primary runtime
    runtime: str | None  # the lane its first request chose (None: no request yet)
    resume: list[bytes] = field(default_factory=list)
    held: list[bytes] = field(default_factory=list)


@dataclass
class ConnectionState:
    kind: Literal["session", "handoff", "fresh"]
    fd: int
    inbound: bytes = b""
    outbound: bytes = b""
    session: SessionState | None = None
    fds: list[int] = field(default_factory=list)  # handoff: the client's stdin, its stdout, the region

    def __post_init__(self) -> None:
        if self.kind == "handoff" and (len(self.fds) != 3 or self.session is None):
            raise ValueError("connection: a hand-off session needs its session and three descriptors")
