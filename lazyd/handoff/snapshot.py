"""What a shim takes from a hand-off region it recovers, of this layout or the previous one.

The waiter execs whatever shim is installed *now* (the README's upgrade is "run the same
command again"), so a shim may have to recover a region a daemon of the previous version wrote.
The support window is this layout (lazyd/handoff/region.py, `LAYOUT`) and the one before it
(`PREVIOUS_MAGIC`: the ids in the state's payload, head and tail further out, no seals); a region
of an older layout reads as no state (nothing in flight can be named). Either way the shim gets one
`Snapshot` and passes a fresh region of this layout to the next daemon (shim/recover.py).
Standard library only: the shim imports it.
"""

from __future__ import annotations

from lazyd.handoff.region import LANDING_BYTES, Region, State, newest_state, pread_all, read_region

_MIB = 1 << 20


class Snapshot:
    """Everything a shim takes from a region it recovers, whatever its layout."""

    __slots__ = ("state", "landed", "head", "tail")

    def __init__(self, state: State, landed: bytes, head: bytes, tail: bytes) -> None:
        self.state = state  # with `inflight` (from the table or the payload) and `out_torn`
        self.landed = landed  # what a read put in the landing zone and no state accounts for
        self.head = head  # the start of a line read and not relayed
        self.tail = tail  # the rest of an answer the daemon had begun to write


def snapshot(fd: int) -> Snapshot | None:
    """What the region `fd` holds, of this layout or the previous one; None if neither has a
    valid state (a new region, a daemon killed before its first write, an older layout)."""
    region = read_region(fd)
    if region is not None:
        return of_region(region)
    return read_previous(fd)


def of_region(region: Region) -> Snapshot | None:
    """What a region of this layout holds (read through the shim's preads, or the daemon's mapping
    when it adopts the session, lazyd/daemon/handoff/reclaim.py); None if it has no valid state."""
    state = region.current
    if state is None:
        return None
    head = region.read_head(state.head_len, state.head_area) if state.head_len else b""
    tail = region.read_tail(state.tail_len) if state.tail_len else b""
    return Snapshot(state, region.read_landed(state.landing), head, tail)


PREVIOUS_MAGIC = b"LZH2"
_PREVIOUS_SLOT_BYTES = _MIB
_PREVIOUS_LANDING_OFFSET = 2 * _MIB
_PREVIOUS_HEAD_OFFSET = 3 * _MIB
_PREVIOUS_HEAD_AREA_BYTES = 32 * _MIB
_PREVIOUS_TAIL_OFFSET = _PREVIOUS_HEAD_OFFSET + 2 * _PREVIOUS_HEAD_AREA_BYTES


def read_previous(fd: int) -> Snapshot | None:
    """A region of the previous layout (`PREVIOUS_MAGIC`: ids in the state's payload, head and
    tail further out, no seals), as a snapshot."""
    state, _ = newest_state(lambda n, at: pread_all(fd, n, at), PREVIOUS_MAGIC, 0, _PREVIOUS_SLOT_BYTES)
    if state is None:
        return None
    head_at = _PREVIOUS_HEAD_OFFSET + state.head_area * _PREVIOUS_HEAD_AREA_BYTES
    head = pread_all(fd, state.head_len, head_at)
    tail = pread_all(fd, state.tail_len, _PREVIOUS_TAIL_OFFSET)
    landed = pread_all(fd, LANDING_BYTES, _PREVIOUS_LANDING_OFFSET + state.landing * LANDING_BYTES)
    end = landed.find(b"\0")
    return Snapshot(state, landed if end < 0 else landed[:end], head, tail)
