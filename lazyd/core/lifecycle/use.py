"""Which client requests are real use of a server, as the check linger counts it (lazyd/core/lifecycle/usage.py).

A health check sends the handshake, listings, maybe discovery and ping; a working session calls a
tool, reads a resource... So every request but those few counts, new MCP methods included.
"""

from __future__ import annotations

from typing import Final

from lazyd.core.cache import LISTINGS

# `logging/setLevel` and `subscriptions/listen` say how a client wants to hear, not what it asks.
NOT_USE: Final = frozenset({"initialize", "ping", "server/discover", "logging/setLevel", "subscriptions/listen",
                            *LISTINGS})


def counts_as_use(method: str) -> bool:
    """Whether a client request with this method is real use of the server."""
    return method not in NOT_USE
