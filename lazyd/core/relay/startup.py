"""The handshake era's start-up in the relay core: the replayed handshake, the listing refresh that
doubles as a barrier, the refreshes a change notification asks for, and what the handshake
connection holds for its clients (the most verbose log level, the resource subscriptions).

Replay: `initialize` with the params of the client that caused the start, else the snapshot's
latest; its result answers every queued `initialize`, a refusal fails the queue and stops the
server unless the stateless era explains it (stateless.py).

Refresh: after `notifications/initialized` the relay restores the clients' log level and
subscriptions and fetches each advertised listing (listings.py); these requests are the barrier
of docs/relay.md. When all are in, a changed entry replaces the snapshot's, drifted listings send
`list_changed`, and the queue goes on in arrival order (READY).

Settling: a server that asked its clients something while starting (filesystem's `roots/list`)
gets its answers first: the queue waits until nothing it asked is unanswered, then for a `ping`
round trip, then for the daemon's word that its threads sleep (`WaitIdle`, `idle`). `Ready` comes
only then, so `start_timeout` bounds the settling too.

A `list_changed` during the refresh fetches again what was already fetched; in READY it refreshes
and is passed on even when nothing changed. Subscriptions are shared: one `resources/subscribe`
per uri upstream, and the `resources/unsubscribe` of its last subscriber only.
"""

from __future__ import annotations

from collections.abc import Callable

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core import state_codec as sc
from lazyd.core.cache import LIST_CHANGED, HandshakeEntry, Listing, handshake_key
from lazyd.core.eras.state import Stage
from lazyd.core.relay.jsonrpc import JsonObj, Kind, Message
from lazyd.core.relay.listings import Fetched, drift
from lazyd.core.relay.actions import Abort, Action, Note, Phase, Ready, SnapshotChanged, ToClient, ToServer, WaitIdle
from lazyd.core.relay.upstream import forward, internal
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.session_roots import RootsPart
from lazyd.core.relay.routing import ClientId
from lazyd.core.sharing.modes import declares_session_aware
from lazyd.core.eras.stateless_cache import StatelessCache


def refusal_reason(error: object) -> str:
    reason = "the server refused the replayed initialize"
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        reason += f": {error['message'][:200]}"
    return reason


# What the start-up keeps besides the settling (lazyd/core/state_codec.py).
_KEPT = {"initial_refresh": bool, "upstream_level": str | None, "upstream_subs": set[str]}


class Handshake:
    """The live handshake of one server instance and its start-up (see the module docstring)."""

    def __init__(self, shared: RelayShared, cache: StatelessCache, roots: RootsPart,
                 dispatch: Callable[[ClientId, Message], list[Action]],
                 initialize_refused: Callable[[JsonObj], list[Action] | None],
                 probe_unanswered: Callable[[], list[Action]]) -> None:
        # A queued request handled again; the stateless era's reading of a refusal and of its probe.
        self.dispatch = dispatch
        self.initialize_refused = initialize_refused
        self.probe_unanswered = probe_unanswered
        self.shared = shared
        self.cache = cache
        self.roots = roots
        self.initial_refresh = False  # the refresh under way is the start's (READY when it is in)
        self.upstream_level: str | None = None  # the log level the server was last set to
        self.upstream_subs: set[str] = set()  # the uris the server was subscribed to
        self.asked_at_start = False  # the settling of a start (module docstring)
        self.settling = False
        self.settle_sent = False

    def to_state(self) -> JsonObj:
        return {"instance": sc.dump(self.shared.instance), **sc.dump_attrs(self, _KEPT),
                "settle": [self.asked_at_start, self.settling, self.settle_sent]}

    def restore(self, value: object) -> None:
        sc.load_attrs(self, _KEPT, value, "handshake")
        instance = sc.obj(value, "handshake").get("instance")
        self.shared.instance = sc.load(HandshakeEntry | None, instance, "handshake.instance")
        settle = sc.load(tuple[bool, bool, bool], sc.obj(value, "handshake").get("settle"), "handshake.settle")
        self.asked_at_start, self.settling, self.settle_sent = settle

    # ---- replay ----------------------------------------------------------------------------------

    def replay_params(self) -> JsonObj | None:
        for cid, msg in self.shared.queue:
            if msg.method == "initialize":
                return msg.params
        for cid, msg in self.shared.queue:
            client = self.shared.clients.get(cid)
            if client is not None and client.params is not None:
                return client.params
        return self.shared.snapshot.last_params

    def send_initialize(self, params: JsonObj) -> list[Action]:
        self.shared.phase = Phase.HANDSHAKE
        self.shared.instance = HandshakeEntry(params=params, result={})
        return [internal(self.shared.routes, "initialize", params, "replay"), Note(f"replaying initialize ({handshake_key(params)})")]

    def answered(self, msg: Message) -> list[Action]:
        """The server answered the replayed initialize."""
        result = msg.obj.get("result")
        if not isinstance(result, dict) or self.shared.instance is None:
            error = msg.obj.get("error")
            if self.shared.instance is not None and isinstance(error, dict):
                handled = self.initialize_refused(error)
                if handled is not None:
                    return handled
            reason = refusal_reason(error)
            return [*self.shared.queue.fail(f"lazyd: {reason}", self.shared.clients), Abort(reason)]
        out: list[Action] = self.shared.era.learn_mixed(True) if self.shared.era.stateless_up is True else []
        if self.shared.era.stage is Stage.HANDSHAKE:
            out.extend(self.shared.era.learn_first_initialize(True))  # it was the connection's first request
        self.shared.instance.result = result
        routes = self.shared.routes  # this process's own declaration decides (session_meta.py)
        routes.session_meta = routes.session_forced or declares_session_aware([result])
        out.append(ToServer(rpc.notification_line("notifications/initialized")))
        era = self.shared.era
        if era.start_plan(self.shared.phase).probe_after_handshake and era.stateless_up is False:
            out.extend(self.cache.probe("probe-after", "asking server/discover after the handshake: "
                                                       "does this connection carry the stateless era too?"))
        for cid, queued in self.shared.queue.take():
            if queued.method == "initialize" and queued.id is not None:
                out.append(ToClient(cid, rpc.result_line(queued.id, result), queued.id))
            else:
                self.shared.queue.hold(cid, queued)
        self.shared.phase = Phase.REFRESH
        self.initial_refresh = True
        out.extend(self.sync_level())
        for uri in sorted(self.shared.routes.subscriptions):
            self.upstream_subs.add(uri)
            out.append(internal(self.shared.routes, "resources/subscribe", {"uri": uri}, "resubscribe"))
        out.extend(self._start_refresh(self.shared.instance.advertised_listings()))
        return out

    # ---- refresh ---------------------------------------------------------------------------------

    def _start_refresh(self, methods: list[str]) -> list[Action]:
        out: list[Action] = []
        for method in methods:
            request = self.shared.listings.start(method, method, "start" if self.initial_refresh else "changed", None)
            if request is not None:
                out.append(request)
        if not self.shared.listings.pending(stateless=False):
            out.extend(self._refresh_done(set()))
        return out

    def fetched(self, done: Fetched) -> list[Action]:
        """A listing of the refresh is in (or the server refused it)."""
        method = done.fetch.method
        if self.shared.instance is None:
            return []
        if done.result is None:
            error = done.error
            self.shared.instance.listings[method] = Listing(error=error if isinstance(error, dict) else {"code": rpc.INTERNAL_ERROR, "message": "bad listing"})
        else:
            self.shared.instance.listings[method] = Listing(items=done.fetch.items)
        if self.shared.listings.pending(stateless=False):
            return []
        return self._refresh_done({method})

    def _refresh_done(self, last: set[str]) -> list[Action]:
        assert self.shared.instance is not None
        key = handshake_key(self.shared.instance.params)
        # Drift is measured against what this handshake's clients were served from the cache.
        old = self.shared.snapshot.entry_for(self.shared.instance.params)
        changed = drift(old.listings if old is not None else None, self.shared.instance.listings)
        if not self.initial_refresh:
            changed |= last  # the server announced a change: pass it on even if we had it already
        entry = HandshakeEntry(self.shared.instance.params, self.shared.instance.result, dict(self.shared.instance.listings))
        out: list[Action] = []
        if old != entry:
            self.shared.snapshot.entries[key] = entry
            out.append(SnapshotChanged())
        for notification in sorted({LIST_CHANGED[m] for m in changed}):
            out.append(Note(f"listing drift: sending {notification}"))
            out.extend(ToClient(cid, rpc.notification_line(notification))
                       for cid, c in sorted(self.shared.clients.items()) if c.initialized)
        if self.initial_refresh:
            self.initial_refresh = False
            if self.asked_at_start:
                self.settling = True
                out.append(Note("the server asked its clients something while starting: the first request waits for the answers"))
                out.extend(self.settle())
            else:
                out.extend(self._ready())
        return out

    # ---- settling: the server's own requests at start answered first ---------------------------

    def server_asked(self) -> None:
        """The server sent a request; during the start the first forwarded request waits for it."""
        if self.shared.phase in (Phase.HANDSHAKE, Phase.REFRESH):
            self.asked_at_start = True

    def settle(self) -> list[Action]:
        """While settling, once nothing the server asked waits for an answer: a `ping` round trip,
        so the server has read those answers (its answer: `settled`)."""
        if not self.settling or self.settle_sent or self.roots.deferred or self.shared.routes.downstream:
            return []
        self.settle_sent = True
        return [internal(self.shared.routes, "ping", None, "settle"),
                Note("the server's requests at start are answered: a ping, so it has read them before the first request")]

    def settled(self) -> list[Action]:
        """The settling ping answered (an error too): the daemon waits for the server's `idle`."""
        if not self.settling:
            return []
        return [WaitIdle()]

    def idle(self) -> list[Action]:
        """The server went idle after the settling ping, or the daemon's bound passed."""
        if not self.settling or not self.settle_sent:
            return []
        return self._ready()

    def _ready(self) -> list[Action]:
        self.settling = self.settle_sent = self.asked_at_start = False
        self.shared.phase = Phase.READY
        out: list[Action] = [*self.probe_unanswered(), Ready()]
        for cid, msg in self.shared.queue.take():
            if cid in self.shared.clients:
                out.extend(self.dispatch(cid, msg) if msg.kind is Kind.REQUEST else [])
        return out

    def list_changed(self, notification: str) -> list[Action]:
        """A handshake-era `list_changed` from the server."""
        methods = [m for m, n in LIST_CHANGED.items() if n == notification]
        if self.shared.phase is Phase.REFRESH and self.shared.instance is not None:
            # A listing already fetched may predate the change; the pending ones will see it.
            stale = [m for m in methods if m in self.shared.instance.listings]
            for method in stale:
                del self.shared.instance.listings[method]
            return [Note(f"{notification} during start-up: fetching {stale or 'nothing'} again"), *self._start_refresh(stale)]
        if self.shared.phase is not Phase.READY or self.shared.instance is None:
            return [Note(f"{notification} before the handshake finished: the coming refresh covers it")]
        for method in methods:
            self.shared.instance.listings.pop(method, None)
        return [Note(f"{notification}: refreshing"), *self._start_refresh(methods)]

    # ---- what the handshake connection holds for its clients -------------------------------------

    def sync_level(self) -> list[Action]:
        """Keep the server's log level at the most verbose any client asked for (handshake era)."""
        wanted = self.shared.routes.most_verbose_level()
        if (wanted is None or wanted == self.upstream_level or self.shared.phase not in (Phase.REFRESH, Phase.READY)
                or self.shared.instance is None):
            return []
        self.upstream_level = wanted
        return [internal(self.shared.routes, "logging/setLevel", {"level": wanted}, "setlevel")]

    def subscribe(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        uri = msg.params.get("uri")
        if not isinstance(uri, str):
            return forward(self.shared.routes, cid, msg)  # let the server word the error
        self.shared.routes.subscriptions.setdefault(uri, set()).add(cid)
        if uri in self.upstream_subs:
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id)]
        self.upstream_subs.add(uri)
        return forward(self.shared.routes, cid, msg)

    def unsubscribe(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        uri = msg.params.get("uri")
        if not isinstance(uri, str):
            return forward(self.shared.routes, cid, msg)
        if self.shared.routes.unsubscribe(uri, cid) or uri not in self.upstream_subs:
            return [ToClient(cid, rpc.result_line(msg.id, {}), msg.id)]
        self.upstream_subs.discard(uri)
        return forward(self.shared.routes, cid, msg)

    def client_left(self, cid: ClientId) -> list[Action]:
        """A client left: its subscriptions end; a uri nobody else wants is unsubscribed upstream."""
        out: list[Action] = []
        for uri in list(self.shared.routes.subscriptions):
            if not self.shared.routes.unsubscribe(uri, cid):
                if uri in self.upstream_subs and self.shared.phase is Phase.READY:
                    self.upstream_subs.discard(uri)
                    out.append(internal(self.shared.routes, "resources/unsubscribe", {"uri": uri}, "unsubscribe"))
        return out

    def gone(self) -> None:
        """The process ended: its handshake, log level and subscriptions with it."""
        self.settling = self.settle_sent = self.asked_at_start = False
        self.upstream_subs.clear()
        self.upstream_level = None
        self.shared.instance = None
