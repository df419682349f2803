"""The listing engine alone (lazyd/core/relay/listings.py), without a relay core: one engine fetches for
both eras, so each rule is checked for a handshake-era listing and a stateless one.

The engine is given a `send` port that records the page requests and hands out relay ids; a test
answers them as a server would and asserts what the engine asks next and what it completes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.asker import Asker
from lazyd.core.eras.versions import CLIENT_INFO_META, PROTOCOL_VERSION_META
from lazyd.core.relay.jsonrpc import JsonObj, Kind, Message
from lazyd.core.relay.listings import Fetched, ListingEngine, Waiter, drift
from lazyd.core.relay.actions import ToServer

ASKER = Asker("2026-07-28", {"name": "modern", "version": "1"}, {})
OTHER = Asker("2026-07-28", {"name": "other", "version": "1"}, {})


class Server:
    """The engine's send port, and the server answering what it sent."""

    def __init__(self) -> None:
        self.sent: dict[int, tuple[JsonObj, str]] = {}  # relay id -> (request, purpose)
        self.next_id = 1

    def send(self, method: str, params: JsonObj | None, purpose: str) -> ToServer:
        rid, self.next_id = self.next_id, self.next_id + 1
        line = rpc.request_line(rid, method, params)
        self.sent[rid] = (json.loads(line), purpose)
        return ToServer(line)

    def last(self) -> tuple[JsonObj, str]:
        return self.sent[max(self.sent)]

    def answer(self, engine: ListingEngine, request: ToServer | None, value: Any = None, *, error: JsonObj | None = None
               ) -> ToServer | Fetched | None:
        assert request is not None
        rid = json.loads(request.line)["id"]
        _, purpose = self.sent[rid]
        obj: JsonObj = {"jsonrpc": "2.0", "id": rid}
        if error is not None:
            obj["error"] = error
        else:
            obj["result"] = value
        return engine.answer(purpose, Message(Kind.RESPONSE, obj, rid, None))


def engine() -> tuple[ListingEngine, Server]:
    server = Server()
    return ListingEngine(server.send), server


def test_a_handshake_era_listing_is_asked_without_params_then_by_cursor_and_merged_page_by_page() -> None:
    e, server = engine()
    first = e.start("tools/list", "tools/list", "start", None)
    assert first is not None and json.loads(first.line) == {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    second = server.answer(e, first, {"tools": [{"name": "a"}], "nextCursor": "p2"})
    assert isinstance(second, ToServer)
    assert json.loads(second.line)["params"] == {"cursor": "p2"}
    done = server.answer(e, second, {"tools": [{"name": "b"}]})
    assert isinstance(done, Fetched) and done.result is not None
    assert done.fetch.items == [{"name": "a"}, {"name": "b"}]
    assert done.result["tools"] == [{"name": "a"}, {"name": "b"}] and "nextCursor" not in done.result
    assert not e.pending(stateless=False)


def test_a_stateless_listing_carries_its_askers_envelope_on_every_page() -> None:
    e, server = engine()
    first = e.start("tools/list", ASKER.key("tools/list", False), "client", ASKER)
    assert first is not None
    meta = json.loads(first.line)["params"]["_meta"]
    assert meta[PROTOCOL_VERSION_META] == "2026-07-28" and meta[CLIENT_INFO_META] == {"name": "modern", "version": "1"}
    second = server.answer(e, first, {"tools": [], "nextCursor": "c"})
    assert isinstance(second, ToServer)
    params = json.loads(second.line)["params"]
    assert params["cursor"] == "c" and params["_meta"] == meta


def test_the_merged_result_keeps_the_smallest_ttl_and_is_private_if_any_page_was() -> None:
    e, server = engine()
    request: ToServer | Fetched | None = e.start("prompts/list", "k", "client", ASKER)
    pages = [{"prompts": [1], "ttlMs": 9_000, "cacheScope": "public", "nextCursor": "2", "extra": "first"},
             {"prompts": [2], "ttlMs": 3_000, "cacheScope": "private", "nextCursor": "3"},
             {"prompts": [3], "ttlMs": 5_000, "cacheScope": "public"}]
    for page in pages:
        assert isinstance(request, ToServer)
        request = server.answer(e, request, page)
    assert isinstance(request, Fetched) and request.result == {
        "prompts": [1, 2, 3], "ttlMs": 3_000, "cacheScope": "private", "extra": "first"}


def test_pages_that_all_say_public_make_a_public_result_and_one_without_ttl_gives_none() -> None:
    e, server = engine()
    done = server.answer(e, e.start("tools/list", "k", "client", ASKER), {"tools": [], "cacheScope": "public"})
    assert isinstance(done, Fetched) and done.result == {"tools": [], "cacheScope": "public"}
    e2, server2 = engine()
    done = server2.answer(e2, e2.start("tools/list", "k", "client", ASKER), {"tools": []})
    assert isinstance(done, Fetched) and done.result is not None and done.result["cacheScope"] == "private"


def test_a_server_that_never_stops_paginating_is_cut_off_at_the_page_limit() -> None:
    e, server = engine()
    request: ToServer | Fetched | None = e.start("tools/list", "tools/list", "start", None)
    for page in range(1000):  # docs/architecture.md: "at most 1000 pages"
        assert isinstance(request, ToServer), page
        request = server.answer(e, request, {"tools": [page], "nextCursor": "more"})
    assert isinstance(request, Fetched) and len(request.fetch.items) == 1000
    assert len(server.sent) == 1000


def test_discovery_is_taken_as_it_comes_in_one_answer() -> None:
    e, server = engine()
    result = {"supportedVersions": ["2026-07-28"], "nextCursor": "ignored"}
    done = server.answer(e, e.start("server/discover", "d", "client", ASKER), result)
    assert isinstance(done, Fetched) and done.result == result


def test_an_error_completes_the_fetch_with_the_servers_error() -> None:
    e, server = engine()
    e.start("tools/list", "tools/list", "start", None)
    done = server.answer(e, e.start("prompts/list", "prompts/list", "start", None), error={"code": -32601, "message": "no"})
    assert isinstance(done, Fetched) and done.result is None and done.error == {"code": -32601, "message": "no"}
    assert e.pending(stateless=False)  # tools/list is still under way


def test_a_second_ask_for_a_key_joins_the_running_fetch_and_is_answered_with_it() -> None:
    e, server = engine()
    first = e.start("tools/list", "k", "client", ASKER, Waiter(1, "a", "stateless"))
    assert e.start("tools/list", "k", "client", ASKER, Waiter(2, 7, "handshake")) is None
    assert len(server.sent) == 1 and e.waiting_count() == 2
    done = server.answer(e, first, {"tools": []})
    assert isinstance(done, Fetched) and [(w.cid, w.client_id) for w in done.fetch.waiters] == [(1, "a"), (2, 7)]
    assert e.waiting_count() == 0


def test_a_replaced_fetch_drops_its_late_pages_and_its_waiters_move_to_the_new_one() -> None:
    e, server = engine()
    old = e.start("tools/list", "k", "start", ASKER, Waiter(1, 1, "stateless"))
    new = e.start("tools/list", "k", "changed", ASKER, Waiter(2, 2, "stateless"), again=True)
    assert new is not None
    assert server.answer(e, old, {"tools": ["stale"]}) is None
    done = server.answer(e, new, {"tools": ["fresh"]})
    assert isinstance(done, Fetched) and done.fetch.items == ["fresh"]
    assert [w.cid for w in done.fetch.waiters] == [1, 2]
    assert done.fetch.why == "start"  # the start that waited on the old fetch waits on this one


def test_a_start_waits_only_for_its_own_eras_start_fetches() -> None:
    e, server = engine()
    handshake = e.start("tools/list", "tools/list", "start", None)
    client = e.start("tools/list", ASKER.key("tools/list", False), "client", ASKER)
    assert e.pending(stateless=False) and e.pending(stateless=True) and not e.pending(stateless=True, why="start")
    server.answer(e, handshake, {"tools": []})
    assert not e.pending(stateless=False) and e.pending(stateless=True)
    server.answer(e, client, {"tools": []})
    assert not e.pending(stateless=True)


def test_running_names_the_stateless_fetches_of_a_listing_whatever_their_asker() -> None:
    e, _ = engine()
    e.start("tools/list", "tools/list", "start", None)
    e.start("tools/list", ASKER.key("tools/list", False), "client", ASKER)
    e.start("tools/list", OTHER.key("tools/list", False), "client", OTHER)
    e.start("prompts/list", ASKER.key("prompts/list", False), "client", ASKER)
    assert sorted(f.asker.client_info["name"] for f in e.running(["tools/list"]) if f.asker) == ["modern", "other"]


def test_a_cancelled_waiter_is_dropped_by_its_id_of_the_same_type() -> None:
    e, _ = engine()
    e.start("tools/list", "k", "client", ASKER, Waiter(1, 1, "stateless"))
    e.start("tools/list", "k", "client", ASKER, Waiter(1, "1", "stateless"))
    assert e.drop_waiter(1, "1") and e.waiting_count() == 1
    assert not e.drop_waiter(1, "1") and not e.drop_waiter(2, 1)
    assert not e.drop_waiter(1, True)  # equal to 1 in Python, but not the same JSON id
    assert e.drop_waiter(1) and e.waiting_count() == 0


def test_when_the_process_ends_every_fetch_is_handed_back_and_later_pages_are_dropped() -> None:
    e, server = engine()
    request = e.start("tools/list", "k", "client", ASKER, Waiter(3, 9, "stateless"))
    gone = e.gone()
    assert [w.cid for f in gone for w in f.waiters] == [3] and not e.fetches
    assert server.answer(e, request, {"tools": []}) is None


@pytest.mark.parametrize(("served", "fresh", "expected"), [
    (None, {"tools/list": [1]}, set()),  # nothing was served from the cache: nothing to correct
    ({"tools/list": [1]}, {"tools/list": [1]}, set()),
    ({"tools/list": [1]}, {"tools/list": [2]}, {"tools/list"}),
    ({"tools/list": [1]}, {"tools/list": [1], "prompts/list": []}, {"prompts/list"}),  # the entry lacked it
])
def test_drift_is_what_differs_from_what_clients_were_served(
        served: dict[str, object] | None, fresh: dict[str, object], expected: set[str]) -> None:
    assert drift(served, fresh) == expected
