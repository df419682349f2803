"""Messages from a client in the handshake era: what the relay answers itself or from the cache,
what waits for the server, and what is forwarded.

- `ping` is answered by the relay. `logging/setLevel` is recorded per client; the server runs at
  the most verbose level any client asked for. A stateless-era request goes to stateless.py, and on
  a server that speaks only the stateless era everything else goes through the bridge (bridge.py).
- `initialize` is answered by the running instance once its handshake is done (a client asking for
  another version is told openly which one the process speaks: PROTOCOL.md §8), else from a cached
  handshake of the same version, else it waits for a start.
- A listing comes from the live instance in READY, else from the snapshot entry of the client's
  handshake; one that a complete entry does not advertise is -32601, as the server would answer.
  The relay serves every listing as one page, so a cursor is the server's: forwarded in READY, and
  answered with nothing when there is no server to continue it.
- `server/discover` goes through the discovery cache (stateless_cache.py).
- Anything else waits in the queue until READY, then goes upstream under a relay id; a task request
  naming another client's task is refused as unknown.
- Subscriptions are shared: the server gets one `resources/subscribe` per uri, and the
  `resources/unsubscribe` of its last subscriber only.
- `notifications/initialized` is swallowed (the relay sent its own when it replayed the handshake).
  A cancellation ends the request wherever it is: a listen stream, a fetch it waits on, the queue,
  or the server, which gets it under the relay id. Other notifications reach a ready server only.
- A client's answer to a server-to-client request goes back under the server's id.
"""

from __future__ import annotations

from lazyd.core import eras
from lazyd.core import jsonrpc as rpc
from lazyd.core.cache import LISTINGS, HandshakeEntry, Listing, handshake_key
from lazyd.core.jsonrpc import Kind, Message
from lazyd.core.relay_base import (
    Action,
    Activity,
    ClientState,
    Note,
    Phase,
    SnapshotChanged,
    ToClient,
    ToServer,
    WantServer,
    discover_version_key,
)
from lazyd.core.relay_server import ServerMessageRelay
from lazyd.core.routing import ClientId, level_rank


class ClientMessageRelay(ServerMessageRelay):
    """The client-message methods of `RelayCore` (see the module docstring)."""

    def _client_request(self, cid: ClientId, msg: Message) -> list[Action]:
        method = msg.method
        assert method is not None and msg.id is not None
        client = self.clients[cid]
        if eras.is_stateless_request(method, msg.params):
            return self._stateless_request(cid, msg)
        if method == "ping":
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id)]
        refused = self._era_refusal(msg)
        if refused is not None:
            return [ToClient(cid, refused, msg.id), Note(f"client {cid} {method}: refused, {self.name} cannot run in its set era")]
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
        if self.phase is Phase.PREINIT and self._start_plan().initialize != "never":
            out.extend(self._send_initialize(msg.params))
        return out

    def _discover_purpose(self, cid: ClientId, msg: Message) -> str:
        return f"{discover_version_key(msg.params)}|{self._request_asker(cid, msg.params).identity}"

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
            entry = self.snapshot.entry_for_client(client.params) if client.params is not None else None
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


def _listing_reply(msg: Message, listing: Listing) -> bytes:
    assert msg.id is not None and msg.method is not None
    if listing.error is not None:
        return rpc.dumps({"jsonrpc": "2.0", "id": msg.id, "error": listing.error})
    if isinstance(msg.params.get("cursor"), str):
        # Everything was served as one page; with no server to continue it, the rest of "all
        # pages" is nothing.
        return rpc.result_line(msg.id, {LISTINGS[msg.method]: []})
    return rpc.result_line(msg.id, listing.as_result(LISTINGS[msg.method]))

