"""Client connections as a successor daemon takes them over: a descriptor, its bytes, its session.

A `ConnectionState` is plain data: the socket; `inbound`, what was read and not yet handled
(decoded before the successor reads more); `outbound`, what was owed and not written; and the
session with its route. Kinds: `session`, `handoff` (its client's pipes and region come too:
lazyd/daemon/handoff/session.py), `fresh` (its hello not read yet), `reply` (the `lazyctl upgrade`
connection). Other connections are closed: their peers reconnect or see the end.
`Live` is the daemon's own view of an open connection while it runs (what the freeze reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from lazyd.protocol import wire
from lazyd.core import state_codec as sc
from lazyd.protocol.frames import AnyFrame

if TYPE_CHECKING:
    from lazyd.daemon.runtime.era_lanes import EraRoute
    from lazyd.daemon.handoff.session import HandoffSession
    from lazyd.daemon.hub.server import HubSession
    from lazyd.daemon.runtime.outbox import ConnectionOutbox

__all__ = ["Live", "ConnectionState", "SessionState", "inbound_bytes"]


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

    def to_json(self) -> dict[str, Any]:
        return {"cid": self.cid, "pid": self.pid, "primary": self.primary, "runtime": self.runtime,
                "resume": [sc.raw_text(x) for x in self.resume], "held": [sc.raw_text(x) for x in self.held]}

    @classmethod
    def from_json(cls, value: object) -> SessionState:
        s = sc.obj(value, "session")
        return cls(sc.integer(s.get("cid"), "session.cid"), sc.integer(s.get("pid"), "session.pid"),
                   sc.text(s.get("primary"), "session.primary"), sc.opt_text(s.get("runtime"), "session.runtime"),
                   [sc.raw_bytes(x, "session.resume") for x in sc.items(s.get("resume"), "session.resume")],
                   [sc.raw_bytes(x, "session.held") for x in sc.items(s.get("held"), "session.held")])


@dataclass
class ConnectionState:
    kind: str  # session | handoff | fresh | reply
    fd: int
    inbound: bytes = b""
    outbound: bytes = b""
    session: SessionState | None = None
    fds: list[int] = field(default_factory=list)  # handoff: the client's stdin, its stdout, the region

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "fd": self.fd, "inbound": sc.raw_text(self.inbound),
                "outbound": sc.raw_text(self.outbound),
                "session": self.session.to_json() if self.session is not None else None, "fds": list(self.fds)}

    @classmethod
    def from_json(cls, value: object) -> ConnectionState:
        s = sc.obj(value, "connection")
        kind = sc.text(s.get("kind"), "connection.kind")
        if kind not in ("session", "handoff", "fresh", "reply"):
            raise ValueError(f"connection.kind: unknown value {kind!r}")
        session = s.get("session")
        fds = [sc.integer(x, "connection.fds") for x in sc.items(s.get("fds", []), "connection.fds")]
        if kind == "handoff" and (len(fds) != 3 or session is None):
            raise ValueError("connection: a hand-off session needs its session and three descriptors")
        return cls(kind, sc.integer(s.get("fd"), "connection.fd"), sc.raw_bytes(s.get("inbound"), "connection.inbound"),
                   sc.raw_bytes(s.get("outbound"), "connection.outbound"),
                   SessionState.from_json(session) if session is not None else None, fds)
