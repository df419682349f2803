"""The hub's routing of ids and cancels between its client and the calls it proxies. Pure.

One hub session (lazyd/daemon/hub/server.py) has one client and any number of calls in flight:
meta-tool tasks and `call_tool` calls (each an internal session on a server's runtime, `call`).

1. A task is admitted while fewer than MAX_CALLS_IN_FLIGHT run and its id is not in flight (`admit`).
2. The client's `notifications/cancelled` for a request in flight cancels its task (`CancelTask`).
3. A server's request during a call goes to the client under the next hub id (integers from 1,
   never reused: `ToClient`); the answer goes back to that call under the server's id, once
   (`ToCall`); an answer to an unknown id is dropped.
4. A server's cancellation of a request waiting on the client goes to the client under its hub id,
   and the request is forgotten. Ids match by value and type: 1 and "1" differ.
5. A call that ends cancels its requests still waiting on the client ("the tool call ended").
"""

from __future__ import annotations

from dataclasses import dataclass

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.jsonrpc import JsonId, Message

# Far above what a model issues in parallel, too low for a runaway client to attach thousands.
MAX_CALLS_IN_FLIGHT = 64
CALL_ENDED_REASON = "the tool call ended"


@dataclass(frozen=True)
class ToClient:
    """Send this line to the hub's client."""

    line: bytes


@dataclass(frozen=True)
class ToCall:
    """Give this line (a client's response, under the server's id) to the call's internal session."""

    call: int
    line: bytes


@dataclass(frozen=True)
class CancelTask:
    """Cancel the task answering the client's request `rid`."""

    rid: JsonId


HubAction = ToClient | ToCall | CancelTask


def _same_id(a: object, b: object) -> bool:
    return a == b and type(a) is type(b)


class HubRoutes:
    """The ids in flight between one hub client and its calls: events in, actions out."""

    def __init__(self) -> None:
        self._tasks: list[JsonId] = []  # the client's request ids whose tasks run, oldest first
        self._outgoing: dict[int, tuple[int, JsonId]] = {}  # hub id -> (call, the server's id)
        self._next_out = 1

    # ---- the client's requests and cancels (rules 1 and 2) -------------------------------------

    def admit(self, rid: JsonId) -> str | None:
        """Whether a task may start for request `rid`: None, or the problem to answer with."""
        if any(_same_id(rid, running) for running in self._tasks):
            return "this request id is already in flight"
        if len(self._tasks) >= MAX_CALLS_IN_FLIGHT:
            return f"{MAX_CALLS_IN_FLIGHT} hub calls are already in flight; wait for some to finish"
        return None

    def task_started(self, rid: JsonId) -> None:
        """A task for `rid` was admitted and runs from now on (cancellable from this moment)."""
        self._tasks.append(rid)

    def task_ended(self, rid: JsonId) -> None:
        self._tasks = [running for running in self._tasks if not _same_id(running, rid)]

    def client_cancel(self, request_id: object) -> list[HubAction]:
        if any(_same_id(request_id, running) for running in self._tasks):
            assert isinstance(request_id, (int, str))
            return [CancelTask(request_id)]
        return []

    # ---- requests from the servers, answers from the client (rules 3 to 5) ----------------------

    def server_request(self, call: int, msg: Message) -> list[HubAction]:
        """A request from the server of `call` (`msg.id` set) to the hub's client."""
        assert msg.id is not None
        out_id = self._next_out
        self._next_out += 1
        self._outgoing[out_id] = (call, msg.id)
        return [ToClient(rpc.with_id(msg, out_id))]

    def client_response(self, msg: Message) -> list[HubAction]:
        """The client's response (result or error) to one of the hub's ids."""
        entry = self._outgoing.pop(msg.id, None) if isinstance(msg.id, int) and not isinstance(msg.id, bool) else None
        if entry is None:
            return []  # an answer to a request that ended with its call, or to none
        call, original = entry
        return [ToCall(call, rpc.with_id(msg, original))]

    def server_cancel(self, call: int, msg: Message) -> list[HubAction]:
        """The server of `call` gave up one of its requests: tell the client under the hub's id."""
        request_id = msg.params.get("requestId")
        for out_id, (owner, original) in self._outgoing.items():
            if owner == call and _same_id(original, request_id):
                del self._outgoing[out_id]
                obj = dict(msg.obj)
                obj["params"] = {**msg.params, "requestId": out_id}
                return [ToClient(rpc.dumps(obj))]
        return []

    def call_ended(self, call: int) -> list[HubAction]:
        """`call` ended: its requests still waiting on the client are cancelled there."""
        actions: list[HubAction] = []
        for out_id in [out_id for out_id, (owner, _) in self._outgoing.items() if owner == call]:
            del self._outgoing[out_id]
            actions.append(ToClient(rpc.notification_line(
                "notifications/cancelled", {"requestId": out_id, "reason": CALL_ENDED_REASON})))
        return actions
