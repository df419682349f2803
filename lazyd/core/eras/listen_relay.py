"""The relay core's side of `subscriptions/listen` (the bookkeeping is lazyd/core/eras/listen.py).

Client listen requests are acknowledged, never forwarded; the relay's own upstream stream is
re-opened at every start (and, a bounded number of times, when the server ends it) and widened as
listen.py says. Its notifications invalidate the cache and fan out to the client streams and, as
plain handshake-era notifications, to the bridge's clients.
"""

from __future__ import annotations

import copy
from typing import Protocol

from lazyd.core.eras import versions as eras
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.asker import PROBE_VERSION
from lazyd.core.cache import LIST_CHANGED, HandshakeEntry
from lazyd.core.relay.jsonrpc import JsonObj, Message
from lazyd.core.eras.listen import (ACKNOWLEDGED, LIST_FLAGS, RESOURCE_UPDATED, ListenHub, covers, honored,
                                    serves_listen, uri_matches, uris_of)
from lazyd.core.relay.actions import Action, Activity, Note, Phase, SnapshotChanged, ToClient, ToServer, WantServer
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import ClientId, Upstream, level_rank
from lazyd.core.eras.stateless_cache import StatelessCache, advertised

# Upstream listen streams the server may end in one run before the relay stops re-opening them.
MAX_LISTEN_REISSUES = 3


class ListenPort(Protocol):
    """The phase, the live handshake, and the stateless start's barrier."""

    @property
    def phase(self) -> Phase: ...

    @property
    def instance(self) -> HandshakeEntry | None: ...

    def maybe_ready(self) -> list[Action]: ...


class ListenRelay:
    """Client listen streams and the relay's own upstream stream (see the module docstring)."""

    def __init__(self, core: ListenPort, shared: RelayShared, cache: StatelessCache) -> None:
        self.core = core
        self.shared = shared
        self.cache = cache
        self.hub = ListenHub()

    def listen(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        discovery = self.cache.known_discovery()
        if discovery is None:
            return self.shared.queue.add(cid, msg, "subscriptions/listen: the server's capabilities are not known yet")
        caps = eras.discover_capabilities(discovery)
        if not serves_listen(caps):
            return [ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, "Method not found", "subscriptions/listen"), msg.id)]
        granted = honored(msg.params.get("notifications"), caps)
        self.hub.streams[(cid, msg.id)] = granted
        ack = rpc.notification_line(ACKNOWLEDGED, {"_meta": {eras.SUBSCRIPTION_ID_META: msg.id}, "notifications": granted})
        out: list[Action] = [ToClient(cid, ack), Activity(), Note(f"client {cid} listen id={msg.id!r} acknowledged")]
        if self.cache.can_fetch():
            out.extend(self.sync())
        elif uris_of(granted) and self.core.phase is Phase.DOWN:
            out.append(WantServer())  # resource updates need a live server (docs/relay.md)
        return out

    def _bridged_uris(self) -> set[str]:
        """Resources handshake-era clients subscribed to through the bridge."""
        return set(self.shared.routes.subscriptions) if self.core.instance is None else set()

    def sync(self) -> list[Action]:
        """Make the relay's upstream listen stream cover what the clients and the cache need."""
        discovery = self.shared.era.discovery
        if not self.cache.can_fetch() or discovery is None:
            return []
        caps = eras.discover_capabilities(discovery)
        if not serves_listen(caps):
            return []
        want = self.hub.wanted(caps, self._bridged_uris())
        if covers(self.hub.requested, want):
            return []
        asker = self.cache.start_asker(eras.upstream_version(discovery) or PROBE_VERSION)
        rid = self.shared.routes.take_id()
        self.shared.routes.add(rid, Upstream("subscriptions/listen", None, None, purpose="listen"))
        self.hub.pending, self.hub.requested = rid, want
        line = rpc.request_line(rid, "subscriptions/listen", {"_meta": asker.envelope(), "notifications": want})
        return [ToServer(line), Note(f"opening the relay's listen stream {rid}")]

    def ended(self, rid: int, refused: bool = False) -> list[Action]:
        """The server ended one of the relay's listen streams (a result, an error, or its cancel)."""
        self.shared.routes.pop(rid)
        if rid not in (self.hub.current, self.hub.pending):
            return []
        if refused:
            self.hub.reissues = MAX_LISTEN_REISSUES  # a refusal will not change by asking again
        if rid == self.hub.current:
            self.hub.current = None
        if rid == self.hub.pending:
            self.hub.pending = None
        self.hub.requested = None
        self.hub.reissues += 1
        if self.hub.reissues > MAX_LISTEN_REISSUES:
            return [Note("the server keeps ending the relay's listen stream: not re-opened until the next start"),
                    *self.core.maybe_ready()]
        return [Note(f"the server ended listen stream {rid}: re-opening"), *self.sync(), *self.core.maybe_ready()]

    def notification(self, msg: Message) -> list[Action] | None:
        """A notification of the stateless era (listen stream, log opt-in), or None for the rest."""
        method, params = msg.method, msg.params
        assert method is not None
        meta = params.get("_meta")
        sid = meta.get(eras.SUBSCRIPTION_ID_META) if isinstance(meta, dict) else None
        stateless_only = self.core.instance is None and self.shared.era.stateless_up
        if method == ACKNOWLEDGED:
            return self._acked(sid)
        if method == "notifications/message" and stateless_only:
            return self._log(msg)
        if method == "notifications/cancelled" and params.get("requestId") in (self.hub.current, self.hub.pending) \
                and isinstance(params.get("requestId"), int):
            return self.ended(params["requestId"])
        if sid is None:
            # A stateless-only server notifies on listen streams only: an unstamped one counts too.
            if not (stateless_only and method in (*LIST_FLAGS, RESOURCE_UPDATED)):
                return None
        elif not (isinstance(sid, int) and not isinstance(sid, bool) and sid == self.hub.current):
            return [Note(f"{method} from a superseded or unknown listen stream dropped")]
        out: list[Action] = []
        if method in LIST_FLAGS:
            out.extend(self._changed(method))
        out.extend(self.announce(method, params))
        return out

    def _acked(self, sid: object) -> list[Action]:
        if not isinstance(sid, int) or isinstance(sid, bool) or sid not in self.shared.routes.upstream:
            return [Note("acknowledgment of an unknown listen stream dropped")]
        if sid == self.hub.pending:
            old, self.hub.current, self.hub.pending = self.hub.current, sid, None
            out: list[Action] = [Note(f"listen stream {sid} acknowledged")]
            if old is not None and self.shared.routes.pop(old) is not None:
                out.append(ToServer(rpc.notification_line("notifications/cancelled", {"requestId": old, "reason": "superseded"})))
            return out + self.core.maybe_ready()
        if sid != self.hub.current:
            self.shared.routes.pop(sid)
            return [ToServer(rpc.notification_line("notifications/cancelled", {"requestId": sid, "reason": "superseded"}))]
        return []

    def announce(self, method: str, params: JsonObj) -> list[Action]:
        """Deliver a change notification to the client streams that asked and the bridge's clients."""
        out: list[Action] = []
        meta = params.get("_meta")
        for cid, listen_id in self.hub.targets(method, params):
            stamped = copy.copy(params)
            stamped["_meta"] = {**(meta if isinstance(meta, dict) else {}), eras.SUBSCRIPTION_ID_META: listen_id}
            out.append(ToClient(cid, rpc.notification_line(method, stamped)))
        return out + self._to_bridged(method, params)

    def _to_bridged(self, method: str, params: JsonObj) -> list[Action]:
        """The same notification to the handshake-era clients of the bridge, in their era's shape."""
        if self.core.instance is not None:
            return []  # a mixed connection notifies them natively
        if method in LIST_FLAGS:
            line = rpc.notification_line(method)
            return [ToClient(cid, line) for cid, c in sorted(self.shared.clients.items()) if c.params is not None and c.initialized]
        if method == RESOURCE_UPDATED:
            uri = params.get("uri")
            if not isinstance(uri, str):
                return []
            targets = sorted({cid for sub, cids in self.shared.routes.subscriptions.items() if uri_matches(sub, uri) for cid in cids})
            plain = {k: v for k, v in params.items() if k != "_meta"}
            meta = params.get("_meta")
            if isinstance(meta, dict) and any(k != eras.SUBSCRIPTION_ID_META for k in meta):
                plain["_meta"] = {k: v for k, v in meta.items() if k != eras.SUBSCRIPTION_ID_META}
            line = rpc.notification_line(method, plain)
            return [ToClient(cid, line) for cid in targets]
        return []

    def _changed(self, notification: str) -> list[Action]:
        """A listing changed: drop its stored results, and fetch it again to keep the cache warm."""
        methods = [m for m, n in LIST_CHANGED.items() if n == notification]
        for method in methods:
            self.shared.snapshot.forget_stateless(method)
        out: list[Action] = [SnapshotChanged(), Note(f"{notification}: cached results dropped")]
        discovery = self.shared.era.discovery
        if self.cache.can_fetch() and discovery is not None:
            asker = self.cache.start_asker(eras.upstream_version(discovery) or PROBE_VERSION)
            for method in methods:
                if method in advertised(discovery):
                    out.extend(self.cache.fetch(method, asker, "changed", again=True))
            for fetch in [f for f in self.shared.listings.running(methods) if f.asker != asker]:
                assert fetch.asker is not None
                out.extend(self.cache.fetch(fetch.method, fetch.asker, fetch.why, again=True))
        return out

    def _log(self, msg: Message) -> list[Action]:
        """A stateless server logs only for requests that opted in: the clients that did get it."""
        rank = level_rank(msg.params.get("level"))
        targets = {cid for cid, level in self.shared.routes.levels.items() if rank >= level_rank(level)}
        targets |= {up.cid for up in self.shared.routes.upstream.values()
                    if up.cid is not None and up.log_level is not None and rank >= level_rank(up.log_level)}
        line = rpc.dumps(msg.obj)
        return [ToClient(cid, line) for cid in sorted(targets) if cid in self.shared.clients]
