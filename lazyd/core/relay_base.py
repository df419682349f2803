"""What every part of the relay core shares: its actions, phases, per-client state, and the state
of one server instance with the few helpers that send something upstream.

The relay core is split by concept (HOUSE_STYLE.md: one concept per module): `relay.py` is the
public object and its events, `relay_client.py` handshake-era client messages, `relay_server.py`
what the server sends, `relay_startup.py` the replay and listing refresh, `stateless.py` the
stateless era (discovery, the ttl-aware cache, listen streams), `bridge.py` handshake-era clients
on a stateless-only server. All of them are methods of the one `RelayCore` object, so they share
the state defined here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lazyd.core import jsonrpc as rpc
from lazyd.core.cache import HandshakeEntry, Snapshot
from lazyd.core.era_policy import Era, EraPolicy, EraSetting, StartPlan, facts_of
from lazyd.core.jsonrpc import JsonId, JsonObj, Kind, Message
from lazyd.core.listen import ListenHub
from lazyd.core.routing import ClientId, Routes, SamplingPolicy, Upstream

if TYPE_CHECKING:
    from lazyd.core.bridge import InputRound
    from lazyd.core.stateless_cache import Asker, Fetch

# A server whose listing never stops paginating must not make the relay loop forever.
MAX_LISTING_PAGES = 1000
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
class Note:
    """A decision worth a log line: methods, ids and reasons, never payloads."""

    text: str


Action = ToClient | ToServer | WantServer | Ready | Abort | SnapshotChanged | Activity | Note


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


@dataclass
class Refresh:
    method: str
    items: list[object] = field(default_factory=list)
    pages: int = 0


class RelayBase:
    """The state of one server instance as the relay sees it, shared by every era's logic."""

    def __init__(self, name: str, snapshot: Snapshot, sampling_policy: SamplingPolicy = "refuse",
                 era: EraSetting = "auto") -> None:
        self.name = name
        self.snapshot = snapshot
        self.sampling_policy: SamplingPolicy = sampling_policy
        # Which era this instance's process runs in (lazyd/core/era_policy.py): the daemon gives
        # the instance a lane when it attaches the first client of an era to it; None until then
        # (a start no client asked for replays a handshake).
        self.era_policy = EraPolicy(era)
        self.lane: Era | None = None
        self.plan: StartPlan | None = None  # the live process's start plan
        # The wall-clock seconds the event being handled brought (every event brings `now`), read
        # only to honour ttlMs: stored results outlive the daemon, so a monotonic clock would not do.
        self.now = 0.0
        self.phase = Phase.DOWN
        self.clients: dict[ClientId, ClientState] = {}
        self.routes = Routes()
        self.queue: list[tuple[ClientId, Message]] = []
        self.instance: HandshakeEntry | None = None  # the live process's handshake and listings
        self._refreshing: dict[str, Refresh] = {}
        self._initial_refresh = False
        self._upstream_level: str | None = None
        self._upstream_subs: set[str] = set()
        self._next_id = 1  # relay ids: never reused, so a late response can never be misrouted
        self._next_down_id = 1
        self._seq = 0
        # ---- the stateless era (stateless.py) ----
        # Whether the live process answered the era probe with a stateless DiscoverResult:
        # None while unknown (no process, or the probe is on its way).
        self.stateless_up: bool | None = None
        self.discovery: JsonObj | None = None  # that DiscoverResult
        self._probe_sent = False
        self._probe_asker: Asker | None = None  # whose identity the era probe carried
        self._init_refused: JsonObj | None = None  # an initialize error held until the probe answers
        self._stateless_starting = False
        self.fetches: dict[str, Fetch] = {}
        self.hub = ListenHub()
        # ---- handshake-era clients on a stateless server (bridge.py) ----
        self.rounds: dict[tuple[ClientId, JsonId], InputRound] = {}
        self.input_waits: dict[tuple[ClientId, JsonId], tuple[JsonId, str]] = {}

    # ---- hooks the era modules call across each other ------------------------------------------

    def _client_request(self, cid: ClientId, msg: Message) -> list[Action]:
        raise NotImplementedError

    # ---- helpers ---------------------------------------------------------------------------------

    def _start_plan(self) -> StartPlan:
        """The live process's plan, else the one the next start would follow."""
        if self.plan is not None and self.phase is not Phase.DOWN:
            return self.plan
        return self.era_policy.start_plan(self.lane, facts_of(self.snapshot))

    def _take_id(self) -> int:
        rid = self._next_id
        self._next_id += 1
        return rid

    def _take_down_id(self) -> int:
        down_id = self._next_down_id
        self._next_down_id += 1
        return down_id

    def _internal(self, method: str, params: JsonObj | None, purpose: str) -> ToServer:
        rid = self._take_id()
        self.routes.add(rid, Upstream(method, None, None, purpose=purpose))
        return ToServer(rpc.request_line(rid, method, params))

    def _forward(self, cid: ClientId, msg: Message, *, bridged: bool = False, inspect: bool = False,
                 log_level: str | None = None, purpose: str | None = None) -> list[Action]:
        """Send a client request upstream under a fresh relay id (and relay progress token)."""
        assert msg.method is not None and msg.id is not None
        rid = self._take_id()
        self._seq += 1
        up = Upstream(msg.method, cid, msg.id, seq=self._seq, inspect=inspect, bridged=bridged, log_level=log_level)
        if purpose is not None:
            up.purpose = purpose
        elif msg.method == "server/discover":
            up.purpose = discover_version_key(msg.params)
        meta = msg.params.get("_meta")
        self.routes.add(rid, up)
        if isinstance(meta, dict) and rpc.valid_id(meta.get("progressToken")):
            up.token = meta["progressToken"]
            self.routes.tokens[rid] = (cid, meta["progressToken"])
            meta["progressToken"] = rid
            msg.obj["id"] = rid
            return [ToServer(rpc.dumps(msg.obj)), Activity()]
        return [ToServer(rpc.with_id(msg, rid)), Activity()]

    def _foreign_task(self, cid: ClientId, msg: Message) -> list[Action] | None:
        """A task request naming another client's task (2025-11-25 tasks, and the 2026 tasks
        extension): refused as unknown, so that its existence is never revealed."""
        if msg.method not in ("tasks/get", "tasks/result", "tasks/cancel") or msg.id is None:
            return None
        task_id = msg.params.get("taskId")
        owner = self.routes.tasks.get(task_id) if isinstance(task_id, str) else None
        if owner is None or owner == cid:
            return None
        return [ToClient(cid, rpc.error_line(msg.id, rpc.INVALID_PARAMS, "Invalid params: unknown task"), msg.id)]

    def _queue(self, cid: ClientId, msg: Message, why: str) -> list[Action]:
        self.queue.append((cid, msg))
        return [WantServer(), Note(f"client {cid} {msg.method} id={msg.id!r} queued: {why}")]

    def _fail_queue(self, message: str) -> list[Action]:
        out: list[Action] = []
        for cid, msg in self.queue:
            if msg.kind is Kind.REQUEST and msg.id is not None and cid in self.clients:
                out.append(ToClient(cid, rpc.error_line(msg.id, rpc.SERVER_UNAVAILABLE, message), msg.id))
        self.queue = []
        return out


def discover_version_key(params: JsonObj) -> str:
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
    return str(version) if version is not None else ""
