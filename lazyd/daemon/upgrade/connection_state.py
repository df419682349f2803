"""Client connections as a successor daemon takes them over: a descriptor, its bytes, its session.

A connection is three things, and each is written as plain data (`ConnectionState`):

- **the descriptor**: the socket, inherited across the exec (same kernel object, same peer);
- **the bytes in flight in each direction**: `inbound`, what was read from the peer and not yet
  handled (decoded frames waiting, re-encoded, then the start of an unfinished frame as the
  decoder holds it, lazyd/protocol/wire.py `unconsumed`), which the successor decodes before it reads
  more; `outbound`, what was owed to the peer and not yet written, which it writes first. An
  upgrade drains the writers before it freezes (lazyd/daemon/upgrade/handover.py), so `outbound` is
  empty today; the field is what a connection whose writes cannot be drained would carry;
- **the session**: the client id the relay cores know it by, the shim's pid, and its route:
  the runtime (by registry key) its first request chose, or, before that, the lines it resumed
  with and the notifications held for its lane.

Kinds: `session` (a shim's session, handed over whole), `handoff` (a session whose client's pipes
the daemon serves itself, lazyd/daemon/handoff/session.py: handed over whole as well, with the client's two
descriptors and the shared region, `fds`; what it had in flight, its handshake and a partly read
line are in the region, which the successor continues from), `fresh` (accepted, its hello not read
yet: the successor serves it from the start, its bytes included), `reply` (the `lazyctl upgrade`
connection: the successor answers it). Control connections and hub sessions are not handed over:
they are closed, and lazyctl or the hub's shim (which reconnects and resumes) see the end. A
session whose outbox could not be drained, or one being opened, is not either: its shim answers
what it had in flight and reconnects, as when a daemon goes away.

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
