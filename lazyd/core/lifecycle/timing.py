"""The timing policy of the lifecycle (lazyd/core/lifecycle/machine.py, rules 2 to 4). Pure.

`LifecyclePolicy`: the per-server settings, validated. `backoff_delay_s`: `BACKOFF_BASE_S *
2**(n-1)` after the n-th failure, jittered by the caller's `random.Random`, clamped to
[`BACKOFF_BASE_S`, `BACKOFF_CAP_S`]. The machine parks a server once `PARK_AFTER_FAILURES`
unrequested failed starts fall within `PARK_WINDOW_S` (never a keep_alive one).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import random  # only the type of the caller's generator: the core draws from it, never from `random`

STABLE_AFTER_S: Final = 10.0  # supervisord's startsecs: a crash later than this is not a crash loop
BACKOFF_BASE_S: Final = 0.5  # a one-off crash is barely noticed, and a loop still cannot spin
BACKOFF_CAP_S: Final = 30.0  # a keep_alive server that never comes up costs one spawn per ~30 s
BACKOFF_JITTER: Final = 0.2  # +-20 % spreads the restarts of servers that crashed together
_MAX_DOUBLINGS: Final = 16  # 0.5 * 2**16 is far past the cap; bounds the power for endless loops
PARK_AFTER_FAILURES: Final = 5  # 0.5+1+2+4+8 s of retries, then park (docs/supervision.md)
PARK_WINDOW_S: Final = 60.0  # failed starts further apart than this are not one crash loop


@dataclass(frozen=True)
class LifecyclePolicy:
    """The per-server policies this machine obeys, in seconds; the config layer maps onto it."""

    start_timeout_s: float = 60.0
    linger_s: float = 600.0
    # The linger of a start only listings came for (lazyd/core/lifecycle/usage.py): a health check's.
    check_linger_s: float = 30.0
    idle_timeout_s: float | None = None
    keep_alive: bool = False
    eager: bool = False
    wake_interval_s: float | None = None
    wake_timeout_s: float = 1.0  # enforced by the caller that runs the predicate; kept here whole

    def __post_init__(self) -> None:
        positive = {"start_timeout_s": self.start_timeout_s, "wake_timeout_s": self.wake_timeout_s,
                    "idle_timeout_s": self.idle_timeout_s, "wake_interval_s": self.wake_interval_s}
        for name, value in positive.items():
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        for name, value in (("linger_s", self.linger_s), ("check_linger_s", self.check_linger_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be 0 or more seconds, not {value!r}")


def backoff_delay_s(burst: int, rng: random.Random) -> float:
    """Rule 4: seconds to wait after the `burst`-th consecutive failure (1 for the first)."""
    doublings = min(max(burst - 1, 0), _MAX_DOUBLINGS)
    jitter = rng.uniform(1.0 - BACKOFF_JITTER, 1.0 + BACKOFF_JITTER)
    return min(max(BACKOFF_BASE_S * 2.0**doublings * jitter, BACKOFF_BASE_S), BACKOFF_CAP_S)


class RecentTimes:
    """The latest `keep` moments of an event: the unrequested failed starts of rule 3a, a server's
    memory breaches (lazyd/core/memory.py). Enough of them within a window means park."""

    def __init__(self, keep: int) -> None:
        self._times: deque[float] = deque(maxlen=keep)

    def __bool__(self) -> bool:
        return bool(self._times)

    def record(self, now: float) -> None:
        self._times.append(now)

    def clear(self) -> None:
        self._times.clear()

    def within(self, now: float, window_s: float) -> int:
        """How many of the moments kept are at most `window_s` before `now`."""
        return sum(1 for t in self._times if now - t <= window_s)

    def to_state(self, now: float) -> list[float]:
        """The moments kept, oldest first, as seconds from `now` (the clocks of two processes differ)."""
        return [t - now for t in self._times]

    @classmethod
    def from_state(cls, keep: int, offsets: list[float], now: float) -> RecentTimes:
        """What `to_state` wrote, its times moved to `now` on the reader's clock."""
        times = cls(keep)
        for offset in offsets:
            times.record(now + offset)
        return times
