"""What the relay core keeps of one client: its initialize params, whether it finished the handshake."""

from __future__ import annotations

from dataclasses import dataclass

from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.core.relay.routing import ClientId


@dataclass
class ClientState:
    cid: ClientId
    params: JsonObj | None = None  # the client's initialize params (None: it never sent one)
    initialized: bool = False
    last_active: int = 0  # sequence number of its latest request, for the roots owner

    def declares(self, capability: str) -> bool:
        caps = (self.params or {}).get("capabilities")
        return isinstance(caps, dict) and capability in caps
