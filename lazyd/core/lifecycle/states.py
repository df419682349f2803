"""The vocabulary of the lifecycle (lazyd/core/lifecycle/machine.py): its states and the actions it returns.

Pure. Each action says what the caller must carry out and what it must report back.

States (the strings are what `lazyctl status` shows)
----------------------------------------------------
- sleeping: no process; answers come from cache. The wake predicate runs only here.
- starting: `Spawn` was issued; the process, handshake replay or listing refresh is not done.
- running:  `ready()` arrived.
- stopping: `Stop` or `KillAndFail` was issued; waiting for `exited()`.
- backoff:  no process; a restart is scheduled at `next_restart_at`.
- failed:   no process; parked with `last_error` until a request or `lazyctl wake`.
A process exists exactly in starting, running and stopping, and only there is `pid` set.

Errors
------
An input that does not fit the state (`ready()` while sleeping, `exited()` with no process, a second
`boot()`) changes nothing and returns a single `Log` action: the caller's view lagged, which is not
worth crashing a supervisor for. `LifecycleError` is raised only for caller bugs that no state can
absorb, before anything changes: time going backwards, negative counts or pids, a bad policy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from lazyd.errors import LifecycleError

__all__ = ["State", "PredicateState", "PROCESS_STATES", "LifecycleError", "Spawn", "Stop", "KillAndFail",
           "FailWaiting", "RunPredicate", "Log", "Action"]


class State(enum.StrEnum):
    SLEEPING = "sleeping"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    FAILED = "failed"


class PredicateState(enum.StrEnum):
    OFF = "off"
    IDLE = "idle"
    RUNNING = "running"


PROCESS_STATES: Final = frozenset({State.STARTING, State.RUNNING, State.STOPPING})


@dataclass(frozen=True)
class Spawn:
    """Start the server process; report `spawned()` or `spawn_failed()`, then `ready()`."""


@dataclass(frozen=True)
class Stop:
    """Run the stop ladder, then report `exited(requested=True)`."""

    reason: str


@dataclass(frozen=True)
class KillAndFail:
    """Kill the process group, fail queued and in-flight requests with `reason`, then report
    `exited()`."""

    reason: str


@dataclass(frozen=True)
class FailWaiting:
    """Answer every request queued for a start with `error`: that start will not come."""

    error: str


@dataclass(frozen=True)
class RunPredicate:
    """Run the wake predicate (bounded by `wake_timeout_s`), then report `predicate_done()`."""


@dataclass(frozen=True)
class Log:
    message: str


Action = Spawn | Stop | KillAndFail | FailWaiting | RunPredicate | Log
