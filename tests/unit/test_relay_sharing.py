"""Several clients on one server: ids, cancellations, progress tokens, server-to-client routing,
task and elicitation ownership, and what happens when a client leaves (PROTOCOL.md §5-§7).

The last test is a bounded, derandomized random walk over all of it that checks the invariants a
shared relay lives by: every client request is answered at most once and only to its owner, no
answer is ever lost (after a final exit nothing is left unanswered), relay ids are never reused,
every server-to-client request is answered at most once, and nothing but the declared action
types ever comes out.
"""

from __future__ import annotations


from hypothesis import given, note, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import Snapshot
from lazyd.core.relay.jsonrpc import JsonId, JsonObj
from lazyd.core.relay.core import PROTOCOL_VERSION_META
from lazyd.core.relay.routing import RELATED_TASK_META
from tests.unit.relay_driver import (
    BARE_PARAMS,
    CLIENT_PARAMS,
    ROOTS,
    Driver,
    notification,
    request,
    result,
    running,
    warm_snapshot,
)
from tests.unit.sharing_walk import OPS, ROOTS_ONLY, Walk


def call(d: Driver, cid: int, msg_id: JsonId, token: JsonId | None = None, method: str = "tools/call") -> JsonObj:
    """A client request that goes upstream; returns the line the server received."""
    params: JsonObj = {"name": "echo", "arguments": {"from": cid}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    out = d.ask(cid, msg_id, method, params)
    assert len(out.server) == 1, out
    return out.server[0]


def make_task(d: Driver, cid: int, msg_id: JsonId, task_id: str) -> None:
    sent = call(d, cid, msg_id)
    d.reply(sent, {"task": {"taskId": task_id, "status": "working"}})


# ---- ids ---------------------------------------------------------------------------------------------


def test_three_clients_all_using_id_1_never_collide_and_each_gets_its_own_answer() -> None:
    d = running(1, 2, 3)
    sent = {cid: call(d, cid, 1) for cid in (1, 2, 3)}
    assert len({m["id"] for m in sent.values()}) == 3
    for cid in (3, 1, 2):
        out = d.reply(sent[cid], {"content": [{"type": "text", "text": f"for {cid}"}]})
        assert out.visible() == [("client", cid, result(1, {"content": [{"type": "text", "text": f"for {cid}"}]}), 1)]
    assert d.core.inflight_count() == 0


def test_string_id_1_and_integer_id_1_from_one_client_are_two_requests() -> None:
    d = running(1)
    as_int = call(d, 1, 1)
    as_str = call(d, 1, "1")
    assert as_int["id"] != as_str["id"]
    # Cancelling "1" cancels only the string one.
    out = d.tell(1, "notifications/cancelled", {"requestId": "1", "reason": "user"})
    assert out.server == [notification("notifications/cancelled", {"requestId": as_str["id"], "reason": "user"})]
    out = d.reply(as_int, {"n": "int"})
    assert out.visible() == [("client", 1, result(1, {"n": "int"}), 1)]
    assert type(out.done[0][1]) is int
    assert d.reply(as_str, {"n": "str"}).visible() == []


def test_a_cancel_is_rewritten_to_the_relay_id_and_the_late_response_is_dropped() -> None:
    d = running(1, 2)
    mine = call(d, 1, 7)
    theirs = call(d, 2, 7)
    out = d.tell(1, "notifications/cancelled", {"requestId": 7})
    assert out.visible() == [("server", notification("notifications/cancelled", {"requestId": mine["id"]}))]
    assert d.core.inflight_count() == 1
    assert d.reply(mine, {}).visible() == []
    # The other client's request with the same id is untouched.
    assert d.reply(theirs, {}).visible() == [("client", 2, result(7, {}), 7)]


def test_a_cancel_that_races_the_response_is_dropped() -> None:
    d = running(1)
    sent = call(d, 1, 3)
    d.reply(sent, {})
    out = d.tell(1, "notifications/cancelled", {"requestId": 3})
    assert out.visible() == [] and out.notes
    # So is a cancel for an id that never existed, or that is not an id.
    assert d.tell(1, "notifications/cancelled", {"requestId": 99}).visible() == []
    assert d.tell(1, "notifications/cancelled", {"requestId": None}).visible() == []


def test_a_cancel_of_a_queued_request_removes_it_before_it_is_ever_sent() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    d.handshake(1)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.ask(1, 2, "tools/call", {"name": "add"})
    assert d.tell(1, "notifications/cancelled", {"requestId": 1}).visible() == []
    assert d.core.inflight_count() == 1
    out = d.start()
    assert [m["params"]["name"] for m in out.server if m.get("method") == "tools/call"] == ["add"]
    assert out.client(1) == []


def test_the_relays_own_initialize_can_never_be_cancelled_by_a_client() -> None:
    d = Driver()
    d.attach(1)
    d.ask(1, 1, "initialize", CLIENT_PARAMS)
    replayed = d.spawned().server[0]
    out = d.tell(1, "notifications/cancelled", {"requestId": replayed["id"]})
    assert out.server == []


# ---- progress tokens ---------------------------------------------------------------------------------


def test_progress_tokens_that_collide_are_rewritten_and_routed_back_with_the_original_token() -> None:
    d = running(1, 2)
    first = call(d, 1, 1, token=1)
    second = call(d, 2, 1, token=1)
    t1, t2 = first["params"]["_meta"]["progressToken"], second["params"]["_meta"]["progressToken"]
    assert t1 != t2
    out = d.server_says(notification("notifications/progress", {"progressToken": t2, "progress": 1, "total": 2}))
    assert out.visible() == [("client", 2, notification("notifications/progress", {"progressToken": 1, "progress": 1, "total": 2}), None)]
    out = d.server_says(notification("notifications/progress", {"progressToken": t1, "progress": 5}))
    assert out.visible() == [("client", 1, notification("notifications/progress", {"progressToken": 1, "progress": 5}), None)]


def test_a_string_progress_token_comes_back_as_the_same_string() -> None:
    d = running(1)
    sent = call(d, 1, 1, token="tok-1")
    token = sent["params"]["_meta"]["progressToken"]
    out = d.server_says(notification("notifications/progress", {"progressToken": token, "progress": 1}))
    assert out.client(1) == [notification("notifications/progress", {"progressToken": "tok-1", "progress": 1})]


def test_progress_for_an_unknown_or_finished_token_is_dropped() -> None:
    d = running(1)
    sent = call(d, 1, 1, token=1)
    token = sent["params"]["_meta"]["progressToken"]
    assert d.server_says(notification("notifications/progress", {"progressToken": 424242, "progress": 1})).visible() == []
    d.reply(sent, {})
    assert d.server_says(notification("notifications/progress", {"progressToken": token, "progress": 2})).visible() == []


def test_a_boolean_progress_token_from_the_server_reaches_no_one() -> None:
    # Known to be handshake-era (so no era probe takes relay id 1), with no discovery answer for
    # 2026-07-28 and no handshake ever seen: a first discovery probe is the one client request
    # that can hold relay id 1.
    d = Driver(Snapshot(discover={"2025-06-18": {"error": {"code": -32022, "message": "Unsupported protocol version"}}}))
    d.attach(1)
    d.ask(1, "p", "server/discover", {"_meta": {PROTOCOL_VERSION_META: "2026-07-28", "progressToken": "mine"}})
    forwarded = d.spawned().server[0]
    assert forwarded["params"]["_meta"]["progressToken"] == 1
    out = d.server_says(notification("notifications/progress", {"progressToken": True, "progress": 1}))
    assert out.visible() == []


def test_a_progress_token_outlives_a_request_that_became_a_task() -> None:
    d = running(1)
    sent = call(d, 1, 1, token=1)
    d.reply(sent, {"task": {"taskId": "t-1", "status": "working"}})
    token = sent["params"]["_meta"]["progressToken"]
    out = d.server_says(notification("notifications/progress", {"progressToken": token, "progress": 3}))
    assert out.client(1) == [notification("notifications/progress", {"progressToken": 1, "progress": 3})]


# ---- server-to-client requests -----------------------------------------------------------------------


def test_a_server_ping_is_answered_by_the_relay() -> None:
    d = running(1)
    assert d.server_says(request("p1", "ping")).visible() == [("server", result("p1", {}))]


def test_sampling_goes_to_the_only_client_with_a_callback_capable_request_in_flight() -> None:
    d = running(1, 2)
    call(d, 2, 1)
    d.ask(1, 1, "tools/list")  # answered locally: not a callback-capable request
    out = d.server_says(request(50, "sampling/createMessage", {"messages": [], "maxTokens": 5}))
    down_id = out.client(2)[0]["id"]  # a client-facing id of the relay's own
    assert out.visible() == [("client", 2, request(down_id, "sampling/createMessage", {"messages": [], "maxTokens": 5}), None)]
    # The client's answer is mapped back to the server's id.
    out = d.send(2, result(down_id, {"role": "assistant", "content": {"type": "text", "text": "hi"}}))
    assert out.visible() == [("server", result(50, {"role": "assistant", "content": {"type": "text", "text": "hi"}}))]
    # And only once.
    assert d.send(2, result(down_id, {})).visible() == []


def test_a_string_server_id_is_restored_on_the_clients_answer_and_errors_pass_too() -> None:
    d = running(1)
    call(d, 1, 1, method="prompts/get")
    out = d.server_says(request("srv-9", "elicitation/create", {"message": "name?", "requestedSchema": {}}))
    down_id = out.client(1)[0]["id"]
    out = d.send(1, {"jsonrpc": "2.0", "id": down_id, "error": {"code": -1, "message": "no"}})
    assert out.server == [{"jsonrpc": "2.0", "id": "srv-9", "error": {"code": -1, "message": "no"}}]


def test_a_clients_answer_under_the_wrong_id_type_is_not_mapped() -> None:
    d = running(1)
    call(d, 1, 1)
    down_id = d.server_says(request(5, "sampling/createMessage", {})).client(1)[0]["id"]
    assert d.send(1, result(str(down_id), {})).visible() == []
    assert d.send(1, result(down_id, {})).server == [result(5, {})]


def test_sampling_is_refused_when_the_client_did_not_declare_sampling() -> None:
    d = running(1, params={1: BARE_PARAMS})
    call(d, 1, 1)
    out = d.server_says(request(50, "sampling/createMessage", {}))
    assert out.clients() == set()
    assert len(out.server) == 1 and out.server[0]["id"] == 50
    assert out.server[0]["error"]["code"] == rpc.METHOD_NOT_FOUND and "sampling" in out.server[0]["error"]["message"]


def test_sampling_goes_to_the_one_caller_that_declares_it_when_another_without_it_has_a_call_in_flight() -> None:
    d = running(1, 2, params={1: BARE_PARAMS})
    call(d, 1, 1)
    call(d, 2, 1)
    out = d.server_says(request(50, "sampling/createMessage", {}))
    assert out.clients() == {2}  # client 1 could never take it: it did not declare sampling


def test_a_servers_roots_list_is_answered_by_the_relay_with_the_roots_of_its_sessions_never_routed_to_a_client() -> None:
    d = running(1, 2)
    call(d, 1, 1)
    d.ask(2, 1, "ping")
    out = d.server_says(request(60, "roots/list"))
    assert out.clients() == set()
    assert out.server == [result(60, ROOTS)]


def test_sampling_is_refused_under_the_default_policy_when_two_clients_have_calls_in_flight() -> None:
    d = running(1, 2)
    call(d, 1, 1)
    call(d, 2, 1)
    out = d.server_says(request(50, "sampling/createMessage", {}))
    assert out.clients() == set()
    assert out.server[0]["id"] == 50 and "sampling_policy = refuse" in out.server[0]["error"]["message"]


def test_sampling_goes_to_the_most_recent_caller_under_the_most_recent_policy() -> None:
    d = running(1, 2, 3, policy="most-recent")
    call(d, 2, 1)
    call(d, 1, 1, method="resources/read")
    d.ask(3, 1, "ping")  # activity, but not a callback-capable request
    out = d.server_says(request(50, "sampling/createMessage", {}))
    assert out.clients() == {1}


def test_sampling_with_no_callback_capable_request_in_flight_is_refused() -> None:
    d = running(1)
    out = d.server_says(request(50, "sampling/createMessage", {}))
    assert out.clients() == set() and out.server[0]["error"]["code"] == rpc.METHOD_NOT_FOUND


def test_the_owner_of_the_related_task_wins_over_the_client_in_flight() -> None:
    d = running(1, 2)
    make_task(d, 1, 1, "task-A")
    call(d, 2, 1)  # the only client with a request in flight
    meta = {RELATED_TASK_META: {"taskId": "task-A"}}
    out = d.server_says(request(51, "sampling/createMessage", {"_meta": meta}))
    assert out.clients() == {1}


def test_roots_are_refused_when_no_session_declares_them() -> None:
    d = running(1, params={1: BARE_PARAMS})
    out = d.server_says(request(60, "roots/list"))
    assert out.visible() == [("server", {"jsonrpc": "2.0", "id": 60, "error": {"code": rpc.METHOD_NOT_FOUND, "message": "lazyd: no session of this process provides roots"}})]


def test_a_server_cancel_of_its_request_reaches_the_client_under_the_client_facing_id() -> None:
    d = running(1)
    call(d, 1, 1)
    down_id = d.server_says(request(70, "sampling/createMessage", {})).client(1)[0]["id"]
    out = d.server_says(notification("notifications/cancelled", {"requestId": 70}))
    assert out.visible() == [("client", 1, notification("notifications/cancelled", {"requestId": down_id}), None)]
    # The client's late answer is then dropped.
    assert d.send(1, result(down_id, {})).visible() == []


# ---- task and elicitation ownership ------------------------------------------------------------------


def test_url_elicitation_completion_goes_to_the_client_that_got_the_elicitation() -> None:
    d = running(1, 2)
    call(d, 2, 1)
    params = {"mode": "url", "elicitationId": "el-1", "url": "https://example.test/x", "message": "log in"}
    assert d.server_says(request(80, "elicitation/create", params)).clients() == {2}
    done = notification("notifications/elicitation/complete", {"elicitationId": "el-1"})
    assert d.server_says(done).visible() == [("client", 2, done, None)]
    assert d.server_says(notification("notifications/elicitation/complete", {"elicitationId": "zz"})).visible() == []


def test_task_status_goes_to_the_owner_and_task_lists_are_filtered_to_the_caller() -> None:
    d = running(1, 2)
    make_task(d, 1, 1, "task-1")
    make_task(d, 2, 1, "task-2")
    status = notification("notifications/tasks/status", {"taskId": "task-2", "status": "completed"})
    assert d.server_says(status).visible() == [("client", 2, status, None)]
    assert d.server_says(notification("notifications/tasks/status", {"taskId": "nobody"})).visible() == []

    listed = d.ask(1, 9, "tasks/list").server[0]
    everything = {"tasks": [{"taskId": "task-1"}, {"taskId": "task-2"}, {"taskId": "stranger"}]}
    assert d.reply(listed, everything).client(1) == [result(9, {"tasks": [{"taskId": "task-1"}]})]


def test_a_task_list_with_malformed_task_ids_is_filtered_instead_of_raising() -> None:
    d = running(1)
    listed = d.ask(1, 9, "tasks/list").server[0]
    out = d.reply(listed, {"tasks": [{"taskId": ["x"]}, {"taskId": {"a": 1}}, "junk", {}]})
    assert out.client(1) == [result(9, {"tasks": []})]


def test_asking_about_another_clients_task_is_refused_without_forwarding() -> None:
    d = running(1, 2)
    make_task(d, 1, 1, "task-1")
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        out = d.ask(2, 5, method, {"taskId": "task-1"})
        assert out.visible() == [("client", 2, {"jsonrpc": "2.0", "id": 5, "error": {"code": rpc.INVALID_PARAMS, "message": "Invalid params: unknown task"}}, 5)]
    # The owner's own question goes through.
    assert [m["method"] for m in d.ask(1, 5, "tasks/get", {"taskId": "task-1"}).server] == ["tasks/get"]


def test_an_unknown_server_notification_goes_to_every_initialized_client() -> None:
    d = running(1, 2)
    d.attach(3)
    odd = notification("notifications/custom", {"x": 1})
    assert d.server_says(odd).visible() == [("client", 1, odd, None), ("client", 2, odd, None)]


# ---- a client leaves ---------------------------------------------------------------------------------


def test_a_client_that_leaves_is_cleaned_up_upstream_and_the_others_see_nothing() -> None:
    d = running(1, 2)
    d.ask(1, "s", "resources/subscribe", {"uri": "file:///shared"})
    d.answer("resources/subscribe", {})
    d.ask(2, "s", "resources/subscribe", {"uri": "file:///shared"})
    d.ask(1, "t", "resources/subscribe", {"uri": "file:///mine"})
    d.answer("resources/subscribe", {})
    first = call(d, 1, 1, token=1)
    d.ask(1, 2, "logging/setLevel", {"level": "debug"})
    d.answer("logging/setLevel", {})
    sampling = d.server_says(request(90, "sampling/createMessage", {}))
    elicitation = d.server_says(request("e-1", "elicitation/create", {"message": "?"}))
    assert sampling.clients() == elicitation.clients() == {1}
    second = call(d, 1, 2, method="prompts/get")
    theirs = call(d, 2, 1)
    assert (d.core.client_count(), d.core.inflight_count()) == (2, 3)

    out = d.detach(1)
    assert out.server == [
        notification("notifications/cancelled", {"requestId": first["id"], "reason": "client disconnected"}),
        notification("notifications/cancelled", {"requestId": second["id"], "reason": "client disconnected"}),
        {"jsonrpc": "2.0", "id": 90, "error": {"code": rpc.INTERNAL_ERROR, "message": "lazyd: the client disconnected"}},
        result("e-1", {"action": "cancel"}),
        request(out.server[4]["id"], "resources/unsubscribe", {"uri": "file:///mine"}),
    ]
    assert out.clients() == set()
    assert (d.core.client_count(), d.core.inflight_count()) == (1, 1)

    # Late answers for the departed client go nowhere; the other client is unaffected.
    assert d.reply(first, {}).visible() == []
    token = first["params"]["_meta"]["progressToken"]
    assert d.server_says(notification("notifications/progress", {"progressToken": token, "progress": 1})).visible() == []
    updated = notification("notifications/resources/updated", {"uri": "file:///shared"})
    assert d.server_says(updated).visible() == [("client", 2, updated, None)]
    assert d.reply(theirs, {}).visible() == [("client", 2, result(1, {}), 1)]
    assert (d.core.client_count(), d.core.inflight_count()) == (1, 0)


def test_a_client_that_leaves_while_its_requests_are_queued_leaves_nothing_behind() -> None:
    d = Driver(warm_snapshot())
    d.attach(1, 2)
    d.handshake(1)
    d.handshake(2)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.ask(2, 1, "tools/call", {"name": "add"})
    out = d.detach(1)
    assert out.server == [] and d.core.inflight_count() == 1
    out = d.start()
    assert [m["params"]["name"] for m in out.server if m.get("method") == "tools/call"] == ["add"]


# ---- the random walk ---------------------------------------------------------------------------------


def decode_ops(data: bytes) -> list[tuple[str, int, int]]:
    """Three bytes per step: which operation, and two selectors (one draw per walk keeps it fast)."""
    return [(OPS[data[i] % len(OPS)], data[i + 1] % 16, data[i + 2] % 16) for i in range(0, len(data) - 2, 3)]


@settings(derandomize=True, max_examples=250, deadline=None)
@given(st.booleans(), st.binary(min_size=30, max_size=240))
def test_random_interleavings_keep_every_answer_with_its_owner_exactly_once(warm: bool, data: bytes) -> None:
    ops = decode_ops(data)
    note(f"warm={warm} ops={ops}")
    walk = Walk(Driver(warm_snapshot() if warm else None))
    for op, a, b in ops:
        walk.step(op, a, b)
    # Nothing is ever lost: once the server is gone, every request not cancelled has its answer.
    walk.exit()
    for cid in walk.clients:
        assert walk.outstanding[cid] == {}, f"client {cid} still waits for {list(walk.outstanding[cid].values())}"
