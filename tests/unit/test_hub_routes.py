"""The hub's id and cancel routing (lazyd/core/hub/routes.py), driven by exact event lists.

Testing policy: as for the relay core, each test feeds events and asserts the exact list of
actions, with literal lines, so a changed id, a lost cancel or a response delivered twice fails.
Calls are named by their internal client ids (-1, -2 ...), as the daemon names them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.hub.routes import CancelTask, HubRoutes, ToCall, ToClient
from lazyd.core.relay.jsonrpc import Message


def msg(obj: Mapping[str, Any]) -> Message:
    parsed = rpc.parse(json.dumps(obj, separators=(",", ":")).encode())
    assert isinstance(parsed, Message)
    return parsed


def line(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


SAMPLING: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": {"maxTokens": 5}}
ROOTS: dict[str, Any] = {"jsonrpc": "2.0", "id": "r", "method": "roots/list"}


def test_a_server_request_goes_to_the_client_under_the_hubs_next_id_and_its_answer_comes_back_once() -> None:
    routes = HubRoutes()
    assert routes.server_request(-1, msg(SAMPLING)) == [ToClient(line({**SAMPLING, "id": 1}))]
    assert routes.server_request(-2, msg(ROOTS)) == [ToClient(line({**ROOTS, "id": 2}))]
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"role": "assistant"}}
    assert routes.client_response(msg(answer)) == [ToCall(-1, line({**answer, "id": 7}))]
    assert routes.client_response(msg(answer)) == []  # exactly once
    error = {"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "no"}}
    assert routes.client_response(msg(error)) == [ToCall(-2, line({**error, "id": "r"}))]
    assert len(routes._outgoing) == 0


def test_hub_ids_are_never_reused_after_a_request_was_answered() -> None:
    routes = HubRoutes()
    routes.server_request(-1, msg(SAMPLING))
    routes.client_response(msg({"jsonrpc": "2.0", "id": 1, "result": {}}))
    assert routes.server_request(-1, msg(SAMPLING)) == [ToClient(line({**SAMPLING, "id": 2}))]


def test_a_response_to_an_unknown_or_string_id_is_dropped() -> None:
    routes = HubRoutes()
    routes.server_request(-1, msg(SAMPLING))
    assert routes.client_response(msg({"jsonrpc": "2.0", "id": 9, "result": {}})) == []
    assert routes.client_response(msg({"jsonrpc": "2.0", "id": "1", "result": {}})) == []
    assert len(routes._outgoing) == 1


def test_a_server_cancel_reaches_the_client_under_the_hub_id_and_the_late_answer_is_dropped() -> None:
    routes = HubRoutes()
    routes.server_request(-1, msg(SAMPLING))
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "timeout"}}
    assert routes.server_cancel(-1, msg(cancel)) == [ToClient(line(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "timeout"}}))]
    assert routes.client_response(msg({"jsonrpc": "2.0", "id": 1, "result": {}})) == []


def test_a_server_cancel_matches_only_its_own_calls_request_and_the_same_id_type() -> None:
    routes = HubRoutes()
    routes.server_request(-1, msg(SAMPLING))  # server id 7

    def cancel_of(rid: object) -> Message:
        return msg({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})

    assert routes.server_cancel(-2, cancel_of(7)) == []  # another call's server
    assert routes.server_cancel(-1, cancel_of("7")) == []  # "7" is not 7
    assert routes.server_cancel(-1, cancel_of(7.0)) == []  # nor is 7.0, though 7.0 == 7 in Python
    assert routes.server_cancel(-1, cancel_of(8)) == []
    assert len(routes._outgoing) == 1


def test_a_call_that_ends_cancels_its_requests_still_waiting_on_the_client_and_only_those() -> None:
    routes = HubRoutes()
    routes.server_request(-1, msg(SAMPLING))
    routes.server_request(-2, msg(ROOTS))
    routes.server_request(-1, msg({**ROOTS, "id": "r2"}))
    ended = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
    assert routes.call_ended(-1) == [
        ToClient(line({**ended, "params": {"requestId": 1, "reason": "the tool call ended"}})),
        ToClient(line({**ended, "params": {"requestId": 3, "reason": "the tool call ended"}})),
    ]
    assert routes.call_ended(-1) == []
    assert routes.client_response(msg({"jsonrpc": "2.0", "id": 2, "result": {"roots": []}})) == [
        ToCall(-2, line({"jsonrpc": "2.0", "id": "r", "result": {"roots": []}}))]


def test_a_client_cancel_cancels_the_task_in_flight_for_that_id_only() -> None:
    routes = HubRoutes()
    routes.task_started(5)
    routes.task_started("5")
    assert routes.client_cancel(5.0) == [] and routes.client_cancel(True) == []
    assert routes.client_cancel(5) == [CancelTask(5)]
    assert routes.client_cancel("5") == [CancelTask("5")]
    assert routes.client_cancel(6) == [] and routes.client_cancel(None) == []
    routes.task_ended(5)
    assert routes.client_cancel(5) == []
    assert len(routes._tasks) == 1


def test_a_task_is_refused_for_an_id_in_flight_and_past_the_limit_and_admitted_again_once_one_ends() -> None:
    routes = HubRoutes()
    assert routes.admit(1) is None
    routes.task_started(1)
    assert routes.admit(1) == "this request id is already in flight"
    assert routes.admit("1") is None
    for rid in range(2, 64 + 1):  # docs/hub.md: "at most 64 calls may be in flight per hub session"
        routes.task_started(rid)
    assert routes.admit(100) == "64 hub calls are already in flight; wait for some to finish"
    assert routes.admit(1) == "this request id is already in flight"
    routes.task_ended(3)
    assert routes.admit(100) is None


@pytest.mark.parametrize("calls", [1, 3])
def test_every_request_of_interleaved_calls_is_answered_to_its_own_call_under_its_own_id(calls: int) -> None:
    routes = HubRoutes()
    sent = []
    for n in range(12):
        call = -(n % calls) - 1
        (action,) = routes.server_request(call, msg({**SAMPLING, "id": f"s{n}"}))
        assert isinstance(action, ToClient)
        sent.append((call, json.loads(action.line)["id"], f"s{n}"))
    assert [hub_id for _, hub_id, _ in sent] == list(range(1, 13))
    for call, hub_id, server_id in reversed(sent):
        assert routes.client_response(msg({"jsonrpc": "2.0", "id": hub_id, "result": {}})) == [
            ToCall(call, line({"jsonrpc": "2.0", "id": server_id, "result": {}}))]


# ---- a random walk: whatever the order, every answer reaches its own call once, or nobody --------

_EVENTS = st.lists(st.tuples(st.sampled_from(["request", "answer", "server_cancel", "end", "stray"]),
                             st.integers(0, 3), st.integers(0, 40)), max_size=60)


@settings(derandomize=True, max_examples=400, deadline=None, database=None)
@given(_EVENTS)
def test_in_any_order_each_answer_reaches_the_call_that_asked_once_and_never_after_it_ended(
        events: list[tuple[str, int, int]]) -> None:
    routes = HubRoutes()
    issued: dict[int, tuple[int, object]] = {}  # hub id -> (call, server id), as the model sees it
    live: set[int] = set()  # hub ids still waiting on the client
    ended: set[int] = set()
    counters = {-1 - n: 0 for n in range(4)}  # each call's server numbers its own requests: ids collide across calls
    for kind, which, pick in events:
        call = -1 - which
        if kind == "request" and call not in ended:
            counters[call] += 1
            serial = counters[call]
            server_id: object = f"s{serial}" if serial % 2 else serial
            (action,) = routes.server_request(call, msg({**SAMPLING, "id": server_id}))
            assert isinstance(action, ToClient)
            hub_id = json.loads(action.line)["id"]
            assert hub_id not in issued, "a hub id was reused"
            issued[hub_id] = (call, server_id)
            live.add(hub_id)
        elif kind == "answer" and issued:
            hub_id = sorted(issued)[pick % len(issued)]
            actions = routes.client_response(msg({"jsonrpc": "2.0", "id": hub_id, "result": {"n": pick}}))
            if hub_id in live:
                owner, server_id = issued[hub_id]
                assert actions == [ToCall(owner, line({"jsonrpc": "2.0", "id": server_id, "result": {"n": pick}}))]
                live.discard(hub_id)
            else:
                assert actions == []
        elif kind == "server_cancel" and issued:
            hub_id = sorted(issued)[pick % len(issued)]
            owner, server_id = issued[hub_id]
            actions = routes.server_cancel(owner, msg({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                                       "params": {"requestId": server_id}}))
            if hub_id in live:
                (action,) = actions
                assert isinstance(action, ToClient) and json.loads(action.line)["params"]["requestId"] == hub_id
                live.discard(hub_id)
            else:
                assert actions == []
        elif kind == "end":
            actions = routes.call_ended(call)
            cancelled = {json.loads(a.line)["params"]["requestId"] for a in actions if isinstance(a, ToClient)}
            assert cancelled == {h for h in live if issued[h][0] == call}
            live -= cancelled
            ended.add(call)
        elif kind == "stray":
            assert routes.client_response(msg({"jsonrpc": "2.0", "id": 10_000 + pick, "result": {}})) == []
        assert len(routes._outgoing) == len(live)
