"""Both protocol eras through the relay core, without processes: the era probe, the stateless
cache (ttlMs, cacheScope, continuations), listen streams shared by several clients, handshake-era
clients bridged onto a stateless-only server, and the mixed-era refusals.

The tests play the daemon and the server around one `RelayCore` (tests/unit/relay_driver.py) and
decide what time it is through the `now` every event brings: nothing here waits for anything.
"""

from __future__ import annotations

import json

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import Snapshot
from lazyd.core.eras.versions import (
    CLIENT_CAPABILITIES_META,
    CLIENT_INFO_META,
    LOG_LEVEL_META,
    PROTOCOL_VERSION_META,
    SERVER_INFO_META,
    SUBSCRIPTION_ID_META,
)
from lazyd.core.relay.jsonrpc import JsonId, JsonObj
from lazyd.core.relay.core import Phase
from tests.unit.relay_driver import (
    BARE_PARAMS,
    CLIENT_PARAMS,
    INIT_RESULT,
    NOT_FOUND,
    PROMPTS,
    TOOLS,
    Driver,
    Out,
    notification,
    request,
    result,
    warm_snapshot,
)
from tests.unit.stateless_relay_support import (
    CAPS,
    DISCOVERY,
    PV,
    SERVER_INFO,
    UNSUPPORTED_INIT,
    driver,
    known_stateless,
    meta,
    page,
    serve_stateless,
    stateless_running,
)

LISTEN_CAPS: JsonObj = {**CAPS, "resources": {"listChanged": True, "subscribe": True}}


def stored(d: Driver, key_start: str) -> list[str]:
    return sorted(k for k in d.core.snapshot.stateless if k.startswith(key_start))


def sent(d: Driver, method: str) -> list[JsonObj]:
    return [m for m in d.sent_to_server if m.get("method") == method]


def listens(d: Driver) -> list[JsonObj]:
    return sent(d, "subscriptions/listen")


def listen_ack(out: Out, cid: int) -> JsonObj:
    acks = [m for m in out.client(cid) if m.get("method") == "notifications/subscriptions/acknowledged"]
    assert len(acks) == 1, out.client(cid)
    params: JsonObj = acks[0]["params"]
    return params


def answer_of(out: Out, cid: int, msg_id: JsonId) -> JsonObj:
    found = [m for m in out.client(cid) if m.get("id") == msg_id and "method" not in m]
    assert len(found) == 1, out.client(cid)
    return found[0]


# ---- era detection -------------------------------------------------------------------------------


def test_a_first_start_probes_the_era_with_the_waking_clients_identity_then_replays_its_handshake() -> None:
    d, _ = driver()
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    out = d.spawned()
    probe_meta = {"_meta": {PROTOCOL_VERSION_META: PV, CLIENT_INFO_META: CLIENT_PARAMS["clientInfo"],
                            CLIENT_CAPABILITIES_META: CLIENT_PARAMS["capabilities"]}}
    assert out.server == [request(1, "server/discover", probe_meta), request(2, "initialize", CLIENT_PARAMS)]
    d.reply_error(d.upstream[1], rpc.METHOD_NOT_FOUND, "Method not found")
    assert d.core.snapshot.era() == "handshake" and d.core.era.stateless_up is False
    d.answer("initialize", INIT_RESULT)
    assert d.serve_listings().ready
    # Known now: the next start replays the handshake at once, without a probe.
    d.exited()
    last = max(m["id"] for m in d.sent_to_server if "id" in m)
    assert d.spawned().server == [request(last + 1, "initialize", CLIENT_PARAMS)]


def test_a_probe_never_answered_before_the_handshake_completed_means_handshake_era_only() -> None:
    d, _ = driver()
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.spawned()
    d.answer("initialize", INIT_RESULT)
    out = d.serve_listings()
    assert out.ready and d.core.era.stateless_up is False
    # Recorded as a -32601, so a stateless-capable client falls back at once, from cache.
    assert d.core.snapshot.discover["*"]["error"]["code"] == rpc.METHOD_NOT_FOUND
    probe = d.ask(1, 5, "server/discover", meta())
    assert probe.client(1)[0]["error"]["code"] == rpc.METHOD_NOT_FOUND


def test_a_server_that_locks_its_connection_to_the_stateless_era_is_recorded_and_its_handshake_client_bridged() -> None:
    d, _ = driver()
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.ask(1, 1, "tools/call", {"name": "echo", "arguments": {"x": 1}})
    d.spawned()
    out = serve_stateless(d)
    snapshot = d.core.snapshot
    assert snapshot.era() == "stateless" and snapshot.mixed_connection is False
    assert out.ready and d.core.phase is Phase.READY and d.core.instance is None
    # The waiting initialize is answered from the discovery, in the client's own era.
    init = answer_of(out, 1, 0)["result"]
    assert init == {"protocolVersion": "2025-11-25", "capabilities": CAPS, "serverInfo": SERVER_INFO, "instructions": "hi"}
    # The listings were fetched under the client's envelope; the relay opened its listen stream.
    fetched = sent(d, "tools/list")[0]["params"]["_meta"]
    assert fetched[CLIENT_INFO_META] == CLIENT_PARAMS["clientInfo"] and fetched[PROTOCOL_VERSION_META] == PV
    assert listens(d)[0]["params"]["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}
    # The queued call went upstream with the same envelope, and its result lost the 2026 fields.
    call = d.one_pending("tools/call")
    assert call["params"]["_meta"][CLIENT_CAPABILITIES_META] == CLIENT_PARAMS["capabilities"]
    assert call["params"]["arguments"] == {"x": 1}
    out = d.reply(call, {"content": [], "resultType": "complete", "_meta": {SERVER_INFO_META: SERVER_INFO}})
    assert out.client(1) == [result(1, {"content": []})]


def test_a_server_that_answers_both_eras_on_one_connection_serves_handshake_clients_natively() -> None:
    d, _ = driver()
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.spawned()
    d.reply(d.upstream[1], DISCOVERY)
    d.answer("initialize", INIT_RESULT)
    assert d.serve_listings().ready
    assert d.core.snapshot.mixed_connection is True and d.core.instance is not None
    # Next start: probe and handshake both, handshake clients native, no bridge.
    d.exited()
    out = d.spawned()
    assert [m["method"] for m in out.server] == ["server/discover", "initialize"]


def test_an_initialize_refused_with_stateless_versions_is_itself_stateless_evidence() -> None:
    # Known handshake-era (no probe), but the server was since replaced by a stateless-only one.
    d, _ = driver(Snapshot(discover={"*": {"error": NOT_FOUND}}, last_params=CLIENT_PARAMS))
    d.attach(1)
    d.ask(1, 0, "tools/call", {"name": "echo"})
    assert [m["method"] for m in d.spawned().server] == ["initialize"]
    out = d.server_says({"jsonrpc": "2.0", "id": 1, "error": UNSUPPORTED_INIT})
    assert not out.aborts and [m["method"] for m in out.server] == ["server/discover"]
    d.upstream.pop(1)
    out = serve_stateless(d)
    assert out.ready and d.core.snapshot.era() == "stateless"
    assert d.one_pending("tools/call")["params"]["_meta"][PROTOCOL_VERSION_META] == PV


def test_a_handshake_refused_by_a_handshake_only_server_still_aborts_the_start() -> None:
    d, _ = driver()
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.spawned()
    assert d.reply_error(d.upstream[2], rpc.INVALID_PARAMS, "bad version").aborts == []  # the probe decides
    out = d.reply_error(d.upstream[1], rpc.METHOD_NOT_FOUND, "Method not found")
    assert len(out.aborts) == 1 and "bad version" in out.aborts[0]
    assert "bad version" in answer_of(out, 1, 0)["error"]["message"]


# ---- stateless clients served from cache ----------------------------------------------------------


def test_a_stateless_session_opens_from_cache_without_waking_the_server() -> None:
    d, clock = stateless_running(1)
    d.exited("stopped")
    before = len(d.sent_to_server)
    clock.now += 10
    out = d.ask(1, "d", "server/discover", meta())
    # Served with the ttl it has left, not the original one.
    assert answer_of(out, 1, "d")["result"] == {**DISCOVERY, "ttlMs": 50_000}
    listing = d.ask(1, 2, "tools/list", meta())
    tools = answer_of(listing, 1, 2)["result"]
    assert tools["tools"] == TOOLS and tools["ttlMs"] == 50_000 and tools["cacheScope"] == "public"
    assert not out.want and not listing.want and len(d.sent_to_server) == before and d.core.phase is Phase.DOWN


def test_an_expired_listing_is_served_stale_while_the_server_sleeps_and_fetched_again_once_it_runs() -> None:
    d, clock = stateless_running(1)
    d.exited("stopped")
    asker = meta()
    clock.now += 59.999
    assert d.ask(1, 6, "tools/list", asker).client(1)[0]["result"]["ttlMs"] == 1
    clock.now += 0.001
    # Asleep: the stale listing answers the session start, marked stale; nothing is started.
    out = d.ask(1, 7, "tools/list", asker)
    assert not out.want and answer_of(out, 1, 7)["result"] == {**page(TOOLS), "ttlMs": 0}
    out = d.ask(1, 70, "tools/call", {"name": "t", "_meta": asker["_meta"]})
    assert out.want
    d.spawned()
    new_tools = [*TOOLS, {"name": "new", "inputSchema": {"type": "object"}}]
    serve_stateless(d, {"tools/list": page(new_tools), "prompts/list": page(PROMPTS, "prompts")})
    # The start refreshed it: stored anew, served from cache again for the next 60 s.
    fresh = answer_of(d.ask(1, 8, "tools/list", asker), 1, 8)["result"]
    assert fresh["tools"] == new_tools and fresh["ttlMs"] == 60_000


def test_a_ttl_of_zero_is_fetched_from_the_live_server_and_served_stale_only_while_it_sleeps() -> None:
    d, clock = driver(known_stateless())
    d.attach(1)
    d.spawned()
    serve_stateless(d, {"tools/list": page(TOOLS, ttl=0), "prompts/list": page(PROMPTS, "prompts")})
    asker = meta()
    out = d.ask(1, 1, "tools/list", asker)  # READY: fetched from the live server, not the cache
    assert out.client(1) == [] and len(d.pending("tools/list")) == 1
    d.reply(d.one_pending("tools/list"), page(TOOLS, ttl=0))
    d.exited("stopped")
    out = d.ask(1, 2, "tools/list", asker)
    assert not out.want and answer_of(out, 1, 2)["result"] == page(TOOLS, ttl=0)


def test_a_listing_without_a_ttl_is_kept_until_a_change_or_the_next_start() -> None:
    d, clock = stateless_running(1)
    tools = {"tools": TOOLS, "resultType": "complete", "cacheScope": "public"}
    d.exited()
    d.spawned()
    serve_stateless(d, {"tools/list": tools, "prompts/list": page(PROMPTS, "prompts")})
    d.exited()
    clock.now += 365 * 86_400
    out = d.ask(1, 1, "tools/list", meta())
    assert answer_of(out, 1, 1)["result"] == {**tools, "tools": TOOLS} and not out.want


def test_a_private_listing_is_never_served_to_another_client_identity() -> None:
    d, _ = stateless_running(1, 2)
    d.core.snapshot.stateless.clear()
    alice, bob = meta("alice"), meta("bob")
    d.ask(1, 1, "tools/list", alice)
    d.reply(d.one_pending("tools/list"), page(TOOLS, scope="private"))
    d.exited("stopped")
    assert answer_of(d.ask(1, 2, "tools/list", alice), 1, 2)["result"]["tools"] == TOOLS
    out = d.ask(2, 3, "tools/list", bob)
    assert out.visible() == [("WantServer",)]


def test_a_result_that_turned_private_stops_being_served_to_others() -> None:
    d, _ = stateless_running(1, 2)  # the start stored public listings
    assert stored(d, "tools/list|") and all(k.endswith("|*") for k in stored(d, "tools/list|"))
    d.server_says(notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: listens(d)[0]["id"]}}))
    d.reply(d.one_pending("tools/list"), page(TOOLS, scope="private"))
    assert not any(k.endswith("|*") for k in stored(d, "tools/list|"))
    assert d.ask(2, 1, "tools/list", meta("someone-else")).client(2) == []


def test_requests_carrying_input_responses_or_request_state_bypass_the_cache() -> None:
    d, _ = stateless_running(1)
    before = dict(d.core.snapshot.stateless)
    continuation = {**meta(), "requestState": "opaque"}
    d.ask(1, 1, "tools/list", continuation)
    forwarded = d.one_pending("tools/list")
    assert forwarded["params"]["requestState"] == "opaque"
    d.reply(forwarded, page([{"name": "other"}]))
    assert d.core.snapshot.stateless == before


def test_an_input_required_result_reaches_a_stateless_client_untouched_but_for_its_id() -> None:
    d, _ = stateless_running(1)
    d.ask(1, "call-1", "tools/call", {**meta(), "name": "ask", "arguments": {}})
    call = d.one_pending("tools/call")
    asked = {"resultType": "input_required", "requestState": "s1",
             "inputRequests": {"q": {"method": "elicitation/create", "params": {"message": "name?"}}}}
    assert d.reply(call, asked).client(1) == [result("call-1", asked)]
    # The retry is an ordinary request: forwarded as is, result passed through.
    retry = {**meta(), "name": "ask", "arguments": {}, "inputResponses": {"q": {"action": "accept"}}, "requestState": "s1"}
    d.ask(1, "call-2", "tools/call", retry)
    assert d.one_pending("tools/call")["params"]["inputResponses"] == {"q": {"action": "accept"}}


def test_a_stateless_progress_token_is_rewritten_like_any_other() -> None:
    d, _ = stateless_running(1, 2)
    d.ask(1, 5, "tools/call", {**meta(progressToken=5), "name": "slow"})
    d.ask(2, 5, "tools/call", {**meta(progressToken=5), "name": "slow"})
    first, second = d.pending("tools/call")
    assert first["params"]["_meta"]["progressToken"] != second["params"]["_meta"]["progressToken"]
    out = d.server_says(notification("notifications/progress", {"progressToken": second["params"]["_meta"]["progressToken"], "progress": 1}))
    assert out.client(2) == [notification("notifications/progress", {"progressToken": 5, "progress": 1})] and out.client(1) == []


def test_concurrent_misses_for_one_client_identity_share_one_fetch() -> None:
    d, _ = stateless_running(1, 2)
    d.core.snapshot.stateless.clear()
    d.ask(1, 1, "tools/list", meta("same"))
    d.ask(2, 9, "tools/list", meta("same"))
    out = d.reply(d.one_pending("tools/list"), page(TOOLS))
    assert answer_of(out, 1, 1)["result"]["tools"] == TOOLS and answer_of(out, 2, 9)["result"]["tools"] == TOOLS


def test_a_paginated_listing_is_merged_into_one_page() -> None:
    d, _ = stateless_running(1)
    d.core.snapshot.stateless.clear()
    d.ask(1, 1, "tools/list", meta())
    d.reply(d.one_pending("tools/list"), page([TOOLS[0]], ttl=30_000, nextCursor="p2"))
    nxt = d.one_pending("tools/list")
    assert nxt["params"]["cursor"] == "p2" and nxt["params"]["_meta"][CLIENT_INFO_META]["name"] == "modern"
    out = d.reply(nxt, page([TOOLS[1]], ttl=60_000, scope="private"))
    merged = answer_of(out, 1, 1)["result"]
    assert merged["tools"] == TOOLS and merged["ttlMs"] == 30_000 and merged["cacheScope"] == "private"
    assert "nextCursor" not in merged


# ---- mixed eras: refusals -----------------------------------------------------------------------


def test_a_stateless_client_of_a_handshake_only_server_gets_the_supported_versions_without_a_start() -> None:
    d, _ = driver(warm_snapshot())
    d.attach(1)
    out = d.ask(1, 4, "tools/list", meta())
    err = answer_of(out, 1, 4)["error"]
    assert err["code"] == -32022 and err["data"] == {"requested": PV, "supported": ["2025-11-25"]}
    assert "2025-11-25" in err["message"] and not out.want
    # Discovery itself gets the recorded -32601, so an `auto` client falls back to initialize.
    assert answer_of(d.ask(1, 5, "server/discover", meta()), 1, 5)["error"]["code"] == rpc.METHOD_NOT_FOUND


def test_stateless_requests_queued_for_a_server_that_turns_out_handshake_only_are_refused() -> None:
    d, _ = driver()
    d.attach(1)
    assert d.ask(1, 1, "tools/call", {**meta(), "name": "echo"}).want
    d.spawned()
    out = d.reply_error(d.upstream[1], rpc.METHOD_NOT_FOUND, "Method not found")
    assert answer_of(out, 1, 1)["error"]["code"] == -32022


def test_an_unsupported_stateless_version_is_refused_from_the_cached_discovery() -> None:
    d, _ = driver(known_stateless())
    d.attach(1)
    out = d.ask(1, 1, "tools/call", {"_meta": {**meta()["_meta"], PROTOCOL_VERSION_META: "2027-01-01"}, "name": "x"})
    assert answer_of(out, 1, 1)["error"]["data"] == {"requested": "2027-01-01", "supported": [PV]}


def test_methods_the_stateless_era_removed_are_method_not_found() -> None:
    d, _ = stateless_running(1)
    for msg_id, method in enumerate(["ping", "logging/setLevel", "resources/subscribe"]):
        assert answer_of(d.ask(1, msg_id, method, meta()), 1, msg_id)["error"]["code"] == rpc.METHOD_NOT_FOUND


# ---- listen streams -----------------------------------------------------------------------------


def test_listen_streams_of_two_clients_with_the_same_id_each_get_their_own_stamp_and_filter() -> None:
    d, _ = stateless_running(1, 2, discovery={**DISCOVERY, "capabilities": LISTEN_CAPS})
    # Both SDK processes number their first stream "listen-1".
    out1 = d.ask(1, "listen-1", "subscriptions/listen", {**meta("a"), "notifications": {"toolsListChanged": True}})
    assert listen_ack(out1, 1) == {"_meta": {SUBSCRIPTION_ID_META: "listen-1"}, "notifications": {"toolsListChanged": True}}
    out2 = d.ask(2, "listen-1", "subscriptions/listen", {**meta("b"), "notifications": {"resourceSubscriptions": ["demo://n"],
                                                                                         "promptsListChanged": False}})
    assert listen_ack(out2, 2)["notifications"] == {"resourceSubscriptions": ["demo://n"]}
    # One upstream stream, widened for the resource once acknowledged; the older one cancelled.
    wider = out2.server[0]
    assert wider["method"] == "subscriptions/listen" and wider["params"]["notifications"]["resourceSubscriptions"] == ["demo://n"]
    old = listens(d)[0]["id"]
    d.upstream.pop(wider["id"])
    out = d.server_says(notification("notifications/subscriptions/acknowledged",
                                     {"_meta": {SUBSCRIPTION_ID_META: wider["id"]}, "notifications": wider["params"]["notifications"]}))
    assert out.server == [notification("notifications/cancelled", {"requestId": old, "reason": "superseded"})]
    # A late event on the superseded stream is not delivered twice.
    assert d.server_says(notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: old}})).clients() == set()
    stamp = {"_meta": {SUBSCRIPTION_ID_META: wider["id"]}}
    out = d.server_says(notification("notifications/tools/list_changed", stamp))
    assert out.client(1) == [notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: "listen-1"}})]
    assert out.client(2) == []
    out = d.server_says(notification("notifications/resources/updated", {**stamp, "uri": "demo://n"}))
    assert out.client(2) == [notification("notifications/resources/updated", {"_meta": {SUBSCRIPTION_ID_META: "listen-1"}, "uri": "demo://n"})]
    assert out.client(1) == []


def test_a_list_change_on_the_relays_stream_drops_the_cached_listing_and_fetches_it_again() -> None:
    d, _ = stateless_running(1)
    sid = listens(d)[0]["id"]
    out = d.server_says(notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: sid}}))
    assert out.snapshot_changed and not stored(d, "tools/list|")
    d.reply(d.one_pending("tools/list"), page([{"name": "fresh"}]))
    assert answer_of(d.ask(1, 1, "tools/list", meta()), 1, 1)["result"]["tools"] == [{"name": "fresh"}]


def test_a_listen_stream_needs_no_running_server_and_outlives_restarts() -> None:
    d, _ = driver(known_stateless())
    d.attach(1)
    out = d.ask(1, "L", "subscriptions/listen", {**meta(), "notifications": {"toolsListChanged": True}})
    assert listen_ack(out, 1)["notifications"] == {"toolsListChanged": True} and not out.want
    assert d.core.inflight_count() == 0  # an open stream does not keep a server up
    for _ in range(2):  # the relay's own stream is opened again at every start
        d.spawned()
        serve_stateless(d)
        sid = listens(d)[-1]["id"]
        out = d.server_says(notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: sid}}))
        assert [m for m in out.client(1) if m["method"] == "notifications/tools/list_changed"] == [
            notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: "L"}})]
        d.exited()
    assert len(listens(d)) == 2


def test_a_cancelled_listen_stream_gets_nothing_more_and_a_server_without_listen_refuses_it() -> None:
    d, _ = stateless_running(1)
    d.ask(1, 3, "subscriptions/listen", {**meta(), "notifications": {"toolsListChanged": True}})
    assert d.tell(1, "notifications/cancelled", {"requestId": 3}).server == []
    sid = listens(d)[0]["id"]
    assert d.server_says(notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: sid}})).client(1) == []
    no_listen = known_stateless({**DISCOVERY, "capabilities": {"tools": {"listChanged": False}}})
    d2, _ = driver(no_listen)
    d2.attach(1)
    assert answer_of(d2.ask(1, 1, "subscriptions/listen", {**meta(), "notifications": {}}), 1, 1)["error"]["code"] == rpc.METHOD_NOT_FOUND


def test_a_start_forwards_queued_requests_only_after_its_listen_stream_is_acknowledged() -> None:
    d, _ = driver(known_stateless())
    d.attach(1)
    d.ask(1, 1, "tools/call", {**meta(), "name": "add_tool"})
    d.spawned()
    d.reply(d.one_pending("server/discover"), DISCOVERY)
    d.reply(d.one_pending("tools/list"), page(TOOLS))
    d.reply(d.one_pending("prompts/list"), page(PROMPTS, "prompts"))
    assert d.pending("tools/call") == [] and d.core.phase is Phase.REFRESH
    listen = d.one_pending("subscriptions/listen")
    d.upstream.pop(listen["id"])
    out = d.server_says(notification("notifications/subscriptions/acknowledged", {"_meta": {SUBSCRIPTION_ID_META: listen["id"]}, "notifications": {}}))
    assert out.ready and len(d.pending("tools/call")) == 1


# ---- handshake-era clients bridged onto a stateless-only server ----------------------------------


def test_a_handshake_session_opens_from_the_stateless_cache_without_waking_the_server() -> None:
    d, clock = stateless_running(1)
    d.exited("stopped")
    clock.now += 86_400  # the handshake era has no ttl: these clients get the cache whatever its age
    d.attach(2)
    out = d.handshake(2, 0, BARE_PARAMS)
    assert answer_of(out, 2, 0)["result"]["serverInfo"] == SERVER_INFO
    assert d.ask(2, 1, "tools/list").client(2) == [result(1, {"tools": TOOLS})]
    assert d.ask(2, 2, "ping").client(2) == [result(2, {})]
    assert d.ask(2, 3, "resources/list").client(2)[0]["error"]["code"] == rpc.METHOD_NOT_FOUND  # not advertised
    assert d.core.phase is Phase.DOWN


def test_a_handshake_clients_request_carries_its_own_identity_and_log_level_upstream() -> None:
    d, _ = stateless_running(1, 2)
    d.handshake(2, 0, BARE_PARAMS)
    d.ask(2, 1, "logging/setLevel", {"level": "info"})
    assert sent(d, "logging/setLevel") == []  # no such request in the stateless era
    d.ask(2, 2, "tools/call", {"name": "echo", "_meta": {"progressToken": "t"}})
    call = d.one_pending("tools/call")["params"]["_meta"]
    assert call[CLIENT_INFO_META] == BARE_PARAMS["clientInfo"] and call[LOG_LEVEL_META] == "info"
    assert call["progressToken"] != "t"
    # The server logs for that request: the bridged client hears it, a client that never opted in doesn't.
    out = d.server_says(notification("notifications/message", {"level": "info", "data": "x"}))
    assert out.clients() == {2}


def test_input_required_becomes_a_request_to_the_very_client_and_the_call_is_retried() -> None:
    d, _ = stateless_running(1)
    d.handshake(1, 0, CLIENT_PARAMS)
    d.ask(1, "c", "tools/call", {"name": "ask", "arguments": {"a": 1}})
    first = d.one_pending("tools/call")
    asked = {"resultType": "input_required", "requestState": "s1",
             "inputRequests": {"who": {"method": "elicitation/create", "params": {"message": "Your name?"}}}}
    out = d.reply(first, asked)
    (elicit,) = out.client(1)
    assert elicit["method"] == "elicitation/create" and elicit["params"] == {"message": "Your name?"} and out.done == []
    out = d.send(1, result(elicit["id"], {"action": "accept", "content": {"name": "ada"}}))
    retry = d.one_pending("tools/call")["params"]
    assert retry["inputResponses"] == {"who": {"action": "accept", "content": {"name": "ada"}}}
    assert retry["requestState"] == "s1" and retry["arguments"] == {"a": 1} and retry["_meta"][PROTOCOL_VERSION_META] == PV
    out = d.reply(d.one_pending("tools/call"), {"content": [{"type": "text", "text": "hello ada"}], "resultType": "complete"})
    assert out.client(1) == [result("c", {"content": [{"type": "text", "text": "hello ada"}]})]
    assert d.core.bridge.rounds == {} and d.core.bridge.input_waits == {}


def test_input_a_handshake_client_did_not_declare_is_declined_or_refused() -> None:
    d, _ = stateless_running(1)
    d.handshake(1, 0, BARE_PARAMS)
    d.ask(1, 1, "tools/call", {"name": "ask"})
    d.reply(d.one_pending("tools/call"), {"resultType": "input_required",
                                          "inputRequests": {"e": {"method": "elicitation/create", "params": {}}}})
    assert d.one_pending("tools/call")["params"]["inputResponses"] == {"e": {"action": "decline"}}
    d.ask(1, 2, "prompts/get", {"name": "p"})
    out = d.reply(d.one_pending("prompts/get"), {"resultType": "input_required",
                                                 "inputRequests": {"s": {"method": "sampling/createMessage", "params": {}}}})
    err = answer_of(out, 1, 2)["error"]
    assert err["code"] == -32021 and err["data"] == {"requiredCapabilities": {"sampling": {}}}


def test_a_server_that_keeps_asking_for_input_is_given_up_on() -> None:
    d, _ = stateless_running(1)
    d.handshake(1, 0, CLIENT_PARAMS)
    d.ask(1, 1, "tools/call", {"name": "loop"})
    for _ in range(10):
        out = d.reply(d.one_pending("tools/call"), {"resultType": "input_required", "requestState": "again"})
    out = d.reply(d.one_pending("tools/call"), {"resultType": "input_required", "requestState": "again"})
    assert "more than 10 times" in answer_of(out, 1, 1)["error"]["message"]


def test_a_handshake_clients_resource_subscription_rides_the_relays_listen_stream() -> None:
    d, _ = stateless_running(1, 2, discovery={**DISCOVERY, "capabilities": LISTEN_CAPS})
    d.handshake(1, 0, CLIENT_PARAMS)
    d.handshake(2, 0, BARE_PARAMS)
    out = d.ask(1, 1, "resources/subscribe", {"uri": "file:///a"})
    assert out.client(1) == [result(1, {})]
    wider = d.one_pending("subscriptions/listen")
    assert wider["params"]["notifications"]["resourceSubscriptions"] == ["file:///a"]
    d.upstream.pop(wider["id"])
    stamp = {"_meta": {SUBSCRIPTION_ID_META: wider["id"]}}
    d.server_says(notification("notifications/subscriptions/acknowledged", {**stamp, "notifications": wider["params"]["notifications"]}))
    out = d.server_says(notification("notifications/resources/updated", {**stamp, "uri": "file:///a"}))
    assert out.client(1) == [notification("notifications/resources/updated", {"uri": "file:///a"})] and out.client(2) == []
    # A list change reaches every initialized handshake-era client, as the handshake era spells it.
    out = d.server_says(notification("notifications/prompts/list_changed", stamp))
    assert out.client(1) == out.client(2) == [notification("notifications/prompts/list_changed")]


def test_a_stateless_and_a_bridged_handshake_client_on_one_stateless_process_each_get_their_own_era() -> None:
    d, _ = stateless_running(1, 2)
    d.handshake(2, 0, CLIENT_PARAMS)
    d.ask(1, "m", "tools/call", {**meta("modern-client"), "name": "whoami"})
    d.ask(2, "m", "tools/call", {"name": "whoami"})
    modern, legacy = d.pending("tools/call")
    assert modern["params"]["_meta"][CLIENT_INFO_META]["name"] == "modern-client"
    assert legacy["params"]["_meta"][CLIENT_INFO_META]["name"] == "test-client"
    stamped = {"content": [], "resultType": "complete", "_meta": {SERVER_INFO_META: SERVER_INFO}}
    assert d.reply(modern, stamped).client(1) == [result("m", stamped)]
    assert d.reply(legacy, stamped).client(2) == [result("m", {"content": []})]


def test_the_handshake_view_of_a_stateless_only_server_is_what_a_handshake_client_would_be_served() -> None:
    d, _ = stateless_running(1)
    view = d.core.handshake_view(BARE_PARAMS)
    assert view is not None and view.result["protocolVersion"] == "2025-11-25"
    assert view.listings["tools/list"].items == TOOLS and "resources/list" not in view.listings


# ---- the snapshot ----------------------------------------------------------------------------------


def test_stateless_entries_and_era_facts_survive_a_round_trip_and_old_files_still_load() -> None:
    d, _ = stateless_running(1)
    snapshot = d.core.snapshot
    again = Snapshot.from_json(json.loads(json.dumps(snapshot.to_json())))
    assert again.to_json() == snapshot.to_json() and again.era() == "stateless"
    old = snapshot.to_json()
    for key in ("stateless", "last_meta", "mixed_connection"):
        del old[key]
    assert Snapshot.from_json(old).stateless == {}


def test_a_check_merge_keeps_one_era_verdict() -> None:
    target = Snapshot(discover={"*": {"error": NOT_FOUND}})
    target.merge(known_stateless())
    assert target.era() == "stateless" and "*" not in target.discover
    back = known_stateless()
    back.merge(Snapshot(discover={"*": {"error": NOT_FOUND}}))
    assert back.era() == "handshake"


def test_listing_counts_for_status_come_from_the_stateless_cache_of_a_stateless_only_server() -> None:
    d, _ = stateless_running(1)
    assert d.core.snapshot.listing_counts() == {"tools": len(TOOLS), "prompts": len(PROMPTS)}


def test_another_clients_task_stays_hidden_from_stateless_and_bridged_clients() -> None:
    d, _ = stateless_running(1, 2, 3)
    d.handshake(3, 0, BARE_PARAMS)
    d.ask(1, 1, "tools/call", {**meta(), "name": "long"})
    d.reply(d.one_pending("tools/call"), {"task": {"taskId": "t-1", "status": "working"}, "resultType": "complete"})
    for cid, params in ((2, meta("other")), (3, {})):
        out = d.ask(cid, 9, "tasks/get", {**params, "taskId": "t-1"})
        assert answer_of(out, cid, 9)["error"]["message"] == "Invalid params: unknown task" and out.server == []
    d.ask(1, 10, "tasks/get", {**meta(), "taskId": "t-1"})
    assert len(d.pending("tasks/get")) == 1


def test_a_change_announced_while_a_listing_is_being_fetched_makes_the_relay_fetch_it_again() -> None:
    d, _ = stateless_running(1)
    d.core.snapshot.stateless.clear()
    d.ask(1, 1, "tools/list", meta())
    stale = d.one_pending("tools/list")
    sid = listens(d)[0]["id"]
    d.server_says(notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: sid}}))
    fresh = [m for m in d.pending("tools/list") if m["id"] != stale["id"]]
    assert len(fresh) == 1  # the relay's own refresh and the client's fetch are the same key here
    # The answer of the fetch that predates the change is not what the client gets.
    assert d.reply(stale, page([{"name": "before"}])).client(1) == []
    out = d.reply(fresh[0], page([{"name": "after"}]))
    assert answer_of(out, 1, 1)["result"]["tools"] == [{"name": "after"}]
    assert answer_of(d.ask(1, 2, "tools/list", meta()), 1, 2)["result"]["tools"] == [{"name": "after"}]


def test_a_bridged_subscription_to_a_server_without_subscriptions_is_refused_as_that_server_would() -> None:
    d, _ = stateless_running(1)  # its discovery advertises no resources.subscribe
    d.handshake(1, 0, CLIENT_PARAMS)
    out = d.ask(1, 1, "resources/subscribe", {"uri": "file:///a"})
    assert answer_of(out, 1, 1)["error"]["code"] == rpc.METHOD_NOT_FOUND and out.server == []


def test_a_daemon_side_change_reaches_a_stateless_client_on_its_listen_stream_once() -> None:
    d, _ = driver(known_stateless())
    d.attach(1, 2)
    d.ask(1, "L", "subscriptions/listen", {**meta(), "notifications": {"toolsListChanged": True}})
    d.ask(2, "M", "subscriptions/listen", {**meta(), "notifications": {"promptsListChanged": True}})
    out = d.record(d.core.announce_list_changed("notifications/tools/list_changed", now=d.clock()))
    assert out.client(1) == [notification("notifications/tools/list_changed", {"_meta": {SUBSCRIPTION_ID_META: "L"}})]
    assert out.client(2) == []  # it did not ask for tool changes
    assert not out.want and out.server == []
