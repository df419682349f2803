"""When the wake predicate runs (rule 9 of lazyd/core/lifecycle/machine.py). Pure.

Only in sleeping (not failed: parked waits for a person or a request; not backoff: a restart is
coming), one at a time, first at `boot()`, then `wake_interval_s` after the last finished or the
server fell asleep. Exit 0 spawns; anything else keeps sleeping (logged unless 1). It never gates
a demand; a late result is ignored. The caller enforces `wake_timeout_s` and always reports.
"""

from __future__ import annotations

from lazyd.core.lifecycle.states import Action, Log, PredicateState, RunPredicate


class PredicateSchedule:
    """The next run of the wake predicate, and whether one runs now."""

    def __init__(self, interval_s: float | None) -> None:
        self.interval_s = interval_s
        self.running = False
        self.next_at: float | None = None  # None while one runs (one at a time), or when off

    @property
    def state(self) -> PredicateState:
        if self.interval_s is None:
            return PredicateState.OFF
        return PredicateState.RUNNING if self.running else PredicateState.IDLE

    def boot(self, now: float) -> None:
        """The daemon took over a sleeping server: the first run is due at once."""
        if self.interval_s is not None and not self.running:
            self.next_at = now

    def asleep(self, now: float) -> None:
        """The server fell asleep: the next run is an interval from now."""
        if self.interval_s is not None and not self.running:
            self.next_at = now + self.interval_s

    def due(self, now: float) -> bool:
        return self.next_at is not None and now >= self.next_at

    def start(self) -> list[Action]:
        self.running = True
        self.next_at = None
        return [RunPredicate()]

    def finish(self) -> bool:
        """A run reported its result; False when none was running (the report is ignored)."""
        if not self.running:
            return False
        self.running = False
        return True

    def keep_sleeping(self, now: float, exit_code: int | None) -> list[Action]:
        """A result other than 0 for a sleeping server: the next run, and a log unless it was 1."""
        assert self.interval_s is not None  # a predicate ran, so one is configured
        self.next_at = now + self.interval_s
        if exit_code == 1:
            return []
        if exit_code is None:
            return [Log("wake predicate timed out or could not run; staying asleep")]
        return [Log(f"wake predicate exited with status {exit_code}; staying asleep")]
