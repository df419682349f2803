"""The daemon's gates, each holding its tasks at one point while closed: reading and starting.

`Registry.reading` is closed while the daemon hands itself over (lazyd/daemon/upgrade/handover.py).
The upgrade writes the state and execs in one synchronous step, so nothing may be half done then:
frames are read whole or kept by the decoder (and written too), and since reads produce writes,
closing it stops every reader at its next read; what was read is handled, the writers drain, and
the freeze comes once they are idle. `Registry.starting` is closed while the orphan sweep runs
(lazyd/daemon/orphans.py): a child started meanwhile could take the pid of a recorded leader that
is gone, and be killed as its leftover. `passage()` costs an attribute test while open, so it may
sit on the hot path.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import trio

T = TypeVar("T")


class Gate:
    """Open (readers pass) or closed (readers wait at `passage()` until it opens again)."""

    def __init__(self) -> None:
        self.closed = False
        self.holds = 0  # steps under way that a hand-over must wait for (a spawn: its pid is not known yet)
        self._opened = trio.Event()
        self._opened.set()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._opened = trio.Event()

    def open(self) -> None:
        self.closed = False
        self._opened.set()

    async def hold(self, work: Awaitable[T]) -> T:
        """Await `work` as a step a hand-over waits for (the settle sees `holds`)."""
        self.holds += 1
        try:
            return await work
        finally:
            self.holds -= 1

    async def passage(self) -> None:
        """Return at once while open; wait while closed (an exec may end the wait for good)."""
        if self.closed:
            await self._opened.wait()
