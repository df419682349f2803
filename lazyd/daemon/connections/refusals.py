"""Connections the daemon refused since it started, by reason, for `lazyctl status`.

A refused shim runs its server directly (fail open): the session works, and the product's benefit
is gone for it. An operator must be able to see that wall, so every refusal is counted here by
its code (``busy``: near the descriptor limit or over the connection cap; ``uid``: a peer of
another user; ``version``: a shim of another wire version; ``unidentified``: no peer
credentials), with the last reason given and when.

Episodes keep the log readable: `note` says whether a refusal is the first of a run of the same
code (log it), and `admitted` ends the run when a connection is served again, returning how many
were refused in it (log that once).
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
