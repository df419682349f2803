"""The stateless-era cache of the relay core: `server/discover` and the four listings.

A stored result is served while it is fresh: `ttlMs` has not run out since it was stored (it is
served with the ttlMs it has left), and a result without `ttlMs` gave no hint and is kept until a
change notification or the next start replaces it. An expired result (`ttlMs: 0` included) is
fetched again while the server runs, which costs nothing; while it sleeps, a session start is
answered with it, marked `ttlMs: 0` (stale: the client may ask again), rather than starting the
server. `ttlMs` is a hint the client MAY cache by (the schema likens it to HTTP's max-age), and a
sleeping server is an origin that is not there: a cache may serve stale then (HTTP's
stale-if-error), and the first real start refreshes every listing and announces drift. Without
this, every session of a stateless client (Claude Code 2.1 among them) would start every server
built on the python SDK, whose default hints are `ttlMs: 0` and `private`.
`cacheScope: "private"` results are stored under the client identity (eras.identity_digest) and
never served to another; a result with no cacheScope counts as private. A miss or an expired
entry is fetched again from the live server, all pages merged into one (a start when the server
sleeps). Requests carrying `inputResponses` or `requestState` never touch the cache. Concurrent
misses for one key share one fetch, and whoever waits on it is answered in the shape of its era.

Discovery answers are stored by version (and identity when private); a -32601 answers every
version (ANY_VERSION), a -32022 its own; other errors concern the request, not the server, and are
not stored. The relay's own requests borrow a real client's identity (`_start_asker`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lazyd.core import eras
from lazyd.core import jsonrpc as rpc
from lazyd.core.cache import (
    LIST_CHANGED,
    LISTING_CAPABILITY,
    LISTINGS,
    PUBLIC,
    CachedResult,
    discover_key,
    is_stateless_discovery,
    remaining_ttl_ms,
    stateless_key,
)
from lazyd.core.jsonrpc import JsonId, JsonObj, Message
from lazyd.core.relay_base import (
    ANY_VERSION,
    MAX_LISTING_PAGES,
    Action,
    Note,
    Phase,
    RelayBase,
    SnapshotChanged,
    ToClient,
    ToServer,
    discover_version_key,
)
from lazyd.core.routing import ClientId

# The version of the relay's own era probe: the first (and so far only) stateless version.
PROBE_VERSION = eras.KNOWN_STATELESS_VERSIONS[-1]


@dataclass(frozen=True)
class Asker:
    """Who a stateless request is made for: what its envelope says, and the cache keys that follow."""

    version: str
    client_info: JsonObj
    capabilities: JsonObj
    principal: str = ""
    log_level: str | None = None

    @property
    def identity(self) -> str:
        return eras.identity_digest(self.client_info, self.principal)

    @property
    def caps(self) -> str:
        return eras.capabilities_digest(self.capabilities)

    def envelope(self) -> JsonObj:
        return eras.make_envelope(self.version, self.client_info, self.capabilities, self.log_level)

    def key(self, method: str, public: bool) -> str:
        return stateless_key(method, self.version, self.caps, PUBLIC if public else self.identity)

    def as_meta(self) -> JsonObj:
        return {"clientInfo": self.client_info, "clientCapabilities": self.capabilities, "principal": self.principal}


def asker_from_params(params: JsonObj, version: str, principal: str = "") -> Asker:
    """The Asker of a handshake-era client, from its `initialize` params."""
    info, caps = params.get("clientInfo"), params.get("capabilities")
    return Asker(version, info if isinstance(info, dict) else {}, caps if isinstance(caps, dict) else {}, principal)


@dataclass
class Waiter:
    """A client request answered when a fetch completes, in the shape its era expects."""

    cid: ClientId
    client_id: JsonId
    shape: str  # "stateless": as fetched; "handshake": stateless fields removed; "initialize"
    requested: object = None  # the protocolVersion an `initialize` asked for


@dataclass
class Fetch:
    """The relay fetching one cacheable result for one Asker, page by page."""

    method: str
    asker: Asker
    why: str  # "start": refresh at a start; "changed": after a list_changed; "client": a miss
    waiters: list[Waiter] = field(default_factory=list)
    items: list[object] = field(default_factory=list)
    pages: int = 0
    first: JsonObj | None = None
    ttl: int | None = None
    private: bool = False
    serial: int = 0  # tells its pages from those of a fetch it replaced

    @property
    def key(self) -> str:
        return stateless_key(self.method, self.asker.version, self.asker.caps, self.asker.identity)


def advertised(discovery: JsonObj | None) -> list[str]:
    caps = eras.discover_capabilities(discovery)
    return [method for method, cap in LISTING_CAPABILITY.items() if cap in caps]


class CacheRelay(RelayBase):
    """The stateless cache's methods of `RelayCore` (see the module docstring)."""

    def _start_asker(self, version: str) -> Asker:
        """The identity of the relay's own requests: the client that caused the start, else the
        most recent one recorded, else lazyd itself (PROTOCOL.md §8: never invent one needlessly)."""
        for cid, msg in self.queue:
            if msg.method is not None and eras.is_stateless_request(msg.method, msg.params):
                info, caps = eras.envelope_identity(msg.params)
                if isinstance(info.get("name"), str):  # an envelope without clientInfo names no one
                    return Asker(version, info, caps, self._principal(cid))
        for cid, msg in self.queue:
            client = self.clients.get(cid)
            params: JsonObj | None = msg.params if msg.method == "initialize" else (client.params if client else None)
            if params:
                return asker_from_params(params, version, self._principal(cid))
        meta = self.snapshot.last_meta
        if meta is not None and isinstance(meta.get("clientInfo"), dict):
            recorded = meta.get("clientCapabilities")
            principal = meta.get("principal")
            return Asker(version, meta["clientInfo"], recorded if isinstance(recorded, dict) else {},
                         principal if isinstance(principal, str) else "")
        if self.snapshot.last_params is not None:
            return asker_from_params(self.snapshot.last_params, version)
        return Asker(version, dict(eras.LAZYD_CLIENT_INFO), {})

    def _principal(self, cid: ClientId) -> str:
        client = self.clients.get(cid)
        return client.principal if client is not None else ""

    def _request_asker(self, cid: ClientId, params: JsonObj) -> Asker:
        info, caps = eras.envelope_identity(params)
        return Asker(eras.request_version(params) or PROBE_VERSION, info, caps, self._principal(cid))

    def _known_discovery(self) -> JsonObj | None:
        """The live DiscoverResult, else any cached one (for versions and capabilities only)."""
        if self.discovery is not None:
            return self.discovery
        for answer in self.snapshot.discover.values():
            if is_stateless_discovery(answer.get("result")):
                result: JsonObj = answer["result"]
                return result
        return None

    def _discover(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
        if self.era_policy.setting == "handshake":
            # As a server without discovery answers: clients in `auto` mode fall back to initialize.
            text = f'Method not found: lazyd serves {self.name} in the handshake era only (era = "handshake")'
            return [ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, text), msg.id)]
        version = discover_version_key(msg.params)
        identity = self._request_asker(cid, msg.params).identity
        answer = self.snapshot.discover.get(ANY_VERSION)
        if answer is None:
            answer = self.snapshot.discover.get(discover_key(version)) or self.snapshot.discover.get(discover_key(version, identity))
        if answer is not None and not eras.is_continuation(msg.params):
            line = self._cached_answer(msg.id, answer)
            if line is not None:
                return [ToClient(cid, line, msg.id)]
        if self.phase is Phase.DOWN:
            return self._queue(cid, msg, "server/discover: not cached (or expired)")
        return self._forward(cid, msg, inspect=True, purpose=discover_key(version, identity))

    def _cached_answer(self, msg_id: JsonId, answer: JsonObj) -> bytes | None:
        """A stored answer under `msg_id`, with the ttlMs it has left; None when it expired and
        the server runs (it is asked again), the stale result with `ttlMs: 0` while it sleeps."""
        if "error" in answer:
            return rpc.dumps({"jsonrpc": "2.0", "id": msg_id, "error": answer["error"]})
        result = answer.get("result")
        if not isinstance(result, dict):
            return None
        stored = answer.get("stored_at", 0.0)
        left = remaining_ttl_ms(result, float(stored) if isinstance(stored, (int, float)) else 0.0, self.now)
        if left is None:
            return rpc.result_line(msg_id, result)
        if left <= 0 and self.phase is not Phase.DOWN:
            return None
        return rpc.result_line(msg_id, {**result, "ttlMs": left})

    def _record_discover(self, purpose: str, msg: Message) -> list[Action]:
        """Store a discovery answer: a result by version (and identity unless public), -32601 for
        every version, -32022 for its version. Other errors concern the request, not the server."""
        version, _, identity = purpose.partition("|")
        result = msg.obj.get("result")
        error = msg.obj.get("error")
        if isinstance(result, dict):
            public = result.get("cacheScope") == "public"
            if not public and not identity:
                return [Note("a private discovery answer for an unknown identity is not cached")]
            self.snapshot.discover[discover_key(version, PUBLIC if public else identity)] = {
                "result": result, "stored_at": self.now}
            if is_stateless_discovery(result):
                self.snapshot.discover.pop(ANY_VERSION, None)
            return [SnapshotChanged()]
        code = error.get("code") if isinstance(error, dict) else None
        if code == rpc.METHOD_NOT_FOUND:
            # A server without discovery answers every version the same way.
            self.snapshot.discover[version] = {"error": error}
            self.snapshot.discover[ANY_VERSION] = {"error": error}
            return [SnapshotChanged()]
        if code == eras.UNSUPPORTED_PROTOCOL_VERSION:
            self.snapshot.discover[version] = {"error": error}
            return [SnapshotChanged()]
        return [Note(f"server/discover error {code!r} not cached: it concerns the request")]

    def _lookup(self, method: str, asker: Asker) -> CachedResult | None:
        return self.snapshot.stateless.get(asker.key(method, True)) or self.snapshot.stateless.get(asker.key(method, False))

    def _not_advertised(self, method: str) -> bool:
        discovery = self._known_discovery()
        return discovery is not None and method not in advertised(discovery)

    def _can_fetch(self) -> bool:
        return self.stateless_up is True and self.phase in (Phase.REFRESH, Phase.READY)

    def _stateless_listing(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None and msg.method is not None
        if self._not_advertised(msg.method):
            return [ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"Method not found: {msg.method}"), msg.id)]
        asker = self._request_asker(cid, msg.params)
        cached = self._lookup(msg.method, asker)
        if cached is not None:
            line = self._cached_answer(msg.id, {"result": cached.result, "stored_at": cached.stored_at})
            if line is not None:
                return [ToClient(cid, line, msg.id)]
        if self._can_fetch():
            return self._fetch(msg.method, asker, "client", Waiter(cid, msg.id, "stateless"))
        return self._queue(cid, msg, f"{msg.method}: not cached for this client, or expired")

    def _fetch(self, method: str, asker: Asker, why: str, waiter: Waiter | None = None, *, again: bool = False) -> list[Action]:
        """Fetch a result for `asker`, or join the fetch already running for it; `again`: the
        running one may predate a change, so a new one replaces it (and takes over its waiters)."""
        key = stateless_key(method, asker.version, asker.caps, asker.identity)
        running = self.fetches.get(key)
        if running is not None and not again:
            if waiter is not None:
                running.waiters.append(waiter)
            return []
        fetch = Fetch(method, asker, why, [waiter] if waiter is not None else [], serial=self._take_id())
        if running is not None:
            fetch.waiters = running.waiters + fetch.waiters
            fetch.why = "start" if running.why == "start" else why  # a start still waits for it
        self.fetches[key] = fetch
        return [self._page_request(fetch, None), Note(f"fetching {method} ({why})")]

    def _page_request(self, fetch: Fetch, cursor: str | None) -> ToServer:
        params: JsonObj = {"_meta": fetch.asker.envelope()}
        if cursor is not None:
            params["cursor"] = cursor
        return self._internal(fetch.method, params, f"fetch:{fetch.serial}:{fetch.key}")

    def _fetch_answer(self, purpose: str, msg: Message) -> list[Action]:
        serial, _, key = purpose.partition(":")
        fetch = self.fetches.get(key)
        if fetch is None or str(fetch.serial) != serial:
            return [Note("a page of a replaced or finished fetch dropped")]
        result = msg.obj.get("result")
        if not isinstance(result, dict):
            del self.fetches[key]
            error = msg.obj.get("error")
            error = error if isinstance(error, dict) else {"code": rpc.INTERNAL_ERROR, "message": "lazyd: bad answer"}
            out: list[Action] = [ToClient(w.cid, rpc.dumps({"jsonrpc": "2.0", "id": w.client_id, "error": error}), w.client_id)
                                 for w in fetch.waiters if w.cid in self.clients]
            if fetch.method == "server/discover":
                out.extend(self._record_discover(discover_key(fetch.asker.version, fetch.asker.identity), msg))
            return out + self._fetch_settled(fetch)
        if fetch.method == "server/discover":
            del self.fetches[key]
            out = self._record_discover(discover_key(fetch.asker.version, fetch.asker.identity), msg)
            return out + self._answer_waiters(fetch, result) + self._fetch_settled(fetch)
        item_key = LISTINGS[fetch.method]
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
            return [self._page_request(fetch, cursor)]
        del self.fetches[key]
        merged = {k: v for k, v in fetch.first.items() if k != "nextCursor"}
        merged[item_key] = fetch.items
        if fetch.ttl is not None:
            merged["ttlMs"] = fetch.ttl
        merged["cacheScope"] = "private" if fetch.private else "public"
        old = self._lookup(fetch.method, fetch.asker)
        # One of the two keys at most: a result that changed scope must not leave its other self.
        self.snapshot.stateless.pop(fetch.asker.key(fetch.method, fetch.private), None)
        self.snapshot.store_stateless(fetch.asker.key(fetch.method, not fetch.private), merged, self.now)
        out = [SnapshotChanged(), *self._answer_waiters(fetch, merged)]
        if fetch.why == "start" and old is not None and old.result.get(item_key) != fetch.items:
            out.append(Note(f"listing drift: sending {LIST_CHANGED[fetch.method]}"))
            out.extend(self._announce_list_changed(LIST_CHANGED[fetch.method]))
        return out + self._fetch_settled(fetch)

    def _answer_waiters(self, fetch: Fetch, result: JsonObj) -> list[Action]:
        out: list[Action] = []
        for w in fetch.waiters:
            if w.cid not in self.clients:
                continue
            value: object = result
            if w.shape == "initialize":
                value = eras.initialize_result_from_discover(result, w.requested, self.name)
            elif w.shape == "handshake":
                value = eras.for_handshake_client(result)
            out.append(ToClient(w.cid, rpc.result_line(w.client_id, value), w.client_id))
        return out

    def _fetch_settled(self, fetch: Fetch) -> list[Action]:
        return self._maybe_ready() if fetch.why == "start" else []

    def waiting_count(self) -> int:
        return sum(len(f.waiters) for f in self.fetches.values())

    def _drop_waiter(self, cid: ClientId, client_id: JsonId | None = None) -> bool:
        dropped = False
        for fetch in self.fetches.values():
            keep = [w for w in fetch.waiters if not (w.cid == cid and (client_id is None or (
                w.client_id == client_id and type(w.client_id) is type(client_id))))]
            dropped = dropped or len(keep) != len(fetch.waiters)
            fetch.waiters = keep
        return dropped

    # ---- hooks the later modules define ----------------------------------------------------------

    def _maybe_ready(self) -> list[Action]:
        raise NotImplementedError  # stateless.py

    def _announce_list_changed(self, notification: str) -> list[Action]:
        raise NotImplementedError  # stateless_listen.py
