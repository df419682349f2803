"""Who uses a running server, and when it is stopped for lack of use (rule 6 of lazyd/core/lifecycle/machine.py).

Only a running, not keep_alive server with no request in flight stops. Linger: `linger_s` with no
client attached (0: at once). Idle: with `idle_timeout_s`, that long since the last `activity()`,
even with clients attached. Check linger: a start a client's demand made that no real request
reached (`counts_as_use`) was for listings only, as a health check makes it, and gets
`check_linger_s` (at most `linger_s`): run directly it would have exited already. A real request
makes it used for the rest of its run; starts no demand made keep `linger_s`; a backoff restart
keeps the rule of the start it repeats.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from lazyd.config.durations import format_duration
from lazyd.core.cache import LISTINGS
from lazyd.core.lifecycle.timing import LifecyclePolicy

# A health check sends the handshake, listings, maybe discovery and ping; a working session calls a
# tool, reads a resource...: every other request is real use, new MCP methods included.
# `logging/setLevel` and `subscriptions/listen` say how a client wants to hear, not what it asks.
NOT_USE: Final = frozenset({"initialize", "ping", "server/discover", "logging/setLevel", "subscriptions/listen",
                            *LISTINGS})


def counts_as_use(method: str) -> bool:
    """Whether a client request with this method is real use of the server."""
    return method not in NOT_USE


class Usage:
    """Attached clients, requests in flight, and the moments that start the linger and idle clocks."""

    def __init__(self) -> None:
        self.clients = 0
        self.inflight = 0
        self.linger_from: float | None = None  # when the last client left (or ready() with none)
        self.last_activity: float | None = None
        self.client_start = False  # the current start was made by a client's demand
        self.real_use = False  # a real request came since the server last went to rest
        self.pending_client = False  # the demand remembered while stopping was a client's

    def for_listings(self) -> bool:
        """Only listings came for this start: the check linger applies."""
        return self.client_start and not self.real_use

    def linger_status(self, policy: LifecyclePolicy, has_process: bool) -> dict[str, str | float | None]:
        """The linger the current run gets, for `lazyctl status`: "check_linger" or "linger", and
        its length; both None with no process."""
        if not has_process:
            return {"linger_rule": None, "linger_s": None}
        return {"linger_rule": "check_linger" if self.for_listings() else "linger", "linger_s": self.linger_s(policy)}

    def linger_s(self, policy: LifecyclePolicy) -> float:
        """The linger that applies to the current run."""
        if self.for_listings():
            return min(policy.check_linger_s, policy.linger_s)
        return policy.linger_s

    def in_use(self) -> bool:
        """Someone needs the server: a client is attached or a request is in flight."""
        return bool(self.clients or self.inflight)

    def at_rest(self) -> None:
        """The server went to sleep: the next start asks afresh what it is for."""
        self.real_use = False

    def ready(self, now: float) -> None:
        """The server became ready: both clocks start now (linger only with no client attached)."""
        self.last_activity = now
        self.linger_from = now if self.clients == 0 else None

    def load(self, now: float, clients: int, inflight: int) -> None:
        """The counts changed (the caller validated them)."""
        if clients > 0:
            self.linger_from = None
        elif self.clients > 0:
            self.linger_from = now
        if inflight == 0 and self.inflight > 0:
            self.last_activity = now  # a request finishing is the last sign of use
        self.clients, self.inflight = clients, inflight

    def stop_deadlines(self, policy: LifecyclePolicy) -> dict[str, float]:
        """The linger and idle deadlines of a running server that apply now, keyed by stop reason."""
        if policy.keep_alive or self.inflight:
            return {}
        deadlines: dict[str, float] = {}
        if self.clients == 0 and self.linger_from is not None:
            linger_s = self.linger_s(policy)
            deadlines[_linger_reason(linger_s, self.for_listings())] = self.linger_from + linger_s
        if policy.idle_timeout_s is not None and self.last_activity is not None:
            deadlines[_idle_reason(policy.idle_timeout_s)] = self.last_activity + policy.idle_timeout_s
        return deadlines


    def due_stop(self, now: float, policy: LifecyclePolicy) -> str | None:
        """The reason of the earliest stop deadline that has come (None: none has)."""
        due = [(at, reason) for reason, at in self.stop_deadlines(policy).items() if now >= at]
        return min(due)[1] if due else None


# Asked for several times per relayed message: each reason is formatted once per policy.
@lru_cache(maxsize=64)
def _linger_reason(linger_s: float, for_listings: bool) -> str:
    reason = f"no client for {format_duration(linger_s)}" if linger_s else "last client left"
    return f"{reason} (started for listings only)" if for_listings else reason


@lru_cache(maxsize=64)
def _idle_reason(idle_timeout_s: float) -> str:
    return f"idle for {format_duration(idle_timeout_s)}"
