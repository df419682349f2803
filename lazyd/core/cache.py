"""The snapshot model: what lazyd remembers about one server identity between runs.

A snapshot holds, per *handshake key* (the protocol version a client asked for plus a hash of the
capabilities it declared), the `initialize` params of the real client that produced it, the server's
`initialize` result, and every listing the server advertised, all pages merged into one list. It also
holds the `server/discover` answers keyed by the protocol version in the probe's `_meta` (an error
such as -32601 is an answer too: it is what makes a handshake-era server's discovery probe cheap).

Why the capability hash is in the key: listings may depend on what the client declared
(server-everything adds `trigger-sampling-request` only for clients that declare `sampling`), and a
client that ignores `list_changed` (Claude Code) must see the full, correct listing at its first
`tools/list`. A miss therefore starts the server rather than guessing from another key.

This module is pure data: the daemon's store turns it into JSON files and back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from lazyd.core.jsonrpc import JsonObj

SNAPSHOT_FORMAT = 1

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


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def handshake_key(params: JsonObj) -> str:
    """The cache key of a client's `initialize` params: requested version + capabilities digest.

    clientInfo is deliberately left out: a client upgrade must not make every cache miss.
    surrogatepass: a lone surrogate from a JSON escape must hash, not raise (valid text hashes as before).
    """
    version = params.get("protocolVersion")
    caps = params.get("capabilities")
    text = canonical(caps if isinstance(caps, dict) else {})
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{version}|{digest}"


@dataclass
class Listing:
    """One listing, all pages merged; or the error the server gave for it."""

    items: list[Any] | None = None
    error: JsonObj | None = None

    def as_result(self, item_key: str) -> JsonObj:
        return {item_key: list(self.items or [])}

    def to_json(self) -> JsonObj:
        return {"items": self.items} if self.error is None else {"error": self.error}

    @classmethod
    def from_json(cls, obj: Any) -> Listing:
        if not isinstance(obj, dict):
            raise ValueError("listing is not an object")
        if isinstance(obj.get("error"), dict):
            return cls(error=obj["error"])
        items = obj.get("items")
        if not isinstance(items, list):
            raise ValueError("listing items are not a list")
        return cls(items=items)


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

    def to_json(self) -> JsonObj:
        return {
            "params": self.params,
            "result": self.result,
            "listings": {m: listing.to_json() for m, listing in self.listings.items()},
        }

    @classmethod
    def from_json(cls, obj: Any) -> HandshakeEntry:
        if not isinstance(obj, dict):
            raise ValueError("entry is not an object")
        params, result, listings = obj.get("params"), obj.get("result"), obj.get("listings", {})
        if not isinstance(params, dict) or not isinstance(result, dict) or not isinstance(listings, dict):
            raise ValueError("entry fields have the wrong types")
        return cls(
            params=params,
            result=result,
            listings={str(m): Listing.from_json(v) for m, v in listings.items() if m in LISTINGS},
        )


@dataclass
class Snapshot:
    """Everything cached for one server identity."""

    entries: dict[str, HandshakeEntry] = field(default_factory=dict)
    # server/discover answers by the protocol version in the probe's _meta: {"result": …} or {"error": …}
    discover: dict[str, JsonObj] = field(default_factory=dict)
    # The most recent real client's initialize params: what a start with no client present replays.
    last_params: JsonObj | None = None
    updated_at: float = 0.0  # wall-clock seconds, for `lazyctl status` cache age only

    def entry_for(self, params: JsonObj) -> HandshakeEntry | None:
        return self.entries.get(handshake_key(params))

    def entry_same_version(self, params: JsonObj) -> HandshakeEntry | None:
        """An entry for the same requested version, whatever the capabilities (initialize only)."""
        exact = self.entry_for(params)
        if exact is not None:
            return exact
        version = params.get("protocolVersion")
        for entry in self.entries.values():
            if entry.params.get("protocolVersion") == version:
                return entry
        return None

    def to_json(self) -> JsonObj:
        return {
            "format": SNAPSHOT_FORMAT,
            "entries": {k: e.to_json() for k, e in self.entries.items()},
            "discover": self.discover,
            "last_params": self.last_params,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Snapshot:
        """Rebuild from stored JSON; raises ValueError on anything unexpected (the store then
        ignores the file and the snapshot is rebuilt from the live server)."""
        if not isinstance(obj, dict) or obj.get("format") != SNAPSHOT_FORMAT:
            raise ValueError("unknown snapshot format")
        entries, discover = obj.get("entries", {}), obj.get("discover", {})
        last_params, updated_at = obj.get("last_params"), obj.get("updated_at", 0.0)
        if not isinstance(entries, dict) or not isinstance(discover, dict):
            raise ValueError("snapshot fields have the wrong types")
        if last_params is not None and not isinstance(last_params, dict):
            raise ValueError("last_params is not an object")
        if not isinstance(updated_at, (int, float)):
            raise ValueError("updated_at is not a number")
        for answer in discover.values():
            if not isinstance(answer, dict) or not ("result" in answer or "error" in answer):
                raise ValueError("discover answer is malformed")
        return cls(
            entries={str(k): HandshakeEntry.from_json(v) for k, v in entries.items()},
            discover={str(k): v for k, v in discover.items()},
            last_params=last_params,
            updated_at=float(updated_at),
        )

    def listing_counts(self) -> dict[str, int]:
        """Item counts of the most recently used entry's listings, for status output."""
        entry = self.entry_for(self.last_params) if self.last_params else None
        if entry is None and self.entries:
            entry = next(iter(self.entries.values()))
        if entry is None:
            return {}
        return {LISTINGS[m]: len(l.items or []) for m, l in entry.listings.items() if l.error is None}
