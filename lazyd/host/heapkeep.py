"""The C library's heap while large lines pass: kept, then given back once they are over.

By glibc's own rules a freed megabyte at the top of the heap goes back to the system at once (its
trim threshold follows the largest block freed, and a line, its read and its rewrite are freed
together), so each next large line's buffers are fresh pages, faulted in and zeroed one by one:
some 600 page faults and a fifth of the daemon's CPU time per 1 MiB echo round trip, and 300 in
the shim relaying it over frames (docs/benchmarks.md, "The 1 MiB echo, fifth pass"). So the
first large line of a spell has the C library keep what it frees (`keep_freed(True)`: trim
threshold 128 MiB, and every buffer of a line up to the longest allowed, 16 MiB, from the heap),
and the end of the spell, once no large line came for a quiet spell, sets glibc's defaults back
and trims (`trim`): between spells the heap is as lean as before, and what a spell kept is given
back. The daemon ends its spells from a trio task (lazyd/daemon/heap_trim.py); the shim, with threads
and no event loop, from a thread of its own (`HeapSpell`). A no-op where the C library is not glibc.

Standard library only (the shim imports it); ctypes is imported at the first large line, not at
start-up.
"""

from __future__ import annotations

import threading
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the shim start-up time
if TYPE_CHECKING:
    from collections.abc import Callable

LARGE_BYTES = 256 * 1024  # a line this large leaves heap behind (glibc's threshold starts at 128 KiB)
QUIET_S = 2.0  # no large line for this long: the spell is over

# glibc's mallopt(3) parameters, the values a spell sets (32 MiB is the highest mmap threshold
# glibc takes), and glibc's own starting values, set back after it.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP = {_M_TRIM_THRESHOLD: 128 << 20, _M_MMAP_THRESHOLD: 32 << 20}
_DEFAULTS = {_M_TRIM_THRESHOLD: 128 << 10, _M_MMAP_THRESHOLD: 128 << 10}


def _libc_function(name: str) -> Callable[..., int] | None:
    import ctypes

    try:
        found: Callable[..., int] = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    return found


def keep_freed(keep: bool) -> bool:
    """Have the C library keep the heap it frees (`keep`), or give it back as it does by default;
    False where it cannot be told (no glibc `mallopt`, or a value refused)."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    return all([mallopt(param, value) == 1 for param, value in (_KEEP if keep else _DEFAULTS).items()])


def trim() -> None:
    """The heap's free pages back to the system (`malloc_trim(0)`), where the C library has it."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


class HeapSpell:
    """A spell of large lines in a process of threads: `note` each line (from any thread); the
    first large one keeps the heap, and a thread started then ends the spell once QUIET_S pass
    without another (defaults back, then the trim), and exits."""

    def __init__(self, keep: Callable[[bool], object] = keep_freed, end: Callable[[], None] = trim,
                 quiet_s: float = QUIET_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._keep, self._end, self._quiet_s, self._clock = keep, end, quiet_s, clock
        self._lock = threading.Lock()
        self._last = 0.0  # when the last large line passed
        self._on = False  # a spell is on: the heap is kept, and a thread waits for its end

    def note(self, nbytes: int) -> None:
        """A line of `nbytes` passed."""
        if nbytes < LARGE_BYTES:
            return
        with self._lock:
            self._last = self._clock()
            if self._on:
                return
            self._on = True
            self._keep(True)
        threading.Thread(target=self._wait_for_quiet, name="heap-spell", daemon=True).start()

    def _wait_for_quiet(self) -> None:
        while True:
            with self._lock:
                left = self._last + self._quiet_s - self._clock()
                if left <= 0:
                    self._keep(False)  # before the trim: what it gives back is not kept again
                    self._end()
                    self._on = False
                    return
            time.sleep(left)
