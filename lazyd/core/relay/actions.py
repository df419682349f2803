"""What the relay core decides: its phases and the actions it returns for the shell to carry out."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from collections.abc import Callable

from lazyd.core.relay.jsonrpc import JsonId, Message
from lazyd.core.relay.routing import ClientId


class Phase(enum.Enum):
    DOWN = "down"
    PREINIT = "preinit"
    HANDSHAKE = "handshake"
    REFRESH = "refresh"
    READY = "ready"


@dataclass(frozen=True, slots=True)
class ToClient:
    cid: ClientId
    line: bytes
    done: JsonId | None = None  # the client's original id when this line finally answers it


@dataclass(frozen=True, slots=True)
class ToServer:
    line: bytes


@dataclass(frozen=True, slots=True)
class WantServer:
    """A request needs a live server: the daemon asks the lifecycle for a start."""


@dataclass(frozen=True, slots=True)
class Ready:
    """Handshake replayed (or era probed) and listings refreshed: the start counts as complete."""


@dataclass(frozen=True, slots=True)
class Abort:
    """The server cannot be used (it refused the replayed handshake): stop it."""

    reason: str


@dataclass(frozen=True, slots=True)
class SnapshotChanged:
    """The snapshot changed and should be persisted."""


@dataclass(frozen=True, slots=True)
class Activity:
    """A client request or its answer passed (resets idle timers; the relay's own probes don't)."""


@dataclass(frozen=True, slots=True)
class Used:
    """A request that is real use of the server came (lazyd/core/lifecycle/usage.py): no check linger."""


@dataclass(frozen=True, slots=True)
class WaitIdle:
    """The server read the answers to what it asked while starting: the daemon calls
    `server_idle` once its threads all sleep, or after a bound."""


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A session's key is known: the daemon places it with `RelayCore.release` (here) or
    `RelayCore.take` (to a process whose sessions have its key)."""

    cid: ClientId
    key: str


@dataclass(frozen=True, slots=True)
class Note:
    """A decision worth a log line: methods, ids and reasons, never payloads."""

    text: str


# A part's call back into the core for a request that waited: handled as if it had just arrived.
Dispatch = Callable[[ClientId, Message], list["Action"]]

Action = ToClient | ToServer | WantServer | Ready | Abort | SnapshotChanged | Activity | Used | SessionKey | WaitIdle | Note
