"""Giving the heap back to the system once large messages have passed.

A megabyte line goes through a few buffers of its size on its way (the read, the line, the
rewritten line). glibc then raises its mmap threshold to that size, so later buffers of that size
come from the heap, and what they leave free there stays resident: after forty 1 MiB echoes the
daemon kept 3-4 MiB more than it needs (38.8 MiB where `malloc_trim(0)` brings it to 35.3 MiB).
That counts against every client session the daemon serves, for as long as it runs.

So a reader that sees a large line notes it (`TRIMMER.note`, one comparison per line), and once
no large line has come for `QUIET_S` the heap is trimmed, once. Never on the hot path of a burst
of large messages, where the kept buffers are what make the next one cheap; a no-op where the C
library has no `malloc_trim` (not glibc). Other memory that large lines leave behind is given back
at the same moment (`later`): a hand-off session's head pages (lazyd/daemon/handoff/ledger.py),
which, given back after every large request, were faulted in again by the next one.

While the large lines come, the C library keeps what they free (lazyd/host/heapkeep.py): the first
large line of a spell tells it to, and the trim that ends the spell sets its defaults back first.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from lazyd.host.heapkeep import LARGE_BYTES, QUIET_S, keep_freed, trim

__all__ = ["HeapTrimmer", "LARGE_BYTES", "QUIET_S", "TRIMMER"]


def malloc_trim() -> None:
    """The heap's free pages back to the system."""
    trim()


class HeapTrimmer:
    """Trims the heap once after each spell of large lines (see the module docstring)."""

    def __init__(self, trim: Callable[[], None] = malloc_trim, keep: Callable[[bool], object] = keep_freed) -> None:
        self._trim = trim
        self._keep = keep
        self._keeping = False  # the C library is told to keep what it frees (a spell is on)
        self._pending = False  # a large line came since the quiet spell began
        self._wake = trio.Event()
        self._later: dict[Callable[[], None], None] = {}  # run once at the next trim, in order

    def later(self, release: Callable[[], None]) -> None:
        """Run `release` once, when the heap is next trimmed (after a quiet spell): memory that
        a large line left behind and the next one would use again. The line itself was noted
        (`note`): this puts the trim off no further."""
        self._later[release] = None
        self._wake.set()

    def note(self, nbytes: int) -> None:
        """A line of `nbytes` passed."""
        if nbytes >= LARGE_BYTES:
            self._pending = True
            self._wake.set()
            if not self._keeping:  # the first large line of a spell: its buffers are kept
                self._keeping = True
                self._keep(True)

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            while self._pending:  # until a whole quiet spell passed without a large line
                self._pending = False
                await trio.sleep(QUIET_S)
            self._wake = trio.Event()
            later, self._later = self._later, {}
            for release in later:
                release()
            if self._keeping:  # before the trim: what it gives back is not kept again
                self._keeping = False
                self._keep(False)
            self._trim()


TRIMMER = HeapTrimmer()
