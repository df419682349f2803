"""Connections the daemon refused since it started, by reason, for `lazyctl status`.

A refused shim runs its server directly: the session works without the product, and an operator
must see that wall. Each refusal is counted by code (``busy``, ``uid``, ``version``,
``unidentified``) with the last reason and when. `note` says whether a refusal begins a run of its
code (log it) and `admitted` ends the run, returning its count (logged once).
"""

from __future__ import annotations

import time
from typing import Any


class Refusals:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.last: dict[str, tuple[float, str]] = {}  # code -> (wall time, reason)
        self._episode: dict[str, int] = {}

    def note(self, code: str, reason: str) -> bool:
        """Count one refusal; True if it begins an episode of this code."""
        self.counts[code] = self.counts.get(code, 0) + 1
        self.last[code] = (time.time(), reason)
        running = self._episode.get(code, 0)
        self._episode[code] = running + 1
        return running == 0

    def admitted(self, code: str) -> int:
        """A connection was served: the episode of `code` ends; how many it refused (0: none ran)."""
        return self._episode.pop(code, 0)

    def status(self) -> dict[str, Any]:
        """The figures `lazyctl status` shows: count, last reason and its time, per code."""
        return {code: {"count": count, "last_at": self.last[code][0], "last_reason": self.last[code][1]}
                for code, count in sorted(self.counts.items())}
