"""The relay core of one server instance: events in, actions out, no I/O.

The daemon feeds it what happened (a client attached, sent a line, left; the server process was
spawned, wrote a line, exited) and carries out the actions it returns (write a line to a client or
to the server, start the server, persist the snapshot). Everything here is decided from the events
alone, so a test drives it with a list of events and asserts the exact actions.

Phases of the server as the relay sees it:

    DOWN ──spawned──► PREINIT ──initialize sent──► HANDSHAKE ──result──► REFRESH ──listings──► READY
      ▲                                                                                      │
      └────────────────────────────── exited (from any phase) ───────────────────────────────┘

- DOWN: no process. Handshakes, `ping`, listings and `server/discover` are answered from the
  snapshot when it has them (docs/relay.md); anything else is queued and `WantServer` asks the
  daemon for a start. A cache miss is queued too: the answer must come from the real server.
- PREINIT: the process exists but no client `initialize` params are known yet (a first-ever
  client probing `server/discover` before its `initialize`): discovery probes go straight through.
- HANDSHAKE: the relay replayed a real client's `initialize` params (the client that caused the
  start, else the most recent one recorded) and waits for the result.
- REFRESH: `notifications/initialized` was sent; every advertised listing is fetched page by page.
  These requests double as a barrier (docs/relay.md): the server has processed
  `initialized` before anything queued is forwarded.
- READY: queued requests are forwarded in arrival order; listings are served from the fresh,
  merged copy; drift from the snapshot sends `list_changed` to every attached client.

A server exit answers every in-flight and queued request with an error under its original id, and
never replays a request (it may not be idempotent).

Both protocol eras go through the same object (docs/protocol-eras.md). Each start follows the
plan of the instance's *lane* (`lane`: the era the daemon gave it; lazyd/core/eras/choice.py): a handshake
lane replays `initialize` first and asks `server/discover` only after the handshake; a stateless
lane begins with the relay's own `server/discover` probe (stateless.py). A process that speaks the
stateless era goes PREINIT -> REFRESH (its listings fetched under a real client's envelope) ->
READY without any handshake, serves stateless clients from a ttl-aware cache, and serves
handshake-era clients through the bridge (bridge.py) when its plan gives it no handshake.

`RelayCore` keeps the public API (the events, the observations, the action types) and owns the
phase; it holds parts, each with its own state and a narrow port back to it (docs/architecture.md):

| part | module | its own state |
|---|---|---|
| routes | routing.py | relay ids, client-facing ids, tokens, tasks, subscriptions, log levels |
| the queue | lazyd/core/relay/actions.py (`Waiting`) | client requests waiting for the server |
| era detection | lazyd/core/eras/state.py | the live process's era stage, its DiscoverResult, a held refusal |
| the listing engine | listings.py | every fetch under way (both eras), who waits on it |
| the stateless cache | stateless_cache.py | none (the snapshot is the cache) |
| the listen hub | lazyd/core/eras/listen_relay.py, listen.py | client listen streams, the relay's own stream |
| the bridge | bridge.py | input rounds of bridged handshake-era clients |
| handshake start-up | lazyd/core/relay/startup.py | the live handshake, the server's log level and subscriptions, the settling of a start |
| sessions' roots | lazyd/core/relay/session_roots.py | each session's roots and key, its requests held until it is placed, the server's roots/list waiting for them |
| the stateless era | stateless.py | whether a stateless start is under way |
| client / server messages | lazyd/core/relay/client.py, lazyd/core/relay/server.py | none: they choose the part |
"""

from __future__ import annotations

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core import state_codec as sc
from lazyd.core.eras.bridge import Bridge
from lazyd.core.cache import HandshakeEntry, Snapshot
from lazyd.core.eras.choice import Era, EraSetting
from lazyd.core.eras.state import EraState
from lazyd.core.relay.jsonrpc import Invalid, JsonObj, Kind, Message
from lazyd.core.relay.listings import MAX_LISTING_PAGES as MAX_LISTING_PAGES
from lazyd.core.relay.listings import ListingEngine
from lazyd.core.relay.upstream import ANY_VERSION as ANY_VERSION
from lazyd.core.relay.upstream import PROTOCOL_VERSION_META as PROTOCOL_VERSION_META
from lazyd.core.relay.actions import Abort as Abort
from lazyd.core.relay.actions import Action as Action
from lazyd.core.relay.actions import Activity as Activity
from lazyd.core.relay.client_state import ClientState as ClientState
from lazyd.core.relay.actions import Note as Note
from lazyd.core.relay.actions import Phase as Phase
from lazyd.core.relay.actions import Ready as Ready
from lazyd.core.relay.actions import SessionKey as SessionKey
from lazyd.core.relay.actions import WaitIdle as WaitIdle
from lazyd.core.relay.actions import SnapshotChanged as SnapshotChanged
from lazyd.core.relay.actions import ToClient as ToClient
from lazyd.core.relay.actions import ToServer as ToServer
from lazyd.core.relay.waiting import Waiting
from lazyd.core.relay.upstream import forward, internal
from lazyd.core.relay.actions import Used as Used
from lazyd.core.relay.actions import WantServer as WantServer
from lazyd.core.relay.client import ClientMessages
from lazyd.core.relay.server import ServerMessages
from lazyd.core.relay.handshake_defaults import unattended_params
from lazyd.core.relay.startup import Handshake
from lazyd.core.relay.session_roots import RootsPart, SessionRoots
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import ClientId, Routes, SamplingPolicy
from lazyd.core.relay.session_meta import default_session_id
from lazyd.core.sharing.modes import declares_session_aware
from lazyd.core.eras.stateless import StatelessEra
from lazyd.core.lifecycle.use import counts_as_use
from lazyd.core.eras.stateless_cache import StatelessCache
from lazyd.core.eras.listen_relay import ListenRelay


class RelayCore:
    """All relay decisions for one server instance shared by any number of clients.

    Every event brings `now`, the wall-clock time in seconds (`time.time()`), as the lifecycle's
    events bring theirs: it is read only to honour stateless results' `ttlMs`, and the core never
    reads a clock itself.
    """

    def __init__(self, name: str, snapshot: Snapshot, sampling_policy: SamplingPolicy = "refuse",
                 era: EraSetting = "auto", session_aware: bool = False) -> None:
        self.name = name
        self.sampling_policy: SamplingPolicy = sampling_policy
        self.phase = Phase.DOWN
        self.now = 0.0  # the time the event being handled brought
        routes = Routes()
        # Session ids in every request (session_meta.py): forced by the setting, or declared by
        # the server (in what is cached now; its live handshake decides again, lazyd/core/relay/startup.py).
        routes.session_forced = session_aware
        routes.session_meta = session_aware or declares_session_aware(e.result for e in snapshot.entries.values())
        era_state = EraState(era, snapshot)
        listings = ListingEngine(lambda method, params, purpose: internal(self.shared.routes, method, params, purpose))
        self.shared = shared = RelayShared(snapshot, era_state, listings, routes)
        self.cache = StatelessCache(self, shared)
        self.listen = ListenRelay(self, shared, self.cache)
        self.bridge = Bridge(self, shared, self.cache, self.listen)
        self.roots = RootsPart(self, shared)
        self.handshake = Handshake(self, shared, self.cache, self.roots)
        self.stateless = StatelessEra(self, shared, self.cache, self.listen, self.handshake)
        self.from_client = ClientMessages(self, shared, self.cache, self.listen, self.bridge, self.handshake,
                                          self.stateless, self.roots)
        self.from_server = ServerMessages(shared, sampling_policy, self.cache, self.listen, self.bridge,
                                          self.handshake, self.stateless, self.roots)

    # The shared data, read under the names the core's callers and tests know.

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

    @property
    def listings(self) -> ListingEngine:
        return self.shared.listings

    # ---- observations ----------------------------------------------------------------------------

    @property
    def instance(self) -> HandshakeEntry | None:
        """The live process's handshake and listings (None: no handshake connection)."""
        return self.handshake.instance

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
        return self.routes.client_inflight_count() + self.queue.requests() + self.listings.waiting_count()

    def listen_count(self) -> int:
        """Open `subscriptions/listen` streams of attached clients (they do not keep a server up)."""
        return len(self.listen.hub.streams)

    def process_era(self) -> str | None:
        """The era the live process serves its clients in: "handshake", "stateless" (handshake-era
        clients bridged), "both" (one connection carries both), or None when there is none."""
        return self.era.process_era(self.phase, self.instance is not None)

    def handshake_view(self, params: JsonObj) -> HandshakeEntry | None:
        """What a handshake-era client with these `initialize` params is served from the snapshot:
        the recorded handshake, or, for a stateless-only server, the bridged one."""
        return self.bridge.handshake_view(params)

    # ---- state: plain data a successor daemon carries on from (lazyd/daemon/upgrade/state.py) ------

    def to_state(self) -> JsonObj:
        """Everything this core keeps, as JSON-ready plain data; the snapshot is not in it (the
        lanes of one registration share one snapshot object, so it is written once, beside)."""
        return {"phase": self.phase.value, "now": self.now,
                "clients": [c.to_state() for c in self.clients.values()], "queue": self.queue.to_state(),
                "routes": self.routes.to_state(), "era": self.era.to_state(), "listings": self.listings.to_state(),
                "listen": self.listen.hub.to_state(), "bridge": self.bridge.to_state(),
                "handshake": self.handshake.to_state(), "stateless_starting": self.stateless.starting,
                "roots": self.roots.to_state()}

    @classmethod
    def from_state(cls, state: object, name: str, snapshot: Snapshot, sampling_policy: SamplingPolicy = "refuse",
                   era: EraSetting = "auto") -> RelayCore:
        """A core that behaves exactly as the one that wrote `state` (with `snapshot`, its own);
        raises ValueError, naming the field, for anything `to_state` did not write."""
        s = sc.obj(state, "relay core")
        core = cls(name, snapshot, sampling_policy, era)
        core.phase = sc.enum_value(Phase, s.get("phase"), "phase")
        core.now = sc.number(s.get("now"), "now")
        for row in sc.items(s.get("clients"), "clients"):
            client = ClientState.from_state(row)
            core.clients[client.cid] = client
        core.queue.restore(s.get("queue"))
        core.shared.routes = Routes.from_state(s.get("routes"))  # the parts read it through `shared`
        core.era.restore(s.get("era"))
        core.listings.restore(s.get("listings"))
        core.listen.hub.restore(s.get("listen"))
        core.bridge.restore(s.get("bridge"))
        core.handshake.restore(s.get("handshake"))
        core.stateless.starting = sc.flag(s.get("stateless_starting"), "stateless_starting")
        if "roots" in s:
            core.roots.restore(s["roots"])
        else:  # a predecessor that knew no roots: its sessions were placed where they are
            core.roots.sessions = {cid: SessionRoots(placed=True) for cid in core.clients}
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
        """Tell every client that a listing may now read differently, for a reason of the daemon's
        own (the tool policy changed): stateless-era clients on their listen streams, handshake-era
        clients directly, or through the bridge when no handshake connection to the server is up
        (it then sends them the notification itself). Each client gets it once."""
        self.now = now
        out = [Note(f"{notification}: sent to clients (a daemon-side change)"), *self.listen.announce(notification, {})]
        if self.instance is not None:
            line = rpc.notification_line(notification)
            out.extend(ToClient(cid, line) for cid, c in sorted(self.clients.items()) if c.initialized)
        return out

    # ---- client events ---------------------------------------------------------------------------

    def attach(self, cid: ClientId, *, now: float, session_id: str | None = None) -> list[Action]:
        """A client attached; `session_id` is what a session-aware server will know it by
        (session_meta.py; None: one made from `cid`)."""
        self.now = now
        self.clients[cid] = ClientState(cid)
        self.routes.sessions[cid] = session_id or default_session_id(cid)
        return [Note(f"client {cid} attached")]

    def set_principal(self, cid: ClientId, principal: str) -> None:
        """Tell the relay who is behind a client beyond its self-reported clientInfo (a digest the
        daemon chose): `cacheScope: "private"` results are then never shared across principals."""
        self.clients[cid].principal = principal

    def resume(self, cid: ClientId, lines: list[bytes], *, now: float) -> list[Action]:
        """Record lines a client already had answered by a previous daemon (no replies)."""
        self.now = now
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
        """`parsed`: `rpc.parse(line)` where the caller parsed it already (a hand-off session's
        ledger reads the ids from the same parse)."""
        self.now = now
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
        """A client left: cancel its requests upstream, answer the server's requests to it, and
        drop its subscriptions, log level, tokens and task ownership. Other clients see nothing."""
        self.now = now
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
        self.listen.hub.drop_client(cid)
        self.listings.drop_waiter(cid)
        self.bridge.forget_rounds(cid)
        del self.clients[cid]
        out.extend(self.roots.left(cid))
        out.extend(self.handshake.sync_level())
        out.extend(self.handshake.settle())
        return out

    # ---- placing a session (session_roots.py) ----------------------------------------------------

    def release(self, cid: ClientId, *, now: float) -> list[Action]:
        """The daemon placed the session on this process (after a `SessionKey`): its held
        requests go on."""
        self.now = now
        return [*self.roots.release(cid), *self.handshake.settle()]

    def take(self, cid: ClientId, *, now: float) -> tuple[SessionRoots, list[bytes], list[Action]]:
        """The daemon moves the session to another process before anything of it reached this one:
        what that process's core adopts (its roots, its held requests as lines), and this core's
        actions for its leaving (which the caller carries out, as for a detach)."""
        known, held = self.roots.take(cid)
        lines = [rpc.dumps(msg.obj) for msg in held]
        return known, lines, self.detach(cid, now=now)

    def adopt(self, cid: ClientId, params: JsonObj | None, known: SessionRoots, *, now: float) -> list[Action]:
        """A session moved here from another process of its registration (`take`): its handshake
        and roots are known, it is placed here. Its held requests follow as ordinary lines."""
        self.now = now
        client = self.clients[cid]
        client.params = params
        client.initialized = params is not None
        self.roots.adopt(cid, known)
        return [Note(f"client {cid} moved here: its roots fit this process"), *self.roots.roots_moved()]

    def server_idle(self, *, now: float) -> list[Action]:
        """The server's threads all sleep after a settling start (or the daemon stopped waiting):
        the first request goes on."""
        self.now = now
        return self.handshake.idle()

    def next_deadline(self) -> float | None:
        """When the relay must be told the time (`tick`) even if nothing happens: a client's
        answer to the relay's roots/list is overdue then (wall-clock seconds, as `now`)."""
        return self.roots.next_deadline()

    def tick(self, *, now: float) -> list[Action]:
        self.now = now
        return [*self.roots.overdue(now), *self.handshake.settle()]

    def session_keys(self) -> set[str]:
        """The keys of the sessions placed on this process (lazyd/core/sharing/roots.py); none for a
        stateless-era process, which asks for roots within each request (the bridge: the session
        that made the request answers), so roots keep no session from sharing it."""
        return set() if self.lane == "stateless" else self.roots.keys()

    # ---- server events ---------------------------------------------------------------------------

    def ensure_replay_params(self) -> None:
        """Give an unattended start a handshake to replay (eager, keep_alive, a wake predicate).

        The relay replays a queued client's `initialize`, else the snapshot's last params. A start
        nobody queued a request for, of a server no client ever initialized, would otherwise send
        no handshake, never become ready, and be killed at its start timeout. An attached client's
        params (a resumed session) are preferred over the defaults: they are a real client's."""
        params = unattended_params(self.snapshot.last_params, bool(self.queue),
                                   (c.params for c in self.clients.values()))
        if params is not None:
            self.snapshot.last_params = params

    def spawned(self, *, now: float) -> list[Action]:
        """The process exists. Follow the start plan of its lane (lazyd/core/eras/choice.py): the era probe
        first (then discovery probes that were waiting), or the replayed handshake first; a
        handshake known and wanted is sent (behind the probe, or alone)."""
        self.now = now
        self.phase = Phase.PREINIT
        plan = self.era.spawned()
        out: list[Action] = [Note(f"server spawned ({self.lane or 'no'} lane: "
                                  f"{'era probe first' if plan.probe_first else 'initialize first'}, "
                                  f"initialize {plan.initialize})")]
        if plan.probe_first:
            out.extend(self.stateless.send_probe())
        params = self.handshake.replay_params()
        handshake = params is not None and plan.initialize != "never"
        if plan.probe_first or not handshake:
            # Discovery probes that woke the server go straight through, unless a handshake must
            # be this connection's first request (a dual-era server locks to the first one's era).
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
        self.now = now
        out: list[Action] = [Note(f"server exited: {description}")]
        message = f"lazyd: server {self.name} stopped before answering: {description}"
        for up in self.routes.upstream.values():
            if up.cid is not None and up.client_id is not None and up.cid in self.clients:
                out.append(ToClient(up.cid, rpc.error_line(up.client_id, rpc.SERVER_UNAVAILABLE, message), up.client_id))
        out.extend(self.queue.fail(message, self.clients))
        self.routes.process_gone()
        self.handshake.gone()
        self.roots.gone()
        self.phase = Phase.DOWN
        out.extend(self.stateless.gone())
        # Rounds whose retry was in flight were just answered with the error above.
        self.bridge.end_answered_rounds()
        return out

    def start_failed(self, reason: str, *, now: float) -> list[Action]:
        """No process could be started: every queued request gets `reason`."""
        self.now = now
        self.phase = Phase.DOWN
        out = [Note(f"start failed: {reason}"), *self.queue.fail(f"lazyd: cannot start server {self.name}: {reason}", self.clients)]
        self.bridge.end_answered_rounds()  # a queued retry was just answered with the error
        return out

    def server_line(self, line: bytes, *, now: float) -> list[Action]:
        self.now = now
        fast = self.from_server.large_result(line)
        if fast is not None:
            return fast
        msg = rpc.parse(line)
        if not isinstance(msg, Message):
            out: list[Action] = [Note(f"dropped a line from the server that is not a JSON-RPC message ({msg.reason})")]
            rid = msg.deep_response_id
            if rid is not None:
                # An answer the relay cannot carry still ends its request: whoever waits on it gets
                # an error now rather than nothing until the server exits.
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
