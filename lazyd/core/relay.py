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

Both protocol eras go through the same object (docs/protocol-eras.md): a start whose era is not
known to be the handshake's begins with the relay's own `server/discover` probe (stateless.py);
a process that speaks the stateless era goes PREINIT -> REFRESH (its listings fetched under a real
client's envelope) -> READY without any handshake, serves stateless clients from a ttl-aware cache,
and serves handshake-era clients through the bridge (bridge.py). This module keeps the public API
and the handshake era.
"""

from __future__ import annotations

from lazyd.core import eras
from lazyd.core import jsonrpc as rpc
from lazyd.core.bridge import BridgeRelay
from lazyd.core.cache import LIST_CHANGED, LISTINGS, HandshakeEntry, Listing, Snapshot, handshake_key
from lazyd.core.jsonrpc import JsonObj, Kind, Message
from lazyd.core.relay_base import ANY_VERSION as ANY_VERSION
from lazyd.core.relay_base import MAX_LISTING_PAGES as MAX_LISTING_PAGES
from lazyd.core.relay_base import PROTOCOL_VERSION_META as PROTOCOL_VERSION_META
from lazyd.core.relay_base import Abort as Abort
from lazyd.core.relay_base import Action as Action
from lazyd.core.relay_base import Activity as Activity
from lazyd.core.relay_base import ClientState as ClientState
from lazyd.core.relay_base import Clock as Clock
from lazyd.core.relay_base import Note as Note
from lazyd.core.relay_base import Phase as Phase
from lazyd.core.relay_base import Ready as Ready
from lazyd.core.relay_base import Refresh as _Refresh
from lazyd.core.relay_base import SnapshotChanged as SnapshotChanged
from lazyd.core.relay_base import ToClient as ToClient
from lazyd.core.relay_base import ToServer as ToServer
from lazyd.core.relay_base import WantServer as WantServer
from lazyd.core.routing import (
    CALLBACK_CAPABILITY,
    ClientId,
    Downstream,
    SamplingPolicy,
    Upstream,
    choose_callback_target,
    level_rank,
)

# Results the relay itself reads (records or filters), so they are always decoded. A task-creating
# tools/call result (which the relay also reads) is a few hundred bytes, never a large line.
_RESULTS_READ_BY_RELAY = frozenset({"server/discover", "tasks/list"})


class RelayCore(BridgeRelay):
    """All relay decisions for one server instance shared by any number of clients.

    `clock` (wall-clock seconds, default `time.time`) is read only to honour stateless results'
    `ttlMs`; nothing else in the core looks at time.
    """

    def __init__(self, name: str, snapshot: Snapshot, sampling_policy: SamplingPolicy = "refuse",
                 clock: Clock | None = None) -> None:
        if clock is None:
            super().__init__(name, snapshot, sampling_policy)
        else:
            super().__init__(name, snapshot, sampling_policy, clock)

    # ---- observations ----------------------------------------------------------------------------

    def client_count(self) -> int:
        return len(self.clients)

    def inflight_count(self) -> int:
        queued = sum(1 for cid, m in self.queue if m.kind is Kind.REQUEST)
        return self.routes.client_inflight_count() + queued + self.waiting_count()

    def listen_count(self) -> int:
        """Open `subscriptions/listen` streams of attached clients (they do not keep a server up)."""
        return len(self.hub.streams)

    # ---- client events ---------------------------------------------------------------------------

    def attach(self, cid: ClientId) -> list[Action]:
        self.clients[cid] = ClientState(cid)
        return [Note(f"client {cid} attached")]

    def set_principal(self, cid: ClientId, principal: str) -> None:
        """Tell the relay who is behind a client beyond its self-reported clientInfo (a digest the
        daemon chose): `cacheScope: "private"` results are then never shared across principals."""
        self.clients[cid].principal = principal

    def resume(self, cid: ClientId, lines: list[bytes]) -> list[Action]:
        """Record lines a client already had answered by a previous daemon (no replies)."""
        client = self.clients[cid]
        for line in lines:
            msg = rpc.parse(line)
            if isinstance(msg, Message) and msg.method == "initialize":
                client.params = msg.params
            elif isinstance(msg, Message) and msg.method == "notifications/initialized":
                client.initialized = True
        return [Note(f"client {cid} resumed its session")]

    def client_line(self, cid: ClientId, line: bytes) -> list[Action]:
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

    def detach(self, cid: ClientId) -> list[Action]:
        """A client left: cancel its requests upstream, answer the server's requests to it, and
        drop its subscriptions, log level, tokens and task ownership. Other clients see nothing."""
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

    def spawned(self) -> list[Action]:
        """The process exists. Probe its era unless it is known to be the handshake's, send
        discovery probes that were waiting, then replay a handshake when one is known and wanted."""
        self.phase = Phase.PREINIT
        out: list[Action] = [Note("server spawned")]
        era = self.snapshot.era()
        probe = era != "handshake"
        self.stateless_up = None if probe else False
        if probe:
            out.extend(self._send_probe())
        waiting = self.queue
        self.queue = []
        for cid, msg in waiting:
            if msg.method == "server/discover":
                out.extend(self._forward(cid, msg, inspect=True, purpose=self._discover_purpose(cid, msg)))
            else:
                self.queue.append((cid, msg))
        params = self._replay_params()
        # A known stateless server gets a handshake only if one connection may carry both eras.
        if params is not None and (era != "stateless" or self.snapshot.mixed_connection is True):
            out.extend(self._send_initialize(params))
        return out

    def exited(self, description: str) -> list[Action]:
        """The process ended (crash, stop or start timeout): answer everything that waits on it."""
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

    def start_failed(self, reason: str) -> list[Action]:
        """No process could be started: every queued request gets `reason`."""
        self.phase = Phase.DOWN
        out = [Note(f"start failed: {reason}"), *self._fail_queue(f"lazyd: cannot start server {self.name}: {reason}")]
        for key in [k for k, r in self.rounds.items() if not r.pending]:
            self._end_round(*key)  # a queued retry was just answered with the error
        return out

    def server_line(self, line: bytes) -> list[Action]:
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

    def _large_result(self, line: bytes) -> list[Action] | None:
        """A large plain result for a client's ordinary request, relayed without decoding it."""
        rid = rpc.large_result_id(line)
        up = self.routes.upstream.get(rid) if rid is not None else None
        if (rid is None or up is None or up.cid is None or up.client_id is None or up.inspect
                or up.method in _RESULTS_READ_BY_RELAY):
            return None
        self.routes.pop(rid)
        self.routes.release_token(rid)
        if up.cid not in self.clients:
            return [Note(f"response for departed client {up.cid} dropped")]
        return [Activity(), ToClient(up.cid, rpc.splice_result_id(line, rid, up.client_id), up.client_id)]

    # ---- client requests -------------------------------------------------------------------------

    def _client_request(self, cid: ClientId, msg: Message) -> list[Action]:
        method = msg.method
        assert method is not None and msg.id is not None
        client = self.clients[cid]
        if eras.is_stateless_request(method, msg.params):
            return self._stateless_request(cid, msg)
        if method == "ping":
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id)]
        if method == "initialize":
            return self._initialize(client, msg)
        if method == "server/discover":
            return self._discover(cid, msg)
        if method in LISTINGS:
            return self._listing(client, msg)
        if method == "logging/setLevel":
            level = msg.params.get("level")
            if not isinstance(level, str) or level_rank(level) == 0 and level != "debug":
                return [ToClient(cid, rpc.error_line(msg.id, rpc.INVALID_PARAMS, "Invalid params: unknown log level"), msg.id)]
            self.routes.levels[cid] = level
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id), *self._sync_level()]
        if self.phase is not Phase.READY:
            self.queue.append((cid, msg))
            return [WantServer(), Note(f"client {cid} {method} id={msg.id!r} queued until the server is ready")]
        refusal = self._foreign_task(cid, msg)
        if refusal is not None:
            return refusal
        if self._bridging():
            return self._bridged_request(client, msg)
        if method == "resources/subscribe":
            return self._subscribe(cid, msg)
        if method == "resources/unsubscribe":
            return self._unsubscribe(cid, msg)
        return self._forward(cid, msg)

    def _initialize(self, client: ClientState, msg: Message) -> list[Action]:
        assert msg.id is not None
        client.params = msg.params
        out: list[Action] = []
        if self.snapshot.last_params != msg.params:
            self.snapshot.last_params = msg.params
            out.append(SnapshotChanged())
        if self._bridging():
            return out + self._bridged_initialize(client, msg)
        # Until the replayed handshake is answered the instance has no result to give: a client
        # arriving then is served from the cache or waits in the queue with the first one.
        if self.instance is not None and self.phase in (Phase.REFRESH, Phase.READY):
            requested = msg.params.get("protocolVersion")
            negotiated = self.instance.result.get("protocolVersion")
            if requested != negotiated:
                # PROTOCOL.md §8: one process speaks one version; the client is told which, openly.
                out.append(Note(f"client {client.cid} asked for {requested}; the running instance speaks {negotiated}"))
            out.append(ToClient(client.cid, rpc.result_line(msg.id, self.instance.result), msg.id))
            return out
        cached = self.snapshot.entry_same_version(msg.params)
        if cached is not None:
            out.append(Note(f"client {client.cid} initialize answered from cache"))
            out.append(ToClient(client.cid, rpc.result_line(msg.id, cached.result), msg.id))
            return out
        self.queue.append((client.cid, msg))
        out.append(WantServer())
        out.append(Note(f"client {client.cid} initialize: no cached handshake for {handshake_key(msg.params)}"))
        if self.phase is Phase.PREINIT:
            out.extend(self._send_initialize(msg.params))
        return out

    def _discover_purpose(self, cid: ClientId, msg: Message) -> str:
        return f"{_discover_key(msg.params)}|{self._request_asker(cid, msg.params).identity}"

    def _listing(self, client: ClientState, msg: Message) -> list[Action]:
        assert msg.id is not None and msg.method is not None
        if self._bridging():
            return self._bridged_listing(client, msg)
        if self.phase is Phase.READY and isinstance(msg.params.get("cursor"), str):
            # The relay never writes a cursor, but it forwards listings while a refresh runs: a
            # cursor is the server's, and only the server can give the pages after it.
            return self._forward(client.cid, msg)
        if self.phase is Phase.READY and self.instance is not None:
            entry: HandshakeEntry | None = self.instance
        else:
            entry = self.snapshot.entry_for(client.params) if client.params is not None else None
        if entry is not None:
            listing = entry.listings.get(msg.method)
            if listing is not None:
                return [ToClient(client.cid, _listing_reply(msg, listing), msg.id)]
            if entry.complete():
                # The server does not advertise this listing: answer as a server without it would.
                line = rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"Method not found: {msg.method}")
                return [ToClient(client.cid, line, msg.id)]
        if self.phase is Phase.READY:
            return self._forward(client.cid, msg)
        self.queue.append((client.cid, msg))
        return [WantServer(), Note(f"client {client.cid} {msg.method}: not cached for its handshake")]

    def _subscribe(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        uri = msg.params.get("uri")
        if not isinstance(uri, str):
            return self._forward(cid, msg)  # let the server word the error
        self.routes.subscriptions.setdefault(uri, set()).add(cid)
        if uri in self._upstream_subs:
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id)]
        self._upstream_subs.add(uri)
        return self._forward(cid, msg)

    def _unsubscribe(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        uri = msg.params.get("uri")
        if not isinstance(uri, str):
            return self._forward(cid, msg)
        subscribers = self.routes.subscriptions.get(uri, set())
        subscribers.discard(cid)
        if subscribers or uri not in self._upstream_subs:
            if not subscribers:
                self.routes.subscriptions.pop(uri, None)
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id)]
        self.routes.subscriptions.pop(uri, None)
        self._upstream_subs.discard(uri)
        return self._forward(cid, msg)

    # ---- client notifications and responses ------------------------------------------------------

    def _client_notification(self, cid: ClientId, msg: Message) -> list[Action]:
        method = msg.method
        if method == "notifications/initialized":
            self.clients[cid].initialized = True
            return []  # swallowed: the relay sent its own when it replayed the handshake
        if method == "notifications/cancelled":
            request_id = msg.params.get("requestId")
            if not rpc.valid_id(request_id):
                return [Note(f"client {cid}: cancel without a valid requestId dropped")]
            assert isinstance(request_id, (int, str))
            if self.hub.remove(cid, request_id):
                return [Note(f"client {cid} closed its listen stream id={request_id!r}")]
            if self._drop_waiter(cid, request_id):
                return [Note(f"client {cid} cancelled id={request_id!r} while its answer was being fetched")]
            self._end_round(cid, request_id)
            before = len(self.queue)
            self.queue = [(c, m) for c, m in self.queue if not (c == cid and m.id == request_id and m.kind is Kind.REQUEST)]
            if len(self.queue) != before:
                return [Note(f"client {cid} cancelled queued id={request_id!r}")]
            rid = self.routes.by_client.get((cid, request_id))
            if rid is None:
                return [Note(f"client {cid} cancel for unknown or finished id={request_id!r} dropped")]
            # The server need not answer a cancelled request, so it stops counting as in flight now.
            self.routes.pop(rid)
            self.routes.release_token(rid)
            msg.params["requestId"] = rid
            return [ToServer(rpc.dumps(msg.obj)), Activity()]
        if self.phase is Phase.READY and self.instance is not None:
            return [ToServer(rpc.dumps(msg.obj))]
        if self.phase is Phase.READY and self.stateless_up:
            # The stateless era has no client notifications but cancellation.
            return [Note(f"client {cid} {method} dropped: not a notification of the stateless era")]
        return [Note(f"client {cid} {method} dropped while the server is not running")]

    def _client_response(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        answered = self._input_answer(cid, msg)
        if answered is not None:
            return answered
        down = self.routes.downstream.pop((cid, msg.id), None)
        if down is None or self.phase is Phase.DOWN:
            return [Note(f"client {cid} response to unknown id={msg.id!r} dropped")]
        return [ToServer(rpc.with_id(msg, down.server_id)), Activity()]

    # ---- server messages -------------------------------------------------------------------------

    def _server_response(self, msg: Message) -> list[Action]:
        rid = msg.id
        up = self.routes.pop(rid) if isinstance(rid, int) else None
        if up is None:
            return [Note(f"server response to unknown or cancelled id={rid!r} dropped")]
        if up.cid is None:
            return self._internal_response(up, msg)
        assert up.client_id is not None
        out: list[Action] = [Activity()]
        result = msg.obj.get("result")
        task = result.get("task") if isinstance(result, dict) else None
        if isinstance(task, dict) and isinstance(task.get("taskId"), str):
            # 2025-11-25 CreateTaskResult: the task outlives the request; so does token ownership.
            self.routes.tasks[task["taskId"]] = up.cid
        else:
            self.routes.release_token(rid)  # type: ignore[arg-type]
        if up.method == "server/discover":
            out.extend(self._record_discover(up.purpose, msg))
        filtered = up.method == "tasks/list" and isinstance(result, dict) and isinstance(result.get("tasks"), list)
        if filtered:
            assert isinstance(result, dict)
            # A task id the server wrote as something unhashable belongs to no client.
            result["tasks"] = [
                t
                for t in result["tasks"]
                if isinstance(t, dict) and isinstance(t.get("taskId"), str) and self.routes.tasks.get(t["taskId"]) == up.cid
            ]
        if up.cid not in self.clients:
            self._end_round(up.cid, up.client_id)
            return [Note(f"response for departed client {up.cid} dropped")]
        if up.bridged:
            return out + self._bridged_response(up, msg)
        if filtered:
            msg.obj["id"] = up.client_id
            out.append(ToClient(up.cid, rpc.dumps(msg.obj), up.client_id))
        else:
            out.append(ToClient(up.cid, rpc.with_id(msg, up.client_id), up.client_id))
        return out

    def _server_request(self, msg: Message) -> list[Action]:
        method = msg.method
        assert method is not None and msg.id is not None
        if method == "ping":
            return [ToServer(rpc.result_line(msg.id, {}))]
        if method == "roots/list":
            owners = [c for c in self.clients.values() if c.declares("roots")]
            if not owners:
                return [ToServer(rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, "lazyd: no attached client provides roots")),
                        Note("roots/list refused: no client declares roots")]
            target: ClientId | None = max(owners, key=lambda c: c.last_active).cid
            reason = "most recently active client that declares roots"
        else:
            target, reason = choose_callback_target(self.routes, msg.params, self.sampling_policy)
            if target is None:
                line = rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"lazyd: cannot route {method}: {reason}")
                return [ToServer(line), Note(f"{method} refused: {reason}")]
            needed = CALLBACK_CAPABILITY.get(method)
            if needed is not None and not self.clients[target].declares(needed):
                line = rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"lazyd: the client of this request does not support {needed}")
                return [ToServer(line), Note(f"{method} refused: client {target} did not declare {needed}")]
        assert target is not None
        down_id = self._next_down_id
        self._next_down_id += 1
        self.routes.downstream[(target, down_id)] = Downstream(msg.id, method)
        elicitation_id = msg.params.get("elicitationId")
        if method == "elicitation/create" and isinstance(elicitation_id, str):
            self.routes.elicitations[elicitation_id] = target
        return [ToClient(target, rpc.with_id(msg, down_id)), Note(f"{method} routed to client {target}: {reason}")]

    def _server_notification(self, msg: Message) -> list[Action]:
        method = msg.method
        params = msg.params
        stateless = self._stateless_notification(msg)
        if stateless is not None:
            return stateless
        if method == "notifications/progress":
            token = params.get("progressToken")
            # bool is an int in Python: `true` must not reach the owner of relay token 1.
            token_owner = self.routes.tokens.get(token) if isinstance(token, int) and not isinstance(token, bool) else None
            if token_owner is None:
                return [Note(f"progress for unknown token {token!r} dropped")]
            params["progressToken"] = token_owner[1]
            return [ToClient(token_owner[0], rpc.dumps(msg.obj))]
        if method is not None and method in LIST_CHANGED.values():
            return self._list_changed(method)
        if method == "notifications/resources/updated":
            uri = params.get("uri")
            subscribers = self.routes.subscriptions.get(uri, set()) if isinstance(uri, str) else set()
            line = rpc.dumps(msg.obj)
            return [ToClient(cid, line) for cid in sorted(subscribers)]
        if method == "notifications/message":
            rank = level_rank(params.get("level"))
            line = rpc.dumps(msg.obj)
            return [
                ToClient(cid, line)
                for cid in sorted(self.clients)
                if cid not in self.routes.levels or rank >= level_rank(self.routes.levels[cid])
            ]
        if method == "notifications/cancelled":
            server_id = params.get("requestId")
            for (cid, down_id), down in list(self.routes.downstream.items()):
                if down.server_id == server_id and type(down.server_id) is type(server_id):
                    del self.routes.downstream[(cid, down_id)]
                    params["requestId"] = down_id
                    return [ToClient(cid, rpc.dumps(msg.obj))]
            return [Note("server cancel of an unknown request dropped")]
        if method == "notifications/tasks/status":
            owner = self.routes.tasks.get(str(params.get("taskId")))
            return [ToClient(owner, rpc.dumps(msg.obj))] if owner is not None else [Note("task status for unknown task dropped")]
        if method == "notifications/elicitation/complete":
            owner = self.routes.elicitations.pop(str(params.get("elicitationId")), None)
            return [ToClient(owner, rpc.dumps(msg.obj))] if owner is not None else [Note("elicitation completion for unknown id dropped")]
        line = rpc.dumps(msg.obj)
        return [ToClient(cid, line) for cid, c in sorted(self.clients.items()) if c.initialized]

    # ---- handshake replay and listing refresh ----------------------------------------------------

    def _replay_params(self) -> JsonObj | None:
        for cid, msg in self.queue:
            if msg.method == "initialize":
                return msg.params
        for cid, msg in self.queue:
            client = self.clients.get(cid)
            if client is not None and client.params is not None:
                return client.params
        return self.snapshot.last_params

    def _send_initialize(self, params: JsonObj) -> list[Action]:
        self.phase = Phase.HANDSHAKE
        self.instance = HandshakeEntry(params=params, result={})
        return [self._internal("initialize", params, "replay"), Note(f"replaying initialize ({handshake_key(params)})")]

    def _internal_response(self, up: Upstream, msg: Message) -> list[Action]:
        if up.purpose == "replay":
            return self._handshake_done(msg)
        if up.purpose.startswith("refresh:"):
            return self._refresh_page(up.method, msg)
        if up.purpose == "probe":
            return self._probe_answered(msg)
        if up.purpose.startswith("fetch:"):
            return self._fetch_answer(up.purpose.removeprefix("fetch:"), msg)
        if up.purpose == "listen":
            assert isinstance(msg.id, int)
            return self._listen_ended(msg.id, refused="error" in msg.obj)
        if "error" in msg.obj:
            return [Note(f"server refused the relay's {up.method}")]
        return []

    def _handshake_done(self, msg: Message) -> list[Action]:
        result = msg.obj.get("result")
        if not isinstance(result, dict) or self.instance is None:
            error = msg.obj.get("error")
            if self.instance is not None and isinstance(error, dict):
                handled = self._initialize_refused(error)
                if handled is not None:
                    return handled
            reason = "the server refused the replayed initialize"
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                reason += f": {error['message'][:200]}"
            return [*self._fail_queue(f"lazyd: {reason}"), *self._abort(reason)]
        if self.stateless_up is True:
            out0 = self._set_mixed(True)
        else:
            out0 = []
        self.instance.result = result
        out: list[Action] = [*out0, ToServer(rpc.notification_line("notifications/initialized"))]
        waiting = self.queue
        self.queue = []
        for cid, queued in waiting:
            if queued.method == "initialize" and queued.id is not None:
                out.append(ToClient(cid, rpc.result_line(queued.id, result), queued.id))
            else:
                self.queue.append((cid, queued))
        self.phase = Phase.REFRESH
        self._initial_refresh = True
        out.extend(self._sync_level())
        for uri in sorted(self.routes.subscriptions):
            self._upstream_subs.add(uri)
            out.append(self._internal("resources/subscribe", {"uri": uri}, "resubscribe"))
        out.extend(self._start_refresh(self.instance.advertised_listings()))
        return out

    def _start_refresh(self, methods: list[str]) -> list[Action]:
        out: list[Action] = []
        for method in methods:
            if method in self._refreshing:
                continue
            self._refreshing[method] = _Refresh(method)
            out.append(self._internal(method, None, f"refresh:{method}"))
        if not self._refreshing:
            out.extend(self._refresh_done(set()))
        return out

    def _refresh_page(self, method: str, msg: Message) -> list[Action]:
        state = self._refreshing.get(method)
        if state is None or self.instance is None:
            return []
        result = msg.obj.get("result")
        if not isinstance(result, dict):
            error = msg.obj.get("error")
            self.instance.listings[method] = Listing(error=error if isinstance(error, dict) else {"code": rpc.INTERNAL_ERROR, "message": "bad listing"})
        else:
            page = result.get(LISTINGS[method])
            state.items.extend(page if isinstance(page, list) else [])
            state.pages += 1
            cursor = result.get("nextCursor")
            if isinstance(cursor, str) and state.pages < MAX_LISTING_PAGES:
                return [self._internal(method, {"cursor": cursor}, f"refresh:{method}")]
            self.instance.listings[method] = Listing(items=state.items)
        del self._refreshing[method]
        if self._refreshing:
            return []
        return self._refresh_done({method})

    def _refresh_done(self, last: set[str]) -> list[Action]:
        assert self.instance is not None
        key = handshake_key(self.instance.params)
        old = self.snapshot.entries.get(key)
        changed = {
            method
            for method, listing in self.instance.listings.items()
            if old is not None and (old.listings.get(method) is None or old.listings[method].to_json() != listing.to_json())
        }
        if not self._initial_refresh:
            changed |= last  # the server announced a change: pass it on even if we had it already
        entry = HandshakeEntry(self.instance.params, self.instance.result, dict(self.instance.listings))
        out: list[Action] = []
        if old is None or old.to_json() != entry.to_json():
            self.snapshot.entries[key] = entry
            out.append(SnapshotChanged())
        for notification in sorted({LIST_CHANGED[m] for m in changed}):
            out.append(Note(f"listing drift: sending {notification}"))
            out.extend(ToClient(cid, rpc.notification_line(notification)) for cid, c in sorted(self.clients.items()) if c.initialized)
        if self._initial_refresh:
            self._initial_refresh = False
            self.phase = Phase.READY
            out.extend(self._probe_unanswered())
            out.append(Ready())
            waiting = self.queue
            self.queue = []
            for cid, msg in waiting:
                if cid in self.clients:
                    out.extend(self._client_request(cid, msg) if msg.kind is Kind.REQUEST else [])
        return out

    def _list_changed(self, notification: str) -> list[Action]:
        methods = [m for m, n in LIST_CHANGED.items() if n == notification]
        if self.phase is Phase.REFRESH and self.instance is not None:
            # A listing this start already fetched may predate the change: fetch it again. The
            # ones still pending will see it.
            stale = [m for m in methods if m in self.instance.listings]
            for method in stale:
                del self.instance.listings[method]
            return [Note(f"{notification} during start-up: fetching {stale or 'nothing'} again"), *self._start_refresh(stale)]
        if self.phase is not Phase.READY or self.instance is None:
            return [Note(f"{notification} before the handshake finished: the coming refresh covers it")]
        for method in methods:
            self.instance.listings.pop(method, None)
        out: list[Action] = [Note(f"{notification}: refreshing")]
        pending_before = set(self._refreshing)
        out.extend(self._start_refresh(methods))
        if pending_before and not self._refreshing:
            return out
        return out

    # ---- helpers ---------------------------------------------------------------------------------

    def _abort(self, reason: str) -> list[Action]:
        return [Abort(reason)]

    def _sync_level(self) -> list[Action]:
        """Keep the server's log level at the most verbose level any client asked for (handshake
        era; a stateless server gets each bridged client's level in its requests' envelope)."""
        wanted = self.routes.most_verbose_level()
        if (wanted is None or wanted == self._upstream_level or self.phase not in (Phase.REFRESH, Phase.READY)
                or self.instance is None):
            return []
        self._upstream_level = wanted
        return [self._internal("logging/setLevel", {"level": wanted}, "setlevel")]


def _cancel_line(rid: int, reason: str) -> bytes:
    return rpc.notification_line("notifications/cancelled", {"requestId": rid, "reason": reason})


def _listing_reply(msg: Message, listing: Listing) -> bytes:
    assert msg.id is not None and msg.method is not None
    if listing.error is not None:
        return rpc.dumps({"jsonrpc": "2.0", "id": msg.id, "error": listing.error})
    if isinstance(msg.params.get("cursor"), str):
        # Everything was served as one page; with no server to continue it, the rest of "all
        # pages" is nothing.
        return rpc.result_line(msg.id, {LISTINGS[msg.method]: []})
    return rpc.result_line(msg.id, listing.as_result(LISTINGS[msg.method]))


def _discover_key(params: JsonObj) -> str:
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
    return str(version) if version is not None else ""
