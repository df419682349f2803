"""Giving the heap back to the system once large messages have passed.

A megabyte line goes through a few buffers of its size on its way (the read, the line, the
rewritten line). glibc then raises its mmap threshold to that size, so later buffers of that size
come from the heap, and what they leave free there stays resident. That would count against every
client session the daemon serves, for as long as it runs.

So whoever passes a line on notes its size (`HeapTrimmer.note`, one comparison per line), and once
no large line has come for `QUIET_S` the heap is trimmed (`malloc_trim(0)`), once: never on the
hot path of a burst of large messages, where the buffers glibc keeps are what make the next one
cheap; a no-op where the C library has no `malloc_trim` (not glibc). Other memory that large
lines leave behind is given back at the same moment (`later`): a hand-off session's head pages
(lazyd/daemon/handoff/ledger.py) and its client's widened pipes (lazyd/daemon/handoff/outbox.py).
The daemon makes one trimmer at start (lazyd/daemon/main.py) and hands it to its registry.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from lazyd.daemon.process import read_buffer

__all__ = ["HeapTrimmer", "LARGE_BYTES", "QUIET_S", "malloc_trim"]

LARGE_BYTES = 256 * 1024  # a line this large leaves heap behind (glibc's threshold starts at 128 KiB)
QUIET_S = 2.0  # no large line for this long: the spell is over


def malloc_trim() -> None:
    """The heap's free pages back to the system, and the shared read buffer's."""
    import ctypes  # at the first trim: a daemon that never sees a large line never loads it

    read_buffer.release()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class HeapTrimmer:
    """Trims the heap once after each spell of large lines (see the module docstring)."""

    def __init__(self, trim: Callable[[], None] = malloc_trim) -> None:
        self._trim = trim
        self._pending = False  # a large line came since the quiet spell began
        self._wake = trio.Event()
        self._later: dict[Callable[[], None], None] = {}  # run once at the next trim, in order

    def later(self, release: Callable[[], None]) -> None:
        """Run `release` once, when the heap is next trimmed: memory that a large line left behind
        and the next one would use again. It counts as a large line (the spell goes on)."""
        self._later[release] = None
        self.note(LARGE_BYTES)

    def note(self, nbytes: int) -> None:
        """A line of `nbytes` passed."""
        if nbytes >= LARGE_BYTES:
            self._pending = True
            self._wake.set()

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
            self._trim()
