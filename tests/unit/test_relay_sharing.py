"""Several clients on one server: ids, cancellations, progress tokens, server-to-client routing,
task and elicitation ownership, and what happens when a client leaves (PROTOCOL.md §5-§7).

The last test is a bounded, derandomized random walk over all of it that checks the invariants a
shared relay lives by: every client request is answered at most once and only to its owner, no
answer is ever lost (after a final exit nothing is left unanswered), relay ids are never reused,
every server-to-client request is answered at most once, and nothing but the declared action
types ever comes out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import Snapshot
from lazyd.core.relay.jsonrpc import JsonId, JsonObj
from lazyd.core.relay.core import (
    PROTOCOL_VERSION_META,
    Abort,
    Activity,
    Note,
    Ready,
    SnapshotChanged,
    ToClient,
    ToServer,
    Used,
    WantServer,
)
from lazyd.core.relay.routing import RELATED_TASK_META, level_rank
from tests.unit.relay_driver import (
    BARE_PARAMS,
    CLIENT_PARAMS,
    INIT_RESULT,
    ITEM_KEYS,
    TOOLS,
    Driver,
    Out,
    notification,
    request,
    result,
    running,
    warm_snapshot,
)

ROOTS_ONLY: JsonObj = {**CLIENT_PARAMS, "capabilities": {"roots": {}}}


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
    assert out.visible() == [("client", 2, request(1, "sampling/createMessage", {"messages": [], "maxTokens": 5}), None)]
    # The client's answer is mapped back to the server's id.
    out = d.send(2, result(1, {"role": "assistant", "content": {"type": "text", "text": "hi"}}))
    assert out.visible() == [("server", result(50, {"role": "assistant", "content": {"type": "text", "text": "hi"}}))]
    # And only once.
    assert d.send(2, result(1, {})).visible() == []


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


def test_roots_asked_during_a_call_go_to_the_caller_not_to_a_more_recently_active_client() -> None:
    d = running(1, 2)
    call(d, 1, 1)
    d.ask(2, 1, "ping")  # client 2 is the most recently active, but has nothing in flight
    out = d.server_says(request(60, "roots/list"))
    assert out.clients() == {1}


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


def test_roots_go_to_the_most_recently_active_client_that_declares_roots() -> None:
    d = running(1, 2, 3, params={1: ROOTS_ONLY, 2: ROOTS_ONLY, 3: BARE_PARAMS})
    d.ask(2, 1, "ping")
    assert d.server_says(request(60, "roots/list")).clients() == {2}
    d.ask(1, 1, "ping")
    d.ask(3, 1, "ping")  # more recent, but declares no roots
    assert d.server_says(request(61, "roots/list")).clients() == {1}


def test_roots_are_refused_when_no_client_declares_them() -> None:
    d = running(1, params={1: BARE_PARAMS})
    out = d.server_says(request(60, "roots/list"))
    assert out.visible() == [("server", {"jsonrpc": "2.0", "id": 60, "error": {"code": rpc.METHOD_NOT_FOUND, "message": "lazyd: no attached client provides roots"}})]


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

ALLOWED_ACTIONS = (ToClient, ToServer, WantServer, Ready, Abort, SnapshotChanged, Activity, Used, Note)
OPS = (
    "attach", "initialize", "initialized", "call", "call", "call", "list", "misc", "misc", "cancel", "detach",
    "spawn", "fail", "respond", "respond", "catch_up", "catch_up", "exit",
    "server_request", "server_request", "client_answer", "client_answer", "server_note", "server_note",
)  # fmt: skip
Key = tuple[str, JsonId]
STARTUP = {"initialize", *ITEM_KEYS}


def key(msg_id: JsonId) -> Key:
    return (type(msg_id).__name__, msg_id)


@dataclass
class Walk:
    """A model of what the clients and the server have seen, checked against every action."""

    d: Driver
    clients: list[int] = field(default_factory=list)
    next_cid: int = 1
    next_id: dict[int, int] = field(default_factory=dict)
    outstanding: dict[int, dict[Key, JsonId]] = field(default_factory=dict)
    methods: dict[tuple[int, Key], str] = field(default_factory=dict)
    cancelled: dict[int, set[Key]] = field(default_factory=dict)
    finished: dict[int, list[JsonId]] = field(default_factory=dict)
    params: dict[int, JsonObj] = field(default_factory=dict)
    initialized: set[int] = field(default_factory=set)
    levels: dict[int, str] = field(default_factory=dict)
    subscribed_ever: dict[int, set[str]] = field(default_factory=dict)
    call_owner: dict[int, tuple[int, JsonId]] = field(default_factory=dict)  # relay id -> client, id
    task_owner: dict[str, int] = field(default_factory=dict)
    elicitation_owner: dict[str, int] = field(default_factory=dict)
    server_pending: set[Key] = field(default_factory=set)  # server requests not yet answered
    delivered: list[tuple[int, JsonId]] = field(default_factory=list)  # (client, client-facing id)
    server_up: bool = False
    wanted: bool = False
    next_server_id: int = 1000
    last_progress_token: int = -1  # the relay token of the latest progress the server sent

    # ---- checking ----------------------------------------------------------------------------------

    def check(self, out: Out) -> None:
        for action in out:
            assert isinstance(action, ALLOWED_ACTIONS), action
            if isinstance(action, ToClient):
                self.check_to_client(action)
            elif isinstance(action, ToServer):
                self.check_to_server(json.loads(action.line))
            elif isinstance(action, Ready):
                assert self.server_up
            elif isinstance(action, WantServer):
                self.wanted = True
        assert self.d.core.inflight_count() == sum(len(self.outstanding[c]) for c in self.clients)
        routes = self.d.core.routes  # the count the routes keep is the count of their map
        assert routes.client_inflight_count() == sum(1 for up in routes.upstream.values() if up.cid is not None)
        assert self.d.core.client_count() == len(self.clients)

    def check_to_client(self, action: ToClient) -> None:
        cid = action.cid
        assert cid in self.clients, f"line for departed client {cid}"
        msg = json.loads(action.line)
        if "method" not in msg:
            # A response: it answers one of this client's requests, exactly once, and says so.
            assert msg["id"] == action.done and (action.done is not None or msg["id"] is None), msg
        if action.done is not None:
            k = key(action.done)
            assert k not in self.cancelled[cid], f"client {cid} got an answer to cancelled {action.done!r}"
            assert k in self.outstanding[cid], f"client {cid}: {action.done!r} answered twice or never asked"
            del self.outstanding[cid][k]
            self.finished[cid].append(action.done)
            res = msg.get("result")
            asked = self.methods.pop((cid, k), None)
            if asked == "initialize" and res is not None:
                assert res == INIT_RESULT, f"client {cid} got a handshake that is not the server's: {res}"
            if asked in ITEM_KEYS and res is not None:
                # One merged page from the cache, or a page the server gave (while a refresh runs).
                assert isinstance(res.get(ITEM_KEYS[asked]), list), f"not a {asked} answer: {res}"
            if isinstance(res, dict) and "structuredContent" in res:
                assert res["structuredContent"] == {"owner": cid, "id": action.done}, "misrouted response"
            if isinstance(res, dict) and isinstance(res.get("task"), dict):
                self.task_owner[res["task"]["taskId"]] = cid
            if isinstance(res, dict) and isinstance(res.get("tasks"), list):
                assert all(self.task_owner.get(t["taskId"]) == cid for t in res["tasks"]), "foreign task listed"
            return
        method = msg.get("method")
        params = msg.get("params") or {}
        if "id" in msg and method is not None:
            self.delivered.append((cid, msg["id"]))
            needed = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation", "roots/list": "roots"}.get(method)
            assert needed is None or needed in self.params.get(cid, {}).get("capabilities", {}), (method, cid)
            if method == "elicitation/create" and "elicitationId" in params:
                self.elicitation_owner[params["elicitationId"]] = cid
        elif method == "notifications/progress":
            owner = self.call_owner.get(self.last_progress_token)
            assert owner == (cid, params["progressToken"]), "progress for another client's token"
        elif method == "notifications/tasks/status":
            assert self.task_owner.get(params["taskId"]) == cid
        elif method == "notifications/elicitation/complete":
            assert self.elicitation_owner.get(params["elicitationId"]) == cid
        elif method == "notifications/resources/updated":
            assert params["uri"] in self.subscribed_ever[cid]
        elif method == "notifications/message":
            assert cid not in self.levels or level_rank(params["level"]) >= level_rank(self.levels[cid])
        elif method is not None and method.endswith("list_changed"):
            assert cid in self.initialized

    def check_to_server(self, msg: JsonObj) -> None:
        method = msg.get("method")
        if method is None:
            k = key(msg["id"])
            assert k in self.server_pending, f"answer to server request {msg['id']!r} that is not pending"
            self.server_pending.discard(k)
        elif method == "tools/call" and "id" in msg:
            args = msg["params"]["arguments"]
            self.call_owner[msg["id"]] = (args["owner"], args["id"])
        elif method == "notifications/cancelled":
            assert isinstance(msg["params"]["requestId"], int)

    # ---- events ------------------------------------------------------------------------------------

    def pick(self, n: int) -> int | None:
        return self.clients[n % len(self.clients)] if self.clients else None

    def ask(self, cid: int, method: str, params: JsonObj | None = None, msg_id: JsonId | None = None) -> None:
        if msg_id is None:
            n = self.next_id[cid] = self.next_id[cid] + 1
            msg_id = n if n % 3 else str(n)  # collide across clients, and mix the two id types
        self.outstanding[cid][key(msg_id)] = msg_id
        self.methods[(cid, key(msg_id))] = method
        self.check(self.d.ask(cid, msg_id, method, params))

    def step(self, op: str, a: int, b: int) -> None:
        self.dispatch(op, a, b)
        if self.wanted and not self.server_up and (a + b) % 4:
            # Mostly, the daemon answers a demand with a start; sometimes it is slower than that.
            self.dispatch("spawn", a, b)

    def dispatch(self, op: str, a: int, b: int) -> None:
        d = self.d
        cid = self.pick(a)
        if op == "spawn" and not self.server_up:
            self.server_up, self.wanted = True, False
            self.check(d.spawned())
        elif op == "fail" and not self.server_up:
            self.wanted = False
            self.check(d.start_failed("spawn failed"))
        elif op == "respond" and self.server_up and d.upstream:
            msg = list(d.upstream.values())[a % len(d.upstream)]
            self.respond(msg, b)
        elif op == "catch_up" and self.server_up:
            # The server gets through its start-up work: the handshake and every listing page.
            while self.server_up and (startup := [m for m in d.upstream.values() if m["method"] in STARTUP]):
                self.respond(startup[0], b)
        elif op == "exit" and self.server_up and b % 3 == 0:
            self.exit()
        elif op == "server_request" and self.server_up:
            self.server_request(a, b)
        elif op == "server_note" and self.server_up:
            self.server_note(a, b)
        elif (op == "attach" and len(self.clients) < 4) or cid is None:
            cid = self.next_cid
            self.next_cid += 1
            self.clients.append(cid)
            self.outstanding[cid], self.next_id[cid] = {}, 0
            self.cancelled[cid], self.finished[cid], self.subscribed_ever[cid] = set(), [], set()
            self.check(d.attach(cid))
            if a % 4:  # most clients open with their handshake at once
                self.initialize(cid, b)
                self.initialized.add(cid)
                self.check(d.tell(cid, "notifications/initialized"))
        elif op == "initialize":
            self.initialize(cid, b)
        elif op == "initialized":
            self.initialized.add(cid)
            self.check(d.tell(cid, "notifications/initialized"))
        elif op == "call":
            n = self.next_id[cid] + 1
            msg_id: JsonId = n if n % 3 else str(n)
            params: JsonObj = {"name": "echo", "arguments": {"owner": cid, "id": msg_id}}
            if b % 2:
                params["_meta"] = {"progressToken": msg_id}
            self.ask(cid, ("tools/call", "prompts/get", "resources/read", "tasks/get")[b % 4] if b > 8 else "tools/call", params)
        elif op == "list":
            self.ask(cid, list(ITEM_KEYS)[b % 4], {"cursor": "x"} if b == 7 else None)
        elif op == "misc":
            uri = f"file:///{b % 2}"
            choice = b % 7
            if choice == 0:
                self.ask(cid, "ping")
            elif choice == 1:
                level = ("debug", "info", "error", "nonsense")[a % 4]
                if level != "nonsense":
                    self.levels[cid] = level
                self.ask(cid, "logging/setLevel", {"level": level})
            elif choice == 2:
                self.subscribed_ever[cid].add(uri)
                self.ask(cid, "resources/subscribe", {"uri": uri})
            elif choice == 3:
                self.ask(cid, "resources/unsubscribe", {"uri": uri})
            elif choice == 4:
                self.ask(cid, "server/discover", {"_meta": {PROTOCOL_VERSION_META: "2026-07-28"}})
            elif choice == 5:
                self.ask(cid, "tasks/list")
            else:
                # An invalid line: the relay answers it itself and the session goes on.
                self.outstanding[cid][key(-b)] = -b
                self.check(d.send(cid, b'{"jsonrpc":"2.0","id":' + str(-b).encode() + b',"method":5}'))
        elif op == "cancel":
            waiting = list(self.outstanding[cid].values())
            if waiting:
                target = waiting[b % len(waiting)]
                del self.outstanding[cid][key(target)]
                self.cancelled[cid].add(key(target))
                self.check(d.tell(cid, "notifications/cancelled", {"requestId": target}))
            elif self.finished[cid]:
                out = d.tell(cid, "notifications/cancelled", {"requestId": self.finished[cid][b % len(self.finished[cid])]})
                assert out.server == [], "a cancel for a finished request went upstream"
                self.check(out)
        elif op == "detach":
            self.clients.remove(cid)
            self.delivered = [(c, i) for c, i in self.delivered if c != cid]
            self.initialized.discard(cid)
            self.levels.pop(cid, None)
            self.check(d.detach(cid))
        elif op == "client_answer":
            mine = [(c, i) for c, i in self.delivered if c == cid]
            if mine:
                self.delivered.remove(mine[b % len(mine)])
                answer = result(mine[b % len(mine)][1], {"ok": True}) if b % 2 else {"jsonrpc": "2.0", "id": mine[b % len(mine)][1], "error": {"code": -1, "message": "no"}}
                self.check(d.send(cid, answer))
            else:
                out = d.send(cid, result(10_000 + b, {}))
                assert out.server == [], "an answer to an unknown server request went upstream"
                self.check(out)

    def initialize(self, cid: int, b: int) -> None:
        self.params[cid] = (CLIENT_PARAMS, CLIENT_PARAMS, BARE_PARAMS, ROOTS_ONLY)[b % 4]
        self.ask(cid, "initialize", self.params[cid])

    def respond(self, msg: JsonObj, b: int) -> None:
        d, method = self.d, msg["method"]
        if method == "initialize":
            if b == 15:
                out = d.reply_error(msg, rpc.INVALID_PARAMS, "unsupported version")
                self.check(out)
                if out.aborts:
                    self.exit()
                return
            value: Any = INIT_RESULT
        elif method in ITEM_KEYS:
            more = b % 3 == 0 and "cursor" not in (msg.get("params") or {})
            items = TOOLS[: 1 + b % 2] if method == "tools/list" else []
            value = {ITEM_KEYS[method]: items, **({"nextCursor": "2"} if more else {})}
        elif method in ("tools/call", "prompts/get", "resources/read"):
            if b % 5 == 1:
                self.check(d.reply_error(msg, -32603, "boom"))
                return
            args = msg["params"].get("arguments", {})
            value = {"task": {"taskId": f"task-{msg['id']}", "status": "working"}} if b % 5 == 2 else {"content": [], "structuredContent": args}
        elif method == "tasks/list":
            value = {"tasks": [{"taskId": t} for t in sorted(self.task_owner)] + [{"taskId": "stranger"}]}
        elif method == "server/discover":
            self.check(d.reply_error(msg, rpc.METHOD_NOT_FOUND, "Method not found"))
            return
        else:
            value = {}
        self.check(d.reply(msg, value))

    def exit(self) -> None:
        self.server_up = False
        self.server_pending.clear()
        self.check(self.d.exited("exited with status 1"))
        assert self.d.core.inflight_count() == 0
        assert not self.d.core.routes.upstream and not self.d.core.queue

    def server_request(self, a: int, b: int) -> None:
        self.next_server_id += 1
        sid: JsonId = self.next_server_id if b % 2 else f"s{self.next_server_id}"
        method = ("sampling/createMessage", "elicitation/create", "roots/list", "ping")[a % 4]
        params: JsonObj = {}
        if method == "elicitation/create":
            params = {"mode": "url", "elicitationId": f"el-{sid}", "url": "https://example.test", "message": "m"}
        if method == "sampling/createMessage" and b % 3 == 0 and self.task_owner:
            params = {"_meta": {RELATED_TASK_META: {"taskId": sorted(self.task_owner)[a % len(self.task_owner)]}}}
        self.server_pending.add(key(sid))
        self.check(self.d.server_says(request(sid, method, params)))

    def server_note(self, a: int, b: int) -> None:
        d = self.d
        choice = b % 8
        if choice == 0:
            calls = sorted(self.call_owner) or [123456]
            self.last_progress_token = calls[a % len(calls)]
            self.check(d.server_says(notification("notifications/progress", {"progressToken": self.last_progress_token, "progress": 1})))
        elif choice == 1:
            self.check(d.server_says(notification("notifications/tools/list_changed")))
        elif choice == 2:
            level = ("debug", "info", "warning", "error")[a % 4]
            self.check(d.server_says(notification("notifications/message", {"level": level, "data": "x"})))
        elif choice == 3:
            self.check(d.server_says(notification("notifications/resources/updated", {"uri": f"file:///{a % 2}"})))
        elif choice == 4 and self.task_owner:
            task = sorted(self.task_owner)[a % len(self.task_owner)]
            self.check(d.server_says(notification("notifications/tasks/status", {"taskId": task, "status": "completed"})))
        elif choice == 5 and self.elicitation_owner:
            eid = sorted(self.elicitation_owner)[a % len(self.elicitation_owner)]
            self.check(d.server_says(notification("notifications/elicitation/complete", {"elicitationId": eid})))
        elif choice == 6:
            self.check(d.server_says(b"some log line on stdout"))
        else:
            self.check(d.server_says(notification("notifications/cancelled", {"requestId": self.next_server_id})))


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
