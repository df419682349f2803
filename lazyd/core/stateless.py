"""The stateless era (2026-07-28) in the relay core: era probe, ttl-aware cache, listen fan-out.

Era probe. At a start whose era is unknown (or known stateless) the relay's first line is its own
`server/discover`, with a real client's identity in the envelope. A DiscoverResult listing a
stateless version means the process speaks that era; anything else means handshake only. When a
handshake is known (a client's or the recorded `initialize` params), the replayed `initialize` is
pipelined behind the probe, and the pair of answers tells all: a DiscoverResult and an
`initialize` result mean one connection carries both eras (`mixed_connection`); a DiscoverResult
and a refused `initialize` (the python SDK's dual-era servers lock a connection to the era of its
first request) mean stateless only, and handshake-era clients are bridged (bridge.py).

Cache. `server/discover` and the four listings are answered from the snapshot while they are fresh:
a stored result is served while `ttlMs` has not run out since it was stored (with the ttlMs it has
left), `ttlMs: 0` is never served from cache, and a result without `ttlMs` gave no hint and is
kept until a change notification or the next start replaces it. `cacheScope: "private"` results
are stored under the client identity (eras.identity_digest) and never served to another. A miss
or an expired entry is fetched again from the live server, all pages merged into one, which needs a
start when the server sleeps. Requests carrying `inputResponses` or `requestState` never touch the
cache. Concurrent misses for one key share one fetch.

Listen streams: see listen.py. Everything else a stateless client sends is forwarded under a relay
id (its progress token rewritten too), and `input_required` results pass through untouched.
"""

from __future__ import annotations

import copy
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
from lazyd.core.listen import ACKNOWLEDGED, LIST_FLAGS, RESOURCE_UPDATED, covers, honored, serves_listen, uris_of
from lazyd.core.relay_base import (
    ANY_VERSION,
    MAX_LISTING_PAGES,
    Action,
    Activity,
    Note,
    Phase,
    Ready,
    RelayBase,
    SnapshotChanged,
    ToClient,
    ToServer,
    WantServer,
    discover_version_key,
)
from lazyd.core.routing import ClientId, Upstream, level_rank

# The version of the relay's own era probe: the first (and so far only) stateless version.
PROBE_VERSION = eras.KNOWN_STATELESS_VERSIONS[-1]
# Upstream listen streams the server may end in one run before the relay stops re-opening them.
MAX_LISTEN_REISSUES = 3


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


def advertised(discovery: JsonObj | None) -> list[str]:
    caps = eras.discover_capabilities(discovery)
    return [method for method, cap in LISTING_CAPABILITY.items() if cap in caps]


class StatelessRelay(RelayBase):
    """The stateless-era methods of `RelayCore` (see the module docstring)."""

    # ---- era probe -----------------------------------------------------------------------------

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

    def _send_probe(self) -> list[Action]:
        asker = self._start_asker(PROBE_VERSION)
        self._probe_asker = asker
        self._probe_sent = True
        return [self._internal("server/discover", {"_meta": asker.envelope()}, "probe"),
                Note(f"probing the protocol era with server/discover {PROBE_VERSION}")]

    def _probe_answered(self, msg: Message) -> list[Action]:
        asker = self._probe_asker or self._start_asker(PROBE_VERSION)
        out = self._record_discover(discover_key(PROBE_VERSION, asker.identity), msg)
        result = msg.obj.get("result")
        stateless = is_stateless_discovery(result) and eras.upstream_version(result) is not None
        self.stateless_up = stateless
        self.discovery = result if stateless and isinstance(result, dict) else None
        if stateless:
            out.append(Note(f"the server speaks the stateless era ({', '.join(eras.stateless_versions(result))})"))
            if self._init_refused is not None:
                self._init_refused = None
                out.extend(self._set_mixed(False))
                out.extend(self._stateless_start())
            elif self.phase is Phase.HANDSHAKE:
                pass  # the replayed initialize's answer decides whether one connection does both
            elif self.instance is not None:
                out.extend(self._set_mixed(True))
                out.extend(self._sync_listen())
            else:
                out.extend(self._stateless_start())
            return out
        out.append(Note("the server does not speak the stateless era: handshake only"))
        refused = self._init_refused
        if refused is not None:
            self._init_refused = None
            reason = "the server refused the replayed initialize"
            if isinstance(refused.get("message"), str):
                reason += f": {refused['message'][:200]}"
            return [*out, *self._fail_queue(f"lazyd: {reason}"), *self._abort(reason)]
        out.extend(self._refuse_queued_stateless())
        if self.instance is None and self.phase is Phase.PREINIT:
            params = self._replay_params()
            if params is not None:
                out.extend(self._send_initialize(params))
        return out

    def _initialize_refused(self, error: JsonObj) -> list[Action] | None:
        """The replayed initialize was refused: the stateless era's reading of that, or None when
        it is just a failed start."""
        if self.stateless_up is True:
            self.instance = None
            out = [Note("the server refused initialize after discovery: handshake-era clients are bridged"),
                   *self._set_mixed(False)]
            if not self._stateless_starting and self.phase is not Phase.READY:
                out.extend(self._stateless_start())
            return out
        if self._probe_sent and self.stateless_up is None:
            self._init_refused = error
            self.instance = None
            self.phase = Phase.PREINIT
            return [Note("initialize refused while the era probe is pending: its answer decides")]
        data = error.get("data")
        if not self._probe_sent and error.get("code") == eras.UNSUPPORTED_PROTOCOL_VERSION and eras.stateless_versions(
            {"supportedVersions": data.get("supported") if isinstance(data, dict) else None}
        ):
            # -32022 naming stateless versions is itself stateless evidence (the SDK's own rule).
            self._init_refused = error
            self.instance = None
            self.phase = Phase.PREINIT
            return self._send_probe()
        return None

    def _set_mixed(self, value: bool) -> list[Action]:
        if self.snapshot.mixed_connection is value:
            return []
        self.snapshot.mixed_connection = value
        return [SnapshotChanged()]

    def _refuse_queued_stateless(self) -> list[Action]:
        out: list[Action] = []
        waiting, self.queue = self.queue, []
        for cid, msg in waiting:
            line = self._stateless_refusal(msg) if msg.method is not None and eras.is_stateless_request(msg.method, msg.params) else None
            if line is not None and msg.id is not None:
                out.append(ToClient(cid, line, msg.id))
            else:
                self.queue.append((cid, msg))
        return out

    def _stateless_start(self) -> list[Action]:
        """The process speaks the stateless era only: open the listen stream, refresh the listings
        under the identity of whoever caused the start, then forward what waited."""
        self.instance = None
        self.phase = Phase.REFRESH
        self._stateless_starting = True
        version = eras.upstream_version(self.discovery) or PROBE_VERSION
        asker = self._start_asker(version)
        out: list[Action] = [*self._sync_listen()]
        for method in advertised(self.discovery):
            out.extend(self._fetch(method, asker, "start"))
        return out + self._maybe_ready()

    def _maybe_ready(self) -> list[Action]:
        """A stateless start is complete once its listings are fetched and its listen stream is
        acknowledged: a change made by a request forwarded after that cannot go unnoticed."""
        if not self._stateless_starting or self.hub.pending is not None:
            return []
        if any(f.why == "start" for f in self.fetches.values()):
            return []
        return self._stateless_ready()

    def _stateless_ready(self) -> list[Action]:
        self._stateless_starting = False
        self.phase = Phase.READY
        out: list[Action] = [Ready()]
        waiting, self.queue = self.queue, []
        for cid, msg in waiting:
            if cid in self.clients and msg.id is not None:
                out.extend(self._client_request(cid, msg))
        return out

    # ---- stateless client requests -------------------------------------------------------------

    def _stateless_request(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.method is not None and msg.id is not None
        method = msg.method
        out = self._remember_asker(cid, msg.params)
        if method == "server/discover":
            return out + self._discover(cid, msg)
        refusal = self._stateless_refusal(msg)
        if refusal is not None:
            return [*out, ToClient(cid, refusal, msg.id), Note(f"client {cid} {method}: protocol version refused")]
        if method in eras.REMOVED_IN_STATELESS:
            return [*out, ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, "Method not found", method), msg.id)]
        if method in LISTINGS and not isinstance(msg.params.get("cursor"), str) and not eras.is_continuation(msg.params):
            return out + self._stateless_listing(cid, msg)
        if method == "subscriptions/listen":
            return out + self._listen(cid, msg)
        if self.phase is not Phase.READY or self.stateless_up is not True:
            return out + self._queue(cid, msg, "needs the server")
        return out + self._forward(cid, msg, log_level=eras.log_level_of(msg.params))

    def _remember_asker(self, cid: ClientId, params: JsonObj) -> list[Action]:
        info, caps = eras.envelope_identity(params)
        meta = {"clientInfo": info, "clientCapabilities": caps, "principal": self._principal(cid)}
        if not info or self.snapshot.last_meta == meta:
            return []
        first = self.snapshot.last_meta is None
        self.snapshot.last_meta = meta
        # Saved with the next change that is saved anyway: clients taking turns must not cost a
        # write each (only the very first identity is worth one).
        return [SnapshotChanged()] if first else []

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

    def _handshake_versions(self) -> list[str]:
        versions = {e.result.get("protocolVersion") for e in self.snapshot.entries.values()}
        if self.instance is not None:
            versions.add(self.instance.result.get("protocolVersion"))
        known = sorted(v for v in versions if isinstance(v, str))
        return known or list(eras.HANDSHAKE_VERSIONS)

    def _stateless_refusal(self, msg: Message) -> bytes | None:
        """-32022 for a stateless request this server cannot take, decided without waking it."""
        assert msg.id is not None
        version = eras.request_version(msg.params)
        if self.stateless_up is False or (self.phase is Phase.DOWN and self.snapshot.era() == "handshake"):
            return eras.unsupported_version_line(
                msg.id, version, self._handshake_versions(),
                f"lazyd: server {self.name} speaks only the handshake era (initialize), not protocol {version}")
        listed = eras.stateless_versions(self._known_discovery())
        if listed and version not in listed:
            return eras.unsupported_version_line(msg.id, version, listed,
                                                 f"lazyd: server {self.name} does not support protocol {version}")
        return None

    # ---- discovery -----------------------------------------------------------------------------

    def _discover(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.id is not None
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
        """A stored answer under `msg_id`, with the ttlMs it has left; None when it expired."""
        if "error" in answer:
            return rpc.dumps({"jsonrpc": "2.0", "id": msg_id, "error": answer["error"]})
        result = answer.get("result")
        if not isinstance(result, dict):
            return None
        stored = answer.get("stored_at", 0.0)
        left = remaining_ttl_ms(result, float(stored) if isinstance(stored, (int, float)) else 0.0, self.clock())
        if left is None:
            return rpc.result_line(msg_id, result)
        if left <= 0:
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
            self.snapshot.discover[discover_key(version, PUBLIC if public or not identity else identity)] = {
                "result": result, "stored_at": self.clock()}
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

    # ---- listings ------------------------------------------------------------------------------

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

    def _fetch(self, method: str, asker: Asker, why: str, waiter: Waiter | None = None) -> list[Action]:
        key = stateless_key(method, asker.version, asker.caps, asker.identity)
        running = self.fetches.get(key)
        if running is not None:
            if waiter is not None:
                running.waiters.append(waiter)
            return []
        self.fetches[key] = Fetch(method, asker, why, [waiter] if waiter is not None else [])
        return [self._internal(method, {"_meta": asker.envelope()}, f"fetch:{key}"), Note(f"fetching {method} ({why})")]

    def _fetch_answer(self, key: str, msg: Message) -> list[Action]:
        fetch = self.fetches.get(key)
        if fetch is None:
            return []
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
            return [self._internal(fetch.method, {"_meta": fetch.asker.envelope(), "cursor": cursor}, f"fetch:{key}")]
        del self.fetches[key]
        merged = {k: v for k, v in fetch.first.items() if k != "nextCursor"}
        merged[item_key] = fetch.items
        if fetch.ttl is not None:
            merged["ttlMs"] = fetch.ttl
        merged["cacheScope"] = "private" if fetch.private else "public"
        old = self._lookup(fetch.method, fetch.asker)
        # One of the two keys at most: a result that changed scope must not leave its other self.
        self.snapshot.stateless.pop(fetch.asker.key(fetch.method, fetch.private), None)
        self.snapshot.store_stateless(fetch.asker.key(fetch.method, not fetch.private), merged, self.clock())
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

    # ---- listen streams ------------------------------------------------------------------------

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
                    out.extend(self._fetch(method, asker, "changed"))
        return out

    def _stateless_log(self, msg: Message) -> list[Action]:
        """A stateless server logs only for requests that opted in: the clients that did get it."""
        rank = level_rank(msg.params.get("level"))
        targets = {cid for cid, level in self.routes.levels.items() if rank >= level_rank(level)}
        targets |= {up.cid for up in self.routes.upstream.values()
                    if up.cid is not None and up.log_level is not None and rank >= level_rank(up.log_level)}
        line = rpc.dumps(msg.obj)
        return [ToClient(cid, line) for cid in sorted(targets) if cid in self.clients]

    # ---- hooks from relay.py -------------------------------------------------------------------

    def _replay_params(self) -> JsonObj | None:
        raise NotImplementedError

    def _send_initialize(self, params: JsonObj) -> list[Action]:
        raise NotImplementedError

    def _abort(self, reason: str) -> list[Action]:
        raise NotImplementedError

    def _probe_unanswered(self) -> list[Action]:
        """The handshake completed before the era probe was answered: handshake era only (the
        issue's "an error or timeout"), recorded as a -32601 so clients' probes fall back at once."""
        if not self._probe_sent or self.stateless_up is not None:
            return []
        self.stateless_up = False
        error = {"code": rpc.METHOD_NOT_FOUND, "message": "lazyd: the server did not answer server/discover before its handshake"}
        self.snapshot.discover.setdefault(ANY_VERSION, {"error": error})
        return [SnapshotChanged(), Note("the era probe is unanswered after the handshake: handshake era only"),
                *self._refuse_queued_stateless()]

    def _stateless_gone(self) -> list[Action]:
        """The process ended: whoever waited on a fetch gets an error; client streams stay."""
        out: list[Action] = []
        for fetch in self.fetches.values():
            for w in fetch.waiters:
                if w.cid in self.clients:
                    line = rpc.error_line(w.client_id, rpc.SERVER_UNAVAILABLE, f"lazyd: server {self.name} stopped before answering")
                    out.append(ToClient(w.cid, line, w.client_id))
        self.fetches.clear()
        self.hub.process_gone()
        self.stateless_up = None
        self.discovery = None
        self._probe_sent = False
        self._probe_asker = None
        self._init_refused = None
        self._stateless_starting = False
        return out
