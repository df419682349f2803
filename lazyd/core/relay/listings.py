"""Fetching listings (and discovery) from the live server: one engine for both eras.

The handshake era fetches at every start (the refresh that is the barrier) and on `list_changed`;
the stateless era for each asker whose cache entry is missing or expired. Both the same way:

- **Pagination**: page after page while the server gives a `nextCursor`, at most
  MAX_LISTING_PAGES (a server that never stops must not make the relay loop for ever).
- **Merge**: the first page's fields without `nextCursor`, every page's items, the smallest
  `ttlMs`, `cacheScope` "private" if any page was (or said nothing).
- **Who waits**: a second ask for a key joins the running fetch; `again` replaces it (it may
  predate an announced change), taking over its waiters and dropping its late pages (each fetch
  has its own serial, in its requests' purpose). A start waits for its `why == "start"` fetches.
- **Drift**: what clients were served against what the server lists now (`drift`).

The owner files the result: the live handshake (lazyd/core/relay/startup.py) or the stateless cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from lazyd.core import state_codec as sc
from lazyd.core.eras.asker import Asker
from lazyd.core.cache import LISTINGS
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Message
from lazyd.core.relay.actions import ToServer
from lazyd.core.relay.routing import ClientId

# A server whose listing never stops paginating must not make the relay loop forever.
MAX_LISTING_PAGES = 1000
PURPOSE_PREFIX = "fetch:"

# The port: send one page request upstream under a fresh relay id (method, params, purpose).
Send = Callable[[str, JsonObj | None, str], ToServer]


class Waiter(NamedTuple):
    """A client request answered when a fetch completes, in the shape its era expects."""

    cid: ClientId
    client_id: JsonId
    shape: str  # "stateless": as fetched; "handshake": stateless fields removed; "initialize"
    requested: object = None  # the protocolVersion an `initialize` asked for


@dataclass
class Fetch:
    """The relay fetching one result for one key, page by page."""

    method: str
    key: str
    why: str  # "start": a start waits for it; "changed": after a list_changed; "client": a miss
    asker: Asker | None  # whose envelope its requests carry; None: a handshake-era listing
    serial: int  # tells its pages from those of a fetch it replaced
    waiters: list[Waiter] = field(default_factory=list)
    items: list[object] = field(default_factory=list)
    pages: int = 0
    first: JsonObj | None = None
    ttl: int | None = None
    private: bool = False

    @property
    def stateless(self) -> bool:
        return self.asker is not None

    @property
    def purpose(self) -> str:
        return f"{PURPOSE_PREFIX}{self.serial}:{self.key}"


@dataclass
class Fetched:
    """A fetch that completed: the merged result, or the server's error (`result` None)."""

    fetch: Fetch
    result: JsonObj | None
    error: object = None


class ListingEngine:
    """Every fetch under way for one server process (see the module docstring)."""

    def __init__(self, send: Send) -> None:
        self.fetches: dict[str, Fetch] = {}
        self.next_serial = 1
        self._send = send

    def start(self, method: str, key: str, why: str, asker: Asker | None, waiter: Waiter | None = None,
              *, again: bool = False) -> ToServer | None:
        """Fetch `method` under `key`, or join the fetch already running for it (None: joined)."""
        running = self.fetches.get(key)
        if running is not None and not again:
            if waiter is not None:
                running.waiters.append(waiter)
            return None
        fetch = Fetch(method, key, why, asker, self.next_serial, [waiter] if waiter is not None else [])
        self.next_serial += 1
        if running is not None:
            fetch.waiters = running.waiters + fetch.waiters
            fetch.why = "start" if running.why == "start" else why  # a start still waits for it
        self.fetches[key] = fetch
        return self._page(fetch, None)

    def _page(self, fetch: Fetch, cursor: str | None) -> ToServer:
        params: JsonObj | None
        if fetch.asker is None:
            params = {"cursor": cursor} if cursor is not None else None
        else:
            params = {"_meta": fetch.asker.envelope()}
            if cursor is not None:
                params["cursor"] = cursor
        return self._send(fetch.method, params, fetch.purpose)

    def answer(self, purpose: str, msg: Message) -> ToServer | Fetched | None:
        """The server answered one of a fetch's requests: the next page's request, the completed
        fetch, or None when the fetch was replaced or is gone (its late page is dropped)."""
        serial, _, key = purpose.removeprefix(PURPOSE_PREFIX).partition(":")
        fetch = self.fetches.get(key)
        if fetch is None or str(fetch.serial) != serial:
            return None
        result = msg.obj.get("result")
        if not isinstance(result, dict):
            del self.fetches[key]
            return Fetched(fetch, None, msg.obj.get("error"))
        item_key = LISTINGS.get(fetch.method)
        if item_key is None:
            del self.fetches[key]
            return Fetched(fetch, result)
        page = result.get(item_key)
        fetch.items.extend(page if isinstance(page, list) else [])
        fetch.pages += 1
        fetch.first = fetch.first if fetch.first is not None else result
        ttl = result.get("ttlMs")
        if isinstance(ttl, int) and not isinstance(ttl, bool):
            fetch.ttl = ttl if fetch.ttl is None else min(fetch.ttl, ttl)
        fetch.private = fetch.private or result.get("cacheScope") != "public"
        cursor = result.get("nextCursor")
        if isinstance(cursor, str) and fetch.pages < MAX_LISTING_PAGES:
            return self._page(fetch, cursor)
        del self.fetches[key]
        merged = {k: v for k, v in fetch.first.items() if k != "nextCursor"}
        merged[item_key] = fetch.items
        if fetch.ttl is not None:
            merged["ttlMs"] = fetch.ttl
        merged["cacheScope"] = "private" if fetch.private else "public"
        return Fetched(fetch, merged)

    # ---- who waits -------------------------------------------------------------------------------

    def pending(self, *, stateless: bool, why: str | None = None) -> bool:
        """Whether a fetch of that era (and reason) is still under way."""
        return any(f.stateless is stateless and (why is None or f.why == why) for f in self.fetches.values())

    def running(self, methods: list[str]) -> list[Fetch]:
        """The stateless fetches of these methods under way (a change may have made them stale)."""
        return [f for f in self.fetches.values() if f.stateless and f.method in methods]

    def waiting_count(self) -> int:
        return sum(len(f.waiters) for f in self.fetches.values())

    def drop_waiter(self, cid: ClientId, client_id: JsonId | None = None) -> bool:
        """A client cancelled a request (or all of them, `client_id` None) waiting on a fetch."""
        dropped = False
        for fetch in self.fetches.values():
            keep = [w for w in fetch.waiters if not (w.cid == cid and (client_id is None or (
                w.client_id == client_id and type(w.client_id) is type(client_id))))]
            dropped = dropped or len(keep) != len(fetch.waiters)
            fetch.waiters = keep
        return dropped

    # ---- state (plain data, lazyd/core/state_codec.py) --------------------------------------------

    def to_state(self) -> JsonObj:
        return {"next_serial": self.next_serial, "fetches": sc.dump(list(self.fetches.values()))}

    def restore(self, value: object) -> None:
        s = sc.obj(value, "listings")
        self.next_serial = sc.integer(s.get("next_serial"), "listings.next_serial")
        self.fetches = {fetch.key: fetch for fetch in sc.load(list[Fetch], s.get("fetches"), "fetch")}

    def gone(self) -> list[Fetch]:
        """The process ended: every fetch is over; whoever waited on one is the caller's to answer."""
        fetches = list(self.fetches.values())
        self.fetches.clear()
        return fetches


def drift(served: Mapping[str, object] | None, fresh: Mapping[str, object]) -> set[str]:
    """The listings (by method) whose fresh content differs from what clients were served from the
    cache. Nothing served (None) is no drift; a listing the served entry lacked has drifted."""
    if served is None:
        return set()
    return {method for method, value in fresh.items() if method not in served or served[method] != value}
