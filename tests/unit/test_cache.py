"""The snapshot model: its JSON round trip, its refusal of corrupt files, and its cache key."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lazyd.core.cache import HandshakeEntry, Listing, Snapshot, handshake_key
from tests.unit.relay_driver import CLIENT_PARAMS, warm_snapshot


def rich_snapshot() -> Snapshot:
    snapshot = warm_snapshot()
    entry = next(iter(snapshot.entries.values()))
    entry.listings["prompts/list"] = Listing(error={"code": -32601, "message": "Method not found"})
    snapshot.discover["2026-07-28"] = {"result": {"supportedVersions": ["2026-07-28"]}}
    snapshot.updated_at = 1234.5
    return snapshot


def test_a_snapshot_survives_a_round_trip_through_json_text() -> None:
    snapshot = rich_snapshot()
    text = json.dumps(snapshot.to_json())
    again = Snapshot.from_json(json.loads(text))
    assert again == snapshot
    assert again.to_json() == snapshot.to_json()


def test_an_empty_snapshot_survives_a_round_trip() -> None:
    assert Snapshot.from_json(Snapshot().to_json()) == Snapshot()


def test_a_listing_error_round_trips_as_an_error_not_as_an_empty_listing() -> None:
    again = Snapshot.from_json(json.loads(json.dumps(rich_snapshot().to_json())))
    listing = next(iter(again.entries.values())).listings["prompts/list"]
    assert listing.error == {"code": -32601, "message": "Method not found"} and listing.items is None


def _corrupt(path: list[Any], value: Any) -> Any:
    """The JSON of a rich snapshot with the value at `path` replaced (or deleted for `...`)."""
    obj = copy.deepcopy(rich_snapshot().to_json())
    target = obj
    for step in path[:-1]:
        target = target[step]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


KEY = handshake_key(CLIENT_PARAMS)
CORRUPTIONS: list[tuple[str, Any]] = [
    ("not an object", [1, 2]),
    ("no format", _corrupt(["format"], ...)),
    ("a future format", _corrupt(["format"], 99)),
    ("entries as a list", _corrupt(["entries"], [])),
    ("an entry as a string", _corrupt(["entries", KEY], "x")),
    ("entry params as a list", _corrupt(["entries", KEY, "params"], [])),
    ("entry result missing", _corrupt(["entries", KEY, "result"], ...)),
    ("entry listings as a list", _corrupt(["entries", KEY, "listings"], [])),
    ("listing items as a dict", _corrupt(["entries", KEY, "listings", "tools/list", "items"], {})),
    ("a listing with neither items nor error", _corrupt(["entries", KEY, "listings", "tools/list"], {})),
    ("a listing that is a list", _corrupt(["entries", KEY, "listings", "tools/list"], [])),
    ("discover as a list", _corrupt(["discover"], [])),
    ("a discover answer with neither result nor error", _corrupt(["discover", "*"], {"x": 1})),
    ("a discover answer that is a string", _corrupt(["discover", "*"], "nope")),
    ("last_params as a string", _corrupt(["last_params"], "p")),
    ("updated_at as a string", _corrupt(["updated_at"], "yesterday")),
]


@pytest.mark.parametrize("obj", [c[1] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupt_snapshot_shape_raises_value_error(obj: Any) -> None:
    with pytest.raises(ValueError):
        Snapshot.from_json(obj)


def test_a_listing_for_an_unknown_method_is_ignored_rather_than_trusted() -> None:
    obj = _corrupt(["entries", KEY, "listings", "bogus/list"], {"items": [1]})
    entry = next(iter(Snapshot.from_json(obj).entries.values()))
    assert "bogus/list" not in entry.listings and "tools/list" in entry.listings


def test_the_handshake_key_ignores_client_info() -> None:
    other = {**CLIENT_PARAMS, "clientInfo": {"name": "another-client", "version": "9"}}
    assert handshake_key(other) == handshake_key(CLIENT_PARAMS)
    assert handshake_key({**CLIENT_PARAMS, "clientInfo": None}) == handshake_key(CLIENT_PARAMS)


def test_the_handshake_key_depends_on_the_declared_capabilities() -> None:
    fewer = {**CLIENT_PARAMS, "capabilities": {"roots": {"listChanged": True}}}
    assert handshake_key(fewer) != handshake_key(CLIENT_PARAMS)
    assert handshake_key({**CLIENT_PARAMS, "capabilities": {}}) != handshake_key(CLIENT_PARAMS)


def test_the_handshake_key_ignores_the_order_capabilities_were_written_in() -> None:
    reordered = {**CLIENT_PARAMS, "capabilities": dict(reversed(list(CLIENT_PARAMS["capabilities"].items())))}
    assert handshake_key(reordered) == handshake_key(CLIENT_PARAMS)


def test_the_handshake_key_depends_on_the_protocol_version() -> None:
    assert handshake_key({**CLIENT_PARAMS, "protocolVersion": "2025-06-18"}) != handshake_key(CLIENT_PARAMS)


def test_the_handshake_key_of_capabilities_holding_a_lone_surrogate_is_computed_not_raised() -> None:
    odd = {**CLIENT_PARAMS, "capabilities": {"x\ud800": {}}}
    assert handshake_key(odd) != handshake_key(CLIENT_PARAMS)


def test_an_entry_is_complete_once_every_advertised_listing_is_cached() -> None:
    entry = HandshakeEntry(params=CLIENT_PARAMS, result={"capabilities": {"tools": {}, "resources": {}}})
    assert entry.advertised_listings() == ["tools/list", "resources/list", "resources/templates/list"]
    entry.listings["tools/list"] = Listing(items=[])
    entry.listings["resources/list"] = Listing(items=[])
    assert not entry.complete()
    entry.listings["resources/templates/list"] = Listing(error={"code": -32601, "message": "no"})
    assert entry.complete()


def test_an_initialize_for_the_same_version_finds_an_entry_whatever_its_capabilities() -> None:
    snapshot = warm_snapshot()
    bare = {**CLIENT_PARAMS, "capabilities": {}}
    assert snapshot.entry_for(bare) is None
    assert snapshot.entry_same_version(bare) is snapshot.entry_for(CLIENT_PARAMS)
    assert snapshot.entry_same_version({**bare, "protocolVersion": "2024-11-05"}) is None


@pytest.mark.parametrize("caps", [{}, {"sampling": {}}, {"roots": {}}, {"roots": {"listChanged": True}, "x": {}},
                                  {"elicitation": {"form": {}}}])
def test_listings_are_found_only_for_the_exact_capabilities_they_were_recorded_with(caps: dict[str, Any]) -> None:
    snapshot = warm_snapshot()
    other = {**CLIENT_PARAMS, "capabilities": caps}
    # Any capability may change what a server lists: another handshake's listings are never a
    # client's, though its initialize result is (the server's own capabilities and instructions).
    assert snapshot.entry_for(other) is None
    assert snapshot.entry_same_version(other) is snapshot.entry_for(CLIENT_PARAMS)
    assert snapshot.entry_for({**CLIENT_PARAMS, "clientInfo": {"name": "another", "version": "9"}}) \
        is snapshot.entry_for(CLIENT_PARAMS)


def test_listing_counts_report_the_most_recent_entry() -> None:
    assert warm_snapshot().listing_counts() == {"tools": 2, "prompts": 1, "resources": 1, "resourceTemplates": 1}
    assert Snapshot().listing_counts() == {}
