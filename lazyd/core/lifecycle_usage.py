"""Who uses a running server, and when it is stopped for lack of use (rule 6 of lazyd/core/lifecycle.py).

Pure; the lifecycle holds one `Usage` and asks it for the stop deadlines that apply. The rule:

6. Stops. Only a running server with no request in flight is stopped for lack of use, and never a
   keep_alive one. Linger: no client attached for `linger_s` since the last one left (or since
   `ready()`, for a start no client was attached to); 0 stops as soon as that is true. Idle: with
   `idle_timeout_s` set, that long since the last `activity()` (or `ready()`, or the last in-flight
   request finishing), even with clients attached. `load()` and `tick()` emit a due stop; the other
   inputs leave it to the next `tick()`, which `next_deadline()` announces.
"""

from __future__ import annotations

from functools import lru_cache

from lazyd.durations import format_duration
from lazyd.core.lifecycle_policy import LifecyclePolicy

__all__ = ["Usage"]


class Usage:
    """Attached clients, requests in flight, and the moments that start the linger and idle clocks."""

    def __init__(self) -> None:
        self.clients = 0
        self.inflight = 0
        self.linger_from: float | None = None  # when the last client left (or ready() with none)
        self.last_activity: float | None = None

    def in_use(self) -> bool:
        """Someone needs the server: a client is attached or a request is in flight."""
        return bool(self.clients or self.inflight)

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
            deadlines[_linger_reason(policy.linger_s)] = self.linger_from + policy.linger_s
        if policy.idle_timeout_s is not None and self.last_activity is not None:
            deadlines[_idle_reason(policy.idle_timeout_s)] = self.last_activity + policy.idle_timeout_s
        return deadlines


# The reasons depend on the policy alone, and the deadlines are asked for several times per
# relayed message (each load change and each next_deadline): format each duration once.
@lru_cache(maxsize=64)
def _linger_reason(linger_s: float) -> str:
    return f"no client for {format_duration(linger_s)}" if linger_s else "last client left"


@lru_cache(maxsize=64)
def _idle_reason(idle_timeout_s: float) -> str:
    return f"idle for {format_duration(idle_timeout_s)}"
