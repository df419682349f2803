"""The start-up sequence of a handshake-era server in the relay core: the replayed handshake, the
listing refresh that doubles as a barrier, and the refreshes a change notification asks for.

Replay. The relay sends `initialize` with a real client's params: those of the client that caused
the start (a queued `initialize`, else a queued client's recorded params), else the most recent ones
the snapshot holds. Its result answers every queued `initialize`; a refusal fails the queue and
stops the server, unless the stateless era explains it (stateless.py).

Refresh. After its own `notifications/initialized` the relay restores what clients asked of the
process (the most verbose log level any of them set, every resource subscription) and fetches each
advertised listing page by page, at most MAX_LISTING_PAGES pages. These requests are the barrier
PROTOCOL.md §8 asks for: the server has processed `initialized` before anything queued is
forwarded. When the last listing is in, the merged entry replaces the snapshot's if it differs,
each listing that drifted from the snapshot sends its `list_changed` to every initialized client,
the phase becomes READY, and the queue is forwarded in arrival order.

Change notifications. A `list_changed` during the refresh fetches again what this start already
fetched (the fetches still pending will see the change); in READY it refreshes the listing and
passes the notification on even when the content turns out unchanged: the server said it changed.
"""

from __future__ import annotations

from lazyd.core import jsonrpc as rpc
from lazyd.core.bridge import BridgeRelay
from lazyd.core.cache import LIST_CHANGED, LISTINGS, HandshakeEntry, Listing, handshake_key
from lazyd.core.jsonrpc import JsonObj, Kind, Message
from lazyd.core.relay_base import (
    MAX_LISTING_PAGES,
    Abort,
    Action,
    Note,
    Phase,
    Ready,
    Refresh,
    SnapshotChanged,
    ToClient,
    ToServer,
)
from lazyd.core.routing import Upstream


class StartupRelay(BridgeRelay):
    """The start-up sequence's methods of `RelayCore` (see the module docstring)."""

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
        if up.purpose == "probe-after":
            return self._probe_after_answered(msg)
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
        if not self._probe_sent:
            # The connection's first request was this initialize. Saved with the next change that
            # is saved anyway: only a refusal (False) changes which process a client gets.
            self.snapshot.handshake_first = True
        self.instance.result = result
        out: list[Action] = [*out0, ToServer(rpc.notification_line("notifications/initialized"))]
        if self._start_plan().probe_after_handshake and self.stateless_up is False:
            out.extend(self._send_probe_after())
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
            self._refreshing[method] = Refresh(method)
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
        # What a client of this handshake was served from the cache, perhaps another handshake's
        # entry: drift is measured against that, so a start after a cross-handshake answer
        # announces what it got wrong.
        old = self.snapshot.entry_for_client(self.instance.params)
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
        return [Note(f"{notification}: refreshing"), *self._start_refresh(methods)]

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
