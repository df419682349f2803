"""Messages from the server in the handshake era, each routed to the client it belongs to (no
state of its own: it chooses the part).

Responses: a relay id names its request; the client's id is put back and its progress token
released, unless the result created a task (it keeps its owner); `tasks/list` is filtered to the
asker's tasks; answers to the relay's own requests go to the part that sent them. A large plain
result is spliced through undecoded unless the relay must read it.

Requests: `ping` and `roots/list` (session_roots.py) are answered by the relay; sampling and
elicitation go where routing.py decides, under fresh client-facing ids, or are refused.

Notifications: stateless-era ones first (lazyd/core/eras/listen.py); progress to the token's
owner; `list_changed` refreshes the listing (lazyd/core/relay/startup.py); resource updates to
subscribers, log messages by level, cancellations, task statuses and elicitation completions to
the one client concerned; anything else to every initialized client.
"""

from __future__ import annotations

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.bridge import Bridge
from lazyd.core.cache import LIST_CHANGED
from lazyd.core.relay.jsonrpc import Message
from lazyd.core.relay.listings import PURPOSE_PREFIX
from lazyd.core.relay.actions import Action, Activity, Note, ToClient, ToServer
from lazyd.core.relay.startup import Handshake
from lazyd.core.relay.session_roots import RootsPart
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import (CALLBACK_CAPABILITY, ClientId, Downstream, SamplingPolicy, Upstream,
                                      choose_callback_target, level_rank)
from lazyd.core.eras.stateless import StatelessEra
from lazyd.core.eras.stateless_cache import StatelessCache
from lazyd.core.eras.listen import ListenRelay

# Results the relay itself reads (records or filters), so they are always decoded. A task-creating
# tools/call result (which the relay also reads) is a few hundred bytes, never a large line.
_RESULTS_READ_BY_RELAY = frozenset({"server/discover", "tasks/list"})


class ServerMessages:
    """Where each message from the server goes (see the module docstring)."""

    def __init__(self, shared: RelayShared, sampling_policy: SamplingPolicy, cache: StatelessCache, listen: ListenRelay,
                 bridge: Bridge, handshake: Handshake, stateless: StatelessEra, roots: RootsPart) -> None:
        self.shared = shared
        self.roots = roots
        self.sampling_policy: SamplingPolicy = sampling_policy
        self.cache = cache
        self.listen = listen
        self.bridge = bridge
        self.handshake = handshake
        self.stateless = stateless

    def large_result(self, line: bytes) -> list[Action] | None:
        """A large plain result for a client's ordinary request, relayed without decoding it."""
        rid = rpc.large_result_id(line)
        up = self.shared.routes.upstream.get(rid) if rid is not None else None
        if (rid is None or up is None or up.cid is None or up.client_id is None or up.inspect
                or up.method in _RESULTS_READ_BY_RELAY):
            return None
        spliced = rpc.spliced_id(line, b"%d" % rid, rpc.dumps(up.client_id))
        if spliced is None:
            return None
        self.shared.routes.pop(rid)
        self.shared.routes.release_token(rid)
        if up.cid not in self.shared.clients:
            return [Note(f"response for departed client {up.cid} dropped")]
        return [Activity(), ToClient(up.cid, spliced, up.client_id)]

    def response(self, msg: Message) -> list[Action]:
        rid = msg.id
        up = self.shared.routes.pop(rid) if isinstance(rid, int) else None
        if up is None:
            return [Note(f"server response to unknown or cancelled id={rid!r} dropped")]
        if up.cid is None:
            return self._internal_response(up, msg)
        assert up.client_id is not None
        out: list[Action] = [Activity()]
        result = msg.obj.get("result")
        task = result.get("task") if isinstance(result, dict) else None
        if isinstance(task, dict) and isinstance(task.get("taskId"), str):
            # 2025-11-25 CreateTaskResult: the task outlives the request; so does token ownership.
            self.shared.routes.tasks[task["taskId"]] = up.cid
        else:
            self.shared.routes.release_token(rid)  # type: ignore[arg-type]
        if up.method == "server/discover":
            out.extend(self.cache.record_discover(up.purpose, msg.obj))
        filtered = up.method == "tasks/list" and isinstance(result, dict) and isinstance(result.get("tasks"), list)
        if filtered:
            assert isinstance(result, dict)
            # A task id the server wrote as something unhashable belongs to no client.
            result["tasks"] = [
                t
                for t in result["tasks"]
                if isinstance(t, dict) and isinstance(t.get("taskId"), str) and self.shared.routes.tasks.get(t["taskId"]) == up.cid
            ]
        if up.cid not in self.shared.clients:
            self.bridge.end_round(up.cid, up.client_id)
            return [Note(f"response for departed client {up.cid} dropped")]
        if up.bridged:
            return out + self.bridge.response(up, msg)
        if filtered:
            msg.obj["id"] = up.client_id
            out.append(ToClient(up.cid, rpc.dumps(msg.obj), up.client_id))
        else:
            out.append(ToClient(up.cid, rpc.with_id(msg, up.client_id), up.client_id))
        return out

    def _internal_response(self, up: Upstream, msg: Message) -> list[Action]:
        """An answer to the relay's own request goes to the part that asked."""
        if up.purpose == "replay":
            return self.handshake.answered(msg)
        if up.purpose.startswith(PURPOSE_PREFIX):
            return self._fetch_answer(up.purpose, msg)
        if up.purpose == "probe":
            return self.stateless.probe_answered(msg)
        if up.purpose == "probe-after":
            return self.stateless.probe_after_answered(msg)
        if up.purpose == "settle":
            return self.handshake.settled()
        if up.purpose == "listen":
            assert isinstance(msg.id, int)
            return self.listen.ended(msg.id, refused="error" in msg.obj)
        if "error" in msg.obj:
            return [Note(f"server refused the relay's {up.method}")]
        return []

    def _fetch_answer(self, purpose: str, msg: Message) -> list[Action]:
        outcome = self.shared.listings.answer(purpose, msg)
        if outcome is None:
            return [Note("a page of a replaced or finished fetch dropped")]
        if isinstance(outcome, ToServer):
            return [outcome]  # the next page
        if not outcome.fetch.stateless:
            return self.handshake.fetched(outcome)
        out, drifted = self.cache.fetched(outcome)
        if drifted is not None:
            out.append(Note(f"listing drift: sending {drifted}"))
            out.extend(self.listen.announce(drifted, {}))
        if outcome.fetch.why == "start":
            out.extend(self.stateless.maybe_ready())
        return out

    def request(self, msg: Message) -> list[Action]:
        method = msg.method
        assert method is not None and msg.id is not None
        self.handshake.server_asked()
        if method == "ping":
            return [ToServer(rpc.result_line(msg.id, {}))]
        if method == "roots/list":
            return self.roots.server_request(msg.id)  # the roots of the sessions this process serves
        needed = CALLBACK_CAPABILITY.get(method)

        def capable(cid: ClientId) -> bool:
            client = self.shared.clients.get(cid)
            return client is not None and (needed is None or client.declares(needed))

        target, reason = choose_callback_target(self.shared.routes, msg.params, self.sampling_policy, capable)
        if target is None:
            line = rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"lazyd: cannot route {method}: {reason}")
            return [ToServer(line), Note(f"{method} refused: {reason}")]
        if needed is not None and not self.shared.clients[target].declares(needed):
            line = rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, f"lazyd: the client of this request does not support {needed}")
            return [ToServer(line), Note(f"{method} refused: client {target} did not declare {needed}")]
        down_id = self.shared.routes.take_down_id()
        self.shared.routes.downstream[(target, down_id)] = Downstream(msg.id, method)
        elicitation_id = msg.params.get("elicitationId")
        if method == "elicitation/create" and isinstance(elicitation_id, str):
            self.shared.routes.elicitations[elicitation_id] = target
        return [ToClient(target, rpc.with_id(msg, down_id)), Note(f"{method} routed to client {target}: {reason}")]

    def notification(self, msg: Message) -> list[Action]:
        method = msg.method
        params = msg.params
        stateless = self.listen.notification(msg)
        if stateless is not None:
            return stateless
        if method == "notifications/progress":
            token = params.get("progressToken")
            # bool is an int in Python: `true` must not reach the owner of relay token 1.
            token_owner = self.shared.routes.tokens.get(token) if isinstance(token, int) and not isinstance(token, bool) else None
            if token_owner is None:
                return [Note(f"progress for unknown token {token!r} dropped")]
            params["progressToken"] = token_owner[1]
            return [ToClient(token_owner[0], rpc.dumps(msg.obj))]
        if method is not None and method in LIST_CHANGED.values():
            return self.handshake.list_changed(method)
        if method == "notifications/resources/updated":
            uri = params.get("uri")
            subscribers = self.shared.routes.subscriptions.get(uri, set()) if isinstance(uri, str) else set()
            line = rpc.dumps(msg.obj)
            return [ToClient(cid, line) for cid in sorted(subscribers)]
        if method == "notifications/message":
            rank = level_rank(params.get("level"))
            line = rpc.dumps(msg.obj)
            return [
                ToClient(cid, line)
                for cid in sorted(self.shared.clients)
                if cid not in self.shared.routes.levels or rank >= level_rank(self.shared.routes.levels[cid])
            ]
        if method == "notifications/cancelled":
            server_id = params.get("requestId")
            for (cid, down_id), down in list(self.shared.routes.downstream.items()):
                if down.server_id == server_id and type(down.server_id) is type(server_id):
                    del self.shared.routes.downstream[(cid, down_id)]
                    params["requestId"] = down_id
                    return [ToClient(cid, rpc.dumps(msg.obj))]
            return [Note("server cancel of an unknown request dropped")]
        if method == "notifications/tasks/status":
            owner = self.shared.routes.tasks.get(str(params.get("taskId")))
            return [ToClient(owner, rpc.dumps(msg.obj))] if owner is not None else [Note("task status for unknown task dropped")]
        if method == "notifications/elicitation/complete":
            owner = self.shared.routes.elicitations.pop(str(params.get("elicitationId")), None)
            return [ToClient(owner, rpc.dumps(msg.obj))] if owner is not None else [Note("elicitation completion for unknown id dropped")]
        line = rpc.dumps(msg.obj)
        return [ToClient(cid, line) for cid, c in sorted(self.shared.clients.items()) if c.initialized]
