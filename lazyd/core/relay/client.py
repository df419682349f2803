"""Messages from a client in the handshake era: answered by the relay or the cache, queued, or
forwarded (no state of its own: it chooses the part).

- `ping` answered; `logging/setLevel` recorded per client (the server runs at the most verbose).
  Stateless-era requests go to stateless.py; on a stateless-only server the rest to bridge.py.
- `initialize`: from the live instance once its handshake is done (another version is told which
  one the process speaks: docs/relay.md), else from a cached handshake of the version, else queued.
- A listing: live in READY, else the snapshot entry of the client's handshake; one a complete entry
  does not advertise is -32601. A cursor is the server's: forwarded in READY, else an empty page.
- Anything else is queued until READY, then forwarded under a relay id; a task request naming
  another client's task is refused as unknown.
- `notifications/initialized` is swallowed (the relay sent its own). A cancellation ends the
  request wherever it is; other notifications reach a ready server only. Answers to server
  requests go back under the server's id.
"""

from __future__ import annotations

from lazyd.core.eras import versions as eras
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.bridge import Bridge
from lazyd.core.cache import LISTINGS, HandshakeEntry, Listing, handshake_key
from lazyd.core.relay.jsonrpc import Message
from lazyd.core.relay.actions import Action, Activity, Note, Phase, SnapshotChanged, ToClient, ToServer, WantServer
from lazyd.core.relay.client_state import ClientState
from lazyd.core.relay.upstream import foreign_task, forward
from lazyd.core.relay.startup import Handshake
from lazyd.core.relay.session_roots import RootsPart
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import ClientId, level_rank
from lazyd.core.eras.stateless import StatelessEra
from lazyd.core.eras.stateless_cache import StatelessCache
from lazyd.core.eras.listen import ListenRelay


class ClientMessages:
    """Where each message from a client goes (see the module docstring)."""

    def __init__(self, shared: RelayShared, cache: StatelessCache, listen: ListenRelay, bridge: Bridge,
                 handshake: Handshake, stateless: StatelessEra, roots: RootsPart) -> None:
        self.roots = roots
        self.shared = shared
        self.cache = cache
        self.listen = listen
        self.bridge = bridge
        self.handshake = handshake
        self.stateless = stateless

    def request(self, cid: ClientId, msg: Message) -> list[Action]:
        method = msg.method
        assert method is not None and msg.id is not None
        client = self.shared.clients[cid]
        if eras.is_stateless_request(method, msg.params):
            return self.stateless.request(cid, msg)
        if method == "ping":
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id)]
        refused = self.stateless.era_refusal(msg)
        if refused is not None:
            why = f"client {cid} {method}: refused, {self.shared.name} cannot run in its set era"
            return [ToClient(cid, refused, msg.id), Note(why)]
        if method == "initialize":
            return self._initialize(client, msg)
        if method == "server/discover":
            return self.cache.discover(cid, msg)
        if method in LISTINGS:
            return self._listing(client, msg)
        if method == "logging/setLevel":
            level = msg.params.get("level")
            if not isinstance(level, str) or level_rank(level) == 0 and level != "debug":
                return [ToClient(cid, rpc.error_line(msg.id, rpc.INVALID_PARAMS, "Invalid params: unknown log level"), msg.id)]
            self.shared.routes.levels[cid] = level
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id), *self.handshake.sync_level()]
        if self.roots.needs_placing(cid):
            return self.roots.hold(cid, msg)  # nothing of a session reaches a process before it is placed
        if self.shared.phase is not Phase.READY:
            self.shared.queue.hold(cid, msg)
            return [WantServer(), Note(f"client {cid} {method} id={msg.id!r} queued until the server is ready")]
        refusal = foreign_task(self.shared.routes, cid, msg)
        if refusal is not None:
            return refusal
        if self.bridge.bridging():
            return self.bridge.request(client, msg)
        if method == "resources/subscribe":
            return self.handshake.subscribe(cid, msg)
        if method == "resources/unsubscribe":
            return self.handshake.unsubscribe(cid, msg)
        return forward(self.shared.routes, cid, msg)

    def _initialize(self, client: ClientState, msg: Message) -> list[Action]:
        assert msg.id is not None
        client.params = msg.params
        out: list[Action] = self.roots.initialize(client.cid)
        if self.shared.snapshot.last_params != msg.params:
            self.shared.snapshot.last_params = msg.params
            out.append(SnapshotChanged())
        if self.bridge.bridging():
            return out + self.bridge.initialize(client, msg)
        # Until the replayed handshake is answered: the cache, or the queue with the first client.
        instance = self.shared.instance
        if instance is not None and self.shared.phase in (Phase.REFRESH, Phase.READY):
            requested = msg.params.get("protocolVersion")
            negotiated = instance.result.get("protocolVersion")
            if requested != negotiated:
                # One process speaks one version; the client is told which, openly (docs/relay.md).
                out.append(Note(f"client {client.cid} asked for {requested}; the running instance speaks {negotiated}"))
            out.append(ToClient(client.cid, rpc.result_line(msg.id, instance.result), msg.id))
            return out
        cached = self.shared.snapshot.entry_same_version(msg.params)
        if cached is not None:
            out.append(Note(f"client {client.cid} initialize answered from cache"))
            out.append(ToClient(client.cid, rpc.result_line(msg.id, cached.result), msg.id))
            return out
        self.shared.queue.hold(client.cid, msg)
        out.append(WantServer())
        out.append(Note(f"client {client.cid} initialize: no cached handshake for {handshake_key(msg.params)}"))
        if self.shared.phase is Phase.PREINIT and self.shared.era.start_plan(self.shared.phase).initialize != "never":
            out.extend(self.handshake.send_initialize(msg.params))
        return out

    def _listing(self, client: ClientState, msg: Message) -> list[Action]:
        assert msg.id is not None and msg.method is not None
        if self.bridge.bridging():
            return self.bridge.listing(client, msg)
        if self.shared.phase is Phase.READY and isinstance(msg.params.get("cursor"), str):
            if self.roots.needs_placing(client.cid):
                return self.roots.hold(client.cid, msg)
            # A cursor is the server's (the relay never writes one): only it can continue.
            return forward(self.shared.routes, client.cid, msg)
        if self.shared.phase is Phase.READY and self.shared.instance is not None:
            entry: HandshakeEntry | None = self.shared.instance
        else:
            entry = self.shared.snapshot.entry_for(client.params) if client.params is not None else None
        if entry is not None:
            listing = entry.listings.get(msg.method)
            if listing is not None:
                return [ToClient(client.cid, _listing_reply(msg, listing), msg.id)]
            if entry.complete():
                # The server does not advertise this listing: answer as a server without it would.
                line = rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"Method not found: {msg.method}")
                return [ToClient(client.cid, line, msg.id)]
        if self.roots.needs_placing(client.cid):
            return self.roots.hold(client.cid, msg)  # only the server can answer it
        if self.shared.phase is Phase.READY:
            return forward(self.shared.routes, client.cid, msg)
        self.shared.queue.hold(client.cid, msg)
        return [WantServer(), Note(f"client {client.cid} {msg.method}: not cached for its handshake")]

    # ---- client notifications and responses ------------------------------------------------------

    def notification(self, cid: ClientId, msg: Message) -> list[Action]:
        method = msg.method
        if method == "notifications/initialized":
            self.shared.clients[cid].initialized = True
            return self.roots.initialized(cid)  # swallowed: the relay sent its own when it replayed the handshake
        if method == "notifications/roots/list_changed":
            return self.roots.list_changed(cid)  # the relay asks it again; the server hears of it if its roots change
        if method == "notifications/cancelled":
            request_id = msg.params.get("requestId")
            if not rpc.valid_id(request_id):
                return [Note(f"client {cid}: cancel without a valid requestId dropped")]
            assert isinstance(request_id, (int, str))
            if self.listen.remove(cid, request_id):
                return [Note(f"client {cid} closed its listen stream id={request_id!r}")]
            if self.shared.listings.drop_waiter(cid, request_id):
                return [Note(f"client {cid} cancelled id={request_id!r} while its answer was being fetched")]
            self.bridge.end_round(cid, request_id)
            if self.shared.queue.cancel(cid, request_id):
                return [Note(f"client {cid} cancelled queued id={request_id!r}")]
            rid = self.shared.routes.by_client.get((cid, request_id))
            if rid is None:
                return [Note(f"client {cid} cancel for unknown or finished id={request_id!r} dropped")]
            # The server need not answer a cancelled request, so it stops counting as in flight now.
            self.shared.routes.pop(rid)
            self.shared.routes.release_token(rid)
            msg.params["requestId"] = rid
            return [ToServer(rpc.dumps(msg.obj)), Activity()]
        if self.shared.phase is Phase.READY and self.shared.instance is not None:
            return [ToServer(rpc.dumps(msg.obj))]
        if self.shared.phase is Phase.READY and self.shared.era.stateless_up:
            # The stateless era has no client notifications but cancellation.
            return [Note(f"client {cid} {method} dropped: not a notification of the stateless era")]
        return [Note(f"client {cid} {method} dropped while the server is not running")]

    def response(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        learned = self.roots.answer(cid, msg)
        if learned is not None:
            return learned
        answered = self.bridge.input_answer(cid, msg)
        if answered is not None:
            return answered
        down = self.shared.routes.downstream.pop((cid, msg.id), None)
        if down is None or self.shared.phase is Phase.DOWN:
            return [Note(f"client {cid} response to unknown id={msg.id!r} dropped")]
        return [ToServer(rpc.with_id(msg, down.server_id)), Activity()]


def _listing_reply(msg: Message, listing: Listing) -> bytes:
    assert msg.id is not None and msg.method is not None
    if listing.error is not None:
        return rpc.dumps({"jsonrpc": "2.0", "id": msg.id, "error": listing.error})
    if isinstance(msg.params.get("cursor"), str):
        # Everything was served as one page: with no server to continue, the rest is nothing.
        return rpc.result_line(msg.id, {LISTINGS[msg.method]: []})
    return rpc.result_line(msg.id, listing.as_result(LISTINGS[msg.method]))

