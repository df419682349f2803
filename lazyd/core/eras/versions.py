"""The two protocol eras as the relay sees them on the wire (docs/protocol-eras.md, schema 2026-07-28).

Handshake era: `initialize` once per connection, then plain requests. Stateless era: every request
carries its version, client info and capabilities in `params._meta` (the *envelope*),
`server/discover` describes the server, and `input_required` results replace server-to-client
requests. Here, as pure functions: which era a request belongs to, the envelope, the conversions
for a bridged handshake-era client, the -32022 error and the digests that key the cache.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.jsonrpc import JsonId, JsonObj

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"
SUBSCRIPTION_ID_META = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_VERSIONS[-1]
# Protocol versions are dates; every version from this one on has no handshake.
FIRST_STATELESS_VERSION = "2026-07-28"
# The stateless versions whose envelope and methods lazyd knows; a newer one a server lists is
# still relayed (its requests pass through), but the relay never writes it itself.
KNOWN_STATELESS_VERSIONS = (FIRST_STATELESS_VERSION,)

UNSUPPORTED_PROTOCOL_VERSION = -32022

# Result fields that exist only in the stateless era: a handshake-era client never sees them.
_STATELESS_RESULT_FIELDS = ("resultType", "ttlMs", "cacheScope")
# Method-specific requests a stateless server never serves (removed in 2026-07-28).
REMOVED_IN_STATELESS = frozenset({"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})


def is_stateless_version(version: object) -> bool:
    return isinstance(version, str) and version >= FIRST_STATELESS_VERSION and version not in HANDSHAKE_VERSIONS


def _meta_of(params: JsonObj) -> JsonObj:
    meta = params.get("_meta")
    return meta if isinstance(meta, dict) else {}


def request_version(params: JsonObj) -> str | None:
    """The protocol version a request's envelope names, or None (a handshake-era request)."""
    version = _meta_of(params).get(PROTOCOL_VERSION_META)
    return version if isinstance(version, str) else None


def is_stateless_request(method: str, params: JsonObj) -> bool:
    """Whether a client request belongs to the stateless era (`initialize` never does, whatever
    its `_meta` says, as the SDK's dual-era servers decide)."""
    return method != "initialize" and is_stateless_version(request_version(params))


def envelope_identity(params: JsonObj) -> tuple[JsonObj, JsonObj]:
    """(clientInfo, clientCapabilities) from a stateless request's envelope; {} where absent."""
    meta = _meta_of(params)
    info, caps = meta.get(CLIENT_INFO_META), meta.get(CLIENT_CAPABILITIES_META)
    return (info if isinstance(info, dict) else {}), (caps if isinstance(caps, dict) else {})


def log_level_of(params: JsonObj) -> str | None:
    level = _meta_of(params).get(LOG_LEVEL_META)
    return level if isinstance(level, str) else None


def is_continuation(params: JsonObj) -> bool:
    """A retry answering an `input_required` result: its result is never cached (spec MUST)."""
    return "inputResponses" in params or "requestState" in params


def with_envelope(params: JsonObj, envelope: JsonObj) -> JsonObj:
    """`params` with the envelope added to its `_meta` (a progress token and other keys stay)."""
    out = dict(params)
    out["_meta"] = {**_meta_of(params), **envelope}
    return out


def _digest(obj: Any) -> str:
    # surrogatepass: a lone surrogate from a JSON escape must hash, not raise.
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def capabilities_digest(capabilities: JsonObj) -> str:
    """Listings may depend on what a client declared: part of every stateless cache key."""
    return _digest(capabilities)


def identity_digest(client_info: JsonObj) -> str:
    """The client identity a `cacheScope: "private"` result is confined to: sessions of one
    process share its tokens already, so clientInfo tells them apart. (The empty "principal" keeps
    the digests of results stored on disk.)"""
    return _digest({"name": client_info.get("name"), "version": client_info.get("version"), "principal": ""})


def stateless_versions(discover_result: object) -> list[str]:
    versions = discover_result.get("supportedVersions") if isinstance(discover_result, dict) else None
    return [v for v in versions if is_stateless_version(v)] if isinstance(versions, list) else []


def upstream_version(discover_result: object) -> str | None:
    """The version the relay speaks to a stateless server: the newest it knows that the server lists."""
    listed = stateless_versions(discover_result)
    known = [v for v in KNOWN_STATELESS_VERSIONS if v in listed]
    return max(known) if known else None


def discover_capabilities(discover_result: object) -> JsonObj:
    caps = discover_result.get("capabilities") if isinstance(discover_result, dict) else None
    return caps if isinstance(caps, dict) else {}


def initialize_result_from_discover(discover_result: JsonObj, requested: object, fallback_name: str) -> JsonObj:
    """The `initialize` result a handshake-era client gets from a stateless server's discovery:
    at the client's version when known (the relay speaks the handshake), without `extensions`;
    `listChanged` and `subscribe` stay, delivered from the relay's own listen stream."""
    version = requested if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION
    caps = {k: copy.deepcopy(v) for k, v in discover_capabilities(discover_result).items() if k != "extensions"}
    meta = discover_result.get("_meta")
    info = meta.get(SERVER_INFO_META) if isinstance(meta, dict) else None
    result: JsonObj = {
        "protocolVersion": version,
        "capabilities": caps,
        "serverInfo": copy.deepcopy(info) if isinstance(info, dict) else {"name": fallback_name, "version": ""},
    }
    instructions = discover_result.get("instructions")
    if isinstance(instructions, str):
        result["instructions"] = instructions
    return result


def for_handshake_client(result: object) -> object:
    """A stateless result without the stateless-only fields and the serverInfo stamp."""
    if not isinstance(result, dict):
        return result
    out = {k: v for k, v in result.items() if k not in _STATELESS_RESULT_FIELDS}
    meta = out.get("_meta")
    if isinstance(meta, dict) and SERVER_INFO_META in meta:
        rest = {k: v for k, v in meta.items() if k != SERVER_INFO_META}
        if rest:
            out["_meta"] = rest
        else:
            del out["_meta"]
    return out


def is_input_required(result: object) -> bool:
    return isinstance(result, dict) and result.get("resultType") == "input_required"


def input_requests(result: JsonObj) -> dict[str, JsonObj]:
    """The server-to-client requests an `input_required` result embeds, by the server's keys."""
    raw = result.get("inputRequests")
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, dict) and isinstance(v.get("method"), str)}


def unsupported_version_line(msg_id: JsonId, requested: str | None, supported: list[str], why: str) -> bytes:
    """UnsupportedProtocolVersionError (-32022) naming the versions this server can be spoken to in."""
    data = {"requested": requested or "", "supported": supported}
    message = f"{why}; supported protocol versions: {', '.join(supported) or 'none known'}"
    return rpc.error_line(msg_id, UNSUPPORTED_PROTOCOL_VERSION, message, data)
