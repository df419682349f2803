"""The relay core's side of `subscriptions/listen` (the bookkeeping is listen.py).

A client's listen request is acknowledged by the relay from the server's discovery capabilities and
never forwarded; the relay's own upstream stream carries the union of every client's filter and the
list changes its cache needs, is re-opened at every start (and when the server ends it, a bounded
number of times), and is widened by opening a new stream and cancelling the old one once the new
one is acknowledged. Its notifications invalidate the cache and fan out to each client stream
stamped with that client's own listen id, and to the bridged handshake-era clients.
"""

from __future__ import annotations

import copy

from lazyd.core import eras
from lazyd.core import jsonrpc as rpc
from lazyd.core.cache import LIST_CHANGED
from lazyd.core.jsonrpc import JsonObj, Message
from lazyd.core.listen import ACKNOWLEDGED, LIST_FLAGS, RESOURCE_UPDATED, covers, honored, serves_listen, uris_of
from lazyd.core.relay_base import Action, Activity, Note, Phase, SnapshotChanged, ToClient, ToServer, WantServer
from lazyd.core.routing import ClientId, Upstream, level_rank
from lazyd.core.stateless_cache import PROBE_VERSION, CacheRelay, advertised

# Upstream listen streams the server may end in one run before the relay stops re-opening them.
MAX_LISTEN_REISSUES = 3


class ListenRelay(CacheRelay):
    """The listen-stream methods of `RelayCore` (see the module docstring)."""

    def _listen(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        discovery = self._known_discovery()
        if discovery is None:
            return self._queue(cid, msg, "subscriptions/listen: the server's capabilities are not known yet")
        caps = eras.discover_capabilities(discovery)
        if not serves_listen(caps):
            return [ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, "Method not found", "subscriptions/listen"), msg.id)]
        granted = honored(msg.params.get("notifications"), caps)
        self.hub.add(cid, msg.id, granted)
        ack = rpc.notification_line(ACKNOWLEDGED, {"_meta": {eras.SUBSCRIPTION_ID_META: msg.id}, "notifications": granted})
        out: list[Action] = [ToClient(cid, ack), Activity(), Note(f"client {cid} listen id={msg.id!r} acknowledged")]
        if self._can_fetch():
            out.extend(self._sync_listen())
        elif uris_of(granted) and self.phase is Phase.DOWN:
            out.append(WantServer())  # resource updates need a live server (PROTOCOL.md §4)
        return out

    def _bridged_uris(self) -> set[str]:
        """Resources handshake-era clients subscribed to through the bridge."""
        return set(self.routes.subscriptions) if self.instance is None else set()

    def _sync_listen(self) -> list[Action]:
        """Make the relay's upstream listen stream cover what the clients and the cache need."""
        if not self._can_fetch() or self.discovery is None:
            return []
        caps = eras.discover_capabilities(self.discovery)
        if not serves_listen(caps):
            return []
        want = self.hub.wanted(caps, self._bridged_uris())
        if covers(self.hub.requested, want):
            return []
        asker = self._start_asker(eras.upstream_version(self.discovery) or PROBE_VERSION)
        rid = self._take_id()
        self.routes.add(rid, Upstream("subscriptions/listen", None, None, purpose="listen"))
        self.hub.pending, self.hub.requested = rid, want
        line = rpc.request_line(rid, "subscriptions/listen", {"_meta": asker.envelope(), "notifications": want})
        return [ToServer(line), Note(f"opening the relay's listen stream {rid}")]

    def _listen_ended(self, rid: int, refused: bool = False) -> list[Action]:
        """The server ended one of the relay's listen streams (a result, an error, or its cancel)."""
        self.routes.pop(rid)
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
                    *self._maybe_ready()]
        return [Note(f"the server ended listen stream {rid}: re-opening"), *self._sync_listen(), *self._maybe_ready()]

    def _stateless_notification(self, msg: Message) -> list[Action] | None:
        """A notification of the stateless era (listen stream, log opt-in), or None for the rest."""
        method, params = msg.method, msg.params
        assert method is not None
        meta = params.get("_meta")
        sid = meta.get(eras.SUBSCRIPTION_ID_META) if isinstance(meta, dict) else None
        if method == ACKNOWLEDGED:
            return self._listen_acked(sid)
        if method == "notifications/message" and self.instance is None and self.stateless_up:
            return self._stateless_log(msg)
        if method == "notifications/cancelled" and params.get("requestId") in (self.hub.current, self.hub.pending) \
                and isinstance(params.get("requestId"), int):
            return self._listen_ended(params["requestId"])
        if sid is None:
            # A stateless-only server sends change notifications on listen streams only; one
            # without a stamp is still one (the handshake connection of a mixed one has its own path).
            if not (self.instance is None and self.stateless_up and method in (*LIST_FLAGS, RESOURCE_UPDATED)):
                return None
        elif not (isinstance(sid, int) and not isinstance(sid, bool) and sid == self.hub.current):
            return [Note(f"{method} from a superseded or unknown listen stream dropped")]
        out: list[Action] = []
        if method in LIST_FLAGS:
            out.extend(self._stateless_changed(method))
        out.extend(self._announce(method, params))
        return out

    def _listen_acked(self, sid: object) -> list[Action]:
        if not isinstance(sid, int) or isinstance(sid, bool) or sid not in self.routes.upstream:
            return [Note("acknowledgment of an unknown listen stream dropped")]
        if sid == self.hub.pending:
            old, self.hub.current, self.hub.pending = self.hub.current, sid, None
            out: list[Action] = [Note(f"listen stream {sid} acknowledged")]
            if old is not None and self.routes.pop(old) is not None:
                out.append(ToServer(rpc.notification_line("notifications/cancelled", {"requestId": old, "reason": "superseded"})))
            return out + self._maybe_ready()
        if sid != self.hub.current:
            self.routes.pop(sid)
            return [ToServer(rpc.notification_line("notifications/cancelled", {"requestId": sid, "reason": "superseded"}))]
        return []

    def _announce(self, method: str, params: JsonObj) -> list[Action]:
        """Deliver a change notification to every client stream that asked for it, each under its
        own listen id, and to the handshake-era clients of the bridge."""
        out: list[Action] = []
        meta = params.get("_meta")
        for stream in self.hub.targets(method, params):
            stamped = copy.copy(params)
            stamped["_meta"] = {**(meta if isinstance(meta, dict) else {}), eras.SUBSCRIPTION_ID_META: stream.listen_id}
            out.append(ToClient(stream.cid, rpc.notification_line(method, stamped)))
        return out + self._bridged_notification(method, params)

    def _announce_list_changed(self, notification: str) -> list[Action]:
        return self._announce(notification, {})

    def _bridged_notification(self, method: str, params: JsonObj) -> list[Action]:
        raise NotImplementedError  # bridge.py

    def _stateless_changed(self, notification: str) -> list[Action]:
        """A listing changed: drop its stored results, and fetch it again to keep the cache warm."""
        methods = [m for m, n in LIST_CHANGED.items() if n == notification]
        for method in methods:
            self.snapshot.forget_stateless(method)
        out: list[Action] = [SnapshotChanged(), Note(f"{notification}: cached results dropped")]
        if self._can_fetch() and self.discovery is not None:
            asker = self._start_asker(eras.upstream_version(self.discovery) or PROBE_VERSION)
            for method in methods:
                if method in advertised(self.discovery):
                    out.extend(self._fetch(method, asker, "changed", again=True))
            for fetch in [f for f in self.fetches.values() if f.method in methods and f.asker != asker]:
                out.extend(self._fetch(fetch.method, fetch.asker, fetch.why, again=True))
        return out

    def _stateless_log(self, msg: Message) -> list[Action]:
        """A stateless server logs only for requests that opted in: the clients that did get it."""
        rank = level_rank(msg.params.get("level"))
        targets = {cid for cid, level in self.routes.levels.items() if rank >= level_rank(level)}
        targets |= {up.cid for up in self.routes.upstream.values()
                    if up.cid is not None and up.log_level is not None and rank >= level_rank(up.log_level)}
        line = rpc.dumps(msg.obj)
        return [ToClient(cid, line) for cid in sorted(targets) if cid in self.clients]
