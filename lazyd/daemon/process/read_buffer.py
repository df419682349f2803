"""One buffer for the daemon's reads of its servers' stdout, copied out by each reader at once.

`os.read(fd, n)` allocates n bytes before it knows how many will come, and past glibc's mmap
threshold that is an mmap and a munmap per call (docs/benchmarks.md). Reading into one
preallocated buffer (`readv`) costs the same whatever the size asked for, so a server's stdout can
be read a whole widened pipe at a time and lines cut straight out of the buffer
(lazyd/daemon/process/stdout_reader.py). The daemon is one thread and every reader copies the bytes
out before it awaits anything, so the registry's one buffer serves them all; it grows to the
largest read asked for (its pages become resident only as far as a read ever filled them).
"""

from __future__ import annotations

import mmap
import os


class ReadBuffer:
    """Anonymous memory that reads land in: a page is resident once a read filled it."""

    def __init__(self) -> None:
        self._buffer: mmap.mmap | None = None

    def read_into(self, fd: int, size: int) -> tuple[mmap.mmap, int]:
        """Read up to `size` bytes of non-blocking `fd`: (the buffer, how many came; 0 at EOF).
        Raises BlockingIOError when none are there. The bytes are valid until the next read: copy
        them out before awaiting."""
        buffer = self._buffer
        if buffer is None or len(buffer) < size:
            if buffer is not None:
                buffer.close()
            buffer = self._buffer = mmap.mmap(-1, size)  # not a bytearray: that would touch every page now
        with memoryview(buffer) as view:
            return buffer, os.readv(fd, [view[:size]])

    def release(self) -> None:
        """Give the pages back (they read as zeros until a read fills them again): what a large
        line made resident is not kept once the large lines are over (lazyd/daemon/heap_trim.py)."""
        if self._buffer is not None:
            self._buffer.madvise(mmap.MADV_DONTNEED)
