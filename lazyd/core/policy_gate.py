"""The policy gate: the tool policy applied to one server's clients, before the relay core.

Pure. Every line a client sends passes through the gate of its server runtime first:

- a `tools/call`: `allow` passes it on; `deny` answers it with a tool error naming the rule; `ask`
  holds it and sends the client the daemon's own `elicitation/create` (id `lazyd-policy-N`, a
  string, never a relay id), or refuses as `deny` when the client cannot elicit;
- the answer to such an elicitation: `accept` passes the held line on, anything else refuses it;
- a `notifications/cancelled` for a held request ends the hold, and the elicitation is cancelled;
- a `tools/list` while some tool could be denied is noted, so `to_client` takes the denied tools
  out of its answer: a model is never offered a tool it would be refused.

A held line is in no relay table, so a client leaving while asked leaves only the hold (`detach`).
Each decision is one `Log` naming the server, tool and rule, never the arguments (secrets).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core import state_codec as sc
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Kind, Message
from lazyd.core.policy import Decision, ToolPolicy, Verdict

ASK_ID_PREFIX = "lazyd-policy-"
# The arguments shown in a confirmation: enough to recognise the call, short enough to read.
SUMMARY_CHARS = 400
SUMMARY_STRING_CHARS = 80


@dataclass(frozen=True, slots=True)
class Pass:
    """Give this line to the relay core (the client's line, or a held call now accepted)."""

    line: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    """Write this line to the client; `done` is the client's request id it finally answers."""

    line: bytes
    done: JsonId | None = None


@dataclass(frozen=True, slots=True)
class Log:
    text: str


GateAction = Pass | Reply | Log


class Held(NamedTuple):
    """A call held for the user's answer."""

    line: bytes
    request_id: JsonId
    tool: str
    decision: Decision
    rule: str | None

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.decision, self.rule)


def summarize_arguments(arguments: object) -> str:
    """A one-line, bounded rendering of a call's arguments for a confirmation question."""

    def shorten(value: Any) -> Any:
        if isinstance(value, str) and len(value) > SUMMARY_STRING_CHARS:
            return value[:SUMMARY_STRING_CHARS] + "…"
        if isinstance(value, dict):
            return {str(k): shorten(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shorten(v) for v in value]
        return value

    if arguments is None or arguments == {}:
        return "(none)"
    text = json.dumps(shorten(arguments), ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "…"


def ask_params(server: str, tool: str, arguments: object, verdict: Verdict) -> JsonObj:
    """The `elicitation/create` params that ask whether a call may run: a form with no fields,
    whose question names the tool, server, arguments (summarised) and rule."""
    message = (f'Allow the tool "{tool}" of the MCP server "{server}" to run?\n'
               f"Arguments: {summarize_arguments(arguments)}\n"
               f"(lazyd asks because of {verdict.reason()} in its config.)")
    return {"message": message, "requestedSchema": {"type": "object", "properties": {}}}


def tool_error(request_id: JsonId, text: str) -> bytes:
    """A `tools/call` result that is a tool error: the model reads it, the server never ran."""
    return rpc.result_line(request_id, {"content": [{"type": "text", "text": text}], "isError": True})


def denied_text(server: str, tool: str, verdict: Verdict) -> str:
    return f'lazyd policy: the tool "{tool}" of server "{server}" is denied by {verdict.reason()}.'


def no_elicitation_text(server: str, tool: str, verdict: Verdict) -> str:
    return (f'lazyd policy: the tool "{tool}" of server "{server}" needs the user\'s confirmation '
            f"({verdict.reason()}), but this client does not support MCP elicitation, so it was "
            "refused. Change the rule to allow it from this client.")


def answer_outcome(answer: JsonObj) -> str:
    """What the client said to a confirmation: accept, decline, cancel, error or unknown."""
    result = answer.get("result")
    if isinstance(result, dict):
        action = result.get("action")
        return action if action in ("accept", "decline", "cancel") else "unknown"
    return "error"


def refusal_text(server: str, tool: str, outcome: str, answer: JsonObj) -> str:
    """The tool error for a confirmation that did not end in `accept`."""
    subject = f'the tool "{tool}" of server "{server}"'
    if outcome == "decline":
        return f"lazyd policy: the user declined running {subject}."
    if outcome == "cancel":
        return f"lazyd policy: the user dismissed the confirmation for {subject}; it did not run."
    if outcome == "error":
        error = answer.get("error")
        reason = error.get("message") if isinstance(error, dict) else None
        return f"lazyd policy: the client could not ask the user about {subject} ({str(reason)[:200]}); it did not run."
    return f"lazyd policy: the confirmation for {subject} got an answer lazyd does not understand; it did not run."


# What a gate keeps for a successor daemon (lazyd/core/state_codec.py).
_KEPT = {"held": dict[tuple[int, str], Held], "next_ask": int, "listings": set[tuple[int, bool, JsonId]]}


class PolicyGate:
    """The policy in front of one server's relay core; see the module docstring."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.held: dict[tuple[int, str], Held] = {}
        self.next_ask = 1
        # tools/list requests whose answers are to be filtered: (client, id type is str, id).
        self.listings: set[tuple[int, bool, JsonId]] = set()

    def held_count(self) -> int:
        return len(self.held)

    def to_state(self) -> JsonObj:
        """The calls held for the user's answer, the ask counter and the listings to filter."""
        return sc.dump_attrs(self, _KEPT)

    def restore(self, value: object) -> None:
        sc.load_attrs(self, _KEPT, value, "gate")

    def client_line(self, cid: int, line: bytes, policy: ToolPolicy,
                    can_elicit: Callable[[], bool]) -> list[GateAction]:
        """Decide about one client line; `can_elicit` says whether this client declared elicitation."""
        if not policy.active and not self.held:
            return [Pass(line)]
        msg = rpc.parse(line)
        if not isinstance(msg, Message):
            return [Pass(line)]  # the core words the error
        if msg.kind is Kind.RESPONSE and isinstance(msg.id, str) and (cid, msg.id) in self.held:
            return self._answered(cid, msg)
        if msg.kind is Kind.NOTIFICATION and msg.method == "notifications/cancelled" and self.held:
            return self._cancelled(cid, msg, line)
        if msg.kind is Kind.REQUEST and msg.method == "tools/list" and policy.can_deny:
            assert msg.id is not None
            self.listings.add((cid, isinstance(msg.id, str), msg.id))
            return [Pass(line)]
        if msg.kind is not Kind.REQUEST or msg.method != "tools/call" or not policy.active:
            return [Pass(line)]
        assert msg.id is not None
        tool = msg.params.get("name")
        if not isinstance(tool, str):
            return [Pass(line)]  # the server answers a call without a name
        verdict = policy.decide(self.server, tool)
        where = f"policy: {self.server}.{tool}: {verdict.decision} by {verdict.reason()}"
        if verdict.decision == "allow":
            return [Log(where), Pass(line)]
        if verdict.decision == "deny":
            return [Log(where), Reply(tool_error(msg.id, denied_text(self.server, tool, verdict)), msg.id)]
        if not can_elicit():
            return [Log(f"{where}; refused: the client does not support elicitation"),
                    Reply(tool_error(msg.id, no_elicitation_text(self.server, tool, verdict)), msg.id)]
        ask_id = f"{ASK_ID_PREFIX}{self.next_ask}"
        self.next_ask += 1
        self.held[(cid, ask_id)] = Held(line, msg.id, tool, verdict.decision, verdict.rule)
        params = ask_params(self.server, tool, msg.params.get("arguments"), verdict)
        return [Log(f"{where}; asking the user"), Reply(rpc.request_line(ask_id, "elicitation/create", params))]

    def listing_count(self) -> int:
        """tools/list answers still to be filtered: while 0, `to_client` need not be called."""
        return len(self.listings)

    def to_client(self, cid: int, line: bytes, done: JsonId, policy: ToolPolicy) -> tuple[bytes, int]:
        """A final answer to client `cid`'s request `done`, with denied tools taken out when it
        answers a noted `tools/list`; and how many were taken out."""
        key = (cid, isinstance(done, str), done)
        if key not in self.listings:
            return line, 0
        self.listings.discard(key)
        msg = rpc.parse(line)
        if not isinstance(msg, Message) or msg.kind is not Kind.RESPONSE:
            return line, 0
        result = msg.obj.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return line, 0  # an error, or no listing: as the server wrote it
        names = [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
        denied = policy.denied(self.server, names)
        kept = [tool for tool in tools if not (isinstance(tool, dict) and isinstance(tool.get("name"), str)
                                               and tool["name"] in denied)]
        if len(kept) == len(tools):
            return line, 0
        assert isinstance(result, dict)
        return rpc.dumps({**msg.obj, "result": {**result, "tools": kept}}), len(tools) - len(kept)

    def detach(self, cid: int) -> None:
        """The client left: its held calls are dropped unanswered (nobody is there to answer)."""
        for key in [k for k in self.held if k[0] == cid]:
            del self.held[key]
        self.listings = {k for k in self.listings if k[0] != cid}

    def _answered(self, cid: int, msg: Message) -> list[GateAction]:
        assert isinstance(msg.id, str)
        held = self.held.pop((cid, msg.id))
        outcome = answer_outcome(msg.obj)
        where = f"policy: {self.server}.{held.tool}: asked by {held.verdict.reason()}, answer {outcome}"
        if outcome == "accept":
            return [Log(f"{where}: running it"), Pass(held.line)]
        text = refusal_text(self.server, held.tool, outcome, msg.obj)
        return [Log(f"{where}: refused"), Reply(tool_error(held.request_id, text), held.request_id)]

    def _cancelled(self, cid: int, msg: Message, line: bytes) -> list[GateAction]:
        request_id = msg.params.get("requestId")
        for (owner, ask_id), held in list(self.held.items()):
            if owner == cid and held.request_id == request_id and type(held.request_id) is type(request_id):
                del self.held[(owner, ask_id)]
                notice = rpc.notification_line("notifications/cancelled",
                                               {"requestId": ask_id, "reason": "the tool call was cancelled"})
                return [Log(f"policy: {self.server}.{held.tool}: cancelled while the user was asked"), Reply(notice)]
        return [Pass(line)]
