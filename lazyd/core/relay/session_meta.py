"""Session ids in `_meta`: how one process of a `session-aware` server tells its sessions apart.

A server that declares `session-aware` sharing (mcp-mux's `x-mux.sharing`, or lazyd's
`experimental.lazyd.sharing`), or runs under `share = "session-aware"`, gets one process for
every session of its registration, and every request a session sends it carries that session's
id in `params._meta`, under two keys: mcp-mux's `muxSessionId` (so servers written for mcp-mux
work unchanged) and lazyd's own `lazyd/sessionId` (a `_meta` key with a prefix, as the MCP
specification asks of keys that are not its own). The id is `sess_` and 8 hex digits, as
mcp-mux spells it: unique per session and stable for its life, given by the daemon when the
session attaches. Notifications carry none, nor do the relay's own requests (the replayed
handshake, listing refreshes): they belong to no session.

A client cannot pass itself off as another session: both keys are overwritten in every request.
"""

from __future__ import annotations

from typing import Final

from lazyd.core.relay.jsonrpc import Message

__all__ = ["MUX_SESSION_KEY", "LAZYD_SESSION_KEY", "default_session_id", "add_session_meta"]

MUX_SESSION_KEY: Final = "muxSessionId"
LAZYD_SESSION_KEY: Final = "lazyd/sessionId"


def default_session_id(cid: int) -> str:
    """The id of a session the daemon gave none (tests, and states written before ids existed)."""
    return f"sess_{cid & 0xFFFFFFFF:08x}"


def add_session_meta(msg: Message, session_id: str) -> None:
    """Put `session_id` into the request's `params._meta` under both keys (in place)."""
    params = msg.obj.get("params")
    if not isinstance(params, dict):
        params = msg.obj["params"] = {}
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        meta = params["_meta"] = {}
    meta[MUX_SESSION_KEY] = session_id
    meta[LAZYD_SESSION_KEY] = session_id
