"""One buffer for the daemon's reads of its servers' stdout, copied out by each reader at once.

`os.read(fd, n)` allocates n bytes before it knows how many will come. Past glibc's mmap
threshold (128 KiB until a larger block has been freed) that is an mmap and a munmap per call:
16 us for a read that returns a 100-byte line, against 1.2 us below it. Reading into one
preallocated buffer (`readv`) costs the same whatever the size asked for and the
allocator's state, so a server's stdout can be read a whole widened pipe (1 MiB) at a time, and
lines cut straight out of the buffer (lazyd/daemon/process/stdout_reader.py). The daemon is one thread
and every reader copies the bytes out before it awaits anything, so one buffer serves them all;
it grows to the largest read asked for (its pages become resident only as far as a read ever
filled them).
"""

from __future__ import annotations

import mmap
import os

__all__ = ["read_into_shared", "release"]

_buffer: mmap.mmap | None = None  # anonymous memory: a page is resident once a read filled it


def _sized(size: int) -> mmap.mmap:
    global _buffer
    if _buffer is None or len(_buffer) < size:
        if _buffer is not None:
            _buffer.close()
        _buffer = mmap.mmap(-1, size)  # not a bytearray: that would zero (touch) every page now
    return _buffer


def read_into_shared(fd: int, size: int) -> tuple[mmap.mmap, int]:
    """Read up to `size` bytes of non-blocking `fd` into the shared buffer: (the buffer, how many
    came; 0 at EOF). Raises BlockingIOError when none are there. The bytes are valid until the
    next read: copy them out before awaiting."""
    buffer = _sized(size)
    with memoryview(buffer) as view:
        return buffer, os.readv(fd, [view[:size]])


def release() -> None:
    """Give the buffer's pages back (they read as zeros until a read fills them again): what a
    large line made resident is not kept once the large lines are over (lazyd/daemon/heap_trim.py)."""
    if _buffer is not None:
        _buffer.madvise(mmap.MADV_DONTNEED)
