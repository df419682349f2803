"""`subscriptions/listen` streams when several clients share one server: the bookkeeping.

A server stamps its change notifications with the listen request's id, and clients pick their own
ids (the python SDK's `listen-1` in every process), so forwarded streams would collide. The relay
keeps ONE stream of its own upstream (the union of every client's filter and the list changes its
cache needs) and fans each notification out to the client streams that asked, each under its own
id. A client stream is acknowledged by the relay from the discovery capabilities (no running
server needed), outlives restarts, and ends when cancelled or its client leaves. A wider filter
opens a new upstream stream and cancels the old one once the new one is acknowledged; events count
only from the newest, so nothing is delivered twice. The relay core writes the lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
class ListenHub:
    # (client, its listen request's id: what its notifications are stamped with) -> the honored
    # filter it was acknowledged with.
    streams: dict[tuple[ClientId, JsonId], JsonObj] = field(default_factory=dict)
    current: int | None = None  # relay id of the acknowledged upstream stream whose events count
    pending: int | None = None  # relay id of a newer upstream stream waiting for its acknowledgment
    requested: JsonObj | None = None  # filter of the newest upstream stream (pending or current)
    reissues: int = 0  # upstream streams the server ended this run (bounds re-issuing)

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


def _order(item: tuple[tuple[ClientId, JsonId], JsonObj]) -> tuple[int, str]:
    return item[0][0], repr(item[0][1])
