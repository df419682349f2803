"""The policy gate in front of a server's relay core (lazyd/core/policy_gate.py), driven line by line.

Each test feeds client lines and asserts the exact actions: what reaches the core (`Pass`), what
the client is told (`Reply`), and what is logged, which must never include the arguments.
"""

from __future__ import annotations

import json
from typing import Any

from lazyd.core.policy_gate import Log, Pass, PolicyGate, Reply, summarize_arguments
from lazyd.core.policy import ToolPolicy, compile_rule

SERVER = "fs"
POLICY = ToolPolicy((compile_rule("fs.rm_rf", "deny"), compile_rule("*.delete_*", "ask")))


def call(rid: int | str, tool: str, arguments: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments or {}}}).encode()


def answer(rid: str, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
    body.update({"error": error} if error is not None else {"result": result})
    return json.dumps(body).encode()


def replies(actions: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(a.line) for a in actions if isinstance(a, Reply)]


def logs(actions: list[Any]) -> list[str]:
    return [a.text for a in actions if isinstance(a, Log)]


def ask(gate: PolicyGate, cid: int, rid: int, arguments: dict[str, Any]) -> str:
    actions = gate.client_line(cid, call(rid, "delete_file", arguments), POLICY, lambda: True)
    [request] = replies(actions)
    assert request["method"] == "elicitation/create"
    assert not any(isinstance(a, Pass) for a in actions)
    return str(request["id"])


def test_without_a_policy_every_line_passes_untouched_and_unparsed() -> None:
    gate = PolicyGate(SERVER)
    garbage = b"not json at all"
    assert gate.client_line(1, garbage, ToolPolicy(), lambda: True) == [Pass(garbage)]
    assert gate.client_line(1, call(1, "rm_rf"), ToolPolicy(), lambda: True) == [Pass(call(1, "rm_rf"))]


def test_an_allowed_call_passes_and_the_decision_is_logged_without_its_arguments() -> None:
    actions = PolicyGate(SERVER).client_line(1, call(7, "read_file", {"path": "/secret"}), POLICY, lambda: True)
    assert actions == [Log('policy: fs.read_file: allow by the default policy (default = "allow")'),
                       Pass(call(7, "read_file", {"path": "/secret"}))]


def test_a_denied_call_gets_a_tool_error_naming_the_rule_and_never_reaches_the_core() -> None:
    actions = PolicyGate(SERVER).client_line(1, call(7, "rm_rf", {"path": "/"}), POLICY, lambda: True)
    assert not any(isinstance(a, Pass) for a in actions)
    [reply] = [a for a in actions if isinstance(a, Reply)]
    assert reply.done == 7
    assert json.loads(reply.line) == {"jsonrpc": "2.0", "id": 7, "result": {"isError": True, "content": [
        {"type": "text", "text": 'lazyd policy: the tool "rm_rf" of server "fs" is denied by rule "fs.rm_rf" = "deny".'}]}}
    assert logs(actions) == ['policy: fs.rm_rf: deny by rule "fs.rm_rf" = "deny"']


def test_ask_holds_the_call_and_sends_a_form_naming_the_tool_server_arguments_and_rule() -> None:
    gate = PolicyGate(SERVER)
    actions = gate.client_line(1, call(7, "delete_file", {"path": "/tmp/x"}), POLICY, lambda: True)
    [request] = replies(actions)
    assert request["id"] == "lazyd-policy-1"
    assert request["params"]["requestedSchema"] == {"type": "object", "properties": {}}
    assert request["params"]["message"] == ('Allow the tool "delete_file" of the MCP server "fs" to run?\n'
                                            'Arguments: {"path": "/tmp/x"}\n'
                                            '(lazyd asks because of rule "*.delete_*" = "ask" in its config.)')
    assert [a.done for a in actions if isinstance(a, Reply)] == [None]  # our request answers nothing
    assert "/tmp/x" not in " ".join(logs(actions))
    assert gate.held_count() == 1


def test_accepting_passes_the_held_call_to_the_core_unchanged() -> None:
    gate = PolicyGate(SERVER)
    ask_id = ask(gate, 1, 7, {"path": "/tmp/x"})
    actions = gate.client_line(1, answer(ask_id, {"action": "accept", "content": {}}), POLICY, lambda: True)
    assert [a for a in actions if not isinstance(a, Log)] == [Pass(call(7, "delete_file", {"path": "/tmp/x"}))]
    assert gate.held_count() == 0


def test_declining_cancelling_or_failing_to_ask_answers_the_call_with_a_tool_error() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"result": {"action": "decline"}}, "the user declined running"),
        ({"result": {"action": "cancel"}}, "the user dismissed the confirmation"),
        ({"result": {"action": "maybe"}}, "an answer lazyd does not understand"),
        ({"error": {"code": -32603, "message": "no UI"}}, "could not ask the user about"),
    ]
    for body, text in cases:
        gate = PolicyGate(SERVER)
        ask_id = ask(gate, 1, 7, {})
        line = answer(ask_id, body.get("result"), body.get("error"))
        actions = gate.client_line(1, line, POLICY, lambda: True)
        [reply] = replies(actions)
        assert reply["id"] == 7 and reply["result"]["isError"] is True
        assert text in reply["result"]["content"][0]["text"]
        assert not any(isinstance(a, Pass) for a in actions)
        assert gate.held_count() == 0


def test_ask_without_the_elicitation_capability_is_refused_with_a_clear_message() -> None:
    actions = PolicyGate(SERVER).client_line(1, call(7, "delete_file"), POLICY, lambda: False)
    [reply] = replies(actions)
    assert "does not support MCP elicitation, so it was refused" in reply["result"]["content"][0]["text"]
    assert not any(isinstance(a, Pass) for a in actions)


def test_an_answer_from_another_client_or_to_an_unknown_id_is_not_taken_for_a_confirmation() -> None:
    gate = PolicyGate(SERVER)
    ask_id = ask(gate, 1, 7, {})
    stolen = answer(ask_id, {"action": "accept"})
    assert gate.client_line(2, stolen, POLICY, lambda: True) == [Pass(stolen)]
    unknown = answer("lazyd-policy-99", {"action": "accept"})
    assert gate.client_line(1, unknown, POLICY, lambda: True) == [Pass(unknown)]
    assert gate.held_count() == 1


def test_cancelling_a_held_call_drops_it_and_cancels_the_question() -> None:
    gate = PolicyGate(SERVER)
    ask_id = ask(gate, 1, 7, {})
    cancel = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}).encode()
    actions = gate.client_line(1, cancel, POLICY, lambda: True)
    assert replies(actions) == [{"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": ask_id, "reason": "the tool call was cancelled"}}]
    assert gate.held_count() == 0
    other = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "7"}}).encode()
    assert gate.client_line(1, other, POLICY, lambda: True) == [Pass(other)]


def test_a_client_that_leaves_while_asked_leaves_nothing_held() -> None:
    gate = PolicyGate(SERVER)
    ask(gate, 1, 7, {})
    ask(gate, 2, 7, {})
    gate.detach(1)
    assert gate.held_count() == 1


def test_lines_other_than_tool_calls_pass_even_with_a_policy() -> None:
    gate = PolicyGate(SERVER)
    for line in (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', b"[1,2]", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}'):
        assert gate.client_line(1, line, POLICY, lambda: True) == [Pass(line)]


def test_a_long_argument_summary_is_bounded() -> None:
    text = summarize_arguments({"body": "x" * 1000, "items": list(range(500))})
    assert len(text) <= 401
    assert text.startswith('{"body": "' + "x" * 80 + '…"')
    assert summarize_arguments({}) == "(none)"


# ---- denied tools are hidden from a per-server tools/list -----------------------------------------

def listing_request(rid: int | str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/list"}).encode()


def listing_answer(rid: int | str, *names: str) -> bytes:
    tools = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools, "nextCursor": "c2"}}).encode()


def test_a_listing_answer_loses_its_denied_tools_and_keeps_everything_else() -> None:
    gate = PolicyGate(SERVER)
    assert gate.client_line(1, listing_request(4), POLICY, lambda: True) == [Pass(listing_request(4))]
    line, hidden = gate.to_client(1, listing_answer(4, "read_file", "rm_rf", "delete_x"), 4, POLICY)
    assert hidden == 1
    assert json.loads(line) == json.loads(listing_answer(4, "read_file", "delete_x"))  # ask is not hidden
    assert gate.listing_count() == 0


def test_only_the_noted_request_of_that_client_is_filtered() -> None:
    gate = PolicyGate(SERVER)
    gate.client_line(1, listing_request(4), POLICY, lambda: True)
    untouched = listing_answer(4, "rm_rf")
    assert gate.to_client(2, untouched, 4, POLICY) == (untouched, 0)  # another client's id 4
    assert gate.to_client(1, untouched, "4", POLICY) == (untouched, 0)  # "4" is not 4
    assert gate.to_client(1, untouched, 4, POLICY)[1] == 1


def test_without_a_deny_rule_listings_are_not_noted_at_all() -> None:
    gate = PolicyGate(SERVER)
    ask_only = ToolPolicy((compile_rule("*.delete_*", "ask"),))
    gate.client_line(1, listing_request(4), ask_only, lambda: True)
    assert gate.listing_count() == 0
    deny_by_default = ToolPolicy((), "deny")
    gate.client_line(1, listing_request(5), deny_by_default, lambda: True)
    assert gate.to_client(1, listing_answer(5, "a", "b"), 5, deny_by_default) == (
        json.dumps({"jsonrpc": "2.0", "id": 5, "result": {"tools": [], "nextCursor": "c2"}},
                   separators=(",", ":")).encode(), 2)


def test_an_error_answer_to_a_listing_passes_as_the_server_wrote_it() -> None:
    gate = PolicyGate(SERVER)
    gate.client_line(1, listing_request(4), POLICY, lambda: True)
    error = answer("x", error={"code": -32601, "message": "no tools"}).replace(b'"x"', b"4")
    assert gate.to_client(1, error, 4, POLICY) == (error, 0)
    assert gate.listing_count() == 0


def test_a_client_that_leaves_leaves_no_noted_listing_behind() -> None:
    gate = PolicyGate(SERVER)
    gate.client_line(1, listing_request(4), POLICY, lambda: True)
    gate.client_line(2, listing_request(4), POLICY, lambda: True)
    gate.detach(1)
    assert gate.listing_count() == 1


def test_malformed_tool_entries_in_a_listing_are_kept_as_the_server_wrote_them() -> None:
    gate = PolicyGate(SERVER)
    gate.client_line(1, listing_request(4), POLICY, lambda: True)
    odd: list[Any] = [{"name": ["rm_rf"]}, "rm_rf", {"name": "rm_rf"}, {"title": "no name"}]
    line = json.dumps({"jsonrpc": "2.0", "id": 4, "result": {"tools": odd}}).encode()
    filtered, hidden = gate.to_client(1, line, 4, POLICY)
    assert hidden == 1 and json.loads(filtered)["result"]["tools"] == [odd[0], odd[1], odd[3]]


def test_a_gate_rebuilt_from_its_state_answers_the_held_call_and_filters_the_noted_listing() -> None:
    gate = PolicyGate(SERVER)
    ask_id = ask(gate, 1, 7, {"path": "/tmp/x"})
    listing_request = json.dumps({"jsonrpc": "2.0", "id": "7", "method": "tools/list"}).encode()
    gate.client_line(2, listing_request, POLICY, lambda: True)
    twin = PolicyGate(SERVER)
    twin.restore(json.loads(json.dumps(gate.to_state())))
    accepted = twin.client_line(1, answer(ask_id, {"action": "accept", "content": {}}), POLICY, lambda: True)
    assert [a for a in accepted if not isinstance(a, Log)] == [Pass(call(7, "delete_file", {"path": "/tmp/x"}))]
    assert replies(twin.client_line(1, call(8, "delete_file"), POLICY, lambda: True))[0]["id"] == "lazyd-policy-2"
    listing = json.dumps({"jsonrpc": "2.0", "id": "7", "result": {"tools": [{"name": "rm_rf"}, {"name": "ls"}]}})
    assert twin.to_client(2, listing.encode(), 7, POLICY) == (listing.encode(), 0)  # id 7, not "7"
    filtered, hidden = twin.to_client(2, listing.encode(), "7", POLICY)
    assert hidden == 1 and json.loads(filtered)["result"]["tools"] == [{"name": "ls"}]
