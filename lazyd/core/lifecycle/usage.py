"""Who uses a running server, and when it is stopped for lack of use (rule 6 of lazyd/core/lifecycle/machine.py).

Pure; the lifecycle holds one `Usage` and asks it for the stop deadlines that apply. The rule:

6. Stops. Only a running server with no request in flight is stopped for lack of use, and never a
   keep_alive one. Linger: no client attached for `linger_s` since the last one left (or since
   `ready()`, for a start no client was attached to); 0 stops as soon as that is true. Idle: with
   `idle_timeout_s` set, that long since the last `activity()` (or `ready()`, or the last in-flight
   request finishing), even with clients attached. `load()` and `tick()` emit a due stop; the other
   inputs leave it to the next `tick()`, which `next_deadline()` announces.
   Check linger: a start that a client's demand made and that no real request has reached since
   (`activity(used=True)`: anything but the handshake, listings, discovery, ping; lazyd/core/lifecycle/use.py) was
   only for listings, as a health check (`claude mcp list`) or a client filling its tool list
   makes it. Its linger is `check_linger_s` instead (never longer than `linger_s`): directly, such
   a server would have exited with the listing, and nobody is coming back for it soon. A real
   request makes it a used server at once, for the rest of its run. Starts nobody's demand made
   (eager, keep_alive, a wake predicate, `lazyctl wake`) keep `linger_s`: someone asked for the
   server to run. A backoff restart keeps the rule of the start it repeats; the mark of use is
   cleared when the server goes to sleep.
"""

from __future__ import annotations

from functools import lru_cache

from lazyd.config.durations import format_duration
from lazyd.core.lifecycle.timing import LifecyclePolicy

__all__ = ["Usage"]


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


# The reasons depend on the policy alone, and the deadlines are asked for several times per
# relayed message (each load change and each next_deadline): format each duration once.
@lru_cache(maxsize=64)
def _linger_reason(linger_s: float, for_listings: bool) -> str:
    reason = f"no client for {format_duration(linger_s)}" if linger_s else "last client left"
    return f"{reason} (started for listings only)" if for_listings else reason


@lru_cache(maxsize=64)
def _idle_reason(idle_timeout_s: float) -> str:
    return f"idle for {format_duration(idle_timeout_s)}"
