"""Session ids in `_meta`: how one process of a `session-aware` server tells its sessions apart.

Every request a session sends such a server carries its id in `params._meta` under mcp-mux's
`muxSessionId` (servers written for mcp-mux work unchanged) and lazyd's `lazyd/sessionId`: `sess_`
and 8 hex digits, given by the daemon at attach. Notifications and the relay's own requests carry
none. Both keys are overwritten in every request, so no client passes itself off as another.
"""

from __future__ import annotations

from typing import Final

from lazyd.core.relay.jsonrpc import Message

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
