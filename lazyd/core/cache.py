"""The snapshot model: what lazyd remembers about one server identity between runs.

Per *handshake key* (the protocol version asked plus a digest of the declared capabilities): the
real client's `initialize` params, the server's result and every advertised listing, pages merged.
Listings may depend on any part of the capabilities (docs/relay.md), so they are served only for
the exact key (`entry_for`); the `initialize` result, which no server seen varies by client, for
any handshake of the version (`entry_same_version`). Also the `server/discover` answers by probe
version (-32601 included), stateless-era results per *stateless key* (method, version, digest, and
the client identity for `cacheScope: "private"`) with their wall-clock store time for `ttlMs`, and
what was learned of the server's eras. Pure data: the daemon's store writes it as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lazyd.core import state_codec as sc
from lazyd.core.eras.versions import capabilities_digest, is_stateless_version
from lazyd.core.relay.jsonrpc import JsonObj

SNAPSHOT_FORMAT = 1
# Private results are kept per client identity: bound how many a snapshot holds (oldest go first).
MAX_STATELESS_ENTRIES = 256
# Key part of a result every client identity may be served (`cacheScope: "public"`).
PUBLIC = "*"
# The discovery key of a -32601: it answers every version.
ANY_VERSION = "*"

# The four listings of the handshake era and the key of their items in a result.
LISTINGS: dict[str, str] = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}
# Which server capability advertises each listing.
LISTING_CAPABILITY: dict[str, str] = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resources",
}
LIST_CHANGED: dict[str, str] = {
    "tools/list": "notifications/tools/list_changed",
    "prompts/list": "notifications/prompts/list_changed",
    "resources/list": "notifications/resources/list_changed",
    "resources/templates/list": "notifications/resources/list_changed",
}


def handshake_key(params: JsonObj) -> str:
    """Requested version + capabilities digest; not clientInfo (a client upgrade must not miss)."""
    caps = params.get("capabilities")
    return f"{params.get('protocolVersion')}|{capabilities_digest(caps if isinstance(caps, dict) else {})}"


@dataclass
class Listing:
    """One listing, all pages merged; or the error the server gave for it."""

    items: list[Any] | None = None
    error: JsonObj | None = None

    def as_result(self, item_key: str) -> JsonObj:
        return {item_key: list(self.items or [])}

    def __post_init__(self) -> None:
        if (self.items is None) == (self.error is None):
            raise ValueError("a listing holds either items or an error")


@dataclass
class HandshakeEntry:
    params: JsonObj
    result: JsonObj
    listings: dict[str, Listing] = field(default_factory=dict)

    def advertised_listings(self) -> list[str]:
        """The listing methods the server's capabilities advertise."""
        caps = self.result.get("capabilities")
        caps = caps if isinstance(caps, dict) else {}
        return [method for method, cap in LISTING_CAPABILITY.items() if cap in caps]

    def complete(self) -> bool:
        return all(method in self.listings for method in self.advertised_listings())

    def __post_init__(self) -> None:
        # A listing of a method lazyd does not know is nothing it could serve (a file of a later version).
        self.listings = {m: listing for m, listing in self.listings.items() if m in LISTINGS}


def stateless_key(method: str, version: str, caps_digest: str, identity: str = PUBLIC) -> str:
    return f"{method}|{version}|{caps_digest}|{identity}"


def discover_key(version: str, identity: str = PUBLIC) -> str:
    """Key of a discovery answer: the probe's version, plus the identity for a private result."""
    return version if identity == PUBLIC else f"{version}|{identity}"


def remaining_ttl_ms(result: object, stored_at: float, now: float) -> int | None:
    """How long a stored stateless result stays fresh (ms, 0 = stale); None: no ttlMs, kept until
    a change notification or the next start replaces it."""
    ttl = result.get("ttlMs") if isinstance(result, dict) else None
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        return None
    left = stored_at * 1000.0 + ttl - now * 1000.0
    return max(0, int(left))


@dataclass
class CachedResult:
    """One stateless-era result (all pages merged for a listing) and when it was stored."""

    result: JsonObj
    stored_at: float  # wall-clock seconds: ttlMs must hold across daemon restarts


@dataclass
class Snapshot:
    """Everything cached for one server identity."""

    entries: dict[str, HandshakeEntry] = field(default_factory=dict)
    # server/discover answers by the protocol version in the probe's _meta (see discover_key):
    # {"result": …} or {"error": …}, plus "stored_at" (wall-clock seconds) for a result's ttlMs.
    discover: dict[str, JsonObj] = field(default_factory=dict)
    # The most recent real client's initialize params: what a start with no client present replays.
    last_params: JsonObj | None = None
    updated_at: float = 0.0  # wall-clock seconds, for `lazyctl status` cache age only
    # Stateless-era results by stateless_key.
    stateless: dict[str, CachedResult] = field(default_factory=dict)
    # The identity the relay's own stateless requests borrow when no client is waiting: the most
    # recent real client's {"clientInfo", "clientCapabilities"}.
    last_meta: JsonObj | None = None
    # Whether a connection that answered server/discover also accepted initialize (None: unknown).
    mixed_connection: bool | None = None
    # Whether `initialize` as a connection's first request was accepted (None: never tried; False:
    # the server speaks only the stateless era). See lazyd/core/eras/choice.py.
    handshake_first: bool | None = None

    def __post_init__(self) -> None:
        if not all("result" in answer or "error" in answer for answer in self.discover.values()):
            raise ValueError("a discover answer holds neither a result nor an error")

    def era(self) -> str | None:
        """"stateless" (discovery listed one), "handshake" (another answer), None (never probed)."""
        if not self.discover:
            return None
        for answer in self.discover.values():
            if is_stateless_discovery(answer.get("result")):
                return "stateless"
        return "handshake"

    def discovery_result(self, version: str | None = None, identity: str = PUBLIC) -> tuple[JsonObj, float] | None:
        """A cached DiscoverResult (and when it was stored) a client of `identity` may be served:
        for `version` if given, else for any version; public before private."""
        keys = [discover_key(version), discover_key(version, identity)] if version is not None else list(self.discover)
        for key in keys:
            answer = self.discover.get(key)
            if answer is None or not isinstance(answer.get("result"), dict):
                continue
            if version is None and "|" in key and not key.endswith(f"|{identity}"):
                continue  # another identity's private answer
            stored = answer.get("stored_at", 0.0)
            return answer["result"], float(stored) if isinstance(stored, (int, float)) else 0.0
        return None

    def store_stateless(self, key: str, result: JsonObj, now: float) -> None:
        self.stateless.pop(key, None)
        self.stateless[key] = CachedResult(result, now)
        while len(self.stateless) > MAX_STATELESS_ENTRIES:
            del self.stateless[min(self.stateless, key=lambda k: self.stateless[k].stored_at)]

    def forget_stateless(self, method: str) -> None:
        """Drop every stored result of `method` (the server announced that its list changed)."""
        for key in [k for k in self.stateless if k.split("|", 1)[0] == method]:
            del self.stateless[key]

    def merge(self, other: Snapshot) -> None:
        """Take everything `other` (a `lazyctl check` run) learned, keeping what it did not see."""
        self.entries.update(other.entries)
        self.discover.update(other.discover)
        if any(is_stateless_discovery(a.get("result")) for a in other.discover.values()):
            # The server answers discovery now: an older -32601 would contradict it.
            self.discover.pop(ANY_VERSION, None)
        elif ANY_VERSION in other.discover:
            for key in [k for k in self.discover if k != ANY_VERSION]:
                del self.discover[key]
        for key, cached in other.stateless.items():
            self.store_stateless(key, cached.result, cached.stored_at)
        if other.mixed_connection is not None:
            self.mixed_connection = other.mixed_connection
        if other.handshake_first is not None:
            self.handshake_first = other.handshake_first
        self.last_meta = self.last_meta or other.last_meta
        self.last_params = self.last_params or other.last_params

    def entry_for(self, params: JsonObj) -> HandshakeEntry | None:
        return self.entries.get(handshake_key(params))

    def entry_same_version(self, params: JsonObj) -> HandshakeEntry | None:
        """What `initialize` may be answered from: the exact key, else the latest entry asked at
        this version, else the latest the server answered with it."""
        exact = self.entry_for(params)
        if exact is not None:
            return exact
        version = params.get("protocolVersion")
        entries = list(self.entries.values())[::-1]  # latest stored first
        for entry in entries:
            if entry.params.get("protocolVersion") == version:
                return entry
        for entry in entries:
            if entry.result.get("protocolVersion") == version:
                return entry
        return None

    def to_json(self) -> JsonObj:
        return {"format": SNAPSHOT_FORMAT, **sc.dump(self)}

    @classmethod
    def from_json(cls, obj: Any) -> Snapshot:
        """Rebuild from stored JSON; ValueError for anything unexpected (the file is ignored)."""
        if not isinstance(obj, dict) or obj.get("format") != SNAPSHOT_FORMAT:
            raise ValueError("unknown snapshot format")
        snapshot: Snapshot = sc.load(Snapshot, {k: v for k, v in obj.items() if k != "format"}, "snapshot")
        return snapshot

    def listing_counts(self) -> dict[str, int]:
        """Item counts of the most recently used entry's listings, for status output."""
        entry = self.entry_for(self.last_params) if self.last_params else None
        if entry is None and self.entries:
            entry = next(iter(self.entries.values()))
        if entry is None:
            return self._stateless_counts()
        return {LISTINGS[m]: len(l.items or []) for m, l in entry.listings.items() if l.error is None}

    def _stateless_counts(self) -> dict[str, int]:
        """Item counts of the most recently stored stateless listings (a stateless-only server)."""
        counts: dict[str, tuple[float, int]] = {}
        for key, cached in self.stateless.items():
            method = key.split("|", 1)[0]
            items = cached.result.get(LISTINGS.get(method, ""))
            if method in LISTINGS and isinstance(items, list):
                if method not in counts or counts[method][0] <= cached.stored_at:
                    counts[method] = (cached.stored_at, len(items))
        return {LISTINGS[m]: n for m, (_, n) in counts.items()}


def is_stateless_discovery(result: object) -> bool:
    """Whether a DiscoverResult lists a stateless-era version."""
    if not isinstance(result, dict):
        return False
    versions = result.get("supportedVersions")
    return isinstance(versions, list) and any(is_stateless_version(v) for v in versions)
