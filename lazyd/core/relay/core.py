"""The relay core of one server instance: events in, actions out, no I/O.

The daemon feeds it what happened (clients attach, send lines, leave; the process is spawned,
writes lines, exits) and carries out the actions it returns. Phases of the server:

    DOWN ──spawned──► PREINIT ──initialize sent──► HANDSHAKE ──result──► REFRESH ──listings──► READY
      ▲                                                                                      │
      └────────────────────────────── exited (from any phase) ───────────────────────────────┘

- DOWN: handshakes, `ping`, listings and `server/discover` are answered from the snapshot when it
  has them (docs/relay.md); anything else, a cache miss included, is queued and `WantServer` asks
  for a start.
- PREINIT: no client `initialize` params known yet: discovery probes go straight through.
- HANDSHAKE: a real client's `initialize` params were replayed; the result is awaited.
- REFRESH: `initialized` was sent and every advertised listing is fetched; these requests are
  the barrier that orders `initialized` before anything queued.
- READY: queued requests go on in arrival order; drift from the snapshot sends `list_changed`.

A server exit answers every in-flight and queued request with an error under its own id and never
replays one (it may not be idempotent). Both eras go through this object (docs/protocol-eras.md):
each start follows the plan of the instance's *lane* (lazyd/core/eras/choice.py); a stateless
process skips the handshake and serves handshake-era clients through the bridge.

`RelayCore` is the public API; its parts (docs/architecture.md, "The relay core: parts, ports")
each keep their own state, share the phase and the rest of `RelayShared`, and reach the core
through a narrow port.
"""

from __future__ import annotations

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core import state_codec as sc
from lazyd.core.eras.bridge import KEPT as BRIDGE_KEPT, Bridge
from lazyd.core.cache import HandshakeEntry, Snapshot
from lazyd.core.eras.choice import Era, EraSetting
from lazyd.core.eras.state import KEPT as ERA_KEPT, EraState
from lazyd.core.relay.jsonrpc import Invalid, JsonObj, Kind, Message
from lazyd.core.relay.listings import MAX_LISTING_PAGES as MAX_LISTING_PAGES
from lazyd.core.relay.listings import ListingEngine
from lazyd.core.relay.waiting import Waiting
from lazyd.core.eras.versions import PROTOCOL_VERSION_META as PROTOCOL_VERSION_META
from lazyd.core.relay.upstream import forward, internal
from lazyd.core.relay.client import ClientMessages
from lazyd.core.relay.server import ServerMessages
from lazyd.core.relay.handshake_defaults import unattended_params
from lazyd.core.relay.startup import Handshake
from lazyd.core.relay.session_roots import KEPT as ROOTS_KEPT, RootsPart, SessionRoots
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import ClientId, Routes, SamplingPolicy
from lazyd.core.relay.session_meta import default_session_id
from lazyd.core.sharing.modes import declares_session_aware
from lazyd.core.eras.stateless import StatelessEra
from lazyd.core.lifecycle.usage import counts_as_use
from lazyd.core.eras.stateless_cache import StatelessCache
from lazyd.core.eras.listen import KEPT as LISTEN_KEPT, ListenRelay
from lazyd.core.relay.actions import (Abort as Abort, Action as Action, Activity as Activity, Note as Note,
                                      Phase as Phase, Ready as Ready, SessionKey as SessionKey,
                                      SnapshotChanged as SnapshotChanged, ToClient as ToClient, ToServer as ToServer,
                                      Used as Used, WaitIdle as WaitIdle, WantServer as WantServer)
from lazyd.core.relay.client_state import ClientState


# The queue's records: each waiting message with its client, in arrival order.
_QUEUE = list[tuple[ClientId, Message]]


class RelayCore:
    """All relay decisions for one server instance shared by any number of clients. Every event
    brings `now` (wall-clock seconds), read only for stateless results' `ttlMs`."""

    def __init__(self, name: str, snapshot: Snapshot, sampling_policy: SamplingPolicy = "refuse",
                 era: EraSetting = "auto", session_aware: bool = False) -> None:
        self.name = name
        self.sampling_policy: SamplingPolicy = sampling_policy
        routes = Routes()
        # Session ids in every request (session_meta.py): forced, or declared by the cached server.
        routes.session_forced = session_aware
        routes.session_meta = session_aware or declares_session_aware(e.result for e in snapshot.entries.values())
        era_state = EraState(era, snapshot)
        listings = ListingEngine(lambda method, params, purpose: internal(self.shared.routes, method, params, purpose))
        self.shared = shared = RelayShared(name, snapshot, era_state, listings, routes)
        self.cache = StatelessCache(shared)
        self.listen = ListenRelay(shared, self.cache, self.maybe_ready)
        self.bridge = Bridge(shared, self.cache, self.listen)
        self.roots = RootsPart(shared, self.dispatch)
        self.handshake = Handshake(shared, self.cache, self.roots, self.dispatch, self.initialize_refused,
                                   self.probe_unanswered)
        self.stateless = StatelessEra(shared, self.cache, self.listen, self.handshake, self.dispatch)
        self.from_client = ClientMessages(shared, self.cache, self.listen, self.bridge, self.handshake,
                                          self.stateless, self.roots)
        self.from_server = ServerMessages(shared, sampling_policy, self.cache, self.listen, self.bridge,
                                          self.handshake, self.stateless, self.roots)

    @property
    def phase(self) -> Phase:
        return self.shared.phase

    @property
    def snapshot(self) -> Snapshot:
        return self.shared.snapshot

    @property
    def clients(self) -> dict[ClientId, ClientState]:
        return self.shared.clients

    @property
    def queue(self) -> Waiting:
        return self.shared.queue

    @property
    def routes(self) -> Routes:
        return self.shared.routes

    @property
    def era(self) -> EraState:
        return self.shared.era

    # ---- observations ----------------------------------------------------------------------------

    @property
    def instance(self) -> HandshakeEntry | None:
        """The live process's handshake and listings (None: no handshake connection)."""
        return self.shared.instance

    @property
    def lane(self) -> Era | None:
        """The era the daemon gave this instance's process (lazyd/core/eras/choice.py)."""
        return self.era.lane

    @lane.setter
    def lane(self, value: Era | None) -> None:
        self.era.lane = value

    def client_count(self) -> int:
        return len(self.clients)

    def inflight_count(self) -> int:
        return self.routes.client_inflight + self.queue.requests() + self.shared.listings.waiting_count()

    def listen_count(self) -> int:
        """Open `subscriptions/listen` streams of attached clients (they do not keep a server up)."""
        return len(self.listen.streams)

    def process_era(self) -> str | None:
        """"handshake", "stateless" (handshake-era clients bridged), "both", or None: no process."""
        return self.era.process_era(self.phase, self.instance is not None)

    def handshake_view(self, params: JsonObj) -> HandshakeEntry | None:
        """The handshake a client with these params is served from the snapshot (maybe bridged)."""
        return self.bridge.handshake_view(params)

    # ---- state: plain data a successor daemon carries on from (lazyd/daemon/upgrade/state.py) ------

    def to_state(self) -> JsonObj:
        """Everything this core keeps, as plain data; not the snapshot, which lanes share."""
        return {"phase": self.phase.value, "now": self.shared.now, "clients": sc.dump(list(self.clients.values())),
                "queue": sc.dump(self.queue.items, _QUEUE), "routes": sc.dump(self.routes),
                "era": sc.dump_attrs(self.era, ERA_KEPT), "listings": self.shared.listings.to_state(),
                "listen": sc.dump_attrs(self.listen, LISTEN_KEPT), "bridge": sc.dump_attrs(self.bridge, BRIDGE_KEPT),
                "handshake": self.handshake.to_state(), "stateless_starting": self.stateless.starting,
                "roots": sc.dump_attrs(self.roots, ROOTS_KEPT)}

    @classmethod
    def from_state(cls, state: object, name: str, snapshot: Snapshot, sampling_policy: SamplingPolicy = "refuse",
                   era: EraSetting = "auto") -> RelayCore:
        """The core that wrote `state`; ValueError naming the field for anything else."""
        s = sc.obj(state, "relay core")
        core = cls(name, snapshot, sampling_policy, era)
        core.shared.phase = sc.enum_value(Phase, s.get("phase"), "phase")
        core.shared.now = sc.number(s.get("now"), "now")
        core.clients.update((c.cid, c) for c in sc.load(list[ClientState], s.get("clients"), "client"))
        core.queue.items = sc.load(_QUEUE, s.get("queue"), "queued message")
        core.shared.routes = sc.load(Routes, s.get("routes"), "routes")  # the parts read it through `shared`
        sc.load_attrs(core.era, ERA_KEPT, s.get("era"), "era")
        core.shared.listings.restore(s.get("listings"))
        sc.load_attrs(core.listen, LISTEN_KEPT, s.get("listen"), "listen")
        sc.load_attrs(core.bridge, BRIDGE_KEPT, s.get("bridge"), "bridge")
        core.handshake.restore(s.get("handshake"))
        core.stateless.starting = sc.flag(s.get("stateless_starting"), "stateless_starting")
        sc.load_attrs(core.roots, ROOTS_KEPT, s.get("roots"), "roots")
        return core

    # ---- the ports the parts reach the core through ----------------------------------------------

    def dispatch(self, cid: ClientId, msg: Message) -> list[Action]:
        """A queued request, handled as if it had just arrived."""
        return self.from_client.request(cid, msg)

    def maybe_ready(self) -> list[Action]:
        return self.stateless.maybe_ready()

    def initialize_refused(self, error: JsonObj) -> list[Action] | None:
        return self.stateless.initialize_refused(error)

    def probe_unanswered(self) -> list[Action]:
        return self.stateless.probe_unanswered()

    # ---- the daemon's own events -----------------------------------------------------------------

    def announce_list_changed(self, notification: str, *, now: float) -> list[Action]:
        """Tell every client, once, that a listing changed for the daemon's own reason (the tool
        policy): on listen streams, directly, or through the bridge when no handshake is up."""
        self.shared.now = now
        out = [Note(f"{notification}: sent to clients (a daemon-side change)"), *self.listen.announce(notification, {})]
        if self.instance is not None:
            line = rpc.notification_line(notification)
            out.extend(ToClient(cid, line) for cid, c in sorted(self.clients.items()) if c.initialized)
        return out

    # ---- client events ---------------------------------------------------------------------------

    def attach(self, cid: ClientId, *, now: float, session_id: str | None = None) -> list[Action]:
        """`session_id`: what a session-aware server knows it by (None: made from `cid`)."""
        self.shared.now = now
        self.clients[cid] = ClientState(cid)
        self.routes.sessions[cid] = session_id or default_session_id(cid)
        return [Note(f"client {cid} attached")]

    def resume(self, cid: ClientId, lines: list[bytes], *, now: float) -> list[Action]:
        """Record lines a client already had answered by a previous daemon (no replies)."""
        self.shared.now = now
        client = self.clients[cid]
        for line in lines:
            msg = rpc.parse(line)
            if isinstance(msg, Message) and msg.method == "initialize":
                client.params = msg.params
            elif isinstance(msg, Message) and msg.method == "notifications/initialized":
                client.initialized = True
        out: list[Action] = [Note(f"client {cid} resumed its session")]
        if client.params is not None:
            out.extend(self.roots.initialize(cid))  # its roots are asked when it next needs the server
        return out

    def client_line(self, cid: ClientId, line: bytes, *, now: float, parsed: Message | Invalid | None = None) -> list[Action]:
        """`parsed`: `rpc.parse(line)` when the caller has it already."""
        self.shared.now = now
        msg = parsed if parsed is not None else rpc.parse(line)
        if not isinstance(msg, Message):
            out: list[Action] = [Note(f"client {cid}: invalid line ({msg.reason})")]
            if msg.reply is not None:
                # A refusal under the request's id is that request's final answer.
                out.append(ToClient(cid, msg.reply, msg.id))
            return out
        if msg.kind is Kind.REQUEST:
            self.clients[cid].last_active = self.routes.next_seq()
            if counts_as_use(msg.method or ""):
                # Before the request's own actions: a start it makes is then already a used one.
                return [Used(), *self.from_client.request(cid, msg)]
            return self.from_client.request(cid, msg)
        if msg.kind is Kind.NOTIFICATION:
            return self.from_client.notification(cid, msg)
        # An answer to the server may be the last of its start's requests (startup.py: settle).
        return [*self.from_client.response(cid, msg), *self.handshake.settle()]

    def detach(self, cid: ClientId, *, now: float) -> list[Action]:
        """Cancel its requests upstream, answer the server's requests to it, drop what it owned."""
        self.shared.now = now
        out: list[Action] = [Note(f"client {cid} detached")]
        alive = self.phase is not Phase.DOWN
        for rid in self.routes.inflight_of(cid):
            up = self.routes.pop(rid)
            self.routes.release_token(rid)
            if alive and up is not None:
                out.append(ToServer(_cancel_line(rid, "client disconnected")))
        for (owner, _), down in list(self.routes.downstream.items()):
            if owner != cid:
                continue
            if down.method == "elicitation/create":
                out.append(ToServer(rpc.result_line(down.server_id, {"action": "cancel"})))
            else:
                out.append(ToServer(rpc.error_line(down.server_id, rpc.INTERNAL_ERROR, "lazyd: the client disconnected")))
        out.extend(self.handshake.client_left(cid))
        self.queue.drop_client(cid)
        self.routes.forget_client(cid)
        self.listen.drop_client(cid)
        self.shared.listings.drop_waiter(cid)
        self.bridge.forget_rounds(cid)
        del self.clients[cid]
        out.extend(self.roots.left(cid))
        out.extend(self.handshake.sync_level())
        out.extend(self.handshake.settle())
        return out

    # ---- placing a session (session_roots.py) ----------------------------------------------------

    def release(self, cid: ClientId, *, now: float) -> list[Action]:
        """The daemon placed the session here (after a `SessionKey`): its held requests go on."""
        self.shared.now = now
        return [*self.roots.release(cid), *self.handshake.settle()]

    def take(self, cid: ClientId, *, now: float) -> tuple[SessionRoots, list[bytes], list[Action]]:
        """The session moves to another process before anything of it reached this one: its roots
        and held requests (as lines) for that core's `move_in`, and this core's detach actions."""
        known, held = self.roots.take(cid)
        lines = [rpc.dumps(msg.obj) for msg in held]
        return known, lines, self.detach(cid, now=now)

    def move_in(self, cid: ClientId, params: JsonObj | None, known: SessionRoots, *, now: float) -> list[Action]:
        """A session `take`n from another process of its registration, placed here with its
        handshake and roots; its held requests follow as ordinary lines."""
        self.shared.now = now
        client = self.clients[cid]
        client.params = params
        client.initialized = params is not None
        self.roots.move_in(cid, known)
        return [Note(f"client {cid} moved here: its roots fit this process"), *self.roots.roots_moved()]

    def server_idle(self, *, now: float) -> list[Action]:
        """The server settled after its start (or the daemon stopped waiting): requests go on."""
        self.shared.now = now
        return self.handshake.idle()

    def next_deadline(self) -> float | None:
        """When to `tick` even if nothing happens: a client's roots/list answer is overdue."""
        return self.roots.next_deadline()

    def tick(self, *, now: float) -> list[Action]:
        self.shared.now = now
        return [*self.roots.overdue(now), *self.handshake.settle()]

    def session_keys(self) -> set[str]:
        """The keys of the sessions placed here (lazyd/core/sharing/roots.py); none for a stateless
        process, which asks for roots within each request."""
        return set() if self.lane == "stateless" else self.roots.keys()

    # ---- server events ---------------------------------------------------------------------------

    def ensure_replay_params(self) -> None:
        """Give an unattended start (eager, keep_alive, a wake predicate) a handshake to replay:
        without one, a server no client ever initialized would never become ready."""
        params = unattended_params(self.snapshot.last_params, bool(self.queue),
                                   (c.params for c in self.clients.values()))
        if params is not None:
            self.snapshot.last_params = params

    def spawned(self, *, now: float) -> list[Action]:
        """Follow the start plan of the lane: the era probe first, or the replayed handshake."""
        self.shared.now = now
        self.shared.phase = Phase.PREINIT
        plan = self.era.spawned()
        out: list[Action] = [Note(f"server spawned ({self.lane or 'no'} lane: "
                                  f"{'era probe first' if plan.probe_first else 'initialize first'}, "
                                  f"initialize {plan.initialize})")]
        if plan.probe_first:
            out.extend(self.stateless.send_probe())
        params = self.handshake.replay_params()
        handshake = params is not None and plan.initialize != "never"
        if plan.probe_first or not handshake:
            # Discovery probes go through, unless a handshake must be first (a dual-era server
            # locks to the first request's era).
            for cid, msg in self.queue.take():
                if msg.method == "server/discover":
                    out.extend(forward(self.routes, cid, msg, inspect=True, purpose=self.cache.discover_purpose(cid, msg)))
                else:
                    self.queue.hold(cid, msg)
        if handshake:
            assert params is not None
            out.extend(self.handshake.send_initialize(params))
        return out

    def exited(self, description: str, *, now: float) -> list[Action]:
        """The process ended (crash, stop or start timeout): answer everything that waits on it."""
        self.shared.now = now
        out: list[Action] = [Note(f"server exited: {description}")]
        message = f"lazyd: server {self.name} stopped before answering: {description}"
        for up in self.routes.upstream.values():
            if up.cid is not None and up.client_id is not None and up.cid in self.clients:
                out.append(ToClient(up.cid, rpc.error_line(up.client_id, rpc.SERVER_UNAVAILABLE, message), up.client_id))
        out.extend(self.queue.fail(message, self.clients))
        self.routes.process_gone()
        self.handshake.gone()
        self.roots.gone()
        self.shared.phase = Phase.DOWN
        out.extend(self.stateless.gone())
        # Rounds whose retry was in flight were just answered with the error above.
        self.bridge.end_answered_rounds()
        return out

    def start_failed(self, reason: str, *, now: float) -> list[Action]:
        """No process could be started: every queued request gets `reason`."""
        self.shared.now = now
        self.shared.phase = Phase.DOWN
        out = [Note(f"start failed: {reason}"), *self.queue.fail(f"lazyd: cannot start server {self.name}: {reason}", self.clients)]
        self.bridge.end_answered_rounds()  # a queued retry was just answered with the error
        return out

    def server_line(self, line: bytes, *, now: float) -> list[Action]:
        self.shared.now = now
        fast = self.from_server.large_result(line)
        if fast is not None:
            return fast
        msg = rpc.parse(line)
        if not isinstance(msg, Message):
            out: list[Action] = [Note(f"dropped a line from the server that is not a JSON-RPC message ({msg.reason})")]
            rid = msg.deep_response_id
            if rid is not None:
                # An answer the relay cannot carry still ends its request, with an error.
                text = f"lazyd: the server's response could not be relayed ({msg.reason})"
                out.extend(self.from_server.response(Message(Kind.RESPONSE, rpc.error_obj(rid, rpc.INTERNAL_ERROR, text), rid, None)))
            return out
        if msg.kind is Kind.RESPONSE:
            return self.from_server.response(msg)
        if msg.kind is Kind.REQUEST:
            return self.from_server.request(msg)
        return self.from_server.notification(msg)


def _cancel_line(rid: int, reason: str) -> bytes:
    return rpc.notification_line("notifications/cancelled", {"requestId": rid, "reason": reason})
