"""A hub session's own processes: where its calls to a server that must not be shared go.

A hub session is one session of every server it calls. A shared registration's calls go to its
process with everyone's. For any other, the hub session joins the server at its first call through
the sharing gate a shim's session goes through (lazyd/daemon/sessions/sharing_gate.py) and keeps
that process, its seat, for life: its calls see their own state and no other session is given the
process. When the hub session ends its seats are let go, as any session that leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from lazyd.config.load import Policy
from lazyd.core.sharing.identity import Identity
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.daemon.sessions.sharing_gate import RegistryView

log = logging.getLogger("lazyd.hub")

# Modes whose registration process serves every session: a hub call goes there, call by call.
_SHARED_MODES = ("shared", "session-aware")


class Seats:
    """The processes one hub session holds, by the registration they belong to."""

    def __init__(self, registry: RegistryView) -> None:
        self.registry = registry
        self.held: dict[ServerRuntime, ServerRuntime] = {}  # registration's runtime -> the hub session's

    async def runtime_for(self, base: ServerRuntime) -> ServerRuntime:
        """Where this hub session's call to `base`'s registration goes (the module docstring)."""
        seat = self.held.get(base)
        if seat is not None and not seat.closing:
            return seat
        if self.registry.sharing(base).mode in _SHARED_MODES:
            return base
        # No shim session ever joined it: a named server the hub is the first to call.
        joined = self.registry.gate.join_args(base) or self._named_args(base)
        if joined is None:
            return base
        seat = await self.registry.gate.join(*joined)
        lanes = self.registry.lanes_for(seat)
        if lanes is not None:
            lanes.reserved = True  # held by this hub session between its calls
        self.held[base] = seat
        log.info("hub: calls to %s go to %s, this hub session's own", base.name, seat.name)
        return seat

    async def place(self, base: ServerRuntime, on: ServerRuntime, key: str) -> ServerRuntime:
        """Where a call's internal session on `on` goes once its key (its roots) is known: `on`
        when every session placed there has that key, else the process the gate gives a session
        of that key, held from then on (a process whose sessions' roots differ from this hub
        session's is never shared with it, whatever the mode: docs/relay.md)."""
        lanes = self.registry.lanes_for(on)
        others = {k for r in (lanes.runtimes if lanes is not None else [on]) for k in r.core.session_keys()}
        if not others - {key}:
            return on
        joined = self.registry.gate.join_args(base) or self._named_args(base)
        if joined is None:
            return on
        seat = await self.registry.gate.join(*joined, key=key)
        held = self.registry.lanes_for(seat)
        if held is not None:
            held.reserved = True
        old = self.held.get(base)
        self.held[base] = seat
        if old is not None and old is not seat:
            self._let_go(old)
        log.info("hub: calls to %s go to %s, this hub session's own (its roots differ)", base.name, seat.name)
        return seat

    def _named_args(self, base: ServerRuntime) -> tuple[ServerRuntime, Identity, Mapping[str, str], Policy] | None:
        """How a session joins a named server no shim session joined yet."""
        server = self.registry.config.servers.get(base.config.name)
        if server is None:
            return None
        return base, self.registry.identities[self.registry.digest_of(base)], base.config.spec.env, server.policy

    def release(self) -> None:
        """The hub session ended: its seats are free; a process of a session's own stops."""
        held, self.held = self.held, {}
        for seat in held.values():
            self._let_go(seat)

    def _let_go(self, seat: ServerRuntime) -> None:
        lanes = self.registry.lanes_for(seat)
        if lanes is not None:
            lanes.reserved = False
            lanes.on_detach(seat)
