"""What the relay core keeps of one client: its initialize params, whether it finished the handshake."""

from __future__ import annotations

from dataclasses import dataclass

from lazyd.core import state_codec as sc
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

    def to_state(self) -> JsonObj:
        return {"cid": self.cid, "params": self.params, "initialized": self.initialized,
                "last_active": self.last_active}

    @classmethod
    def from_state(cls, value: object) -> ClientState:
        s = sc.obj(value, "client")
        return cls(sc.integer(s.get("cid"), "client.cid"), sc.opt_json_obj(s.get("params"), "client.params"),
                   sc.flag(s.get("initialized"), "client.initialized"),
                   sc.integer(s.get("last_active"), "client.last_active"))
