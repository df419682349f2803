"""The lifecycle of one supervised server: when it starts, stops, backs off and parks.

Pure: the daemon's supervisor feeds inputs with the monotonic `now`, carries out the returned
actions and calls `tick(now)` when `next_deadline()` comes due. Vocabulary follows supervisord,
the shape h11. States: lazyd/core/lifecycle/states.py; a process (and `pid`) exists exactly in
starting, running and stopping.

Rules
-----
1. Starts. `demand()` and `operator_wake()` start from sleeping, backoff and failed (from failed
   a demand is one fresh try), join a start under way, and are remembered while stopping
   (lazyd/core/lifecycle/requests.py). Their starts are *requested*; backoff, predicate and boot
   starts are not.
2. A start is good once up `STABLE_AFTER_S` after `ready()` (supervisord's startsecs); only then
   are `burst` and the parking window cleared. Anything failing before is a failed start.
3. Failures record `last_error` and add one to `burst`; then, in order: (a) park as failed if the
   last `PARK_AFTER_FAILURES` unrequested failed starts fell within `PARK_WINDOW_S` (never for
   keep_alive); (b) failed after rule 1's single try; (c) backoff if someone needs it (clients,
   requests in flight, keep_alive); (d) failed after a failed `operator_wake()` start, so status
   says why; (e) backoff if eager ("keep it running", until (a) parks it); (f) else sleeping.
   A failed start emits `FailWaiting`. A fatal spawn error (ENOENT, EACCES, ENOEXEC, a missing
   directory: the caller decides) parks at once, even keep_alive: retrying cannot help.
4. Backoff with jitter (lazyd/core/lifecycle/timing.py); a crash after a good start waits the
   base delay.
5. Start timeout: `KillAndFail`, stopping, a failed start; once gone, parked as failed (nothing
   retries a hung start on its own), or backoff for keep_alive.
6. Stops for lack of use: lazyd/core/lifecycle/usage.py; `load()` and `tick()` emit them.
7. In stopping any `exited()` completes the stop; then a remembered demand spawns, a timeout's
   outcome applies, else sleeping. Elsewhere `exited(requested=True)` counts no failure.
8. `operator_sleep()` stops a starting or running server, cancels a backoff, drops a remembered
   demand.
9. The wake predicate (lazyd/core/lifecycle/predicate.py) runs only in sleeping; exit 0 spawns.
10. `boot()`, once, when the daemon takes the server on: eager and keep_alive servers spawn.
11. `memory_stop()` (lazyd/core/memory.py decides when) stops for its reason and counts as a
   failure: parked (`park`), backoff by `breaches` steps when 3c/3e apply, or sleeping.
   `pressure_sleep()` stops a running, idle, not keep_alive server like `operator_sleep()`.
Errors: a misfit input returns one `Log`; caller bugs raise (lazyd/core/lifecycle/states.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lazyd.core import state_codec as sc
from lazyd.core.state_codec import AT
from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.core.lifecycle.timing import (PARK_AFTER_FAILURES, PARK_WINDOW_S, STABLE_AFTER_S, RecentTimes,
                                         LifecyclePolicy, backoff_delay_s)
from lazyd.core.lifecycle.predicate import PredicateSchedule
from lazyd.core.lifecycle.requests import OPERATOR_SLEEP_REASON, REQUEST_RULES, Rule
from lazyd.core.lifecycle.states import (PROCESS_STATES, Action, FailWaiting, KillAndFail, Log,
                                         PredicateState, RunPredicate, Spawn, State, Stop)
from lazyd.core.lifecycle.usage import Usage
from lazyd.config.durations import format_duration

if TYPE_CHECKING:
    import random  # the caller's generator, for its type only: the core never draws from `random`
__all__ = ["State", "PredicateState", "PROCESS_STATES", "LifecyclePolicy", "Spawn", "Stop",
           "KillAndFail", "FailWaiting", "RunPredicate", "Log", "Action", "Lifecycle"]


class Lifecycle:
    """The state machine of one server (rules in the module docstring). Every input takes the
    monotonic `now` and raises `ValueError`, changing nothing, if time went backwards."""

    def __init__(self, policy: LifecyclePolicy, rng: random.Random) -> None:
        self._policy = policy
        self._rng = rng
        # Observable state for `lazyctl status`: read these, never assign them from outside.
        self.state = State.SLEEPING
        self.pid: int | None = None
        self.started_at: float | None = None  # when ready() arrived
        self.restarts = 0  # starts made out of backoff, i.e. after an unexpected exit
        self.last_error: str | None = None
        self.burst = 0  # consecutive failures since the last good start or operator_wake()
        self.next_restart_at: float | None = None
        # Private bookkeeping.
        self._now: float | None = None
        self._spawn_at: float | None = None
        self._unrequested = RecentTimes(PARK_AFTER_FAILURES)  # the latest unrequested failed starts (rule 3a)
        self._start_requested = False
        self._single_try = False
        self._operator_start = False  # the current start was operator_wake()'s (rule 3d)
        self._pending_demand = False
        self._stop_outcome = State.SLEEPING
        self._usage = Usage()  # clients, requests in flight and the last use (rule 6)
        self._predicate = PredicateSchedule(policy.wake_interval_s)  # rule 9
        self._booted = False

    # -- observable state ------------------------------------------------------------------------

    @property
    def predicate_state(self) -> PredicateState:
        return self._predicate.state

    def status_fields(self) -> dict[str, object]:
        """The fields `lazyctl status` shows, as plain values, as of the last input (and tick)."""
        return {"state": str(self.state), "pid": self.pid, "started_at": self.started_at,
                "restarts": self.restarts, "last_error": self.last_error, "burst": self.burst,
                "next_restart_at": self.next_restart_at, "predicate_state": str(self.predicate_state),
                **self._usage.linger_status(self._policy, self.state in PROCESS_STATES)}

    # -- its state, for a successor daemon ----------------------------------------------------------
    # Everything kept, bookkeeping included (the tables below). Monotonic clocks differ between
    # processes, so times are written as seconds from the writer's `now` and read from the reader's
    # moment of the write. The policy (the reader's config) and the generator are not state.

    def to_state(self, now: float) -> JsonObj:
        """Everything this lifecycle keeps, its times as seconds from `now`."""
        return {**sc.dump_attrs(self, _KEPT, now), "unrequested": self._unrequested.to_state(now),
                "pending_client": self._usage.pending_client, "usage": sc.dump_attrs(self._usage, _USAGE, now),
                "predicate": sc.dump_attrs(self._predicate, _PREDICATE, now)}

    @classmethod
    def from_state(cls, state: object, policy: LifecyclePolicy, rng: random.Random, now: float) -> Lifecycle:
        """The lifecycle that wrote `state`, its times moved to `now`; ValueError names a bad field."""
        s = sc.obj(state, "lifecycle")
        life = cls(policy, rng)
        sc.load_attrs(life, _KEPT, s, "lifecycle", now)
        offsets = sc.load(list[float], s.get("unrequested"), "lifecycle.unrequested")
        life._unrequested = RecentTimes.from_state(PARK_AFTER_FAILURES, offsets, now)
        sc.load_attrs(life._usage, {"pending_client": bool}, s, "lifecycle")
        sc.load_attrs(life._usage, _USAGE, s.get("usage"), "lifecycle.usage", now)
        sc.load_attrs(life._predicate, _PREDICATE, s.get("predicate"), "lifecycle.predicate", now)
        return life

    # -- inputs ----------------------------------------------------------------------------------

    def boot(self, now: float) -> list[Action]:
        """The daemon took this server on (rule 10); call once."""
        self._enter(now)
        if self._booted:
            return [Log("boot() called twice; ignored")]
        self._booted = True
        if self.state is not State.SLEEPING:
            return []
        self._predicate.boot(now)
        if self._policy.eager or self._policy.keep_alive:
            return self._spawn(now, requested=False)
        return []

    def demand(self, now: float) -> list[Action]:
        """A client request needs a live server (rule 1)."""
        return self._request("demand", now)

    def operator_wake(self, now: float) -> list[Action]:
        """`lazyctl wake`: clear the failure counters and start once (rule 1)."""
        self._enter(now)
        self.burst = 0
        self._unrequested.clear()
        actions = self._request("operator_wake", now)
        if self.state is State.STARTING:
            self._operator_start = True  # also when it joined a start under way
        return actions

    def operator_sleep(self, now: float, reason: str = "lazyctl sleep") -> list[Action]:
        """`lazyctl sleep` (rule 8), or the daemon's own for `reason` (its log line says which)."""
        return self._request("operator_sleep", now, reason)

    def memory_stop(self, now: float, reason: str, *, park: bool, breaches: int) -> list[Action]:
        """The server's tree stayed over its memory limit (rule 11)."""
        self._enter(now)
        if self.state not in (State.STARTING, State.RUNNING):
            return self._ignored("memory_stop")
        self.last_error = reason
        self.burst = max(self.burst, breaches, 1)
        self.started_at = None  # this run ends as a failure: rule 2 must not clear the count meanwhile
        if park:
            outcome = State.FAILED
        elif self._usage.in_use() or self._policy.keep_alive or self._policy.eager:
            outcome = State.BACKOFF
        else:
            outcome = State.SLEEPING
        actions = self._stop(reason)
        self._stop_outcome = outcome
        if park:
            actions.append(Log(f"parked as failed: {reason}"))
        return actions

    def pressure_sleep(self, now: float, reason: str) -> list[Action]:
        """Memory pressure chose this server to sleep (rule 11)."""
        self._enter(now)
        if self.state is not State.RUNNING or self._usage.inflight or self._policy.keep_alive:
            return []
        return self._stop(reason)

    @property
    def last_activity(self) -> float | None:
        """When the last client request or answer passed (monotonic), None before any."""
        return self._usage.last_activity

    def spawned(self, now: float, pid: int) -> list[Action]:
        """The process asked for by `Spawn` exists; raises `ValueError` for a pid <= 0."""
        if pid <= 0:
            raise ValueError(f"pid must be positive, not {pid}")
        self._enter(now)
        if self.state not in PROCESS_STATES or self.pid is not None:
            return self._ignored("spawned")
        self.pid = pid
        return []

    def spawn_failed(self, now: float, error: str, fatal: bool) -> list[Action]:
        """The command could not be executed; `fatal` when retrying cannot help (rule 3)."""
        self._enter(now)
        if self.state not in PROCESS_STATES or self.pid is not None:
            return self._ignored("spawn_failed")
        if fatal:
            waiting = self.state is State.STARTING or self._pending_demand
            self._process_gone()
            self._pending_demand = False
            self._stop_outcome = State.SLEEPING
            self.last_error = error
            self.burst += 1
            self.state = State.FAILED
            return [FailWaiting(error)] if waiting else []
        if self.state is State.STOPPING:
            return self._stopped(now)
        return self._failed(now, error, failed_start=True)

    def ready(self, now: float) -> list[Action]:
        """Handshake replay and listing refresh are done: the server is running."""
        self._enter(now)
        if self.state is not State.STARTING or self.pid is None:
            return self._ignored("ready")
        self.state = State.RUNNING
        self.started_at = now
        self._spawn_at = None
        self._single_try = False
        self._operator_start = False
        self._usage.ready(now)
        return []

    def exited(self, now: float, description: str, requested: bool) -> list[Action]:
        """The process ended; `description` (exit status, stderr tail) becomes `last_error`."""
        self._enter(now)
        if self.state not in PROCESS_STATES:
            return self._ignored("exited")
        if self.state is State.STOPPING:
            return self._stopped(now)
        if requested:
            failing = [FailWaiting(description)] if self.state is State.STARTING else []
            return [*failing, *self._stopped(now)]
        # _enter() already cleared the burst if this run was long enough to be a good start.
        failed_start = self.started_at is None or now < self.started_at + STABLE_AFTER_S
        return self._failed(now, description, failed_start=failed_start)

    def load(self, now: float, clients: int, inflight: int) -> list[Action]:
        """Attached clients or in-flight requests (queued ones included) changed (rule 6)."""
        if clients < 0 or inflight < 0:
            raise ValueError(f"load counts must not be negative: {clients=} {inflight=}")
        self._enter(now)
        self._usage.load(now, clients, inflight)
        return self._due_stop(now)

    def activity(self, now: float, used: bool = False) -> list[Action]:
        """A client request or its response passed; never call it for the daemon's own probes.
        `used`: a real request came (rule 6), told before the `demand()` it makes."""
        self._enter(now)
        self._usage.last_activity = now
        self._usage.real_use |= used
        return []

    def predicate_done(self, now: float, exit_code: int | None) -> list[Action]:
        """The wake predicate finished; None for a timeout or launch error (rule 9)."""
        self._enter(now)
        if not self._predicate.finish():
            return self._ignored("predicate_done")
        if self.state is not State.SLEEPING:
            return []  # a demand or wake started the server meanwhile; the answer is moot
        if exit_code == 0:
            return self._spawn(now, requested=False)
        return self._predicate.keep_sleeping(now, exit_code)

    def tick(self, now: float) -> list[Action]:
        """Fire what is due at `now`; afterwards `next_deadline()` is None or later than `now`."""
        self._enter(now)
        state = self.state
        if state is State.STARTING and self._spawn_at is not None:
            if now >= self._spawn_at + self._policy.start_timeout_s:
                return self._start_timed_out(now)
        elif state is State.BACKOFF and self.next_restart_at is not None and now >= self.next_restart_at:
            return self._spawn(now, requested=False)
        elif state is State.RUNNING:
            return self._due_stop(now)
        elif state is State.SLEEPING and self._predicate.due(now):
            return self._predicate.start()
        return []

    def next_deadline(self) -> float | None:
        """When `tick()` must next be called; None when only an input can change anything."""
        state = self.state
        candidates: list[float] = []
        if state is State.STARTING and self._spawn_at is not None:
            candidates.append(self._spawn_at + self._policy.start_timeout_s)
        elif state is State.BACKOFF and self.next_restart_at is not None:
            candidates.append(self.next_restart_at)
        elif state is State.RUNNING:
            candidates += self._usage.stop_deadlines(self._policy).values()
            if self.started_at is not None and (self.burst or self._unrequested):
                candidates.append(self.started_at + STABLE_AFTER_S)  # keeps `burst` honest
        elif state is State.SLEEPING and self._predicate.next_at is not None:
            candidates.append(self._predicate.next_at)
        return min(candidates, default=None)

    # -- rules -----------------------------------------------------------------------------------

    def _enter(self, now: float) -> None:
        if math.isnan(now) or (self._now is not None and now < self._now):
            raise ValueError(f"time went backwards: {now} after {self._now}")
        self._now = now
        if self.started_at is not None and now >= self.started_at + STABLE_AFTER_S:
            self.burst = 0  # rule 2: this start was good
            self._unrequested.clear()

    def _ignored(self, name: str) -> list[Action]:
        return [Log(f"ignored {name}() while {self.state} (pid {self.pid})")]

    def _request(self, name: str, now: float, reason: str = "lazyctl sleep") -> list[Action]:
        self._enter(now)
        rule = REQUEST_RULES[name][self.state]
        if rule in (Rule.SPAWN, Rule.SPAWN_ONCE):
            return self._spawn(now, requested=True, single_try=rule is Rule.SPAWN_ONCE, client=name == "demand")
        if rule is Rule.JOIN:
            self._start_requested = True
            self._usage.client_start &= name == "demand"  # an operator's wake: someone wants it running
        elif rule is Rule.AFTER_STOP:
            self._pending_demand = True
            self._usage.pending_client = name == "demand"
        elif rule is Rule.TO_SLEEP:
            self._enter_sleeping(now)
        elif rule is Rule.STOP_FAILING_WAITING:
            return [*self._stop(reason), FailWaiting(OPERATOR_SLEEP_REASON)]
        elif rule is Rule.STOP:
            return self._stop(reason)
        elif rule is Rule.DROP_AFTER_STOP:
            if self._stop_outcome is State.BACKOFF:
                self._stop_outcome = State.SLEEPING
            if self._pending_demand:
                self._pending_demand = False
                return [FailWaiting(OPERATOR_SLEEP_REASON)]
        return []

    def _spawn(self, now: float, requested: bool, single_try: bool = False, client: bool = False) -> list[Action]:
        if self.state is State.BACKOFF:
            self.restarts += 1  # the restart keeps the linger rule of the start it repeats (rule 6)
        else:
            self._usage.client_start = client
        self.state = State.STARTING
        self._spawn_at = now
        self.next_restart_at = None
        self._start_requested = requested
        self._single_try = single_try
        self._operator_start = False
        return [Spawn()]

    def _stop(self, reason: str) -> list[Action]:
        self.state = State.STOPPING
        self._stop_outcome = State.SLEEPING
        self._pending_demand = False
        return [Stop(reason)]

    def _process_gone(self) -> None:
        self.pid = None
        self._spawn_at = None
        self.started_at = None

    def _stopped(self, now: float) -> list[Action]:
        self._process_gone()
        outcome, self._stop_outcome = self._stop_outcome, State.SLEEPING
        if self._pending_demand:
            self._pending_demand = False
            return self._spawn(now, requested=True, client=self._usage.pending_client)
        if outcome is State.BACKOFF:
            self._schedule_backoff(now)
        elif outcome is State.FAILED:
            self.state = State.FAILED
        else:
            self._enter_sleeping(now)
        return []

    def _record_failure(self, now: float, error: str, failed_start: bool) -> None:
        self.last_error = error
        self.burst += 1
        if failed_start and not self._start_requested:
            self._unrequested.record(now)

    def _failed(self, now: float, error: str, failed_start: bool) -> list[Action]:
        """Rule 3, for an unexpected exit or failed spawn of a starting or running server."""
        waiting = self.state is State.STARTING
        self._process_gone()
        self._record_failure(now, error, failed_start)
        actions: list[Action] = [FailWaiting(error)] if waiting else []
        single_try, self._single_try = self._single_try, False
        operator_start, self._operator_start = self._operator_start, False
        if not self._policy.keep_alive and self._unrequested.within(now, PARK_WINDOW_S) == PARK_AFTER_FAILURES:
            self.state = State.FAILED
            actions.append(Log(f"parked as failed after {PARK_AFTER_FAILURES} failed restarts "
                               f"within {format_duration(PARK_WINDOW_S)}; last error: {error}"))
        elif single_try and failed_start:
            self.state = State.FAILED
        elif self._usage.in_use() or self._policy.keep_alive:
            self._schedule_backoff(now)
        elif operator_start and failed_start:
            self.state = State.FAILED
        elif self._policy.eager:
            self._schedule_backoff(now)
        else:
            self._enter_sleeping(now)
        return actions

    def _start_timed_out(self, now: float) -> list[Action]:
        reason = f"start timeout after {format_duration(self._policy.start_timeout_s)}"
        self._record_failure(now, reason, failed_start=True)
        self._single_try = False
        self.state = State.STOPPING
        self._pending_demand = False
        self._stop_outcome = State.BACKOFF if self._policy.keep_alive else State.FAILED
        return [KillAndFail(reason)]

    def _schedule_backoff(self, now: float) -> None:
        self.state = State.BACKOFF
        self.next_restart_at = now + backoff_delay_s(self.burst, self._rng)

    def _enter_sleeping(self, now: float) -> None:
        self.state = State.SLEEPING
        self.next_restart_at = None
        self._usage.at_rest()
        self._predicate.asleep(now)

    def _due_stop(self, now: float) -> list[Action]:
        reason = self._usage.due_stop(now, self._policy) if self.state is State.RUNNING else None
        return self._stop(reason) if reason is not None else []


# What a lifecycle keeps (lazyd/core/state_codec.py; AT: a monotonic time).
_KEPT = {"state": State, "pid": int | None, "started_at": AT, "restarts": int, "last_error": str | None, "burst": int,
         "next_restart_at": AT, "_now": AT, "_spawn_at": AT, "_start_requested": bool, "_single_try": bool,
         "_operator_start": bool, "_pending_demand": bool, "_stop_outcome": State, "_booted": bool}
_USAGE = {"clients": int, "inflight": int, "linger_from": AT, "last_activity": AT, "client_start": bool,
          "real_use": bool}
_PREDICATE = {"running": bool, "next_at": AT}
