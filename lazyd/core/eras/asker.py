"""Who a stateless-era request is made for: the envelope it carries and the cache keys that follow.

The envelope names the client in `params._meta` (version, clientInfo, capabilities); the relay
writes one for its own requests and for bridged clients, and the stateless cache keys results by
version, capabilities digest and, when private, client identity. An `Asker` is that value.
"""

from __future__ import annotations

from dataclasses import dataclass

from lazyd.core.eras import versions as eras
from lazyd.core.cache import PUBLIC, stateless_key
from lazyd.core.relay.jsonrpc import JsonObj

# The version of the relay's own era probe: the first (and so far only) stateless version.
PROBE_VERSION = eras.KNOWN_STATELESS_VERSIONS[-1]


@dataclass(frozen=True)
class Asker:
    """Who a stateless request is made for: what its envelope says, and the cache keys that follow."""

    version: str
    client_info: JsonObj
    capabilities: JsonObj
    log_level: str | None = None

    @property
    def identity(self) -> str:
        return eras.identity_digest(self.client_info)

    @property
    def caps(self) -> str:
        return eras.capabilities_digest(self.capabilities)

    def envelope(self) -> JsonObj:
        meta: JsonObj = {eras.PROTOCOL_VERSION_META: self.version, eras.CLIENT_INFO_META: self.client_info,
                         eras.CLIENT_CAPABILITIES_META: self.capabilities}
        if self.log_level is not None:
            meta[eras.LOG_LEVEL_META] = self.log_level
        return meta

    def key(self, method: str, public: bool) -> str:
        """The cache key of a result; a fetch made for this asker is keyed as private (its identity)."""
        return stateless_key(method, self.version, self.caps, PUBLIC if public else self.identity)


def asker_from_params(params: JsonObj, version: str) -> Asker:
    """The Asker of a handshake-era client, from its `initialize` params."""
    info, caps = params.get("clientInfo"), params.get("capabilities")
    return Asker(version, info if isinstance(info, dict) else {}, caps if isinstance(caps, dict) else {})
