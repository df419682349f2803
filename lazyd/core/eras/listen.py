"""`subscriptions/listen` streams (2026-07-28) when several clients share one server.

A listen request is a stream: it stays open, the server acknowledges it with
`notifications/subscriptions/acknowledged`, then sends change notifications stamped with
`_meta["io.modelcontextprotocol/subscriptionId"]` = the listen request's JSON-RPC id. Clients pick
their own ids (the python SDK uses `listen-1`, `listen-2`… in every process), so two clients'
streams collide on the wire if forwarded as they are.

The relay therefore never forwards a client's listen request. It keeps, per server process, ONE
stream of its own upstream whose filter is the union of what every client asked for plus the list
changes the relay needs to keep its cache fresh, and fans each notification out to the client
streams that asked for it, each stamped with that client's own listen id. A client stream:
- is acknowledged by the relay with the subset of its filter the server supports (the discovery
  capabilities say which), so opening one does not need a running server;
- outlives server restarts: the relay re-issues its own stream at every start;
- ends when the client cancels it (`notifications/cancelled` naming its id) or leaves.
When a client asks for a resource the upstream stream does not cover, the relay opens a wider
stream and, once that one is acknowledged, cancels the older one; events count only from the
newest acknowledged stream, so nothing is delivered twice.

This module is the bookkeeping; the relay core writes the lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lazyd.core import state_codec as sc
from lazyd.core.relay.jsonrpc import JsonId, JsonObj
from lazyd.core.relay.routing import ClientId

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


@dataclass
class ClientStream:
    cid: ClientId
    listen_id: JsonId  # the client's own request id: what its notifications are stamped with
    filter: JsonObj  # the honored filter it was acknowledged with


@dataclass
class ListenHub:
    streams: dict[tuple[ClientId, JsonId], ClientStream] = field(default_factory=dict)
    current: int | None = None  # relay id of the acknowledged upstream stream whose events count
    pending: int | None = None  # relay id of a newer upstream stream waiting for its acknowledgment
    requested: JsonObj | None = None  # filter of the newest upstream stream (pending or current)
    reissues: int = 0  # upstream streams the server ended this run (bounds re-issuing)

    def add(self, cid: ClientId, listen_id: JsonId, filter_: JsonObj) -> None:
        self.streams[(cid, listen_id)] = ClientStream(cid, listen_id, filter_)

    def remove(self, cid: ClientId, listen_id: JsonId) -> bool:
        key = (cid, listen_id)
        # `1` and `"1"` are different ids: the type must match too.
        stream = self.streams.get(key)
        if stream is None or type(stream.listen_id) is not type(listen_id):
            return False
        del self.streams[key]
        return True

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
        for stream in self.streams.values():
            uris.update(uris_of(stream.filter))
        if uris and _cap(caps, "resources").get("subscribe") is True:
            out["resourceSubscriptions"] = sorted(uris)
        return out

    def targets(self, method: str, params: JsonObj) -> list[ClientStream]:
        """The client streams a notification from the upstream stream goes to."""
        if method in LIST_FLAGS:
            flag = LIST_FLAGS[method][0]
            return [s for _, s in sorted(self.streams.items(), key=_order) if s.filter.get(flag) is True]
        if method == RESOURCE_UPDATED:
            uri = params.get("uri")
            if not isinstance(uri, str):
                return []
            return [s for _, s in sorted(self.streams.items(), key=_order)
                    if any(uri_matches(sub, uri) for sub in uris_of(s.filter))]
        return []

    def to_state(self) -> JsonObj:
        return {"streams": [[s.cid, s.listen_id, s.filter] for s in self.streams.values()], "current": self.current,
                "pending": self.pending, "requested": self.requested, "reissues": self.reissues}

    def restore(self, value: object) -> None:
        s = sc.obj(value, "listen")
        self.streams = {}
        for row in sc.items(s.get("streams"), "listen.streams"):
            cid, listen_id, filter_ = sc.items(row, "listen stream")
            self.add(sc.integer(cid, "listen.cid"), sc.json_id(listen_id, "listen.id"), sc.json_obj(filter_, "listen.filter"))
        self.current = sc.opt_integer(s.get("current"), "listen.current")
        self.pending = sc.opt_integer(s.get("pending"), "listen.pending")
        self.requested = sc.opt_json_obj(s.get("requested"), "listen.requested")
        self.reissues = sc.integer(s.get("reissues"), "listen.reissues")

    def process_gone(self) -> None:
        """The server exited: its streams are gone; the client streams stay for the next start."""
        self.current = self.pending = None
        self.requested = None
        self.reissues = 0


def _order(item: tuple[tuple[ClientId, JsonId], ClientStream]) -> tuple[int, str]:
    return item[0][0], repr(item[0][1])
