"""The vocabulary of the lifecycle (lazyd/core/lifecycle/machine.py): its states and the actions it returns.

States, as `lazyctl status` shows them: sleeping (no process; the cache answers, the wake
predicate runs), starting (`Spawn` issued, not ready), running (`ready()` came), stopping (`Stop`
or `KillAndFail` issued), backoff (a restart at `next_restart_at`), failed (parked with
`last_error` until a request or `lazyctl wake`).

An input that does not fit the state changes nothing and returns one `Log`: the caller's view
lagged, not worth crashing a supervisor for. `ValueError` is raised, before anything changes,
only for caller bugs: time going backwards, negative counts or pids, a bad policy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


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
