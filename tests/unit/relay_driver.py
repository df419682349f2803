"""Helpers that drive a `RelayCore` with events and read its actions as parsed JSON.

The relay core does no I/O, so a test is a list of events and the exact actions they produce. These
helpers keep that readable: `Out` wraps one event's actions and renders the lines as JSON objects,
and `Driver` plays the daemon (feeding events) and, where a test asks it to, a well-behaved server
(answering the replayed handshake and the listing refresh page by page).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import HandshakeEntry, Listing, Snapshot, handshake_key
from lazyd.core.relay.jsonrpc import JsonId, JsonObj
from lazyd.core.relay.core import (
    Abort,
    Action,
    Activity,
    Note,
    Phase,
    Ready,
    RelayCore,
    SessionKey,
    SnapshotChanged,
    WaitIdle,
    ToClient,
    ToServer,
    Used,
    WantServer,
)
from lazyd.core.relay.routing import SamplingPolicy

VERSION = "2025-11-25"
CLIENT_PARAMS: JsonObj = {
    "protocolVersion": VERSION,
    "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}},
    "clientInfo": {"name": "test-client", "version": "1.0"},
}
# A client that declares no callback capability at all.
BARE_PARAMS: JsonObj = {
    "protocolVersion": VERSION,
    "capabilities": {},
    "clientInfo": {"name": "bare-client", "version": "1.0"},
}
INIT_RESULT: JsonObj = {
    "protocolVersion": VERSION,
    "capabilities": {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "logging": {},
    },
    "serverInfo": {"name": "test-server", "version": "0.1"},
}
TOOLS: list[Any] = [{"name": "echo", "inputSchema": {"type": "object"}}, {"name": "add", "inputSchema": {"type": "object"}}]
PROMPTS: list[Any] = [{"name": "greet"}]
RESOURCES: list[Any] = [{"uri": "file:///a", "name": "a"}]
TEMPLATES: list[Any] = [{"uriTemplate": "file:///{path}", "name": "files"}]
# Listing method -> its pages, as the server serves them (merged by the relay).
PAGES: dict[str, list[list[Any]]] = {
    "tools/list": [TOOLS],
    "prompts/list": [PROMPTS],
    "resources/list": [RESOURCES],
    "resources/templates/list": [TEMPLATES],
}
ITEM_KEYS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources", "resources/templates/list": "resourceTemplates"}
NOT_FOUND: JsonObj = {"code": rpc.METHOD_NOT_FOUND, "message": "Method not found"}


def line(obj: JsonObj) -> bytes:
    return rpc.dumps(obj)


def request(msg_id: JsonId, method: str, params: JsonObj | None = None) -> JsonObj:
    obj: JsonObj = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        obj["params"] = params
    return obj


def notification(method: str, params: JsonObj | None = None) -> JsonObj:
    obj: JsonObj = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        obj["params"] = params
    return obj


def result(msg_id: JsonId, value: Any) -> JsonObj:
    return {"jsonrpc": "2.0", "id": msg_id, "result": value}


def error(msg_id: JsonId | None, code: int, message: str = "") -> JsonObj:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def warm_snapshot(
    params: JsonObj = CLIENT_PARAMS,
    init_result: JsonObj = INIT_RESULT,
    pages: dict[str, list[list[Any]]] = PAGES,
    discover_not_found: bool = True,
) -> Snapshot:
    """A snapshot as a previous run against a handshake-era server would have left it."""
    snapshot = Snapshot()
    entry = HandshakeEntry(params=params, result=init_result)
    for method, method_pages in pages.items():
        entry.listings[method] = Listing(items=[item for page in method_pages for item in page])
    snapshot.entries[handshake_key(params)] = entry
    snapshot.last_params = params
    if discover_not_found:
        snapshot.discover["*"] = {"error": NOT_FOUND}
    return snapshot


class Out(list[Action]):
    """The actions one event produced, with readable views."""

    def client(self, cid: int) -> list[JsonObj]:
        """Every line sent to client `cid`, parsed."""
        return [json.loads(a.line) for a in self if isinstance(a, ToClient) and a.cid == cid]

    def clients(self) -> set[int]:
        return {a.cid for a in self if isinstance(a, ToClient)}

    @property
    def server(self) -> list[JsonObj]:
        """Every line sent to the server, parsed."""
        return [json.loads(a.line) for a in self if isinstance(a, ToServer)]

    @property
    def done(self) -> list[tuple[int, JsonId]]:
        """(client, original id) of every line that finally answers a client request."""
        return [(a.cid, a.done) for a in self if isinstance(a, ToClient) and a.done is not None]

    @property
    def want(self) -> bool:
        return any(isinstance(a, WantServer) for a in self)

    @property
    def ready(self) -> bool:
        return any(isinstance(a, Ready) for a in self)

    @property
    def snapshot_changed(self) -> bool:
        return any(isinstance(a, SnapshotChanged) for a in self)

    @property
    def notes(self) -> list[str]:
        return [a.text for a in self if isinstance(a, Note)]

    @property
    def aborts(self) -> list[str]:
        return [a.reason for a in self if isinstance(a, Abort)]

    def visible(self) -> list[tuple[Any, ...]]:
        """Every action but notes and activity and use marks, in order, lines parsed."""
        out: list[tuple[Any, ...]] = []
        for a in self:
            if isinstance(a, ToClient):
                out.append(("client", a.cid, json.loads(a.line), a.done))
            elif isinstance(a, ToServer):
                out.append(("server", json.loads(a.line)))
            elif isinstance(a, (Note, Activity, Used)):
                continue
            else:
                out.append((type(a).__name__,))
        return out


class Clock:
    """Wall-clock seconds as the test says: the `now` the driver gives every event."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


# The roots every client of a Driver answers the relay's roots/list with, unless a test says.
ROOTS: JsonObj = {"roots": [{"uri": "file:///project", "name": "project"}]}


class Driver:
    """Plays the daemon around one `RelayCore`, and the server where a test asks it to.

    It also plays the daemon's placing and a well-behaved client's roots, unless a test turns them
    off: a `SessionKey` is answered with `release` (the session stays; `place = False` leaves it
    to the test), and the relay's own `roots/list` to a client is answered with `roots[cid]`, else
    ROOTS (`auto_roots = False` leaves it to the test); neither shows in the actions returned.

    `upstream` holds every request the relay sent to the server that the test has not answered yet
    (a cancelled one stays there: the server may still answer it, as a real one can). Every event
    is given `clock()` as its `now`.
    """

    def __init__(self, snapshot: Snapshot | None = None, policy: SamplingPolicy = "refuse") -> None:
        self.core = RelayCore("test", snapshot if snapshot is not None else Snapshot(), policy)
        self.clock = Clock()
        self.upstream: dict[int, JsonObj] = {}
        self.sent_to_server: list[JsonObj] = []
        self.place = True
        self.idle = True  # the server goes idle at once after a settling start (WaitIdle)
        self.auto_roots = True
        self.roots: dict[int, JsonObj] = {}

    # ---- events ----------------------------------------------------------------------------------

    def record(self, actions: Iterable[Action]) -> Out:
        out = Out()
        for action in actions:
            if isinstance(action, WaitIdle) and self.idle:
                out.extend(self.record(self.core.server_idle(now=self.clock())))
                continue
            if isinstance(action, SessionKey) and self.place:
                out.extend(self.record(self.core.release(action.cid, now=self.clock())))
                continue
            if isinstance(action, ToClient) and self.auto_roots:
                msg = json.loads(action.line)
                mine = self.core.roots.sessions.get(action.cid)
                if msg.get("method") == "roots/list" and mine is not None and msg.get("id") == mine.asking:
                    answer = line(result(msg["id"], self.roots.get(action.cid, ROOTS)))
                    out.extend(self.record(self.core.client_line(action.cid, answer, now=self.clock())))
                    continue
            if isinstance(action, ToServer):
                msg = json.loads(action.line)
                self.sent_to_server.append(msg)
                if "method" in msg and "id" in msg:
                    assert msg["id"] not in self.upstream, f"relay id {msg['id']} reused"
                    self.upstream[msg["id"]] = msg
            out.append(action)
        return out

    def attach(self, *cids: int) -> Out:
        out = Out()
        for cid in cids:
            out.extend(self.record(self.core.attach(cid, now=self.clock())))
        return out

    def detach(self, cid: int) -> Out:
        return self.record(self.core.detach(cid, now=self.clock()))

    def send(self, cid: int, obj: JsonObj | bytes) -> Out:
        return self.record(self.core.client_line(cid, obj if isinstance(obj, bytes) else line(obj), now=self.clock()))

    def ask(self, cid: int, msg_id: JsonId, method: str, params: JsonObj | None = None) -> Out:
        return self.send(cid, request(msg_id, method, params))

    def tell(self, cid: int, method: str, params: JsonObj | None = None) -> Out:
        return self.send(cid, notification(method, params))

    def server_says(self, obj: JsonObj | bytes) -> Out:
        return self.record(self.core.server_line(obj if isinstance(obj, bytes) else line(obj), now=self.clock()))

    def spawned(self) -> Out:
        return self.record(self.core.spawned(now=self.clock()))

    def exited(self, description: str = "exited with status 1") -> Out:
        out = self.record(self.core.exited(description, now=self.clock()))
        self.upstream.clear()
        return out

    def start_failed(self, reason: str = "command not found") -> Out:
        return self.record(self.core.start_failed(reason, now=self.clock()))

    # ---- the server's side -----------------------------------------------------------------------

    def pending(self, method: str) -> list[JsonObj]:
        return [msg for msg in self.upstream.values() if msg["method"] == method]

    def one_pending(self, method: str) -> JsonObj:
        found = self.pending(method)
        assert len(found) == 1, f"expected one pending {method}, found {found}"
        return found[0]

    def reply(self, msg: JsonObj, value: Any) -> Out:
        """Answer the server-bound request `msg` with `value` as its result."""
        self.upstream.pop(msg["id"], None)
        return self.server_says(result(msg["id"], value))

    def reply_error(self, msg: JsonObj, code: int, message: str = "") -> Out:
        self.upstream.pop(msg["id"], None)
        return self.server_says(error(msg["id"], code, message))

    def answer(self, method: str, value: Any) -> Out:
        return self.reply(self.one_pending(method), value)

    def serve_listings(self, pages: dict[str, list[list[Any]]] = PAGES) -> Out:
        """Answer every pending listing request, page by page, until none is left."""
        out = Out()
        while True:
            waiting = [m for m in self.upstream.values() if m["method"] in ITEM_KEYS]
            if not waiting:
                return out
            msg = waiting[0]
            method = msg["method"]
            method_pages = pages.get(method)
            if method_pages is None:
                out.extend(self.reply_error(msg, rpc.METHOD_NOT_FOUND, "Method not found"))
                continue
            cursor = (msg.get("params") or {}).get("cursor")
            index = 0 if cursor is None else int(cursor)
            page: JsonObj = {ITEM_KEYS[method]: method_pages[index]}
            if index + 1 < len(method_pages):
                page["nextCursor"] = str(index + 1)
            out.extend(self.reply(msg, page))

    def start(
        self,
        init_result: JsonObj = INIT_RESULT,
        pages: dict[str, list[list[Any]]] = PAGES,
    ) -> Out:
        """spawned(), then answer the replayed initialize and every listing request."""
        out = self.spawned()
        out.extend(self.answer("initialize", init_result))
        out.extend(self.serve_listings(pages))
        return out

    def handshake(self, cid: int, msg_id: JsonId = 0, params: JsonObj = CLIENT_PARAMS) -> Out:
        """A client's initialize and notifications/initialized."""
        out = self.ask(cid, msg_id, "initialize", params)
        out.extend(self.tell(cid, "notifications/initialized"))
        return out


def running(
    *cids: int,
    snapshot: Snapshot | None = None,
    params: dict[int, JsonObj] | None = None,
    policy: SamplingPolicy = "refuse",
) -> Driver:
    """A relay whose server is READY, with clients `cids` attached and through their handshake.

    The handshakes are answered from a warm snapshot, then the server is started and refreshed
    with the same listings (so no drift).
    """
    driver = Driver(snapshot if snapshot is not None else warm_snapshot(), policy)
    for cid in cids:
        driver.attach(cid)
        driver.handshake(cid, params=(params or {}).get(cid, CLIENT_PARAMS))
    driver.start()
    assert driver.core.phase is Phase.READY
    assert not driver.upstream, driver.upstream
    return driver


def refreshing() -> Driver:
    """Client 1 through its handshake (from the cache); its tools/call (id 1) started the server,
    which answered the replayed initialize: the listing refresh comes next."""
    d = Driver(warm_snapshot())
    d.attach(1)
    d.handshake(1)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.spawned()
    d.answer("initialize", INIT_RESULT)
    return d
