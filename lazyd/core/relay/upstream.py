"""The two ways a request goes upstream: the relay's own, and a client's under a fresh relay id."""

from __future__ import annotations

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.actions import Action, Activity, ToClient, ToServer
from lazyd.core.relay.jsonrpc import JsonObj, Message
from lazyd.core.relay.routing import ClientId, Routes, Upstream
from lazyd.core.relay.session_meta import add_session_meta, default_session_id
from lazyd.core.eras.versions import PROTOCOL_VERSION_META



def internal(routes: Routes, method: str, params: JsonObj | None, purpose: str) -> ToServer:
    """The relay's own request, under a fresh relay id; its answer goes to whoever `purpose` names."""
    rid = routes.take_id()
    routes.add(rid, Upstream(method, None, None, purpose=purpose))
    return ToServer(rpc.request_line(rid, method, params))


def forward(routes: Routes, cid: ClientId, msg: Message, *, bridged: bool = False, inspect: bool = False,
            log_level: str | None = None, purpose: str | None = None) -> list[Action]:
    """Send a client request upstream under a fresh relay id (and relay progress token)."""
    assert msg.method is not None and msg.id is not None
    rid = routes.take_id()
    up = Upstream(msg.method, cid, msg.id, seq=routes.next_seq(), inspect=inspect, bridged=bridged, log_level=log_level)
    if purpose is not None:
        up.purpose = purpose
    elif msg.method == "server/discover":
        up.purpose = discover_version_key(msg.params)
    meta = msg.params.get("_meta")
    routes.add(rid, up)
    session_id = (routes.sessions.get(cid) or default_session_id(cid)) if routes.session_meta else None
    token = isinstance(meta, dict) and rpc.valid_id(meta.get("progressToken"))
    if token:
        assert isinstance(meta, dict)
        up.token = meta["progressToken"]
        routes.tokens[rid] = (cid, meta["progressToken"])
        meta["progressToken"] = rid
    if session_id is not None:
        add_session_meta(msg, session_id)  # a session-aware server: whose request this is
    if token or session_id is not None:
        msg.obj["id"] = rid
        return [ToServer(rpc.dumps(msg.obj)), Activity()]
    return [ToServer(rpc.with_id(msg, rid)), Activity()]


def foreign_task(routes: Routes, cid: ClientId, msg: Message) -> list[Action] | None:
    """A task request naming another client's task (2025-11-25 tasks, and the 2026 tasks
    extension): refused as unknown, so that its existence is never revealed."""
    if msg.method not in ("tasks/get", "tasks/result", "tasks/cancel") or msg.id is None:
        return None
    task_id = msg.params.get("taskId")
    owner = routes.tasks.get(task_id) if isinstance(task_id, str) else None
    if owner is None or owner == cid:
        return None
    return [ToClient(cid, rpc.error_line(msg.id, rpc.INVALID_PARAMS, "Invalid params: unknown task"), msg.id)]


def discover_version_key(params: JsonObj) -> str:
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
    return str(version) if version is not None else ""
