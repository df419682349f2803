"""The stateless-era cache of the relay core: `server/discover` and the four listings.

A result is served while its `ttlMs` has not run out (with what is left; no `ttlMs`: until a
change notification or the next start). An expired one is fetched again while the server runs;
while it sleeps, a session start is answered with it marked `ttlMs: 0` rather than starting the
server: `ttlMs` is a hint like HTTP's max-age, and a cache may serve stale when the origin is not
there (stale-if-error). Otherwise every session of a stateless client would start every python
SDK server (its default hints: `ttlMs: 0`, `private`). Private results (and those without a
cacheScope) stay with their client identity (eras.identity_digest); misses go to the listing
engine (listings.py); continuations (`inputResponses`, `requestState`) never touch the cache.

Discovery answers are stored by version (and identity when private); -32601 answers every version
(ANY_VERSION), -32022 its own, other errors are not stored. The relay's own requests borrow a real
client's identity (`start_asker`). Time is the event's wall-clock `now`, never read here.
"""

from __future__ import annotations

from lazyd.core.eras import versions as eras
from lazyd.core.relay.handshake_defaults import LAZYD_CLIENT_INFO
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.asker import PROBE_VERSION, Asker, asker_from_params
from lazyd.core.cache import (ANY_VERSION, LIST_CHANGED, LISTING_CAPABILITY, LISTINGS, PUBLIC, CachedResult,
                              discover_key, is_stateless_discovery, remaining_ttl_ms)
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Message
from lazyd.core.relay.listings import Fetched, Waiter, drift
from lazyd.core.relay.upstream import discover_version_key, forward, internal
from lazyd.core.relay.actions import Action, Note, Phase, SnapshotChanged, ToClient
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import ClientId


def advertised(discovery: JsonObj | None) -> list[str]:
    caps = eras.discover_capabilities(discovery)
    return [method for method, cap in LISTING_CAPABILITY.items() if cap in caps]


class StatelessCache:
    """The stateless cache's answers and records (see the module docstring)."""

    def __init__(self, shared: RelayShared) -> None:
        self.shared = shared

    # ---- whose identity --------------------------------------------------------------------------

    def start_asker(self, version: str) -> Asker:
        """The identity of the relay's own requests: the client that caused the start, else the
        most recent one recorded, else lazyd itself."""
        for cid, msg in self.shared.queue:
            if msg.method is not None and eras.is_stateless_request(msg.method, msg.params):
                info, caps = eras.envelope_identity(msg.params)
                if isinstance(info.get("name"), str):  # an envelope without clientInfo names no one
                    return Asker(version, info, caps)
        for cid, msg in self.shared.queue:
            client = self.shared.clients.get(cid)
            params: JsonObj | None = msg.params if msg.method == "initialize" else (client.params if client else None)
            if params:
                return asker_from_params(params, version)
        meta = self.shared.snapshot.last_meta
        if meta is not None and isinstance(meta.get("clientInfo"), dict):
            recorded = meta.get("clientCapabilities")
            return Asker(version, meta["clientInfo"], recorded if isinstance(recorded, dict) else {})
        if self.shared.snapshot.last_params is not None:
            return asker_from_params(self.shared.snapshot.last_params, version)
        return Asker(version, dict(LAZYD_CLIENT_INFO), {})

    def probe(self, purpose: str, why: str) -> list[Action]:
        """The relay's own `server/discover` (the era probe), under a real client's identity."""
        asker = self.shared.era.probe_asker = self.start_asker(PROBE_VERSION)
        return [internal(self.shared.routes, "server/discover", {"_meta": asker.envelope()}, purpose), Note(why)]

    def record_probe(self, response: JsonObj) -> list[Action]:
        """Store the answer to the era probe under the identity it carried."""
        asker = self.shared.era.probe_asker or self.start_asker(PROBE_VERSION)
        return self.record_discover(discover_key(PROBE_VERSION, asker.identity), response)

    def request_asker(self, cid: ClientId, params: JsonObj) -> Asker:
        info, caps = eras.envelope_identity(params)
        return Asker(eras.request_version(params) or PROBE_VERSION, info, caps)

    def discover_purpose(self, cid: ClientId, msg: Message) -> str:
        """What a client's `server/discover` is recorded under: its version and identity."""
        return f"{discover_version_key(msg.params)}|{self.request_asker(cid, msg.params).identity}"

    # ---- discovery -------------------------------------------------------------------------------

    def known_discovery(self) -> JsonObj | None:
        """The live DiscoverResult, else any cached one (for versions and capabilities only)."""
        if self.shared.era.discovery is not None:
            return self.shared.era.discovery
        for answer in self.shared.snapshot.discover.values():
            if is_stateless_discovery(answer.get("result")):
                result: JsonObj = answer["result"]
                return result
        return None

    def discover(self, cid: ClientId, msg: Message) -> list[Action]:
        """A client's `server/discover`, in either era: from the cache while fresh, else asked."""
        assert msg.id is not None
        if self.shared.era.setting == "handshake":
            # As a server without discovery answers: clients in `auto` mode fall back to initialize.
            text = f'Method not found: lazyd serves {self.shared.name} in the handshake era only (era = "handshake")'
            return [ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, text), msg.id)]
        version = discover_version_key(msg.params)
        identity = self.request_asker(cid, msg.params).identity
        answer = self.shared.snapshot.discover.get(ANY_VERSION)
        if answer is None:
            discover = self.shared.snapshot.discover
            answer = discover.get(discover_key(version)) or discover.get(discover_key(version, identity))
        if answer is not None and not eras.is_continuation(msg.params):
            line = self.cached_answer(msg.id, answer)
            if line is not None:
                return [ToClient(cid, line, msg.id)]
        if self.shared.phase is Phase.DOWN:
            return self.shared.queue.add(cid, msg, "server/discover: not cached (or expired)")
        return forward(self.shared.routes, cid, msg, inspect=True, purpose=discover_key(version, identity))

    def cached_answer(self, msg_id: JsonId, answer: JsonObj) -> bytes | None:
        """A stored answer under `msg_id`, with the ttlMs it has left; None when it expired and
        the server runs (it is asked again), the stale result with `ttlMs: 0` while it sleeps."""
        if "error" in answer:
            return rpc.dumps({"jsonrpc": "2.0", "id": msg_id, "error": answer["error"]})
        result = answer.get("result")
        if not isinstance(result, dict):
            return None
        stored = answer.get("stored_at", 0.0)
        left = remaining_ttl_ms(result, float(stored) if isinstance(stored, (int, float)) else 0.0, self.shared.now)
        if left is None:
            return rpc.result_line(msg_id, result)
        if left <= 0 and self.shared.phase is not Phase.DOWN:
            return None
        return rpc.result_line(msg_id, {**result, "ttlMs": left})

    def record_discover(self, purpose: str, response: JsonObj) -> list[Action]:
        """Store a discovery answer as the module docstring says."""
        version, _, identity = purpose.partition("|")
        result = response.get("result")
        error = response.get("error")
        if isinstance(result, dict):
            public = result.get("cacheScope") == "public"
            if not public and not identity:
                return [Note("a private discovery answer for an unknown identity is not cached")]
            self.shared.snapshot.discover[discover_key(version, PUBLIC if public else identity)] = {
                "result": result, "stored_at": self.shared.now}
            if is_stateless_discovery(result):
                self.shared.snapshot.discover.pop(ANY_VERSION, None)
            return [SnapshotChanged()]
        code = error.get("code") if isinstance(error, dict) else None
        if code == rpc.METHOD_NOT_FOUND:
            # A server without discovery answers every version the same way.
            self.shared.snapshot.discover[version] = {"error": error}
            self.shared.snapshot.discover[ANY_VERSION] = {"error": error}
            return [SnapshotChanged()]
        if code == eras.UNSUPPORTED_PROTOCOL_VERSION:
            self.shared.snapshot.discover[version] = {"error": error}
            return [SnapshotChanged()]
        return [Note(f"server/discover error {code!r} not cached: it concerns the request")]

    # ---- listings --------------------------------------------------------------------------------

    def lookup(self, method: str, asker: Asker) -> CachedResult | None:
        return self.shared.snapshot.stateless.get(asker.key(method, True)) or self.shared.snapshot.stateless.get(asker.key(method, False))

    def not_advertised(self, method: str) -> bool:
        discovery = self.known_discovery()
        return discovery is not None and method not in advertised(discovery)

    def can_fetch(self) -> bool:
        return self.shared.era.can_fetch(self.shared.phase)

    def listing(self, cid: ClientId, msg: Message, asker: Asker | None = None) -> list[Action]:
        """A listing without cursor or continuation: a stateless client's (`asker` None: its
        envelope's, served while fresh), or a bridged handshake-era client's (whatever its age,
        without the stateless-only fields)."""
        assert msg.id is not None and msg.method is not None
        if self.not_advertised(msg.method):
            return [ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"Method not found: {msg.method}"), msg.id)]
        shape = "stateless" if asker is None else "handshake"
        asker = asker or self.request_asker(cid, msg.params)
        cached = self.lookup(msg.method, asker)
        if cached is not None and shape == "handshake":
            return [ToClient(cid, rpc.result_line(msg.id, eras.for_handshake_client(cached.result)), msg.id)]
        if cached is not None:
            line = self.cached_answer(msg.id, {"result": cached.result, "stored_at": cached.stored_at})
            if line is not None:
                return [ToClient(cid, line, msg.id)]
        if self.can_fetch():
            return self.fetch(msg.method, asker, "client", Waiter(cid, msg.id, shape))
        return self.shared.queue.add(cid, msg, f"{msg.method}: not cached for this client, or expired")

    def fetch(self, method: str, asker: Asker, why: str, waiter: Waiter | None = None, *, again: bool = False) -> list[Action]:
        """Fetch a result for `asker`, or join the fetch already running for it; `again`: the
        running one may predate a change, so a new one replaces it (and takes over its waiters)."""
        request = self.shared.listings.start(method, asker.key(method, False), why, asker, waiter, again=again)
        return [] if request is None else [request, Note(f"fetching {method} ({why})")]

    def fetched(self, done: Fetched) -> tuple[list[Action], str | None]:
        """Store a completed fetch and answer its waiters; also the `list_changed` to announce."""
        fetch = done.fetch
        assert fetch.asker is not None
        asker = fetch.asker
        if done.result is None:
            error = done.error if isinstance(done.error, dict) else {"code": rpc.INTERNAL_ERROR, "message": "lazyd: bad answer"}
            out: list[Action] = [ToClient(w.cid, rpc.dumps({"jsonrpc": "2.0", "id": w.client_id, "error": error}), w.client_id)
                                 for w in fetch.waiters if w.cid in self.shared.clients]
            if fetch.method == "server/discover":
                out.extend(self.record_discover(discover_key(asker.version, asker.identity), {"error": done.error}))
            return out, None
        if fetch.method == "server/discover":
            out = self.record_discover(discover_key(asker.version, asker.identity), {"result": done.result})
            return out + self.answer_waiters(done), None
        item_key = LISTINGS[fetch.method]
        old = self.lookup(fetch.method, asker)
        # One of the two keys at most: a result that changed scope must not leave its other self.
        self.shared.snapshot.stateless.pop(asker.key(fetch.method, fetch.private), None)
        self.shared.snapshot.store_stateless(asker.key(fetch.method, not fetch.private), done.result, self.shared.now)
        out = [SnapshotChanged(), *self.answer_waiters(done)]
        served = {fetch.method: old.result.get(item_key)} if old is not None else None
        drifted = fetch.why == "start" and bool(drift(served, {fetch.method: fetch.items}))
        return out, LIST_CHANGED[fetch.method] if drifted else None

    def answer_waiters(self, done: Fetched) -> list[Action]:
        assert done.result is not None
        out: list[Action] = []
        for w in done.fetch.waiters:
            if w.cid not in self.shared.clients:
                continue
            value: object = done.result
            if w.shape == "initialize":
                value = eras.initialize_result_from_discover(done.result, w.requested, self.shared.name)
            elif w.shape == "handshake":
                value = eras.for_handshake_client(done.result)
            out.append(ToClient(w.cid, rpc.result_line(w.client_id, value), w.client_id))
        return out
