"""Parts of the relay core alone, each built with nothing but the data it holds and a stand-in
port: the queue, the routes' ids, the two ways a request goes upstream, and the stateless cache
answering by the time an event brought. (The era detection and the listing engine have modules
of their own: test_era_state.py, test_listings.py.)
"""

from __future__ import annotations

import json

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.asker import Asker
from lazyd.core.cache import Snapshot
from lazyd.core.eras.state import EraState
from lazyd.core.relay.jsonrpc import JsonObj, Message
from lazyd.core.relay.listings import ListingEngine
from lazyd.core.relay.client_state import ClientState
from lazyd.core.relay.actions import Note, Phase, ToClient, ToServer, WantServer
from lazyd.core.relay.waiting import Waiting
from lazyd.core.relay.upstream import forward, internal
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import Routes
from lazyd.core.eras.stateless_cache import StatelessCache


def message(line: bytes) -> Message:
    msg = rpc.parse(line)
    assert isinstance(msg, Message)
    return msg


def call(msg_id: int | str, **params: object) -> Message:
    return message(rpc.request_line(msg_id, "tools/call", {"name": "echo", **params}))


# ---- the queue -----------------------------------------------------------------------------------


def test_the_queue_asks_for_a_server_and_keeps_arrival_order_when_taken_and_held_again() -> None:
    queue = Waiting()
    assert queue.add(1, call(1), "needs the server") == [WantServer(), Note("client 1 tools/call id=1 queued: needs the server")]
    queue.hold(2, call(2))
    taken = queue.take()
    assert [cid for cid, _ in taken] == [1, 2] and len(queue) == 0
    for cid, msg in taken:
        queue.hold(cid, msg)
    assert [cid for cid, _ in queue] == [1, 2]


def test_failing_the_queue_answers_only_requests_of_attached_clients_and_empties_it() -> None:
    queue = Waiting()
    queue.hold(1, call(1))
    queue.hold(2, call("x"))
    queue.hold(1, message(rpc.notification_line("notifications/progress", {})))
    out = queue.fail("lazyd: gone", clients={1})
    assert out == [ToClient(1, rpc.error_line(1, rpc.SERVER_UNAVAILABLE, "lazyd: gone"), 1)] and len(queue) == 0


def test_a_cancel_drops_the_queued_request_of_that_client_and_id_only() -> None:
    queue = Waiting()
    queue.hold(1, call(5))
    queue.hold(2, call(5))
    assert queue.requests() == 2
    assert not queue.cancel(1, 6) and queue.cancel(1, 5) and not queue.cancel(1, 5)
    assert [cid for cid, _ in queue] == [2]
    queue.drop_client(2)
    assert len(queue) == 0


# ---- routes and the way upstream ---------------------------------------------------------------


def test_relay_ids_are_never_reused_and_map_back_to_their_owner() -> None:
    routes = Routes()
    first = forward(routes, 1, call(7))
    second = internal(routes, "tools/list", None, "fetch:1:tools/list")
    third = forward(routes, 2, call(7))
    ids = [json.loads(a.line)["id"] for a in (*first, second, *third) if isinstance(a, ToServer)]
    assert ids == [1, 2, 3]
    assert routes.by_client == {(1, 7): 1, (2, 7): 3}
    assert routes.upstream[2].cid is None and routes.upstream[2].purpose == "fetch:1:tools/list"
    routes.process_gone()
    assert not routes.upstream and not routes.by_client
    assert json.loads(internal(routes, "ping", None, "").line)["id"] == 4  # still never reused


def test_a_forwarded_progress_token_becomes_the_relay_id_and_the_owner_is_remembered() -> None:
    routes = Routes()
    out = forward(routes, 3, call(9, _meta={"progressToken": "tok"}))
    sent = json.loads(out[0].line) if isinstance(out[0], ToServer) else {}
    assert sent["id"] == 1 and sent["params"]["_meta"]["progressToken"] == 1
    assert routes.tokens == {1: (3, "tok")}


def test_the_process_ending_keeps_what_belongs_to_the_clients() -> None:
    routes = Routes()
    forward(routes, 1, call(1, _meta={"progressToken": 1}))
    routes.tasks["t"] = 1
    routes.subscriptions["file:///a"] = {1}
    routes.levels[1] = "debug"
    routes.process_gone()
    assert not routes.tokens and not routes.tasks
    assert routes.subscriptions == {"file:///a": {1}} and routes.levels == {1: "debug"}


# ---- the stateless cache, by the time of the event ---------------------------------------------


def cache_part(now: float = 1_000.0) -> StatelessCache:
    snapshot = Snapshot()
    routes = Routes()
    era = EraState("auto", snapshot)
    listings = ListingEngine(lambda method, params, purpose: internal(routes, method, params, purpose))
    return StatelessCache(RelayShared("test", snapshot, era, listings, routes, {1: ClientState(1)}, now=now))


def answer(ttl_ms: int, stored_at: float) -> JsonObj:
    return {"result": {"tools": [], "ttlMs": ttl_ms}, "stored_at": stored_at}


def test_a_stored_result_is_served_with_the_ttl_it_has_left_at_the_events_time() -> None:
    cache = cache_part(now=1_010.0)
    line = cache.cached_answer(4, answer(60_000, 1_000.0))
    assert line is not None and json.loads(line)["result"]["ttlMs"] == 50_000
    cache.shared.now = 1_059.5
    line = cache.cached_answer(4, answer(60_000, 1_000.0))
    assert line is not None and json.loads(line)["result"]["ttlMs"] == 500


def test_an_expired_result_is_served_stale_while_the_server_sleeps_and_asked_again_while_it_runs() -> None:
    cache = cache_part(now=2_000.0)
    line = cache.cached_answer(4, answer(1_000, 1_000.0))
    assert line is not None and json.loads(line)["result"]["ttlMs"] == 0
    cache.shared.phase = Phase.READY
    assert cache.cached_answer(4, answer(1_000, 1_000.0)) is None


def test_discovery_is_stored_with_the_time_the_event_brought() -> None:
    cache = cache_part(now=1_234.5)
    cache.record_discover("2026-07-28|someone", {"result": {"supportedVersions": ["2026-07-28"], "cacheScope": "public"}})
    assert cache.shared.snapshot.discover["2026-07-28"]["stored_at"] == 1_234.5


def test_the_relays_own_requests_borrow_the_queued_clients_identity() -> None:
    cache = cache_part()
    cache.shared.queue.hold(1, message(rpc.request_line(1, "initialize", {"clientInfo": {"name": "cc", "version": "2"},
                                                                   "capabilities": {"roots": {}}})))
    assert cache.start_asker("2026-07-28") == Asker("2026-07-28", {"name": "cc", "version": "2"}, {"roots": {}})
