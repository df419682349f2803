"""How much the client's stdout surely takes in one write, whole: the room a line needs to go out
uncut by a kill -9.

The kernel writes a nonblocking write whole when it finds room for all of it; this module says,
conservatively, when that is (docs/reliability.md).

- **A pipe** (fs/pipe.c, `anon_pipe_write`): the bytes are copied page by page, each into a new
  slot of the ring, and the write stops only when every slot is used. FIONREAD counts bytes, not
  slots, and slots are not full (a 3,000-byte write takes a page of its own), so the only state
  in which the free slots are known from outside is an empty pipe: every slot is free, and a write
  of at most the pipe's size goes whole. `pipe_room` promises room only then.
- **A Unix stream socket** (net/unix/af_unix.c, `unix_stream_sendmsg`): the data is cut into skbs
  of at most `(sk_sndbuf >> 1) - 64` bytes, each taken while SIOCOUTQ (`sk_wmem_alloc`, the
  truesize of the unread skbs) is below SO_SNDBUF, else the send stops there with MSG_DONTWAIT.
  `socket_cost` counts each skb at SKB_MIN_DATA bytes of data at most and SKB_OVERHEAD beyond.

A write can still stop short where the kernel cannot allocate a page; the outbox then treats the
line as cut (lazyd/daemon/handoff/outbox.py).
"""

from __future__ import annotations

import mmap

PAGE = mmap.PAGESIZE
SKB_MIN_DATA = 16 * 1024  # the data of one skb of a large send, at least (older kernels' SKB_MAX_ALLOC)
SKB_OVERHEAD = PAGE + 1024  # the truesize of one skb beyond its data, at most: a page rounded up, sk_buff, shinfo


def pipe_room(capacity: int, unread: int) -> int:
    """Bytes a write surely puts whole into a pipe of `capacity` bytes (F_GETPIPE_SZ) holding
    `unread` bytes (FIONREAD): all of it when it is empty, else none."""
    return capacity if unread == 0 else 0


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
