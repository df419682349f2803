"""What every part of the relay core shares: its actions, its phases, the state of one client, the
queue of requests waiting for the server, and the two ways a request goes upstream.

The relay core is a small object (`relay.RelayCore`) that owns the phase and holds parts, each
with its own state and a narrow port to the core (docs/architecture.md). The parts import
this module and each other downwards only; what a part needs from above (the phase, the live
handshake, handling a queued request again) it reaches through a `typing.Protocol` port that the
core satisfies.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core import state_codec as sc
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Kind, Message
from lazyd.core.relay.routing import ClientId, Routes, Upstream
from lazyd.core.relay.session_meta import add_session_meta, default_session_id

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
# Discovery-cache key of a -32601 answer, which holds whatever version the probe named.
ANY_VERSION = "*"


class Phase(enum.Enum):
    DOWN = "down"
    PREINIT = "preinit"
    HANDSHAKE = "handshake"
    REFRESH = "refresh"
    READY = "ready"


# ---- actions -------------------------------------------------------------------------------------


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
    """A client request that is real use of the server came (lazyd/core/lifecycle/use.py): for the check
    linger, which the lifecycle applies to starts only listings came for."""


@dataclass(frozen=True, slots=True)
class WaitIdle:
    """The server has read the answers to what it asked while starting (startup.py, settling):
    the daemon tells the relay (`server_idle`) once the server's threads all sleep, so that what
    it does with those answers is done before the first request; or after a bound."""


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A session's key is known (lazyd/core/sharing/roots.py, lazyd/core/relay/session_roots.py):
    the daemon places it, then calls `RelayCore.release` (it stays on this process) or
    `RelayCore.take` (it moves to a process whose sessions have its key)."""

    cid: ClientId
    key: str


@dataclass(frozen=True, slots=True)
class Note:
    """A decision worth a log line: methods, ids and reasons, never payloads."""

    text: str


Action = ToClient | ToServer | WantServer | Ready | Abort | SnapshotChanged | Activity | Used | SessionKey | WaitIdle | Note


@dataclass
class ClientState:
    cid: ClientId
    params: JsonObj | None = None  # the client's initialize params (None: it never sent one)
    initialized: bool = False
    last_active: int = 0  # sequence number of its latest request, for the roots owner
    principal: str = ""  # what the daemon knows of who is asking, beyond clientInfo (eras.identity_digest)

    def declares(self, capability: str) -> bool:
        caps = (self.params or {}).get("capabilities")
        return isinstance(caps, dict) and capability in caps

    def to_state(self) -> JsonObj:
        return {"cid": self.cid, "params": self.params, "initialized": self.initialized,
                "last_active": self.last_active, "principal": self.principal}

    @classmethod
    def from_state(cls, value: object) -> ClientState:
        s = sc.obj(value, "client")
        return cls(sc.integer(s.get("cid"), "client.cid"), sc.opt_json_obj(s.get("params"), "client.params"),
                   sc.flag(s.get("initialized"), "client.initialized"), sc.integer(s.get("last_active"), "client.last_active"),
                   sc.text(s.get("principal"), "client.principal"))


# ---- the queue -----------------------------------------------------------------------------------


class Waiting:
    """Client messages waiting for the server, in arrival order: forwarded (handled again) when the
    process is ready, answered with an error when it cannot be."""

    def __init__(self) -> None:
        self.items: list[tuple[ClientId, Message]] = []

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[tuple[ClientId, Message]]:
        return iter(self.items)

    def hold(self, cid: ClientId, msg: Message) -> None:
        self.items.append((cid, msg))

    def add(self, cid: ClientId, msg: Message, why: str) -> list[Action]:
        """Hold a request and ask for a live server."""
        self.items.append((cid, msg))
        return [WantServer(), Note(f"client {cid} {msg.method} id={msg.id!r} queued: {why}")]

    def take(self) -> list[tuple[ClientId, Message]]:
        """Everything waiting, leaving the queue empty (what is held again goes to the back)."""
        items, self.items = self.items, []
        return items

    def requests(self) -> int:
        return sum(1 for _, msg in self.items if msg.kind is Kind.REQUEST)

    def cancel(self, cid: ClientId, request_id: JsonId) -> bool:
        """Drop a client's queued request (its cancellation); whether one was there."""
        before = len(self.items)
        self.items = [(c, m) for c, m in self.items if not (c == cid and m.id == request_id and m.kind is Kind.REQUEST)]
        return len(self.items) != before

    def drop_client(self, cid: ClientId) -> None:
        self.items = [(c, m) for c, m in self.items if c != cid]

    def to_state(self) -> list[object]:
        return [[cid, sc.message_state(msg)] for cid, msg in self.items]

    def restore(self, value: object) -> None:
        self.items = []
        for row in sc.items(value, "queue"):
            cid, msg = sc.items(row, "queue row")
            self.items.append((sc.integer(cid, "queued client"), sc.message_from(msg, "queued message")))

    def fail(self, message: str, clients: Collection[ClientId]) -> list[Action]:
        """Answer every queued request of an attached client with `message`, and empty the queue."""
        out: list[Action] = []
        for cid, msg in self.items:
            if msg.kind is Kind.REQUEST and msg.id is not None and cid in clients:
                out.append(ToClient(cid, rpc.error_line(msg.id, rpc.SERVER_UNAVAILABLE, message), msg.id))
        self.items = []
        return out


# ---- requests going upstream ---------------------------------------------------------------------


def internal(routes: Routes, method: str, params: JsonObj | None, purpose: str) -> ToServer:
    """The relay's own request, under a fresh relay id; its answer goes to whoever `purpose` names."""
    rid = routes.take_id()
    routes.add(rid, Upstream(method, None, None, purpose=purpose))
    return ToServer(rpc.request_line(rid, method, params))


def forward(routes: Routes, cid: ClientId, msg: Message, *, bridged: bool = False, inspect: bool = False,
            log_level: str | None = None, purpose: str | None = None) -> list[Action]:
    """Send a client request upstream under a fresh relay id (and relay progress token)."""
    assert msg.method is not None and msg.id is not None
    rid = routes.take_id()
    up = Upstream(msg.method, cid, msg.id, seq=routes.next_seq(), inspect=inspect, bridged=bridged, log_level=log_level)
    if purpose is not None:
        up.purpose = purpose
    elif msg.method == "server/discover":
        up.purpose = discover_version_key(msg.params)
    meta = msg.params.get("_meta")
    routes.add(rid, up)
    session_id = (routes.sessions.get(cid) or default_session_id(cid)) if routes.session_meta else None
    token = isinstance(meta, dict) and rpc.valid_id(meta.get("progressToken"))
    if token:
        assert isinstance(meta, dict)
        up.token = meta["progressToken"]
        routes.tokens[rid] = (cid, meta["progressToken"])
        meta["progressToken"] = rid
    if session_id is not None:
        add_session_meta(msg, session_id)  # a session-aware server: whose request this is
    if token or session_id is not None:
        msg.obj["id"] = rid
        return [ToServer(rpc.dumps(msg.obj)), Activity()]
    return [ToServer(rpc.with_id(msg, rid)), Activity()]


def foreign_task(routes: Routes, cid: ClientId, msg: Message) -> list[Action] | None:
    """A task request naming another client's task (2025-11-25 tasks, and the 2026 tasks
    extension): refused as unknown, so that its existence is never revealed."""
    if msg.method not in ("tasks/get", "tasks/result", "tasks/cancel") or msg.id is None:
        return None
    task_id = msg.params.get("taskId")
    owner = routes.tasks.get(task_id) if isinstance(task_id, str) else None
    if owner is None or owner == cid:
        return None
    return [ToClient(cid, rpc.error_line(msg.id, rpc.INVALID_PARAMS, "Invalid params: unknown task"), msg.id)]


def discover_version_key(params: JsonObj) -> str:
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
    return str(version) if version is not None else ""
