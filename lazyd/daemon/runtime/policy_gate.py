"""The daemon side of the per-server tool policy gate (lazyd/core/policy_gate.py).

Every runtime passes each client line through its `RuntimeGate` before the relay core, and each
final answer on its way back: `deny` is answered here, `ask` held while the client is asked
(elicitation), denied tools taken out of `tools/list`. The policy is read at each call, so a reload
applies at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lazyd.core import policy_gate as gate
from lazyd.core.relay.jsonrpc import JsonId
from lazyd.core.policy import ToolPolicy
from lazyd.daemon.runtime.outbox import Outbox

log = logging.getLogger("lazyd.hub")


class RuntimeGate:
    """The tool policy in front of one runtime's relay core (`ServerRuntime.gate`): `name` for its
    log, `policy` read at each call, the runtime's sessions, and whether a client can be asked
    (asked of the runtime's relay core at each call: an upgrade or a restart replaces the core)."""

    def __init__(self, name: str, server: str, policy: Callable[[], ToolPolicy], sessions: dict[int, Outbox],
                 can_elicit: Callable[[int], bool]) -> None:
        self.name = name
        self.policy = policy
        self.sessions = sessions
        self._can_elicit = can_elicit
        self.core = gate.PolicyGate(server)  # both era lanes of a server are one name to the policy

    def client_line(self, cid: int, line: bytes) -> bytes | None:
        """The line to give the relay core, or None when the gate answered or holds it."""
        policy = self.policy()
        if not policy.active and not self.core.held_count():
            return line
        passed: bytes | None = None
        for action in self.core.client_line(cid, line, policy, lambda: self._can_elicit(cid)):
            if isinstance(action, gate.Pass):
                passed = action.line
            elif isinstance(action, gate.Reply):
                session = self.sessions.get(cid)
                if session is not None:
                    session.deliver(action.line, action.done)
            else:
                log.info("[%s] %s", self.name, action.text)
        return passed

    def to_client(self, cid: int, line: bytes, done: JsonId) -> bytes:
        """A final answer to a client, with denied tools out of a `tools/list` (see PolicyGate)."""
        if not self.core.listing_count():
            return line
        filtered, hidden = self.core.to_client(cid, line, done, self.policy())
        if hidden:
            log.info("[%s] policy: %d denied tool(s) hidden from client %d's tools/list", self.name, hidden, cid)
        return filtered

    def detach(self, cid: int) -> None:
        self.core.detach(cid)

    def to_state(self) -> object:
        """The calls it holds, for a successor daemon (the policy is the config's, read again)."""
        return self.core.to_state()

    def restore(self, state: object) -> None:
        """Hold again what `to_state` wrote; ValueError for a state this code did not write."""
        self.core.restore(state)
