"""A server's memory limit (`memory_max`): when a tree that stays over it is restarted, and when parked.

Pure: fed PSS samples of the server's tree and the monotonic time by the memory watch
(lazyd/daemon/runtime/memory_watch.py). The rules (docs/supervision.md, "Memory"): a tree *stays
over* when two samples in a row find it over (a burst given back is no breach; a sample under, or
a new process, starts the count again); a breach restarts the server (`Restart`), its in-flight
requests answered with an error naming the limit; the `PARK_AFTER_BREACHES`-th breach within
`PARK_WINDOW_S` parks it (`Park`), the restarts before it backing off like crashes. Sizes are
bytes, written and read as users type them (lazyd/config/sizes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from lazyd.config.durations import format_duration
from lazyd.config.sizes import format_bytes
from lazyd.core import state_codec as sc
from lazyd.core.lifecycle.timing import RecentTimes

SAMPLE_INTERVAL_S: Final = 2.0  # how often the watch samples trees and pressure (docs/supervision.md)
OVER_SAMPLES: Final = 2  # rule 1: over at this many samples in a row
PARK_AFTER_BREACHES: Final = 3  # rule 3
PARK_WINDOW_S: Final = 600.0


@dataclass(frozen=True)
class Restart:
    """Restart the server for `reason` (rule 2); `breaches` within the window, this one counted."""

    reason: str
    breaches: int


@dataclass(frozen=True)
class Park:
    """Stop the server and park it as failed with `reason` (rule 3)."""

    reason: str


Verdict = Restart | Park


class MemoryLimit:
    """Rules 1 to 3 for one server whose `memory_max` is `limit` bytes."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"a memory limit must be positive, not {limit}")
        self.limit = limit
        self.last_bytes: int | None = None  # the latest sample, for status
        self.over = 0  # samples in a row over the limit
        self.pid: int | None = None  # the process the samples are of: another one starts the count again
        self._breaches = RecentTimes(PARK_AFTER_BREACHES)

    def to_state(self, now: float) -> dict[str, object]:
        """The count and the breaches of the window (as seconds from `now`), for a successor daemon."""
        return {"over": self.over, "breaches": self._breaches.to_state(now), "pid": self.pid}

    def restore(self, state: object, now: float) -> None:
        """Take up what `to_state` wrote at `now` (this clock's moment of the write); ValueError
        for a state it did not write."""
        s = sc.obj(state, "memory")
        self.over = sc.integer(s.get("over"), "memory.over")
        offsets = sc.load(list[float], s.get("breaches"), "memory.breaches")
        self._breaches = RecentTimes.from_state(PARK_AFTER_BREACHES, offsets, now)
        self.pid = sc.opt_integer(s.get("pid"), "memory.pid")

    def sample(self, now: float, size: int, pid: int) -> Verdict | None:
        """The tree of process `pid` measured `size` bytes at `now` (another pid: count anew)."""
        if pid != self.pid:
            self.pid, self.over = pid, 0
        self.last_bytes = size
        if size <= self.limit:
            self.over = 0
            return None
        self.over += 1
        if self.over < OVER_SAMPLES:
            return None
        self.over = 0
        self._breaches.record(now)
        over = f"{format_bytes(size)} over memory_max {format_bytes(self.limit)}"
        recent = self._breaches.within(now, PARK_WINDOW_S)
        if recent >= PARK_AFTER_BREACHES:
            self._breaches.clear()
            return Park(f"parked: {recent} times over memory_max {format_bytes(self.limit)} within "
                        f"{format_duration(PARK_WINDOW_S)} (last {format_bytes(size)})")
        return Restart(f"restarted: {over}", recent)
