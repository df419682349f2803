"""Which client requests are real use of a server, as the check linger counts it (lazyd/core/lifecycle/usage.py).

A health check or a client filling its tool list sends the handshake, the listings, maybe
discovery and ping, and nothing else; a session that works calls a tool, reads a resource, gets
a prompt, completes an argument, subscribes. So real use is told by what it is not: every request
but these few counts, which also covers methods no list here knows yet (a new MCP method is
something a client wants from the server, not a listing).
"""

from __future__ import annotations

from typing import Final

from lazyd.core.cache import LISTINGS

__all__ = ["NOT_USE", "counts_as_use"]

# Requests a client sends before it uses a server, or to see that it is there. `logging/setLevel`
# and `subscriptions/listen` say how the client wants to hear from the server, not that it asks
# anything of it.
NOT_USE: Final = frozenset({"initialize", "ping", "server/discover", "logging/setLevel", "subscriptions/listen",
                            *LISTINGS})


def counts_as_use(method: str) -> bool:
    """Whether a client request with this method is real use of the server."""
    return method not in NOT_USE
