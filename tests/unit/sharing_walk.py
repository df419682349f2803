"""A random walk of clients sharing one relayed server (the operations and the `Walk` that
plays them), shared by the sharing and fuzz tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lazyd.core.relay import jsonrpc as rpc
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
from lazyd.core.relay.jsonrpc import JsonId, JsonObj
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
)


ROOTS_ONLY: JsonObj = {**CLIENT_PARAMS, "capabilities": {"roots": {}}}
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
        assert routes.client_inflight == sum(1 for up in routes.upstream.values() if up.cid is not None)
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
