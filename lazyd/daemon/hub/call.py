"""One hub `call_tool`: an internal session attached to a server's runtime for the call's duration.

It attaches like a shim's session (a negative client id, never a shim's) and sends `initialize`
(lazyd/core/relay/handshake_defaults.py), `notifications/initialized` and the `tools/call`. What
the server sends it meanwhile goes to the hub's client through the hub's routes
(lazyd/core/hub/routes.py); the result comes back with only its id changed. Its outbox holds lines
(LineOutbox): no msgpack.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

from lazyd.core.hub import tools as ht
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.handshake_defaults import hub_call_params
from lazyd.core.hub.routes import HubAction, HubRoutes
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Kind, Message
from lazyd.daemon.runtime.era_lanes import EraLanes
from lazyd.daemon.runtime.outbox import LineOutbox
from lazyd.daemon.runtime.supervisor import ServerRuntime

# The internal session's own ids: strings, which the relay maps like any client's.
_INIT_ID = "lazyd-hub-initialize"
_CALL_ID = "lazyd-hub-call"
# Negative client ids for internal sessions: the registry numbers shim sessions from 1 upwards.
_internal_cids = itertools.count(-1, -1)


class ProxiedCall:
    """One `call_tool`: an internal session on the server's runtime for the call's duration. Of
    the hub session it belongs to it takes the client's initialize `params`, the `routes`, `send`
    to its client and `carry_out` of the routes' actions (lazyd/daemon/hub/server.py)."""

    def __init__(self, params: JsonObj | None, routes: HubRoutes, send: Callable[[bytes], None],
                 carry_out: Callable[[list[HubAction]], None], runtime: ServerRuntime, rid: JsonId,
                 lanes: EraLanes | None, place: Callable[[ProxiedCall, str], None]) -> None:
        self.params, self.routes, self.send, self.carry_out = params, routes, send, carry_out
        self.runtime = runtime
        # Where the internal session goes once its key (its roots) is known: the hub session's
        # seats decide (seats.py); it may move the session to another process before its call
        # reached this one.
        self.place = place
        self.lanes = lanes  # the registration's processes by era, if it has a lane table
        self.rid = rid
        self.cid = next(_internal_cids)
        self.overflowed = False
        self.inbox = LineOutbox(self.cid, os.getpid(), self._overflow)

    def _overflow(self) -> None:
        self.overflowed = True  # the relay stops delivering; the channel's end ends the call

    async def run(self, tool: str, arguments: JsonObj, token: object) -> JsonObj | bytes:
        lanes = self.lanes
        if lanes is not None:
            # The call is a handshake-era session: it gets that era's process of the server.
            self.runtime, _ = await lanes.get("handshake")
        runtime = self.runtime
        params = hub_call_params(self.params)
        call_params: JsonObj = {"name": tool, "arguments": arguments}
        if rpc.valid_id(token):
            call_params["_meta"] = {"progressToken": token}
        runtime.placers[self.cid] = lambda cid, key: self.place(self, key)
        runtime.attach(self.inbox, [])
        try:
            runtime.client_line(self.cid, rpc.request_line(_INIT_ID, "initialize", params))
            runtime.client_line(self.cid, rpc.notification_line("notifications/initialized"))
            runtime.client_line(self.cid, rpc.request_line(_CALL_ID, "tools/call", call_params))
            async for line, _done in self.inbox.lines():
                answer = self._line(line)
                if answer is not None:
                    return answer
            why = "the hub fell behind reading it" if self.overflowed else "it was removed or restarted by a config reload"
            return ht.error_result(f"lazyd hub: the call to {runtime.name} ended without an answer: {why}")
        finally:
            self.runtime.detach(self.cid)  # where it is now: a move may have taken it elsewhere

    def _line(self, line: bytes) -> bytes | None:
        msg = rpc.parse(line)
        if not isinstance(msg, Message):
            return None
        if msg.kind is Kind.RESPONSE:
            return rpc.with_id(msg, self.rid) if msg.id == _CALL_ID else None
        if msg.kind is Kind.REQUEST:
            self.carry_out(self.routes.server_request(self.cid, msg))
        elif msg.method in ("notifications/progress", "notifications/message"):
            self.send(line)  # progress already carries the caller's own token
        elif msg.method == "notifications/cancelled":
            self.carry_out(self.routes.server_cancel(self.cid, msg))
        return None
