"""The relay core of one server instance: events in, actions out, no I/O (HOUSE_STYLE.md).

The daemon feeds it what happened (a client attached, sent a line, left; the server process was
spawned, wrote a line, exited) and carries out the actions it returns (write a line to a client or
to the server, start the server, persist the snapshot). Everything here is decided from the events
alone, so a test drives it with a list of events and asserts the exact actions.

Phases of the server as the relay sees it:

    DOWN ──spawned──► PREINIT ──initialize sent──► HANDSHAKE ──result──► REFRESH ──listings──► READY
      ▲                                                                                      │
      └────────────────────────────── exited (from any phase) ───────────────────────────────┘

- DOWN: no process. Handshakes, `ping`, listings and `server/discover` are answered from the
  snapshot when it has them (PROTOCOL.md §4); anything else is queued and `WantServer` asks the
  daemon for a start. A cache miss is queued too: the answer must come from the real server.
- PREINIT: the process exists but no client `initialize` params are known yet (a first-ever
  client probing `server/discover` before its `initialize`): discovery probes go straight through.
- HANDSHAKE: the relay replayed a real client's `initialize` params (the client that caused the
  start, else the most recent one recorded) and waits for the result.
- REFRESH: `notifications/initialized` was sent; every advertised listing is fetched page by page.
  These requests double as the barrier PROTOCOL.md §8 asks for: the server has processed
  `initialized` before anything queued is forwarded.
- READY: queued requests are forwarded in arrival order; listings are served from the fresh,
  merged copy; drift from the snapshot sends `list_changed` to every attached client.

A server exit answers every in-flight and queued request with an error under its original id, and
never replays a request (it may not be idempotent).

Both protocol eras go through the same object (docs/protocol-eras.md). Each start follows the
plan of the instance's *lane* (`lane`: the era the daemon gave it; era_policy.py): a handshake
lane replays `initialize` first and asks `server/discover` only after the handshake; a stateless
lane begins with the relay's own `server/discover` probe (stateless.py). A process that speaks the
stateless era goes PREINIT -> REFRESH (its listings fetched under a real client's envelope) ->
READY without any handshake, serves stateless clients from a ttl-aware cache, and serves
handshake-era clients through the bridge (bridge.py) when its plan gives it no handshake.

This module keeps the public API: the events and what each does in every phase. The handshake
era's rules live with their code: relay_client.py (client messages), relay_startup.py (handshake
replay and listing refresh), relay_server.py (server messages).
"""

from __future__ import annotations

from lazyd.core import jsonrpc as rpc
from lazyd.core.cache import Snapshot
from lazyd.core.era_policy import EraSetting, facts_of
from lazyd.core.jsonrpc import Kind, Message
from lazyd.core.relay_base import ANY_VERSION as ANY_VERSION
from lazyd.core.relay_base import MAX_LISTING_PAGES as MAX_LISTING_PAGES
from lazyd.core.relay_base import PROTOCOL_VERSION_META as PROTOCOL_VERSION_META
from lazyd.core.relay_base import Abort as Abort
from lazyd.core.relay_base import Action as Action
from lazyd.core.relay_base import Activity as Activity
from lazyd.core.relay_base import ClientState as ClientState
from lazyd.core.relay_base import Note as Note
from lazyd.core.relay_base import Phase as Phase
from lazyd.core.relay_base import Ready as Ready
from lazyd.core.relay_base import SnapshotChanged as SnapshotChanged
from lazyd.core.relay_base import ToClient as ToClient
from lazyd.core.relay_base import ToServer as ToServer
from lazyd.core.relay_base import WantServer as WantServer
from lazyd.core.relay_client import ClientMessageRelay
from lazyd.core.routing import ClientId, SamplingPolicy


class RelayCore(ClientMessageRelay):
    """All relay decisions for one server instance shared by any number of clients.

    Every event brings `now`, the wall-clock time in seconds (`time.time()`), as the lifecycle's
    events bring theirs: it is read only to honour stateless results' `ttlMs`, and the core never
    reads a clock itself.
    """

    def __init__(self, name: str, snapshot: Snapshot, sampling_policy: SamplingPolicy = "refuse",
                 era: EraSetting = "auto") -> None:
        super().__init__(name, snapshot, sampling_policy, era)

    # ---- observations ----------------------------------------------------------------------------

    def client_count(self) -> int:
        return len(self.clients)

    def inflight_count(self) -> int:
        queued = sum(1 for cid, m in self.queue if m.kind is Kind.REQUEST)
        return self.routes.client_inflight_count() + queued + self.waiting_count()

    def listen_count(self) -> int:
        """Open `subscriptions/listen` streams of attached clients (they do not keep a server up)."""
        return len(self.hub.streams)

    # ---- the daemon's own events -----------------------------------------------------------------

    def announce_list_changed(self, notification: str, *, now: float) -> list[Action]:
        """Tell every client that a listing may now read differently, for a reason of the daemon's
        own (the tool policy changed): stateless-era clients on their listen streams, handshake-era
        clients directly, or through the bridge when no handshake connection to the server is up
        (it then sends them the notification itself). Each client gets it once."""
        self.now = now
        out = [Note(f"{notification}: sent to clients (a daemon-side change)"), *self._announce_list_changed(notification)]
        if self.instance is not None:
            line = rpc.notification_line(notification)
            out.extend(ToClient(cid, line) for cid, c in sorted(self.clients.items()) if c.initialized)
        return out

    # ---- client events ---------------------------------------------------------------------------

    def attach(self, cid: ClientId, *, now: float) -> list[Action]:
        self.now = now
        self.clients[cid] = ClientState(cid)
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
        return [Note(f"client {cid} resumed its session")]

    def client_line(self, cid: ClientId, line: bytes, *, now: float) -> list[Action]:
        self.now = now
        msg = rpc.parse(line)
        if not isinstance(msg, Message):
            out: list[Action] = [Note(f"client {cid}: invalid line ({msg.reason})")]
            if msg.reply is not None:
                # A refusal under the request's id is that request's final answer.
                out.append(ToClient(cid, msg.reply, msg.id))
            return out
        if msg.kind is Kind.REQUEST:
            self._seq += 1
            self.clients[cid].last_active = self._seq
            return self._client_request(cid, msg)
        if msg.kind is Kind.NOTIFICATION:
            return self._client_notification(cid, msg)
        return self._client_response(cid, msg)

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
        for uri, subscribers in list(self.routes.subscriptions.items()):
            subscribers.discard(cid)
            if not subscribers:
                del self.routes.subscriptions[uri]
                if uri in self._upstream_subs and self.phase is Phase.READY:
                    self._upstream_subs.discard(uri)
                    out.append(self._internal("resources/unsubscribe", {"uri": uri}, "unsubscribe"))
        self.queue = [(c, m) for c, m in self.queue if c != cid]
        self.routes.forget_client(cid)
        self.hub.drop_client(cid)
        self._drop_waiter(cid)
        self._forget_rounds(cid)
        del self.clients[cid]
        out.extend(self._sync_level())
        return out

    # ---- server events ---------------------------------------------------------------------------

    def spawned(self, *, now: float) -> list[Action]:
        """The process exists. Follow the start plan of its lane (era_policy.py): the era probe
        first (then discovery probes that were waiting), or the replayed handshake first; a
        handshake known and wanted is sent (behind the probe, or alone)."""
        self.now = now
        self.phase = Phase.PREINIT
        plan = self.plan = self.era_policy.start_plan(self.lane, facts_of(self.snapshot))
        if self.lane is None:
            # A start no client asked for: the process is in the era its plan gives it, so the
            # next client of that era joins it instead of getting a process of its own.
            self.lane = "stateless" if plan.initialize == "never" else "handshake"
        out: list[Action] = [Note(f"server spawned ({self.lane or 'no'} lane: "
                                  f"{'era probe first' if plan.probe_first else 'initialize first'}, "
                                  f"initialize {plan.initialize})")]
        self.stateless_up = None if plan.probe_first else False
        if plan.probe_first:
            out.extend(self._send_probe())
        params = self._replay_params()
        handshake = params is not None and plan.initialize != "never"
        if plan.probe_first or not handshake:
            # Discovery probes that woke the server go straight through, unless a handshake must
            # be this connection's first request (a dual-era server locks to the first one's era).
            waiting = self.queue
            self.queue = []
            for cid, msg in waiting:
                if msg.method == "server/discover":
                    out.extend(self._forward(cid, msg, inspect=True, purpose=self._discover_purpose(cid, msg)))
                else:
                    self.queue.append((cid, msg))
        if handshake:
            assert params is not None
            out.extend(self._send_initialize(params))
        return out

    def process_era(self) -> str | None:
        """The era the live process serves its clients in: "handshake", "stateless" (handshake-era
        clients bridged), "both" (one connection carries both), or None when there is none."""
        if self.phase is Phase.DOWN:
            return None
        if self.stateless_up is True:
            return "both" if self.instance is not None else "stateless"
        if self.stateless_up is False or self.instance is not None:
            return "handshake"
        return None  # the era probe is on its way

    def exited(self, description: str, *, now: float) -> list[Action]:
        """The process ended (crash, stop or start timeout): answer everything that waits on it."""
        self.now = now
        out: list[Action] = [Note(f"server exited: {description}")]
        message = f"lazyd: server {self.name} stopped before answering: {description}"
        for up in self.routes.upstream.values():
            if up.cid is not None and up.client_id is not None and up.cid in self.clients:
                out.append(ToClient(up.cid, rpc.error_line(up.client_id, rpc.SERVER_UNAVAILABLE, message), up.client_id))
        out.extend(self._fail_queue(message))
        self.routes.upstream.clear()
        self.routes.by_client.clear()
        self.routes.tokens.clear()
        self.routes.downstream.clear()
        self.routes.tasks.clear()
        self.routes.elicitations.clear()
        self._upstream_subs.clear()
        self._upstream_level = None
        self._refreshing.clear()
        self.instance = None
        self.phase = Phase.DOWN
        out.extend(self._stateless_gone())
        # Rounds whose retry was in flight were just answered with the error above.
        for key in [k for k, r in self.rounds.items() if not r.pending]:
            self._end_round(*key)
        return out

    def start_failed(self, reason: str, *, now: float) -> list[Action]:
        """No process could be started: every queued request gets `reason`."""
        self.now = now
        self.phase = Phase.DOWN
        out = [Note(f"start failed: {reason}"), *self._fail_queue(f"lazyd: cannot start server {self.name}: {reason}")]
        for key in [k for k, r in self.rounds.items() if not r.pending]:
            self._end_round(*key)  # a queued retry was just answered with the error
        return out

    def server_line(self, line: bytes, *, now: float) -> list[Action]:
        self.now = now
        fast = self._large_result(line)
        if fast is not None:
            return fast
        msg = rpc.parse(line)
        if not isinstance(msg, Message):
            out: list[Action] = [Note(f"dropped a line from the server that is not a JSON-RPC message ({msg.reason})")]
            if msg.kind is Kind.RESPONSE and isinstance(msg.id, int):
                # An answer the relay cannot carry still ends its request: whoever waits on it gets
                # an error now rather than nothing until the server exits.
                text = f"lazyd: the server's response could not be relayed ({msg.reason})"
                out.extend(self._server_response(Message(Kind.RESPONSE, rpc.error_obj(msg.id, rpc.INTERNAL_ERROR, text), msg.id, None)))
            return out
        if msg.kind is Kind.RESPONSE:
            return self._server_response(msg)
        if msg.kind is Kind.REQUEST:
            return self._server_request(msg)
        return self._server_notification(msg)


def _cancel_line(rid: int, reason: str) -> bytes:
    return rpc.notification_line("notifications/cancelled", {"requestId": rid, "reason": reason})
