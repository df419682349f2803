"""Stateless-era relay helpers shared by the era tests: a driven `RelayCore` on a stateless
server, its discovery and listing pages, the envelopes clients send.
"""

from __future__ import annotations

from typing import Any

from lazyd.core.cache import Snapshot
from lazyd.core.eras.choice import Era
from lazyd.core.eras.versions import (
    CLIENT_CAPABILITIES_META,
    CLIENT_INFO_META,
    PROTOCOL_VERSION_META,
    SERVER_INFO_META,
    SUBSCRIPTION_ID_META,
)
from lazyd.core.relay.core import Phase
from lazyd.core.relay.jsonrpc import JsonObj
from tests.unit.relay_driver import Clock, PROMPTS, TOOLS, Driver, Out, notification


PV = "2026-07-28"
SERVER_INFO = {"name": "dual", "version": "1.0"}
CAPS: JsonObj = {"tools": {"listChanged": True}, "prompts": {"listChanged": True}}
DISCOVERY: JsonObj = {"supportedVersions": [PV], "capabilities": CAPS, "instructions": "hi", "resultType": "complete",
                      "ttlMs": 60_000, "cacheScope": "public", "_meta": {SERVER_INFO_META: SERVER_INFO}}
UNSUPPORTED_INIT: JsonObj = {"code": -32022, "message": "connection is serving the 2026-07-28 protocol",
                             "data": {"supported": [PV], "requested": "2025-11-25"}}


def meta(name: str = "modern", caps: JsonObj | None = None, **extra: Any) -> JsonObj:
    return {"_meta": {PROTOCOL_VERSION_META: PV, CLIENT_INFO_META: {"name": name, "version": "1"},
                      CLIENT_CAPABILITIES_META: caps or {}, **extra}}


def page(items: list[Any], key: str = "tools", ttl: int = 60_000, scope: str = "public", **extra: Any) -> JsonObj:
    return {key: items, "resultType": "complete", "ttlMs": ttl, "cacheScope": scope, **extra}


def driver(snapshot: Snapshot | None = None, lane: Era | None = "stateless") -> tuple[Driver, Clock]:
    """A relay core whose process is the stateless lane's unless `lane` says otherwise
    (lazyd/core/eras/choice.py: the lane decides the start plan)."""
    d = Driver(snapshot if snapshot is not None else Snapshot())
    d.core.lane = lane
    return d, d.clock


def known_stateless(discovery: JsonObj = DISCOVERY) -> Snapshot:
    return Snapshot(discover={PV: {"result": discovery, "stored_at": 1_000.0}}, mixed_connection=False)


def serve_stateless(d: Driver, listings: dict[str, JsonObj] | None = None, discovery: JsonObj = DISCOVERY) -> Out:
    """Play a stateless-only SDK server through a start: discovery, -32022 to initialize, every
    listing fetch, and the acknowledgment of the relay's listen stream."""
    listings = listings if listings is not None else {
        "tools/list": page(TOOLS), "prompts/list": page(PROMPTS, "prompts"),
        "resources/list": page([], "resources"), "resources/templates/list": page([], "resourceTemplates")}
    out = Out()
    for _ in range(50):
        pending = sorted(d.upstream.values(), key=lambda m: m["id"])
        if not pending:
            return out
        msg = pending[0]
        method = msg["method"]
        if method == "server/discover":
            out.extend(d.reply(msg, discovery))
        elif method == "initialize":
            out.extend(d.server_says({"jsonrpc": "2.0", "id": msg["id"], "error": UNSUPPORTED_INIT}))
            d.upstream.pop(msg["id"], None)
        elif method == "subscriptions/listen":
            d.upstream.pop(msg["id"])
            ack = {"_meta": {SUBSCRIPTION_ID_META: msg["id"]}, "notifications": msg["params"]["notifications"]}
            out.extend(d.server_says(notification("notifications/subscriptions/acknowledged", ack)))
        elif method in listings:
            out.extend(d.reply(msg, listings[method]))
        else:
            return out  # a forwarded client request: the test answers it
    raise AssertionError("the relay kept asking")


def stateless_running(*cids: int, discovery: JsonObj = DISCOVERY) -> tuple[Driver, Clock]:
    """A stateless-only server READY, its listings fetched under lazyd's own identity (no client
    was ever seen), which has no capabilities: the cache serves clients that declare none."""
    d, clock = driver(known_stateless(discovery))
    d.attach(*cids)
    d.spawned()
    serve_stateless(d, discovery=discovery)
    assert d.core.phase is Phase.READY and d.core.era.stateless_up is True
    return d, clock
