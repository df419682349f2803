"""The C library's heap while large messages pass: kept during a spell of them, given back after.

By glibc's own rules a freed megabyte at the top of the heap goes back to the system at once, so
each next large line's buffers would be fresh pages, faulted in and zeroed one by one. So while a
spell of large lines lasts the C library keeps what it frees (`keep_freed`: every buffer of a line
up to the longest allowed from the heap), and once none has come for `QUIET_S` glibc's defaults
are set back and the heap trimmed, once (docs/benchmarks.md, "One JSON reader and the heap kept
for a spell"). Other memory large lines leave behind is given back then too (`later`): a hand-off
session's head pages (lazyd/daemon/handoff/ledger.py) and its client's widened pipes
(lazyd/daemon/handoff/outbox.py). The daemon makes one trimmer (lazyd/daemon/main.py) and runs it
in its nursery, so that every call to the C library comes from that one task. Where the C library
is not glibc, nothing is kept or trimmed.
"""

from __future__ import annotations

from collections.abc import Callable

import trio


LARGE_BYTES = 256 * 1024  # a line this large leaves heap behind (glibc's threshold starts at 128 KiB)
QUIET_S = 2.0  # no large line for this long: the spell is over

# mallopt(3): M_TRIM_THRESHOLD and M_MMAP_THRESHOLD, as a spell sets them (32 MiB is the highest
# mmap threshold glibc takes) and as glibc starts.
_KEEP = {-1: 128 << 20, -3: 32 << 20}
_DEFAULTS = {-1: 128 << 10, -3: 128 << 10}


def _libc() -> object:
    import ctypes  # at the first large line: a daemon that never sees one never loads it

    return ctypes.CDLL(None)


def keep_freed(keep: bool) -> None:
    """Have the C library keep the heap it frees (`keep`), or give it back as it does by default."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is not None:
        for param, value in (_KEEP if keep else _DEFAULTS).items():
            mallopt(param, value)


def malloc_trim() -> None:
    """The heap's free pages back to the system."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


class HeapTrimmer:
    """Keeps the heap during each spell of large lines and trims it once after (see the module
    docstring)."""

    def __init__(self, trim: Callable[[], None] = malloc_trim, keep: Callable[[bool], None] = keep_freed) -> None:
        self._trim = trim
        self._keep = keep
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
            self._keep(True)  # a spell began: what its lines' buffers free is kept
            while self._pending:  # until a whole quiet spell passed without a large line
                self._pending = False
                await trio.sleep(QUIET_S)
            self._wake = trio.Event()
            later, self._later = self._later, {}
            for release in later:
                release()
            self._keep(False)  # before the trim: what it gives back is not kept again
            self._trim()
