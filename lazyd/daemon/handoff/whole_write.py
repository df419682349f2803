"""How much the client's stdout surely takes in one write, whole: the room a line needs to go out
uncut by a kill -9.

The kernel writes a nonblocking write whole when it finds room for all of it; this module says,
conservatively, when that is (docs/reliability.md).

- **A pipe** (fs/pipe.c, `anon_pipe_write`): the bytes are copied page by page, each into a new
  slot of the ring, and the write stops only when every slot is used. So a write of `s` bytes goes
  whole when ceil(s / PAGE) slots are free. FIONREAD counts bytes, not slots, and slots are not
  full (a 3,000-byte write takes a page of its own), so `PipeRoom` counts the slots the daemon's
  own writes may hold: the reader takes bytes in order, FIONREAD says which writes are wholly
  read, and at most one more slot, the oldest, may still hold bytes of a later write. Before the
  pipe is first seen empty, each unread byte may hold a slot.
- **A Unix stream socket** (net/unix/af_unix.c, `unix_stream_sendmsg`): the data is cut into skbs
  of at most `(sk_sndbuf >> 1) - 64` bytes, each taken while SIOCOUTQ (`sk_wmem_alloc`, the
  truesize of the unread skbs) is below SO_SNDBUF, else the send stops there with MSG_DONTWAIT.
  `socket_cost` counts each skb at SKB_MIN_DATA bytes of data at most and SKB_OVERHEAD beyond.

A write can still stop short where the kernel cannot allocate a page; the outbox then treats the
line as cut (lazyd/daemon/handoff/outbox.py).
"""

from __future__ import annotations

import mmap
from collections import deque

PAGE = mmap.PAGESIZE
SKB_MIN_DATA = 16 * 1024  # the data of one skb of a large send, at least (older kernels' SKB_MAX_ALLOC)
SKB_OVERHEAD = PAGE + 1024  # the truesize of one skb beyond its data, at most: a page rounded up, sk_buff, shinfo
MAX_TRACKED_WRITES = 64
# Past this, a write is counted with the one before it (freed once both are read: more slots,
# never fewer), so a session of small lines keeps a few entries, not one per line.


def pages(size: int) -> int:
    return -(-size // PAGE)


class PipeRoom:
    """The slots of the client's stdout pipe that the daemon's writes may still hold (see the
    module docstring): plain bookkeeping, fed each write's size and the pipe's FIONREAD."""

    def __init__(self) -> None:
        self._ends: deque[tuple[int, int]] = deque()  # per write still partly unread: its end, its slots
        self._written = 0  # bytes written since the pipe was last seen empty
        self._slots = 0  # slots the writes in `_ends` may hold
        self._known = False  # the pipe was seen empty since: every byte in it is the daemon's

    def wrote(self, size: int) -> None:
        """The daemon wrote `size` bytes into the pipe."""
        if self._known and size > 0:
            self._written += size
            slots = pages(size)
            if len(self._ends) >= MAX_TRACKED_WRITES:
                slots += self._ends.pop()[1]
            self._ends.append((self._written, slots))
            self._slots += pages(size)

    @property
    def tracked(self) -> int:
        """How many writes are counted apart (MAX_TRACKED_WRITES at most)."""
        return len(self._ends)

    def free_slots(self, capacity: int, unread: int) -> int:
        """A lower bound on the free slots of a pipe of `capacity` bytes (F_GETPIPE_SZ) holding
        `unread` bytes (FIONREAD)."""
        slots = capacity // PAGE
        if unread == 0:
            self._ends.clear()
            self._written = self._slots = 0
            self._known = True
            return slots
        if self._known and unread > self._written:
            self._known = False  # bytes of another writer: the count no longer holds
        if not self._known:
            return max(0, slots - unread)  # each slot holds at least one unread byte
        consumed = self._written - unread
        while self._ends and self._ends[0][0] <= consumed:
            self._slots -= self._ends.popleft()[1]
        return max(0, slots - self._slots - 1)  # and the oldest page, which a later write may share

    def room(self, capacity: int, unread: int) -> int:
        """Bytes a write surely puts into the pipe whole now."""
        return self.free_slots(capacity, unread) * PAGE


def socket_cost(size: int, sndbuf: int) -> int:
    """What a send of `size` bytes adds to a Unix stream socket's SIOCOUTQ, at most."""
    per_skb = max(1, min(SKB_MIN_DATA, (sndbuf >> 1) - 64))
    return size + -(-size // per_skb) * SKB_OVERHEAD


def socket_room(queued: int, sndbuf: int) -> int:
    """Bytes a MSG_DONTWAIT send surely puts whole into a Unix stream socket whose SIOCOUTQ is
    `queued` and SO_SNDBUF `sndbuf`: the most whose `socket_cost` fits what is left."""
    free = sndbuf - queued - 1  # each skb is taken only while the queue is below the buffer
    per_skb = max(1, min(SKB_MIN_DATA, (sndbuf >> 1) - 64))
    if free <= SKB_OVERHEAD:
        return 0
    best = 0
    count = free // (per_skb + SKB_OVERHEAD)
    for skbs in (count, count + 1):
        best = max(best, min(skbs * per_skb, free - skbs * SKB_OVERHEAD))
    return best
