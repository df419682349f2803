"""What a demand, an operator's wake and an operator's sleep do in each state: rules 1 and 8 of the
lifecycle (lazyd/core/lifecycle/machine.py), as the table the machine reads. Pure.

`demand()` spawns from sleeping, backoff (its wait skipped) and failed (one fresh try: failing, it
goes straight back), does nothing in starting or running, and is remembered in stopping.
`operator_wake()` also resets the failure counters and is no single try. A demand joining an
unrequested start makes it requested. `operator_sleep()` stops a starting or running server
(queued requests fail), cancels a backoff, drops a remembered demand, leaves failed alone.
"""

from __future__ import annotations

import enum
from typing import Final

from lazyd.core.lifecycle.states import State


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
