"""What a demand, an operator's wake and an operator's sleep do in each state: rules 1 and 8 of the
lifecycle (lazyd/core/lifecycle/machine.py), written out and as the table the machine reads. Pure.

1. Starts. `demand()` (a request needs a live server) spawns at once from sleeping, backoff and
   failed; backoff's wait is skipped. From failed it is *one fresh try*: if that start fails the
   server goes straight back to failed, and waiting requests get the error. In starting or running
   it does nothing; in stopping the spawn is remembered and issued when the stop completes.
   `operator_wake()` resets the failure counters and starts like a demand, but is not a single try.
   Starts made by `demand()` and `operator_wake()` are *requested*; backoff restarts, predicate
   starts and boot starts are *unrequested*. A demand that joins an unrequested start makes it
   requested.
8. `operator_sleep()` stops a starting or running server (queued requests are failed), cancels a
   backoff (to sleeping) and drops a demand remembered while stopping. It leaves failed alone.
"""

from __future__ import annotations

import enum
from typing import Final

from lazyd.core.lifecycle.states import State

__all__ = ["Rule", "REQUEST_RULES", "OPERATOR_SLEEP_REASON"]


class Rule(enum.StrEnum):
    """What one request does in one state (the machine carries it out)."""

    SPAWN = "spawn"  # start now (requested)
    SPAWN_ONCE = "spawn_once"  # start now, as a single try (rule 1: a demand from failed)
    JOIN = "join"  # a start is under way: it becomes requested
    NOTHING = "nothing"
    AFTER_STOP = "after_stop"  # remember the demand; spawn when the stop completes
    TO_SLEEP = "to_sleep"  # cancel the backoff
    STOP_FAILING_WAITING = "stop_failing_waiting"  # stop, and fail the requests queued for the start
    STOP = "stop"
    DROP_AFTER_STOP = "drop_after_stop"  # forget a remembered demand (and a backoff after the stop)


# Rules 1 and 8 as a table: what demand, operator_wake and operator_sleep do in each state.
REQUEST_RULES: Final[dict[str, dict[State, Rule]]] = {
    "demand": {State.SLEEPING: Rule.SPAWN, State.BACKOFF: Rule.SPAWN, State.FAILED: Rule.SPAWN_ONCE,
               State.STARTING: Rule.JOIN, State.RUNNING: Rule.NOTHING, State.STOPPING: Rule.AFTER_STOP},
    "operator_wake": {State.SLEEPING: Rule.SPAWN, State.BACKOFF: Rule.SPAWN, State.FAILED: Rule.SPAWN,
                      State.STARTING: Rule.JOIN, State.RUNNING: Rule.NOTHING, State.STOPPING: Rule.AFTER_STOP},
    "operator_sleep": {State.SLEEPING: Rule.NOTHING, State.BACKOFF: Rule.TO_SLEEP, State.FAILED: Rule.NOTHING,
                       State.STARTING: Rule.STOP_FAILING_WAITING, State.RUNNING: Rule.STOP,
                       State.STOPPING: Rule.DROP_AFTER_STOP},
}
OPERATOR_SLEEP_REASON: Final = "stopped by lazyctl sleep"
