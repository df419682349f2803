"""The relay core with one client at a time: cache answers, cold starts, replay, drift, failures.

Each test feeds events to a `RelayCore` and asserts the exact actions it returns (lines parsed as
JSON for readability, notes and activity marks left out unless they are the point). Nothing here
starts a process: the tests play both the daemon and the server.
"""

from __future__ import annotations

import json
from typing import Any

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import Snapshot, handshake_key
from lazyd.core.relay.core import PROTOCOL_VERSION_META, Phase, ToClient
from tests.unit.relay_driver import (
    refreshing,
    BARE_PARAMS,
    CLIENT_PARAMS,
    INIT_RESULT,
    NOT_FOUND,
    PAGES,
    PROMPTS,
    RESOURCES,
    TEMPLATES,
    TOOLS,
    VERSION,
    Driver,
    error,
    notification,
    request,
    result,
    running,
    warm_snapshot,
)

INITIALIZED = notification("notifications/initialized")
DISCOVER_PARAMS = {"_meta": {PROTOCOL_VERSION_META: "2026-07-28"}}


def handshake_era() -> Snapshot:
    """An empty cache for a server already known to be handshake-era only: no era probe at its
    starts (the probe itself is tested in test_relay_eras.py)."""
    return Snapshot(discover={"*": {"error": NOT_FOUND}})


def phase(d: Driver) -> Phase:
    return d.core.phase


def assert_unavailable(msg: dict[str, Any], msg_id: Any, fragment: str) -> None:
    assert msg["id"] == msg_id and type(msg["id"]) is type(msg_id)
    assert msg["error"]["code"] == rpc.SERVER_UNAVAILABLE
    assert fragment in msg["error"]["message"]


# ---- warm cache while the server sleeps --------------------------------------------------------------


def test_a_warm_cache_answers_a_whole_session_opening_without_waking_the_server() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    # The python SDK's pattern: server/discover with id 1, then initialize with id 2.
    assert d.ask(1, 1, "server/discover", DISCOVER_PARAMS).visible() == [("client", 1, error(1, rpc.METHOD_NOT_FOUND, "Method not found"), 1)]
    assert d.ask(1, 2, "initialize", CLIENT_PARAMS).visible() == [("client", 1, result(2, INIT_RESULT), 2)]
    assert d.tell(1, "notifications/initialized").visible() == []
    assert d.ask(1, 3, "ping").visible() == [("client", 1, result(3, {}), 3)]
    assert d.ask(1, 4, "tools/list").visible() == [("client", 1, result(4, {"tools": TOOLS}), 4)]
    assert d.ask(1, 5, "prompts/list").visible() == [("client", 1, result(5, {"prompts": PROMPTS}), 5)]
    assert d.ask(1, 6, "resources/list").visible() == [("client", 1, result(6, {"resources": RESOURCES}), 6)]
    assert d.ask(1, 7, "resources/templates/list").visible() == [
        ("client", 1, result(7, {"resourceTemplates": TEMPLATES}), 7)
    ]
    assert d.sent_to_server == []
    assert phase(d) is Phase.DOWN and d.core.inflight_count() == 0


def test_cached_listings_merge_every_page_into_one_page_without_a_next_cursor() -> None:
    d = Driver(warm_snapshot(pages={**PAGES, "tools/list": [[TOOLS[0]], [TOOLS[1]]]}))
    d.attach(1)
    d.handshake(1)
    out = d.ask(1, "t", "tools/list")
    assert out.visible() == [("client", 1, result("t", {"tools": TOOLS}), "t")]
    # While the server sleeps, a cursor kept from elsewhere gets "the rest of all pages": nothing.
    assert d.ask(1, "u", "tools/list", {"cursor": "abc"}).visible() == [("client", 1, result("u", {"tools": []}), "u")]


def test_a_listing_the_server_does_not_advertise_is_refused_from_cache_like_the_server_would() -> None:
    only_tools = {**INIT_RESULT, "capabilities": {"tools": {}}}
    d = Driver(warm_snapshot(init_result=only_tools, pages={"tools/list": [TOOLS]}))
    d.attach(1)
    d.handshake(1)
    out = d.ask(1, 9, "prompts/list")
    assert out.visible() == [("client", 1, error(9, rpc.METHOD_NOT_FOUND, "Method not found: prompts/list"), 9)]
    assert d.sent_to_server == []


def test_a_cached_discovery_answer_for_a_version_is_served_without_waking() -> None:
    snapshot = warm_snapshot(discover_not_found=False)
    snapshot.discover["2026-07-28"] = {"result": {"supportedVersions": ["2026-07-28"]}}
    d = Driver(snapshot)
    d.attach(1)
    out = d.ask(1, "d", "server/discover", DISCOVER_PARAMS)
    assert out.visible() == [("client", 1, result("d", {"supportedVersions": ["2026-07-28"]}), "d")]
    # Another version has no cached answer: only the server can give it.
    other = d.ask(1, "e", "server/discover", {"_meta": {PROTOCOL_VERSION_META: "2027-01-01"}})
    assert other.want and other.visible() == [("WantServer",)]


def test_a_client_with_other_capabilities_gets_the_cached_initialize_but_not_another_handshakes_listings() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    out = d.ask(1, 1, "initialize", BARE_PARAMS)
    assert out.visible() == [("SnapshotChanged",), ("client", 1, result(1, INIT_RESULT), 1)]
    d.tell(1, "notifications/initialized")
    # A listing recorded for other capabilities may lack what this client's would add: only the
    # server, asked with this client's own handshake, can give it.
    listing = d.ask(1, 2, "tools/list")
    assert listing.want and listing.visible() == [("WantServer",)]


def test_each_client_is_served_the_listings_recorded_for_exactly_its_capabilities() -> None:
    snapshot = warm_snapshot()
    other = warm_snapshot(params=BARE_PARAMS, pages={**PAGES, "tools/list": [TOOLS[:1]]})
    snapshot.entries.update(other.entries)
    d = Driver(snapshot)
    d.attach(1)
    d.handshake(1, 1, {**BARE_PARAMS, "capabilities": {"roots": {}}})
    assert d.ask(1, 2, "tools/list").visible() == [("WantServer",)]
    d.attach(2)
    d.handshake(2, 1, BARE_PARAMS)
    assert d.ask(2, 2, "tools/list").visible() == [("client", 2, result(2, {"tools": TOOLS[:1]}), 2)]
    d.attach(3)
    d.handshake(3, 1, CLIENT_PARAMS)
    assert d.ask(3, 2, "tools/list").visible() == [("client", 3, result(2, {"tools": TOOLS}), 2)]
    assert d.sent_to_server == []


def test_a_start_for_a_client_of_other_capabilities_lists_with_its_handshake_and_keeps_both_entries() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    d.handshake(1, 1, BARE_PARAMS)
    assert d.ask(1, 2, "tools/list").visible() == [("WantServer",)]
    out = d.start(pages={**PAGES, "tools/list": [TOOLS[:1]]})
    # Nothing was served from another handshake's entry, so nothing is announced as changed: the
    # client's queued listing is answered with what the server listed for it.
    assert {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"} not in out.client(1)
    assert {"jsonrpc": "2.0", "id": 2, "result": {"tools": TOOLS[:1]}} in out.client(1)
    assert set(d.core.snapshot.entries) == {handshake_key(CLIENT_PARAMS), handshake_key(BARE_PARAMS)}


# ---- cold cache: start, replay, refresh --------------------------------------------------------------


def test_a_cold_start_replays_the_clients_handshake_refreshes_page_by_page_then_forwards_in_order() -> None:
    d = Driver(handshake_era())
    d.attach(1)
    out = d.ask(1, 0, "initialize", CLIENT_PARAMS)
    assert out.visible() == [("SnapshotChanged",), ("WantServer",)]
    assert d.sent_to_server == []

    # The client's own params are replayed under a relay id.
    assert d.spawned().visible() == [("server", request(1, "initialize", CLIENT_PARAMS))]
    out = d.answer("initialize", INIT_RESULT)
    assert out.visible() == [
        ("server", INITIALIZED),
        ("client", 1, result(0, INIT_RESULT), 0),
        ("server", request(2, "tools/list")),
        ("server", request(3, "prompts/list")),
        ("server", request(4, "resources/list")),
        ("server", request(5, "resources/templates/list")),
    ]
    assert phase(d) is Phase.REFRESH

    # The client goes on while the listings are fetched: everything else waits for READY.
    assert d.tell(1, "notifications/initialized").visible() == []
    assert d.ask(1, 10, "tools/list").visible() == [("WantServer",)]
    assert d.ask(1, 11, "tools/call", {"name": "echo", "arguments": {"n": 1}}).visible() == [("WantServer",)]
    assert d.ask(1, "12", "tools/call", {"name": "echo", "arguments": {"n": 2}}).visible() == [("WantServer",)]
    assert d.core.inflight_count() == 3

    assert d.reply(d.upstream[2], {"tools": [TOOLS[0]], "nextCursor": "c2"}).visible() == [
        ("server", request(6, "tools/list", {"cursor": "c2"}))
    ]
    assert d.reply(d.upstream[3], {"prompts": PROMPTS}).visible() == []
    assert d.reply(d.upstream[4], {"resources": RESOURCES}).visible() == []
    assert d.reply(d.upstream[5], {"resourceTemplates": TEMPLATES}).visible() == []
    out = d.reply(d.upstream[6], {"tools": [TOOLS[1]]})
    assert out.visible() == [
        ("SnapshotChanged",),
        ("Ready",),
        ("client", 1, result(10, {"tools": TOOLS}), 10),
        ("server", request(7, "tools/call", {"name": "echo", "arguments": {"n": 1}})),
        ("server", request(8, "tools/call", {"name": "echo", "arguments": {"n": 2}})),
    ]
    assert phase(d) is Phase.READY

    # Responses return under the client's ids, with the type it used, and mark the request done.
    out = d.server_says(result(8, {"content": [{"type": "text", "text": "2"}]}))
    assert out.visible() == [("client", 1, result("12", {"content": [{"type": "text", "text": "2"}]}), "12")]
    out = d.server_says(result(7, {"content": []}))
    assert out.visible() == [("client", 1, result(11, {"content": []}), 11)]
    assert d.core.inflight_count() == 0

    # The snapshot now holds the merged listings, keyed by the replayed handshake.
    entry = d.core.snapshot.entries[handshake_key(CLIENT_PARAMS)]
    assert entry.result == INIT_RESULT and entry.listings["tools/list"].items == TOOLS
    assert d.core.snapshot.last_params == CLIENT_PARAMS


def test_a_first_ever_client_probing_discovery_before_initialize_is_answered_by_the_live_server() -> None:
    d = Driver()
    d.core.lane = "stateless"  # the daemon gives a client whose first request is a probe the stateless lane
    d.attach(1)
    assert d.ask(1, 1, "server/discover", DISCOVER_PARAMS).visible() == [("WantServer",)]
    # No era is known: the relay's own probe goes first (with lazyd's identity, as no client ever
    # gave one), then the client's probe; no initialize params were ever seen, so no handshake yet.
    probe = {"_meta": {PROTOCOL_VERSION_META: "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "lazyd", "version": "0.1.0"},
                       "io.modelcontextprotocol/clientCapabilities": {}}}
    assert d.spawned().visible() == [("server", request(1, "server/discover", probe)), ("server", request(2, "server/discover", DISCOVER_PARAMS))]
    assert phase(d) is Phase.PREINIT
    out = d.reply_error(d.upstream[1], rpc.METHOD_NOT_FOUND, "Method not found")
    assert out.visible() == [("SnapshotChanged",)]
    out = d.reply_error(d.upstream[2], rpc.METHOD_NOT_FOUND, "Method not found")
    assert out.visible() == [("SnapshotChanged",), ("client", 1, error(1, rpc.METHOD_NOT_FOUND, "Method not found"), 1)]
    # A -32601 answers every version the same way.
    assert d.core.snapshot.discover["*"] == {"error": NOT_FOUND}
    # The SDK falls back to initialize with id 2: that handshake is replayed now.
    out = d.ask(1, 2, "initialize", CLIENT_PARAMS)
    assert out.visible() == [("SnapshotChanged",), ("WantServer",), ("server", request(3, "initialize", CLIENT_PARAMS))]
    out = d.answer("initialize", INIT_RESULT)
    assert ("client", 1, result(2, INIT_RESULT), 2) in out.visible()
    assert d.serve_listings().ready
    # A second probe is now served from the cache.
    assert d.ask(1, 3, "server/discover", DISCOVER_PARAMS).visible() == [("client", 1, error(3, rpc.METHOD_NOT_FOUND, "Method not found"), 3)]


def test_a_start_without_any_client_replays_the_last_recorded_handshake() -> None:
    d = Driver(warm_snapshot())
    out = d.spawned()
    assert out.visible() == [("server", request(1, "initialize", CLIENT_PARAMS))]


def test_a_second_client_initializing_during_the_replayed_handshake_gets_the_servers_real_result() -> None:
    d = Driver()
    d.attach(1, 2)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.spawned()
    assert phase(d) is Phase.HANDSHAKE
    # Regression: this used to be answered at once with the empty result of the unfinished replay.
    out = d.ask(2, 0, "initialize", CLIENT_PARAMS)
    assert out.client(2) == []
    out = d.answer("initialize", INIT_RESULT)
    assert out.client(1) == [result(0, INIT_RESULT)]
    assert out.client(2) == [result(0, INIT_RESULT)]
    assert sorted(out.done) == [(1, 0), (2, 0)]


def test_a_client_initializing_while_the_server_runs_gets_the_running_instances_result() -> None:
    d = running(1)
    d.attach(2)
    older = {**CLIENT_PARAMS, "protocolVersion": "2025-06-18"}
    out = d.ask(2, 5, "initialize", older)
    # One process speaks one version: the client is told which, openly (PROTOCOL.md §8).
    assert out.client(2) == [result(5, INIT_RESULT)]
    assert any("2025-06-18" in note and VERSION in note for note in out.notes)
    assert d.sent_to_server[-1]["method"] != "initialize"


def test_a_resumed_client_counts_as_initialized_and_its_handshake_is_the_one_replayed() -> None:
    d = Driver(handshake_era())
    d.attach(1)
    d.record(d.core.resume(1, [rpc.request_line(0, "initialize", BARE_PARAMS), rpc.notification_line("notifications/initialized")],
                           now=d.clock()))
    assert d.ask(1, 1, "tools/call", {"name": "echo"}).want
    assert d.spawned().server == [request(1, "initialize", BARE_PARAMS)]
    assert d.core.clients[1].initialized


# ---- listing drift -----------------------------------------------------------------------------------



def test_listings_that_drifted_since_the_snapshot_send_list_changed_to_initialized_clients() -> None:
    d = Driver(warm_snapshot())
    d.attach(1, 2)
    d.handshake(1)
    d.ask(2, 0, "initialize", CLIENT_PARAMS)  # client 2 never finished its handshake
    assert d.ask(1, 1, "tools/call", {"name": "echo"}).want
    d.spawned()
    d.answer("initialize", INIT_RESULT)
    new_tools = [*TOOLS, {"name": "new", "inputSchema": {"type": "object"}}]
    out = d.serve_listings({**PAGES, "tools/list": [new_tools]})
    assert out.visible() == [
        ("SnapshotChanged",),
        ("client", 1, notification("notifications/tools/list_changed"), None),
        ("Ready",),
        ("server", request(6, "tools/call", {"name": "echo"})),
    ]
    assert d.core.snapshot.entries[handshake_key(CLIENT_PARAMS)].listings["tools/list"].items == new_tools


def test_listings_unchanged_since_the_snapshot_send_no_list_changed_and_no_snapshot_write() -> None:
    d = refreshing()
    out = d.serve_listings()
    assert out.visible() == [("Ready",), ("server", request(6, "tools/call", {"name": "echo"}))]


def test_a_server_list_changed_while_ready_refreshes_then_notifies_every_attached_client() -> None:
    d = running(1, 2)
    out = d.server_says(notification("notifications/tools/list_changed"))
    assert out.visible() == [("server", request(6, "tools/list"))]
    # While the refresh runs, a listing is not served stale: it goes to the server.
    asked = d.ask(1, "mid", "tools/list")
    assert [m["method"] for m in asked.server] == ["tools/list"]
    d.reply(asked.server[0], {"tools": TOOLS})
    new_tools = [TOOLS[0]]
    out = d.reply(d.upstream[6], {"tools": new_tools})
    assert out.visible() == [
        ("SnapshotChanged",),
        ("client", 1, notification("notifications/tools/list_changed"), None),
        ("client", 2, notification("notifications/tools/list_changed"), None),
    ]
    assert d.ask(2, 9, "tools/list").visible() == [("client", 2, result(9, {"tools": new_tools}), 9)]


def test_a_daemon_side_change_notifies_each_initialized_client_once_while_the_server_runs() -> None:
    d = running(1, 2)
    d.attach(3)
    d.ask(3, 0, "initialize", CLIENT_PARAMS)  # never finished its handshake: told nothing
    out = d.record(d.core.announce_list_changed("notifications/tools/list_changed", now=d.clock()))
    assert out.visible() == [
        ("client", 1, notification("notifications/tools/list_changed"), None),
        ("client", 2, notification("notifications/tools/list_changed"), None),
    ]
    assert out.server == []  # nothing is fetched again: the server's listing did not change


def test_a_daemon_side_change_notifies_initialized_clients_once_while_the_server_sleeps() -> None:
    d = Driver(warm_snapshot())
    d.attach(1, 2)
    d.handshake(1)
    d.handshake(2)
    out = d.record(d.core.announce_list_changed("notifications/tools/list_changed", now=d.clock()))
    assert out.visible() == [
        ("client", 1, notification("notifications/tools/list_changed"), None),
        ("client", 2, notification("notifications/tools/list_changed"), None),
    ]
    assert not out.want  # and nothing starts for it


def test_a_client_paging_through_a_listing_forwarded_during_a_refresh_gets_every_page_from_the_server() -> None:
    d = running(1)
    d.server_says(notification("notifications/tools/list_changed"))
    first = d.ask(1, "p1", "tools/list").server[0]
    out = d.reply(first, {"tools": [TOOLS[0]], "nextCursor": "page-2"})
    assert out.client(1) == [result("p1", {"tools": [TOOLS[0]], "nextCursor": "page-2"})]
    d.serve_listings()  # the relay's refresh ends before the client asks for page 2
    # Regression: the cursor is the server's, so page 2 must come from the server, not an empty page.
    second = d.ask(1, "p2", "tools/list", {"cursor": "page-2"})
    assert second.server == [request(second.server[0]["id"], "tools/list", {"cursor": "page-2"})]
    assert d.reply(second.server[0], {"tools": [TOOLS[1]]}).client(1) == [result("p2", {"tools": [TOOLS[1]]})]


def test_a_server_list_changed_is_passed_on_even_when_the_refresh_finds_the_cached_listing() -> None:
    d = running(1)
    d.server_says(notification("notifications/prompts/list_changed"))
    out = d.answer("prompts/list", {"prompts": PROMPTS})
    assert out.visible() == [("client", 1, notification("notifications/prompts/list_changed"), None)]


def test_a_list_changed_during_start_up_for_a_listing_already_fetched_fetches_it_again() -> None:
    d = refreshing()
    d.answer("tools/list", {"tools": TOOLS})
    # The server registers a tool after answering the relay's tools/list, while the refresh still runs.
    out = d.server_says(notification("notifications/tools/list_changed"))
    assert out.server == [request(6, "tools/list")]
    new_tools = [*TOOLS, {"name": "late", "inputSchema": {"type": "object"}}]
    out = d.serve_listings({**PAGES, "tools/list": [new_tools]})
    assert out.visible()[:3] == [
        ("SnapshotChanged",),
        ("client", 1, notification("notifications/tools/list_changed"), None),
        ("Ready",),
    ]
    assert d.ask(1, 2, "tools/list").client(1) == [result(2, {"tools": new_tools})]


def test_a_list_changed_during_start_up_for_a_listing_not_fetched_yet_sends_nothing_more() -> None:
    d = refreshing()
    # The pending tools/list will see the change: no second request.
    assert d.server_says(notification("notifications/tools/list_changed")).server == []


# ---- the server dies, or never starts ------------------------------------------------------------------


def test_a_server_exit_answers_each_in_flight_request_once_under_its_original_id() -> None:
    d = running(1, 2)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.ask(2, 1, "tools/call", {"name": "echo"})
    d.ask(2, "x", "prompts/get", {"name": "greet"})
    assert d.core.inflight_count() == 3
    late = d.pending("tools/call")[0]
    out = d.exited("was killed by signal 9")
    errors = {(cid, msg["id"]): msg for cid in (1, 2) for msg in out.client(cid)}
    assert sorted(errors, key=str) == sorted([(1, 1), (2, 1), (2, "x")], key=str)
    for (_, msg_id), msg in errors.items():
        assert_unavailable(msg, msg_id, "was killed by signal 9")
    assert sorted(out.done, key=str) == sorted([(1, 1), (2, 1), (2, "x")], key=str)
    assert d.core.inflight_count() == 0 and phase(d) is Phase.DOWN
    # A response that raced the exit finds nothing to answer.
    assert d.server_says(result(late["id"], {})).visible() == []


def test_after_an_exit_the_next_request_starts_the_server_again_and_the_handshake_is_replayed() -> None:
    d = running(1)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.exited()
    out = d.ask(1, 2, "tools/call", {"name": "add"})
    assert out.visible() == [("WantServer",)]
    out = d.spawned()
    assert [m["method"] for m in out.server] == ["initialize"]
    assert out.server[0]["params"] == CLIENT_PARAMS
    d.answer("initialize", INIT_RESULT)
    out = d.serve_listings()
    assert out.ready
    # The earlier tools/call is never replayed (it may not be idempotent); the queued one goes out.
    calls = [m for m in out.server if m["method"] == "tools/call"]
    assert [c["params"]["name"] for c in calls] == ["add"]


def test_requests_queued_during_a_start_that_fails_get_the_reason_under_their_ids() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    d.handshake(1)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.ask(1, "2", "resources/read", {"uri": "file:///a"})
    out = d.start_failed("command not found: npx")
    assert [m["id"] for m in out.client(1)] == [1, "2"]
    for msg in out.client(1):
        assert_unavailable(msg, msg["id"], "command not found: npx")
    assert out.done == [(1, 1), (1, "2")]
    assert d.core.inflight_count() == 0
    assert d.ask(1, 3, "tools/call", {"name": "echo"}).want


def test_a_server_that_dies_during_the_replayed_handshake_fails_the_queued_requests() -> None:
    d = Driver(handshake_era())
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.spawned()
    out = d.exited("exited with status 127")
    assert_unavailable(out.client(1)[0], 0, "exited with status 127")
    assert out.done == [(1, 0)]
    # The next attempt replays the same handshake again.
    assert d.ask(1, 1, "initialize", CLIENT_PARAMS).want
    assert d.spawned().server == [request(2, "initialize", CLIENT_PARAMS)]


def test_a_server_that_refuses_the_replayed_handshake_is_aborted_and_the_queue_answered() -> None:
    d = Driver(handshake_era())
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.spawned()
    out = d.reply_error(d.one_pending("initialize"), rpc.INVALID_PARAMS, "unsupported protocol version")
    assert len(out.aborts) == 1 and "unsupported protocol version" in out.aborts[0]
    assert out.client(1)[0]["id"] == 0 and "unsupported protocol version" in out.client(1)[0]["error"]["message"]
    assert out.done == [(1, 0)]
    # The daemon stops the process: nothing is answered twice.
    assert d.exited("stopped").client(1) == []


# ---- logging -----------------------------------------------------------------------------------------


def test_log_levels_are_answered_locally_and_the_most_verbose_one_goes_upstream() -> None:
    d = running(1, 2, 3)
    out = d.ask(1, 1, "logging/setLevel", {"level": "warning"})
    assert out.visible() == [("client", 1, result(1, {}), 1), ("server", request(6, "logging/setLevel", {"level": "warning"}))]
    out = d.ask(2, 1, "logging/setLevel", {"level": "debug"})
    assert out.visible() == [("client", 2, result(1, {}), 1), ("server", request(7, "logging/setLevel", {"level": "debug"}))]
    assert d.ask(1, 2, "logging/setLevel", {"level": "error"}).visible() == [("client", 1, result(2, {}), 2)]
    d.reply(d.upstream[6], {})
    d.reply(d.upstream[7], {})

    info = notification("notifications/message", {"level": "info", "data": "hello"})
    assert d.server_says(info).visible() == [("client", 2, info, None), ("client", 3, info, None)]
    bad = notification("notifications/message", {"level": "error", "data": "bad"})
    assert d.server_says(bad).visible() == [("client", c, bad, None) for c in (1, 2, 3)]

    # The most verbose client leaves: the server is turned down to the next most verbose level.
    out = d.detach(2)
    assert out.server == [request(8, "logging/setLevel", {"level": "error"})]


def test_an_unknown_log_level_is_refused_as_invalid_params() -> None:
    d = running(1)
    out = d.ask(1, 1, "logging/setLevel", {"level": "loud"})
    assert out.visible() == [("client", 1, error(1, rpc.INVALID_PARAMS, "Invalid params: unknown log level"), 1)]


def test_a_log_level_set_while_the_server_sleeps_is_sent_after_the_next_handshake() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    d.handshake(1)
    assert d.ask(1, 1, "logging/setLevel", {"level": "info"}).visible() == [("client", 1, result(1, {}), 1)]
    assert d.sent_to_server == []
    d.spawned()
    out = d.answer("initialize", INIT_RESULT)
    assert out.server[:2] == [INITIALIZED, request(2, "logging/setLevel", {"level": "info"})]


# ---- subscriptions -------------------------------------------------------------------------------------


def test_subscriptions_are_refcounted_per_uri_and_updates_go_to_subscribers_only() -> None:
    d = running(1, 2, 3)
    out = d.ask(1, 1, "resources/subscribe", {"uri": "file:///a"})
    assert out.visible() == [("server", request(6, "resources/subscribe", {"uri": "file:///a"}))]
    assert d.reply(d.upstream[6], {}).visible() == [("client", 1, result(1, {}), 1)]
    # The second subscriber is answered locally.
    assert d.ask(2, 1, "resources/subscribe", {"uri": "file:///a"}).visible() == [("client", 2, result(1, {}), 1)]

    updated = notification("notifications/resources/updated", {"uri": "file:///a"})
    assert d.server_says(updated).visible() == [("client", 1, updated, None), ("client", 2, updated, None)]
    other = notification("notifications/resources/updated", {"uri": "file:///b"})
    assert d.server_says(other).visible() == []

    # Only the last unsubscribe goes upstream.
    assert d.ask(1, 2, "resources/unsubscribe", {"uri": "file:///a"}).visible() == [("client", 1, result(2, {}), 2)]
    assert d.server_says(updated).visible() == [("client", 2, updated, None)]
    out = d.ask(2, 2, "resources/unsubscribe", {"uri": "file:///a"})
    assert out.visible() == [("server", request(7, "resources/unsubscribe", {"uri": "file:///a"}))]
    assert d.reply(d.upstream[7], {}).visible() == [("client", 2, result(2, {}), 2)]
    assert d.server_says(updated).visible() == []


def test_subscriptions_are_replayed_after_a_restart() -> None:
    d = running(1)
    d.ask(1, 1, "resources/subscribe", {"uri": "file:///a"})
    d.answer("resources/subscribe", {})
    d.exited()
    d.ask(1, 2, "tools/call", {"name": "echo"})
    d.spawned()
    out = d.answer("initialize", INIT_RESULT)
    assert out.server[:2] == [INITIALIZED, {**request(out.server[1]["id"], "resources/subscribe", {"uri": "file:///a"})}]
    # The relay's own subscribe answer goes to no client.
    assert d.answer("resources/subscribe", {}).visible() == []
    updated = notification("notifications/resources/updated", {"uri": "file:///a"})
    d.serve_listings()
    assert d.server_says(updated).visible() == [("client", 1, updated, None)]


def test_a_subscribe_while_the_server_sleeps_waits_for_it() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    d.handshake(1)
    assert d.ask(1, 1, "resources/subscribe", {"uri": "file:///a"}).visible() == [("WantServer",)]
    d.spawned()
    d.answer("initialize", INIT_RESULT)
    out = d.serve_listings()
    assert out.visible()[-1] == ("server", request(6, "resources/subscribe", {"uri": "file:///a"}))


# ---- bad lines -----------------------------------------------------------------------------------------


def test_a_garbage_line_from_the_server_is_only_noted() -> None:
    d = running(1)
    for junk in (b"Starting server on stdio...", b"[1,2]", b'{"jsonrpc":"2.0"}', b"\xff"):
        out = d.server_says(junk)
        assert out.visible() == [] and len(out.notes) == 1


def test_an_invalid_client_line_is_answered_and_the_session_goes_on() -> None:
    d = running(1)
    out = d.send(1, b"{not json")
    assert out.visible() == [("client", 1, {"jsonrpc": "2.0", "id": None, "error": {"code": rpc.PARSE_ERROR, "message": "Parse error: the line is not JSON"}}, None)]
    out = d.send(1, b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
    assert out.client(1)[0]["error"]["code"] == rpc.INVALID_REQUEST
    # A refusal that carries the request's id finally answers that id.
    out = d.send(1, b'{"jsonrpc":"2.0","id":4,"method":17}')
    assert out.client(1)[0]["id"] == 4 and out.done == [(1, 4)]
    assert d.ask(1, 5, "ping").visible() == [("client", 1, result(5, {}), 5)]
    assert all(m.get("method") != "ping" for m in d.sent_to_server)


def deep_result(rid: int) -> bytes:
    depth = rpc.MAX_NESTING_DEPTH + 1
    return b'{"jsonrpc":"2.0","id":' + str(rid).encode() + b',"result":' + b"[" * depth + b"]" * depth + b"}"


def test_a_server_response_too_deep_to_relay_still_answers_its_client_with_an_error() -> None:
    d = running(1)
    sent = d.ask(1, "c", "tools/call", {"name": "echo"}).server[0]
    out = d.server_says(deep_result(sent["id"]))
    assert [(cid, msg["id"], msg["error"]["code"]) for cid, msg, _ in _client_lines(out)] == [(1, "c", rpc.INTERNAL_ERROR)]
    assert "too deep" in out.client(1)[0]["error"]["message"] and out.done == [(1, "c")]
    assert d.core.inflight_count() == 0


def test_a_listing_too_deep_to_relay_does_not_stall_the_start() -> None:
    d = refreshing()
    tools = d.upstream.pop(d.one_pending("tools/list")["id"])
    d.server_says(deep_result(tools["id"]))
    out = d.serve_listings()
    assert out.ready and [m["method"] for m in out.server] == ["tools/call"]


def _client_lines(out: Any) -> list[tuple[int, dict[str, Any], Any]]:
    return [(a.cid, json.loads(a.line), a.done) for a in out if isinstance(a, ToClient)]


def test_a_server_result_carrying_nan_is_relayed_to_its_client() -> None:
    d = running(1)
    asked = d.ask(1, 1, "tools/call", {"name": "echo"})
    rid = asked.server[0]["id"]
    out = d.server_says(b'{"jsonrpc":"2.0","id":' + str(rid).encode() + b',"result":{"x":NaN}}')
    assert [a.line for a in out if isinstance(a, ToClient)] == [b'{"jsonrpc":"2.0","id":1,"result":{"x":NaN}}']


def test_a_client_request_carrying_a_lone_surrogate_is_forwarded_with_the_same_escape() -> None:
    d = running(1)
    out = d.send(1, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"s":"\\ud83d"}}}')
    assert len(out.server) == 1 and out.server[0]["params"]["arguments"]["s"] == "\ud83d"
