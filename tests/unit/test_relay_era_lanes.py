"""The relay core following its lane's start plan (lazyd/core/eras/choice.py), without processes:
a handshake lane replays `initialize` first and asks discovery only after it, a stateless lane
bridges the handshake clients of a server that locks each connection to one era, what is learned
on the way is recorded, and the `era` setting forces either era with clear refusals.
"""

from __future__ import annotations

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import HandshakeEntry, Snapshot, handshake_key
from lazyd.core.eras.choice import EraPolicy, Kind, facts_of
from lazyd.core.eras.versions import LOG_LEVEL_META, PROTOCOL_VERSION_META
from lazyd.core.relay.core import Phase
from tests.unit.relay_driver import CLIENT_PARAMS, INIT_RESULT, PAGES, TOOLS, Driver, request, result
from tests.unit.stateless_relay_support import DISCOVERY, PV, UNSUPPORTED_INIT, driver, known_stateless, meta, page, serve_stateless

SDK_LEGACY_REFUSAL = "this connection serves the handshake protocol era; requests carrying the 2026-07-28 envelope are not accepted on it"


def handshake_lane(snapshot: Snapshot | None = None) -> Driver:
    d, _ = driver(snapshot, lane="handshake")
    return d


def started_handshake(d: Driver, cid: int = 1) -> None:
    """A client's initialize wakes the lane; its process answers the replayed handshake."""
    d.attach(cid)
    d.ask(cid, 0, "initialize", CLIENT_PARAMS)
    out = d.spawned()
    assert [m["method"] for m in out.server] == ["initialize"]  # the connection's first request
    d.answer("initialize", INIT_RESULT)


# ---- a handshake lane ------------------------------------------------------------------------------


def test_a_handshake_lane_replays_initialize_first_and_asks_discovery_only_after_the_handshake() -> None:
    d = handshake_lane()
    d.attach(1)
    assert d.ask(1, 0, "initialize", CLIENT_PARAMS).want
    out = d.spawned()
    assert out.server == [request(1, "initialize", CLIENT_PARAMS)]
    out = d.answer("initialize", INIT_RESULT)
    methods = [m["method"] for m in out.server]
    assert methods[0] == "notifications/initialized" and "server/discover" in methods
    probe = d.one_pending("server/discover")
    assert probe["params"]["_meta"][PROTOCOL_VERSION_META] == PV  # under a real client's envelope
    assert probe["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] == CLIENT_PARAMS["clientInfo"]
    assert d.core.snapshot.handshake_first is True
    # The python SDK's answer on a handshake connection: this connection carries one era.
    out = d.reply_error(probe, rpc.INVALID_REQUEST, SDK_LEGACY_REFUSAL)
    assert out.snapshot_changed and d.core.snapshot.mixed_connection is False
    assert d.core.snapshot.discover == {}  # nothing learned about the server's discovery
    assert d.serve_listings().ready and d.core.process_era() == "handshake"


def test_a_method_not_found_to_discovery_after_the_handshake_records_a_handshake_only_server() -> None:
    d = handshake_lane()
    started_handshake(d)
    d.reply_error(d.one_pending("server/discover"), rpc.METHOD_NOT_FOUND, "Method not found")
    assert d.core.snapshot.discover["*"]["error"]["code"] == rpc.METHOD_NOT_FOUND
    assert facts_of(d.core.snapshot).kind is Kind.HANDSHAKE_ONLY
    d.serve_listings()
    # A stateless client is now refused from what was learned; a probe gets the -32601.
    d.attach(2)
    out = d.ask(2, 1, "tools/list", meta())
    assert out.client(2)[0]["error"]["code"] == -32022 and not d.upstream
    assert d.ask(2, 2, "server/discover", meta()).client(2)[0]["error"]["code"] == rpc.METHOD_NOT_FOUND


def test_a_discover_result_after_the_handshake_makes_the_one_process_serve_both_eras() -> None:
    d = handshake_lane()
    started_handshake(d)
    out = d.answer("server/discover", DISCOVERY)
    assert d.core.snapshot.mixed_connection is True and d.core.era.stateless_up is True
    assert any(m["method"] == "subscriptions/listen" for m in out.server)  # the relay's own stream
    d.serve_listings()
    assert d.core.phase is Phase.READY and d.core.process_era() == "both"
    # A stateless client on this very process is served natively, under a relay id.
    d.attach(2)
    out = d.ask(2, 7, "tools/call", {**meta(), "name": "echo"})
    (sent,) = out.server
    assert sent["method"] == "tools/call" and sent["params"]["_meta"][PROTOCOL_VERSION_META] == PV
    assert d.reply(sent, {"content": []}).client(2) == [result(7, {"content": []})]


def test_a_handshake_lane_of_a_dual_era_server_answers_from_its_recorded_handshake_never_from_discovery() -> None:
    snapshot = known_stateless()
    snapshot.entries[handshake_key(CLIENT_PARAMS)] = HandshakeEntry(CLIENT_PARAMS, INIT_RESULT)
    d = handshake_lane(snapshot)
    d.attach(1)
    out = d.ask(1, 0, "initialize", CLIENT_PARAMS)
    assert out.client(1) == [result(0, INIT_RESULT)] and not out.want  # the server's own handshake
    # With no recorded handshake the process must give it: discovery is another connection's.
    d2 = handshake_lane(known_stateless())
    d2.attach(1)
    assert d2.ask(1, 0, "initialize", CLIENT_PARAMS).want
    assert [m["method"] for m in d2.spawned().server] == ["initialize"]
    out = d2.answer("initialize", INIT_RESULT)
    assert "server/discover" not in [m["method"] for m in out.server]  # mixed is known: False
    assert out.client(1) == [result(0, INIT_RESULT)]


def test_a_first_initialize_refused_by_a_server_with_a_stateless_era_makes_the_lane_bridge_and_is_recorded() -> None:
    d = handshake_lane(known_stateless())
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.spawned()
    init = d.upstream.pop(d.one_pending("initialize")["id"])
    out = d.server_says({"jsonrpc": "2.0", "id": init["id"], "error": UNSUPPORTED_INIT})
    assert d.core.snapshot.handshake_first is False and out.snapshot_changed
    assert [m["method"] for m in out.server] == ["server/discover"]
    out = serve_stateless(d)
    assert out.ready and d.core.process_era() == "stateless"
    # The handshake client is answered through the bridge, from the discovery.
    (answer,) = out.client(1)
    assert answer["id"] == 0 and answer["result"]["serverInfo"] == {"name": "dual", "version": "1.0"}
    assert facts_of(d.core.snapshot).kind is Kind.STATELESS_ONLY


# ---- a stateless lane ------------------------------------------------------------------------------


def test_a_stateless_lane_of_a_server_that_locks_connections_bridges_without_trying_initialize() -> None:
    d, _ = driver(known_stateless())
    d.attach(1)
    out = d.ask(1, 0, "initialize", CLIENT_PARAMS)
    assert out.client(1)[0]["result"]["serverInfo"] == {"name": "dual", "version": "1.0"} and not out.want
    d.tell(1, "notifications/initialized")
    assert d.ask(1, 1, "tools/call", {"name": "echo"}).want
    assert [m["method"] for m in d.spawned().server] == ["server/discover"]
    serve_stateless(d)
    assert d.pending("initialize") == [] and d.core.process_era() == "stateless"


def test_a_bridged_call_that_the_server_refuses_for_want_of_a_back_channel_says_why() -> None:
    d, _ = driver(known_stateless())
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.tell(1, "notifications/initialized")
    d.ask(1, 1, "tools/call", {"name": "sample"})
    d.spawned()
    serve_stateless(d)
    sent = d.one_pending("tools/call")
    text = "Cannot send 'sampling/createMessage': this transport context has no back-channel for server-initiated requests."
    (answer,) = d.reply_error(sent, rpc.INVALID_REQUEST, text).client(1)
    assert answer["id"] == 1 and answer["error"]["code"] == rpc.INVALID_REQUEST
    assert answer["error"]["message"].startswith(text) and "served through the stateless era" in answer["error"]["message"]


# ---- the era setting -------------------------------------------------------------------------------


def test_era_handshake_never_probes_and_refuses_the_stateless_era_without_recording_it() -> None:
    d = handshake_lane(known_stateless())
    d.core.era.policy = EraPolicy("handshake")
    d.attach(1, 2)
    out = d.ask(2, 1, "server/discover", meta())
    assert out.client(2)[0]["error"]["code"] == rpc.METHOD_NOT_FOUND and 'era = "handshake"' in out.client(2)[0]["error"]["message"]
    out = d.ask(2, 2, "tools/list", meta())
    assert out.client(2)[0]["error"]["code"] == -32022 and not out.want
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    assert [m["method"] for m in d.spawned().server] == ["initialize"]
    out = d.answer("initialize", INIT_RESULT)
    assert "server/discover" not in [m["method"] for m in out.server]
    assert d.core.snapshot.discover == known_stateless().discover  # answers of its own never stored


def test_era_stateless_bridges_even_a_server_that_serves_both_eras_on_one_connection() -> None:
    snapshot = known_stateless()
    snapshot.mixed_connection = True
    d, _ = driver(snapshot, lane=None)
    d.core.era.policy = EraPolicy("stateless")
    d.attach(1)
    assert "result" in d.ask(1, 0, "initialize", CLIENT_PARAMS).client(1)[0]
    d.tell(1, "notifications/initialized")
    d.ask(1, 1, "tools/call", {"name": "echo"})
    assert [m["method"] for m in d.spawned().server] == ["server/discover"]
    serve_stateless(d, {"tools/list": page(TOOLS), "prompts/list": page([], "prompts")})
    assert d.pending("initialize") == [] and d.core.process_era() == "stateless"


def test_era_stateless_on_a_server_without_it_fails_clearly_then_refuses_from_the_cache() -> None:
    d, _ = driver(Snapshot(), lane=None)
    d.core.era.policy = EraPolicy("stateless")
    d.attach(1)
    assert d.ask(1, 0, "initialize", CLIENT_PARAMS).want
    d.spawned()
    out = d.reply_error(d.one_pending("server/discover"), rpc.METHOD_NOT_FOUND, "Method not found")
    (answer,) = out.client(1)
    assert answer["id"] == 0 and 'era = "stateless"' in answer["error"]["message"]
    assert "does not speak the stateless era" in answer["error"]["message"] and out.aborts
    d.exited("killed")
    # From now on decided from what was learned: no start, the same words.
    out = d.ask(1, 1, "initialize", CLIENT_PARAMS)
    assert not out.want and 'era = "stateless"' in out.client(1)[0]["error"]["message"]
    assert d.ask(1, 2, "ping").client(1) == [result(2, {})]


def test_a_start_no_client_asked_for_replays_a_handshake_first() -> None:
    snapshot = known_stateless()
    snapshot.last_params = CLIENT_PARAMS
    d, _ = driver(snapshot, lane=None)
    assert [m["method"] for m in d.spawned().server] == ["initialize"]
    assert d.core.lane == "handshake"  # so a handshake-era client joins this process
    d.answer("initialize", INIT_RESULT)
    assert d.serve_listings(PAGES).ready and d.core.process_era() == "handshake"


def test_a_bridged_client_that_set_no_log_level_is_opted_in_to_every_message_as_a_handshake_server_would() -> None:
    d, _ = driver(known_stateless())
    d.attach(1, 2)
    for cid in (1, 2):
        d.ask(cid, 0, "initialize", CLIENT_PARAMS)
        d.tell(cid, "notifications/initialized")
    d.ask(2, 1, "logging/setLevel", {"level": "error"})
    d.ask(1, 1, "tools/call", {"name": "a"})
    d.ask(2, 2, "tools/call", {"name": "b"})
    d.spawned()
    serve_stateless(d)
    levels = {m["params"]["name"]: m["params"]["_meta"].get(LOG_LEVEL_META) for m in d.pending("tools/call")}
    assert levels == {"a": "debug", "b": "error"}
