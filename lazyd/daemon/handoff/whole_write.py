"""How much the client's stdout surely takes in one write, whole: the room a line needs to go out
uncut by a kill -9.

A write into the client's stdout that stops inside a line leaves it cut if the daemon is killed
before the next one (docs/reliability.md). The kernel writes a nonblocking write whole when it
finds room for all of it, and this module says, conservatively, when that is:

- **A pipe** (Linux fs/pipe.c, `anon_pipe_write`, formerly `pipe_write`): the first
  `total_len & (PAGE_SIZE-1)` bytes may be merged into the last page if they fit there; the rest
  is copied page by page, each into a new slot of the ring, filled whole before the next
  (`copy_page_from_iter(page, 0, PAGE_SIZE, from)`). Only when `pipe_full(head, tail,
  max_usage)` does the loop stop: with O_NONBLOCK it returns what it copied (or -EAGAIN), and only
  a blocking writer then checks `signal_pending` and sleeps. So a write of `s` bytes goes whole
  when ceil(s / PAGE) slots are free; F_GETPIPE_SZ is `max_usage * PAGE_SIZE`. FIONREAD counts
  bytes, not slots, and slots are not full: a 3,000-byte write that does not fit the last page's
  rest takes a page of its own, so ten such writes hold ten slots with 30,000 bytes, and
  "size minus FIONREAD" would promise 8 pages where 6 are free. `PipeRoom` therefore counts the
  slots the daemon's own writes can hold: each write of `w` bytes takes at most ceil(w / PAGE)
  new slots; the reader takes bytes in order (FIONREAD tells how many are left, hence which
  writes are wholly read, whose slots are free), and at most one more slot, the oldest, can still
  hold bytes merged into a page a wholly read write began. An empty pipe has all its slots free
  and starts the count; before the first time it is seen empty, each unread byte may hold a slot.
- **A Unix stream socket** (net/unix/af_unix.c, `unix_stream_sendmsg`): the data is cut into
  skbs of at most `(sk_sndbuf >> 1) - 64` bytes (and `SKB_MAX_HEAD(0) + UNIX_SKB_FRAGS_SZ`, 32 KiB
  and a page's head; `SKB_MAX_ALLOC`, 16 KiB, on older kernels), each allocated by
  `sock_alloc_send_pskb`, which takes it while `sk_wmem_alloc < sk_sndbuf` and with MSG_DONTWAIT
  fails with EAGAIN otherwise, sendmsg then returning the bytes sent so far. SIOCOUTQ is
  `sk_wmem_alloc` (the truesize of the skbs the peer has not read: data, pages rounded up, the
  sk_buff and its shared info), SO_SNDBUF is `sk_sndbuf`. So a send goes whole when the queue plus
  what its skbs cost stays below the buffer; `socket_cost` counts each skb at SKB_MIN_DATA bytes
  of data at most and SKB_OVERHEAD of the rest at most (measured on Linux 6.18: a 100-byte send
  costs 768 bytes of SIOCOUTQ, a 400,000-byte one 408,320, about 760 per 36 KiB skb).

Either way a write can still stop short where the kernel cannot allocate a page (ENOMEM) or the
data faults; the outbox then treats the line as cut (lazyd/daemon/handoff/outbox.py).
"""

from __future__ import annotations

import mmap
from collections import deque

PAGE = mmap.PAGESIZE
SKB_MIN_DATA = 16 * 1024  # the data of one skb of a large send, at least (older kernels' SKB_MAX_ALLOC)
SKB_OVERHEAD = PAGE + 1024  # the truesize of one skb beyond its data, at most: a page rounded up, sk_buff, shinfo
MAX_TRACKED_WRITES = 64
# Writes counted one by one; past this, a write is counted with the one before it (its slots
# freed only once both are read: more slots than they hold, never fewer), so a session of small
# lines that never asks for room keeps a few entries, not one per line.


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
