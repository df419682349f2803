"""`subscriptions/listen` when several clients share one server: the relay core's listen hub.

A server stamps its change notifications with the listen request's id, and clients pick their own
ids (the python SDK's `listen-1` in every process), so forwarded streams would collide. The relay
keeps ONE stream of its own upstream (the union of every client's filter and the list changes its
cache needs) and fans each notification out to the client streams that asked, each under its own
id. A client stream is acknowledged by the relay from the discovery capabilities (no running
server needed), is never forwarded, outlives restarts, and ends when cancelled or its client
leaves. The upstream stream is re-opened at every start (and, a bounded number of times, when the
server ends it); a wider filter opens a new one and cancels the old one once the new one is
acknowledged; events count only from the newest, so nothing is delivered twice. Its notifications
invalidate the cache and fan out to the client streams and, as plain handshake-era notifications,
to the bridge's clients.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from lazyd.core.eras import versions as eras
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.asker import PROBE_VERSION
from lazyd.core.cache import LIST_CHANGED
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Message
from lazyd.core.relay.actions import Action, Activity, Note, Phase, SnapshotChanged, ToClient, ToServer, WantServer
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import ClientId, Upstream, level_rank
from lazyd.core.eras.stateless_cache import StatelessCache, advertised

LIST_FLAGS: dict[str, tuple[str, str]] = {
    # notification -> (filter flag, server capability that advertises it)
    "notifications/tools/list_changed": ("toolsListChanged", "tools"),
    "notifications/prompts/list_changed": ("promptsListChanged", "prompts"),
    "notifications/resources/list_changed": ("resourcesListChanged", "resources"),
}
RESOURCE_UPDATED = "notifications/resources/updated"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"


def _cap(caps: JsonObj, name: str) -> JsonObj:
    value = caps.get(name)
    return value if isinstance(value, dict) else {}


def serves_listen(caps: JsonObj) -> bool:
    """A stateless server advertises listChanged/subscribe exactly when it serves listen."""
    return any(_cap(caps, c).get("listChanged") is True for _, c in LIST_FLAGS.values()) or (
        _cap(caps, "resources").get("subscribe") is True
    )


def uris_of(notifications: object) -> list[str]:
    raw = notifications.get("resourceSubscriptions") if isinstance(notifications, dict) else None
    return [u for u in raw if isinstance(u, str)] if isinstance(raw, list) else []


def honored(requested: object, caps: JsonObj) -> JsonObj:
    """The part of a requested filter this server delivers; false flags and empty lists omitted."""
    asked = requested if isinstance(requested, dict) else {}
    out: JsonObj = {}
    for flag, cap in LIST_FLAGS.values():
        if asked.get(flag) is True and _cap(caps, cap).get("listChanged") is True:
            out[flag] = True
    uris = uris_of(asked)
    if uris and _cap(caps, "resources").get("subscribe") is True:
        out["resourceSubscriptions"] = uris
    return out


def covers(have: JsonObj | None, want: JsonObj) -> bool:
    if have is None:
        return False
    flags_ok = all(have.get(flag) is True for flag, _ in LIST_FLAGS.values() if want.get(flag) is True)
    return flags_ok and set(uris_of(want)) <= set(uris_of(have))


def uri_matches(subscribed: str, uri: str) -> bool:
    """An update for `uri` concerns a subscription to `subscribed` (itself or a sub-resource)."""
    return uri == subscribed or uri.startswith(subscribed if subscribed.endswith("/") else subscribed + "/")


# Upstream listen streams the server may end in one run before the relay stops re-opening them.
MAX_LISTEN_REISSUES = 3


# What the listen hub keeps (lazyd/core/state_codec.py).
KEPT = {"streams": dict[tuple[ClientId, JsonId], JsonObj], "current": int | None, "pending": int | None,
        "requested": JsonObj | None, "reissues": int}


class ListenRelay:
    """Client listen streams and the relay's own upstream stream (see the module docstring)."""

    def __init__(self, shared: RelayShared, cache: StatelessCache, maybe_ready: Callable[[], list[Action]]) -> None:
        self.shared = shared
        self.maybe_ready = maybe_ready  # the stateless start's barrier, passed when a stream is in
        self.cache = cache
        # (client, its listen request's id: what its notifications are stamped with) -> the honored
        # filter it was acknowledged with.
        self.streams: dict[tuple[ClientId, JsonId], JsonObj] = {}
        self.current: int | None = None  # relay id of the acknowledged upstream stream whose events count
        self.pending: int | None = None  # relay id of a newer upstream stream waiting for its acknowledgment
        self.requested: JsonObj | None = None  # filter of the newest upstream stream (pending or current)
        self.reissues = 0  # upstream streams the server ended this run (bounds re-issuing)

    def remove(self, cid: ClientId, listen_id: JsonId) -> bool:
        return self.streams.pop((cid, listen_id), None) is not None

    def drop_client(self, cid: ClientId) -> None:
        for key in [k for k in self.streams if k[0] == cid]:
            del self.streams[key]

    def wanted(self, caps: JsonObj, extra_uris: set[str]) -> JsonObj:
        """The upstream filter: every list change the server offers (the cache needs them) and
        every resource any client stream or handshake-era subscriber asked for."""
        out: JsonObj = {}
        for flag, cap in LIST_FLAGS.values():
            if _cap(caps, cap).get("listChanged") is True:
                out[flag] = True
        uris = set(extra_uris)
        for filter_ in self.streams.values():
            uris.update(uris_of(filter_))
        if uris and _cap(caps, "resources").get("subscribe") is True:
            out["resourceSubscriptions"] = sorted(uris)
        return out

    def targets(self, method: str, params: JsonObj) -> list[tuple[ClientId, JsonId]]:
        """The client streams a notification from the upstream stream goes to."""
        uri = params.get("uri")
        if method in LIST_FLAGS:
            flag = LIST_FLAGS[method][0]
            return [key for key, f in sorted(self.streams.items(), key=_order) if f.get(flag) is True]
        if method == RESOURCE_UPDATED and isinstance(uri, str):
            return [key for key, f in sorted(self.streams.items(), key=_order)
                    if any(uri_matches(sub, uri) for sub in uris_of(f))]
        return []

    def process_gone(self) -> None:
        """The server exited: its streams are gone; the client streams stay for the next start."""
        self.current = self.pending = None
        self.requested = None
        self.reissues = 0

    def listen(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        discovery = self.cache.known_discovery()
        if discovery is None:
            return self.shared.queue.add(cid, msg, "subscriptions/listen: the server's capabilities are not known yet")
        caps = eras.discover_capabilities(discovery)
        if not serves_listen(caps):
            return [ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, "Method not found", "subscriptions/listen"), msg.id)]
        granted = honored(msg.params.get("notifications"), caps)
        self.streams[(cid, msg.id)] = granted
        ack = rpc.notification_line(ACKNOWLEDGED, {"_meta": {eras.SUBSCRIPTION_ID_META: msg.id}, "notifications": granted})
        out: list[Action] = [ToClient(cid, ack), Activity(), Note(f"client {cid} listen id={msg.id!r} acknowledged")]
        if self.cache.can_fetch():
            out.extend(self.sync())
        elif uris_of(granted) and self.shared.phase is Phase.DOWN:
            out.append(WantServer())  # resource updates need a live server (docs/relay.md)
        return out

    def _bridged_uris(self) -> set[str]:
        """Resources handshake-era clients subscribed to through the bridge."""
        return set(self.shared.routes.subscriptions) if self.shared.instance is None else set()

    def sync(self) -> list[Action]:
        """Make the relay's upstream listen stream cover what the clients and the cache need."""
        discovery = self.shared.era.discovery
        if not self.cache.can_fetch() or discovery is None:
            return []
        caps = eras.discover_capabilities(discovery)
        if not serves_listen(caps):
            return []
        want = self.wanted(caps, self._bridged_uris())
        if covers(self.requested, want):
            return []
        asker = self.cache.start_asker(eras.upstream_version(discovery) or PROBE_VERSION)
        rid = self.shared.routes.take_id()
        self.shared.routes.add(rid, Upstream("subscriptions/listen", None, None, purpose="listen"))
        self.pending, self.requested = rid, want
        line = rpc.request_line(rid, "subscriptions/listen", {"_meta": asker.envelope(), "notifications": want})
        return [ToServer(line), Note(f"opening the relay's listen stream {rid}")]

    def ended(self, rid: int, refused: bool = False) -> list[Action]:
        """The server ended one of the relay's listen streams (a result, an error, or its cancel)."""
        self.shared.routes.pop(rid)
        if rid not in (self.current, self.pending):
            return []
        if refused:
            self.reissues = MAX_LISTEN_REISSUES  # a refusal will not change by asking again
        if rid == self.current:
            self.current = None
        if rid == self.pending:
            self.pending = None
        self.requested = None
        self.reissues += 1
        if self.reissues > MAX_LISTEN_REISSUES:
            return [Note("the server keeps ending the relay's listen stream: not re-opened until the next start"),
                    *self.maybe_ready()]
        return [Note(f"the server ended listen stream {rid}: re-opening"), *self.sync(), *self.maybe_ready()]

    def notification(self, msg: Message) -> list[Action] | None:
        """A notification of the stateless era (listen stream, log opt-in), or None for the rest."""
        method, params = msg.method, msg.params
        assert method is not None
        meta = params.get("_meta")
        sid = meta.get(eras.SUBSCRIPTION_ID_META) if isinstance(meta, dict) else None
        stateless_only = self.shared.instance is None and self.shared.era.stateless_up
        if method == ACKNOWLEDGED:
            return self._acked(sid)
        if method == "notifications/message" and stateless_only:
            return self._log(msg)
        if method == "notifications/cancelled" and params.get("requestId") in (self.current, self.pending) \
                and isinstance(params.get("requestId"), int):
            return self.ended(params["requestId"])
        if sid is None:
            # A stateless-only server notifies on listen streams only: an unstamped one counts too.
            if not (stateless_only and method in (*LIST_FLAGS, RESOURCE_UPDATED)):
                return None
        elif not (isinstance(sid, int) and not isinstance(sid, bool) and sid == self.current):
            return [Note(f"{method} from a superseded or unknown listen stream dropped")]
        out: list[Action] = []
        if method in LIST_FLAGS:
            out.extend(self._changed(method))
        out.extend(self.announce(method, params))
        return out

    def _acked(self, sid: object) -> list[Action]:
        if not isinstance(sid, int) or isinstance(sid, bool) or sid not in self.shared.routes.upstream:
            return [Note("acknowledgment of an unknown listen stream dropped")]
        if sid == self.pending:
            old, self.current, self.pending = self.current, sid, None
            out: list[Action] = [Note(f"listen stream {sid} acknowledged")]
            if old is not None and self.shared.routes.pop(old) is not None:
                out.append(ToServer(rpc.notification_line("notifications/cancelled", {"requestId": old, "reason": "superseded"})))
            return out + self.maybe_ready()
        if sid != self.current:
            self.shared.routes.pop(sid)
            return [ToServer(rpc.notification_line("notifications/cancelled", {"requestId": sid, "reason": "superseded"}))]
        return []

    def announce(self, method: str, params: JsonObj) -> list[Action]:
        """Deliver a change notification to the client streams that asked and the bridge's clients."""
        out: list[Action] = []
        meta = params.get("_meta")
        for cid, listen_id in self.targets(method, params):
            stamped = copy.copy(params)
            stamped["_meta"] = {**(meta if isinstance(meta, dict) else {}), eras.SUBSCRIPTION_ID_META: listen_id}
            out.append(ToClient(cid, rpc.notification_line(method, stamped)))
        return out + self._to_bridged(method, params)

    def _to_bridged(self, method: str, params: JsonObj) -> list[Action]:
        """The same notification to the handshake-era clients of the bridge, in their era's shape."""
        if self.shared.instance is not None:
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


def _order(item: tuple[tuple[ClientId, JsonId], JsonObj]) -> tuple[int, str]:
    return item[0][0], repr(item[0][1])
