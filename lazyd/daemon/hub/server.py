"""The hub: an MCP server the daemon serves itself, over every server it knows (docs/hub.md).

A session opened with `opts = {"hub": "true"}` and no command is handed to `open_hub`; it offers
the meta-tools of lazyd/core/hub/tools.py. Listings read the caches and start nothing; `call_tool`
is one `ProxiedCall` (lazyd/daemon/hub/call.py), an internal session seated by the sharing gate
(lazyd/daemon/hub/seats.py) so that it never sees another session's state. It reads the registry
through `RegistryView` (lazyd/daemon/sessions/sharing_gate.py), so it does not import the registry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from lazyd.core import policy_gate as gate
from lazyd.core.hub import tools as ht
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.hub.catalog import ToolInfo, cached_tools, search, server_description, tool_infos
from lazyd.core.hub.protocol import hub_servers, initialize_result
from lazyd.core.hub.routes import CancelTask, HubAction, HubRoutes, ToCall, ToClient
from lazyd.core.relay.jsonrpc import Invalid, JsonId, JsonObj, Kind, Message
from lazyd.core.policy import ToolPolicy, Verdict
from lazyd.core.relay.core import Phase
from lazyd.daemon.hub.call import ProxiedCall
from lazyd.daemon.hub.seats import Seats
from lazyd.daemon.sessions.sharing_gate import RegistryView
from lazyd.daemon.runtime.outbox import Outbox
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.daemon.control.wake_sleep import sleep_and_wait, state_of, wake, wake_and_wait
from lazyd.daemon.process.tree import tree_cpu_ticks, tree_members, tree_pss
from lazyd.host import procfs
from lazyd.protocol.frames import Hello

log = logging.getLogger("lazyd.hub")


HUB_NAME = "hub"  # the session name in the welcome frame and in logs


async def open_hub(registry: RegistryView, hello: Hello, opts: Mapping[str, str],
                   session: Outbox) -> HubSession:
    """Start a hub session for `session` (its tasks live in the daemon's nursery)."""
    hub = HubSession(registry, session, hub_servers(hello.argv, hello.server, opts))
    for line in hello.resume:
        hub.resume(line)
    await registry.nursery.start(hub.run)
    log.info("hub session %d opened (pid %s)%s", session.cid, hello.pid,
             f" for {', '.join(hub.servers)}" if hub.servers else "")
    return hub


class HubSession:
    """One client of the hub: the MCP server side, the meta-tools, and the calls in flight."""

    def __init__(self, registry: RegistryView, session: Outbox, servers: tuple[str, ...] | None) -> None:
        self.registry = registry
        self.session = session
        self.servers = servers
        self.name = HUB_NAME
        self.params: JsonObj | None = None  # the client's initialize params
        self._scope = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        # Which ids go where, decided by the pure routes (lazyd/core/hub/routes.py); the hub
        # carries the actions out. The scopes of the tasks it admitted, by request id, and the
        # calls in flight, by their internal client id.
        self.routes = HubRoutes()
        self._scopes: dict[JsonId, trio.CancelScope] = {}
        self._calls: dict[int, ProxiedCall] = {}
        # The hub's own confirmations of control tools (`elicitation/create` under string ids
        # `lazyd-hub-ask-N`, apart from the routes' integer ids): id -> (the answer, its arrival).
        self._asks: dict[str, tuple[list[JsonObj], trio.Event]] = {}
        self._next_ask = 0
        # The processes this hub session holds of servers that must not be shared (seats.py).
        self.seats = Seats(registry)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self._scope:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()

    def detach(self, cid: int) -> None:
        """The client left: every call is cancelled, which detaches its internal session, and its
        seats are let go."""
        self._scope.cancel()
        self.seats.release()
        self.session.close()
        log.info("hub session %d closed", cid)

    def resume(self, line: bytes) -> None:
        msg = rpc.parse(line)
        if isinstance(msg, Message) and msg.method == "initialize":
            self.params = msg.params

    def send(self, line: bytes, done: JsonId | None = None) -> None:
        self.session.deliver(line, done)

    # ---- the client's lines --------------------------------------------------------------------

    def client_line(self, cid: int, line: bytes, parsed: Message | Invalid | None = None) -> None:
        try:
            self._client_line(line, parsed)
        except Exception:
            # This runs in the connection's task, inside the daemon's listener nursery.
            log.exception("hub: a client line failed inside lazyd")

    def _client_line(self, line: bytes, parsed: Message | Invalid | None = None) -> None:
        msg = parsed if parsed is not None else rpc.parse(line)
        if not isinstance(msg, Message):
            if msg.reply is not None:
                self.send(msg.reply, msg.id)
            return
        if msg.kind is Kind.REQUEST:
            assert msg.id is not None
            self._request(msg, msg.id)
        elif msg.kind is Kind.NOTIFICATION:
            if msg.method == "notifications/cancelled":
                self.carry_out(self.routes.client_cancel(msg.params.get("requestId")))
        elif isinstance(msg.id, str) and msg.id in self._asks:
            answer, arrived = self._asks.pop(msg.id)
            answer.append(msg.obj)
            arrived.set()
        else:
            self.carry_out(self.routes.client_response(msg))

    def carry_out(self, actions: list[HubAction]) -> None:
        """Carry out what the routes decided (lazyd/core/hub/routes.py)."""
        for action in actions:
            if isinstance(action, ToClient):
                self.send(action.line)
            elif isinstance(action, ToCall):
                call = self._calls.get(action.call)
                if call is not None:
                    call.runtime.client_line(call.cid, action.line)
            elif isinstance(action, CancelTask):
                scope = self._scopes.get(action.rid)
                if scope is not None:
                    scope.cancel()

    def _request(self, msg: Message, rid: JsonId) -> None:
        method = msg.method
        if method == "initialize":
            self.params = msg.params
            self.send(rpc.result_line(rid, initialize_result(msg.params)), rid)
        elif method == "ping":
            self.send(rpc.result_line(rid, {}), rid)
        elif method == "tools/list":
            tools = [] if isinstance(msg.params.get("cursor"), str) else ht.visible_tools(self._policy())
            self.send(rpc.result_line(rid, {"tools": tools}), rid)
        elif method == "tools/call":
            self._tools_call(msg, rid)
        else:
            self.send(rpc.error_line(rid, rpc.METHOD_NOT_FOUND, f"Method not found: {method}"), rid)

    def _tools_call(self, msg: Message, rid: JsonId) -> None:
        name = msg.params.get("name")
        call = ht.parse_meta_call(name if isinstance(name, str) else "", msg.params.get("arguments"))
        if isinstance(call, str):
            if not isinstance(name, str) or name not in {t["name"] for t in ht.META_TOOLS}:
                self.send(rpc.error_line(rid, rpc.INVALID_PARAMS, f"Invalid params: {call}"), rid)
            else:
                self.send(rpc.result_line(rid, ht.error_result(call)), rid)
            return
        verdict = ht.control_verdict(self._policy(), call.name) if call.name in ht.CONTROL_TOOLS else None
        if verdict is not None and verdict.decision == "deny":
            log.info("policy: %s.%s: deny by %s (hub control tool)", ht.CONTROL_SERVER, call.name, verdict.reason())
            self.send(rpc.result_line(rid, ht.error_result(gate.denied_text(ht.CONTROL_SERVER, call.name, verdict))), rid)
        elif verdict is not None and verdict.decision == "ask":
            if (problem := self.routes.admit(rid)) is not None:
                self.send(rpc.error_line(rid, rpc.INVALID_REQUEST, f"lazyd hub: {problem}"), rid)
            else:
                self._spawn(rid, self._control, call, verdict)
        elif call.name == ht.LIST_SERVERS:
            self.send(rpc.result_line(rid, self._list_servers()), rid)
        elif call.name == ht.SERVER_STATUS:
            self.send(rpc.result_line(rid, self._status(call)), rid)
        elif call.name == ht.SEARCH_TOOLS:
            self.send(rpc.result_line(rid, self._search(call)), rid)
        elif call.name == ht.GET_TOOL_SCHEMA:
            self.send(rpc.result_line(rid, self._schema(call)), rid)
        elif (problem := self.routes.admit(rid)) is not None:
            self.send(rpc.error_line(rid, rpc.INVALID_REQUEST, f"lazyd hub: {problem}"), rid)
        elif call.name == ht.CALL_TOOL:
            meta = msg.params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            self._spawn(rid, self._call, call, rid, token)
        else:
            self._spawn(rid, self._control, call, None)

    def _spawn(self, rid: JsonId, work: Callable[..., Awaitable[JsonObj | bytes]], *args: Any) -> None:
        """Run `work(*args)` as a task the client can cancel; its result answers request `rid`."""
        scope = trio.CancelScope()
        self.routes.task_started(rid)  # now, not in the task: a cancel may arrive before it runs
        self._scopes[rid] = scope

        async def task() -> None:
            try:
                with scope:
                    answer = await work(*args)
                    self.send(answer if isinstance(answer, bytes) else rpc.result_line(rid, answer), rid)
            except Exception:
                # A bug in one call must not end the daemon, whose nursery this task lives in.
                log.exception("hub: a tool call failed inside lazyd")
                self.send(rpc.error_line(rid, rpc.INTERNAL_ERROR, "lazyd hub: internal error (see lazyd.log)"), rid)
            finally:
                self.routes.task_ended(rid)
                self._scopes.pop(rid, None)

        assert self._nursery is not None
        self._nursery.start_soon(task)

    # ---- servers -------------------------------------------------------------------------------

    def _visible(self) -> list[ServerRuntime]:
        registry = self.registry
        named = list(registry.config.servers)
        shown = [
            runtime for digest, runtime in registry.runtimes.items()
            if not registry.identities[digest].instance.startswith("private:")
            and not registry.is_second_lane(digest)  # the same server: its other-era process
            and (self.servers is None or runtime.name in self.servers)
        ]
        return sorted(shown, key=lambda r: (named.index(r.name) if r.name in named else len(named), r.name))

    def _lookup(self, name: str) -> ServerRuntime | str:
        visible = self._visible()
        for runtime in visible:
            if runtime.name == name:
                return runtime
        if self.servers is not None and name not in self.servers:
            return f"server {name!r} is not one of this hub's servers ({', '.join(self.servers)})"
        import difflib  # only for a name that matches nothing: not kept by every daemon

        near = difflib.get_close_matches(name, [r.name for r in visible], n=1)
        hint = f"; did you mean {near[0]!r}?" if near else "; list_servers shows them"
        return f"no server named {name!r}{hint}"

    def _tools(self, runtime: ServerRuntime) -> list[JsonObj] | None:
        core = runtime.core
        return cached_tools(core.snapshot, core.instance if core.phase is Phase.READY else None, self.params)

    def _policy(self) -> ToolPolicy:
        return self.registry.config.tool_policy

    def _about(self) -> dict[str, str]:
        """The descriptions users wrote for named servers (`description` in config.toml), read
        from the config in force, so a reload applies at once."""
        return {name: server.description for name, server in self.registry.config.servers.items()
                if server.description}

    # ---- meta-tools ----------------------------------------------------------------------------

    def _list_servers(self) -> JsonObj:
        policy = self._policy()
        views = []
        for runtime in self._visible():
            tools = self._tools(runtime)
            hidden = len(policy.denied(runtime.name, [t["name"] for t in tools or []]))
            snap = runtime.life.status_fields()
            live = runtime.core.instance if runtime.core.phase is Phase.READY else None
            views.append(ht.ServerView(
                name=runtime.name, state=str(snap["state"]),
                description=self._about().get(runtime.name) or server_description(runtime.core.snapshot, live),
                tools=None if tools is None else len(tools) - hidden, hidden=hidden,
                pid=runtime.proc.pid if runtime.proc is not None else None,
                last_error=str(snap["last_error"]) if snap["last_error"] else None))
        known = {r.name for r in self._visible()}
        unknown = [n for n in self.servers or () if n not in known]
        return ht.text_result(ht.render_servers(views, unknown))

    def _search(self, call: ht.MetaCall) -> JsonObj:
        if call.server:
            runtime = self._lookup(call.server)
            if isinstance(runtime, str):
                return ht.error_result(runtime)
            runtimes = [runtime]
        else:
            runtimes = self._visible()
        policy = self._policy()
        infos: list[ToolInfo] = []
        unknown: list[str] = []
        for runtime in runtimes:
            tools = self._tools(runtime)
            if tools is None:
                unknown.append(runtime.name)
                continue
            denied = policy.denied(runtime.name, [t["name"] for t in tools])
            infos.extend(i for i in tool_infos(runtime.name, tools) if i.name not in denied)
        about = self._about()
        found = search(infos, call.query, call.limit, about)
        ranked = [(info, policy.decide(info.server, info.name).decision) for info in found]
        return ht.text_result(ht.render_search(call.query, ranked, len(infos), unknown, about))

    def _schema(self, call: ht.MetaCall) -> JsonObj:
        runtime = self._lookup(call.server)
        if isinstance(runtime, str):
            return ht.error_result(runtime)
        tools = self._tools(runtime)
        if tools is None:
            self._prewarm(runtime)
            return ht.error_result(f"the tools of {runtime.name!r} are not known yet (it never ran); "
                                   "it is starting now: ask again in a few seconds")
        verdict = self._policy().decide(runtime.name, call.tool)
        if verdict.decision == "deny":
            return ht.error_result(gate.denied_text(runtime.name, call.tool, verdict))
        tool = next((t for t in tools if t["name"] == call.tool), None)
        if tool is None:
            all_names = [t["name"] for t in tools]
            denied = self._policy().denied(runtime.name, all_names)
            names = [name for name in all_names if name not in denied]
            import difflib  # only for a tool that matches nothing: not kept by every daemon

            near = difflib.get_close_matches(call.tool, names, n=3)
            hint = f"; did you mean {', '.join(near)}?" if near else "; search_tools lists its tools"
            return ht.error_result(f"{runtime.name!r} has no tool named {call.tool!r}{hint}")
        self._prewarm(runtime)
        return ht.text_result(ht.render_schema(runtime.name, tool, verdict.decision, state_of(runtime)))

    def _prewarm(self, runtime: ServerRuntime) -> None:
        if state_of(runtime) == "sleeping":
            log.info("hub: starting %s in the background (a tool schema was asked for)", runtime.name)
            wake(runtime, self.params)

    async def _call(self, call: ht.MetaCall, rid: JsonId, token: object) -> JsonObj | bytes:
        runtime = self._lookup(call.server)
        if isinstance(runtime, str):
            return ht.error_result(runtime)
        verdict = self._policy().decide(runtime.name, call.tool)
        if verdict.decision == "deny":
            log.info("policy: %s.%s: deny by %s (hub call)", runtime.name, call.tool, verdict.reason())
            return ht.error_result(gate.denied_text(runtime.name, call.tool, verdict))
        # A server that must not be shared is called in this hub session's own process (seats.py).
        target = await self.seats.runtime_for(runtime)
        log.info("hub: calling %s.%s", target.name, call.tool)
        proxied = ProxiedCall(self.params, self.routes, self.send, self.carry_out, target, rid,
                              self.registry.lanes_for(target), place=lambda c, key: self._spawn_place(c, runtime, key))
        self._calls[proxied.cid] = proxied
        try:
            return await proxied.run(call.tool, call.arguments, token)
        finally:
            # Its requests still waiting on the client are moot: say so.
            self._calls.pop(proxied.cid, None)
            self.carry_out(self.routes.call_ended(proxied.cid))

    def _spawn_place(self, call: ProxiedCall, base: ServerRuntime, key: str) -> None:
        """A call's internal session has its key: place it (seats.py), moving it if it must."""
        assert self._nursery is not None
        self._nursery.start_soon(self._place, call, base, key)

    async def _place(self, call: ProxiedCall, base: ServerRuntime, key: str) -> None:
        on = call.runtime
        target = await self.seats.place(base, on, key)
        if target is on:
            on.release(call.cid)
            return
        lanes = self.registry.lanes_for(target)
        if lanes is not None:
            target, _ = await lanes.get("handshake")
        if call.runtime is not on or call.cid not in on.sessions:
            return  # the call ended meanwhile (the hub session holds the process it got)
        params = on.core.clients[call.cid].params if call.cid in on.core.clients else None
        taken = on.take(call.cid)
        if taken is None:
            return
        known, held = taken
        call.runtime = target
        target.placers[call.cid] = lambda cid, key: self._spawn_place(call, base, key)
        target.move_in(call.inbox, params, known, held)

    async def _control(self, call: ht.MetaCall, verdict: Verdict | None) -> JsonObj:
        """A control tool; when the policy asks (`verdict`), the user's answer first."""
        runtime = self._lookup(call.server) if call.server else None
        if isinstance(runtime, str):
            return ht.error_result(runtime)
        if verdict is not None:
            refusal = await self._confirm(call.name, runtime.name if runtime is not None else "every server", verdict)
            if refusal is not None:
                return ht.error_result(refusal)
        if runtime is None:
            return self._list_servers()
        if call.name == ht.SERVER_STATUS:
            return self._status(call)
        if call.name != ht.WAKE_SERVER:  # sleep_server, restart_server
            await sleep_and_wait(runtime)
            if call.name == ht.SLEEP_SERVER:
                return ht.text_result(f"{runtime.name} is {state_of(runtime)}; the next call starts it again")
        error = await wake_and_wait(runtime, self.params)
        if error is not None:
            return ht.error_result(error)
        pid = runtime.proc.pid if runtime.proc is not None else None
        if call.name == ht.RESTART_SERVER:
            return ht.text_result(f"{runtime.name} was restarted: running, pid {pid}")
        return ht.text_result(f"{runtime.name} is running (pid {pid}); its tools: {len(self._tools(runtime) or [])}")

    async def _confirm(self, tool: str, server: str, verdict: Verdict) -> str | None:
        """Ask the hub's client's user whether the model may run control tool `tool` on `server`:
        None when accepted, else the refusal for a tool error."""
        where = f"{ht.CONTROL_SERVER}.{tool} ({server})"
        capabilities = (self.params or {}).get("capabilities")
        if not (isinstance(capabilities, dict) and isinstance(capabilities.get("elicitation"), dict)):
            log.info("policy: %s: ask by %s; refused: the client does not support elicitation", where, verdict.reason())
            return gate.no_elicitation_text(ht.CONTROL_SERVER, tool, verdict)
        self._next_ask += 1
        ask_id = f"lazyd-hub-ask-{self._next_ask}"
        answer: list[JsonObj] = []
        arrived = trio.Event()
        self._asks[ask_id] = (answer, arrived)
        log.info("policy: %s: ask by %s; asking the user", where, verdict.reason())
        self.send(rpc.request_line(ask_id, "elicitation/create", ht.control_ask_params(tool, server, verdict)))
        try:
            await arrived.wait()
        finally:
            if self._asks.pop(ask_id, None) is not None:  # the call was cancelled: so is the question
                self.send(rpc.notification_line("notifications/cancelled",
                                                {"requestId": ask_id, "reason": "the tool call was cancelled"}))
        outcome = gate.answer_outcome(answer[0])
        log.info("policy: %s: asked by %s, answer %s", where, verdict.reason(), outcome)
        return None if outcome == "accept" else gate.refusal_text(ht.CONTROL_SERVER, tool, outcome, answer[0])

    def _status(self, call: ht.MetaCall) -> JsonObj:
        runtime = self._lookup(call.server)
        if isinstance(runtime, str):
            return ht.error_result(runtime)
        snap = runtime.life.status_fields()
        proc = runtime.proc
        members: set[int] = set()
        table = None
        if proc is not None:
            table = procfs.stats()
            members = tree_members(proc.pid, table)
        running = proc is not None and snap["state"] == "running" and runtime.started_wall is not None
        stop = runtime.last_stop
        return ht.text_result(ht.render_status(ht.StatusView(
            name=runtime.name, state=str(snap["state"]), pid=proc.pid if proc is not None else None,
            processes=len(members), memory_bytes=tree_pss(members, table) if members else None,
            memory_max=runtime.config.memory_max,
            cpu_s=tree_cpu_ticks(members, table) / procfs.CLOCK_TICKS if members and table is not None else None,
            uptime_s=time.time() - runtime.started_wall if running and runtime.started_wall else None,
            clients=runtime.core.client_count(), inflight=runtime.core.inflight_count(),
            restarts=int(str(snap["restarts"])), last_error=str(snap["last_error"]) if snap["last_error"] else None,
            last_stop=stop[1] if stop is not None else None)))
