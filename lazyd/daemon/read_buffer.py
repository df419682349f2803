"""One buffer for the daemon's reads of pipes and sockets, copied out by each reader at once.

`os.read(fd, n)` allocates n bytes before it knows how many will come: past glibc's mmap
threshold (128 KiB at first) that is an mmap and a munmap per call, about 15 us for a read that
returns a 100-byte line, against 1 us below it. Reading into one preallocated buffer and copying
out what came (`readv`, `recv_into`) costs the small copy only, whatever the size asked for.
The daemon is one thread and every reader copies the bytes out before it awaits anything, so one
buffer serves them all; it grows to the largest read asked for (its pages become resident only
as far as a read ever filled them).
"""

from __future__ import annotations

import os
import socket

__all__ = ["read_bytes", "read_into_shared", "recv_bytes"]

_buffer = bytearray()


def _sized(size: int) -> bytearray:
    global _buffer
    if len(_buffer) < size:
        _buffer = bytearray(size)
    return _buffer


def read_into_shared(fd: int, size: int) -> tuple[bytearray, int]:
    """Read up to `size` bytes of non-blocking `fd` into the shared buffer: (the buffer, how many
    came; 0 at EOF). Raises BlockingIOError when none are there. The bytes are valid until the
    next read: copy them out before awaiting."""
    buffer = _sized(size)
    with memoryview(buffer) as view:
        return buffer, os.readv(fd, [view[:size]])


def read_bytes(fd: int, size: int) -> bytes:
    """`os.read(fd, size)` without its allocation of `size` bytes (see the module docstring)."""
    buffer, count = read_into_shared(fd, size)
    with memoryview(buffer) as view:
        return bytes(view[:count])


def recv_bytes(sock: socket.socket, size: int, flags: int) -> bytes:
    """`sock.recv(size, flags)` without its allocation of `size` bytes."""
    buffer = _sized(size)
    with memoryview(buffer) as view:
        count = sock.recv_into(view, size, flags)
        return bytes(view[:count])
