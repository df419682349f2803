"""Memory pressure: which idle server to put to sleep, and when, while the machine runs short.

Pure: fed PSI's `some avg10` (the highest of /proc/pressure/memory and the user's cgroup), the
servers and the monotonic time; lazyd/daemon/runtime/memory_watch.py carries out the answer. The
rules (docs/supervision.md, "Memory pressure"): pressure begins at `start_pct` and ends below
`stop_pct`; while it lasts one server sleeps, then nothing for `pause_s` (the ten-second average
needs that long to show what was given back), then the next; only a running, idle, not keep_alive
server may sleep, the least recently used first, then by name; no readable figure is no pressure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PressureSettings:
    """`[pressure]` in config.toml, checked by its reader (lazyd/config/load.py)."""

    enabled: bool = True
    # `some avg10` in %: reclaim starts to be felt at 10 % (sleeping an idle server is far milder than
    # systemd-oomd's kill at 60 % `full`, so it comes much earlier); below 5 % the machine copes.
    start_pct: float = 10.0
    stop_pct: float = 5.0
    pause_s: float = 10.0  # avg10 is a ten-second average
    # PSI files to read; empty: /proc/pressure/memory and the daemon's own cgroup's memory.pressure.
    files: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Candidate:
    """A server as rule 3 sees it."""

    name: str
    running: bool  # a ready process
    busy: bool  # a request in flight
    keep_alive: bool
    last_used: float | None  # monotonic time of its last request or answer; None: never used


@dataclass(frozen=True)
class Began:
    pct: float


@dataclass(frozen=True)
class Ended:
    pct: float


@dataclass(frozen=True)
class Sleep:
    """Put `name` to sleep; `reason` goes in the log and in its status."""

    name: str
    reason: str


Action = Began | Ended | Sleep


class PressureRelief:
    """Rules 1 to 4."""

    def __init__(self, settings: PressureSettings) -> None:
        self.settings = settings
        self.under_pressure = False
        self.last_pct: float | None = None
        self._last_sleep: float | None = None

    def sample(self, now: float, pct: float | None, servers: list[Candidate]) -> list[Action]:
        """The pressure read at monotonic `now` (None: none could be read) and the servers now."""
        self.last_pct = pct
        settings = self.settings
        if not settings.enabled:
            return []
        actions: list[Action] = []
        if pct is None:
            pct = 0.0
        if not self.under_pressure:
            if pct < settings.start_pct:
                return []
            self.under_pressure = True
            self._last_sleep = None
            actions.append(Began(pct))
        elif pct < settings.stop_pct:
            self.under_pressure = False
            return [Ended(pct)]
        if self._last_sleep is not None and now < self._last_sleep + settings.pause_s:
            return actions
        idle = [s for s in servers if s.running and not s.busy and not s.keep_alive]
        if not idle:
            return actions
        chosen = min(idle, key=lambda s: (s.last_used is not None, s.last_used or 0.0, s.name))
        self._last_sleep = now
        actions.append(Sleep(chosen.name, f"memory pressure: some avg10 {pct:.1f}% >= {settings.start_pct:g}% "
                                          "(the least recently used idle server)"))
        return actions


def parse_psi(text: str) -> float | None:
    """`some avg10` of a PSI file's text (/proc/pressure/memory, a cgroup's memory.pressure):
    "some avg10=1.23 avg60=... total=..." -> 1.23; None when the text has no such figure."""
    for line in text.splitlines():
        words = line.split()
        if words[:1] != ["some"]:
            continue
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key == "avg10":
                try:
                    pct = float(value)
                except ValueError:
                    return None
                return pct if math.isfinite(pct) and pct >= 0 else None
    return None
