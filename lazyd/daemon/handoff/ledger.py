"""A hand-off session's ledger: what its shim would need if the daemon were lost, kept in the region.

The session's one table of requests in flight: a request enters when its line is read, before it
is relayed, and leaves when its answer is wholly in the client's stdout or the client cancels it.
The region's table (lazyd/handoff/region.py) is written only from it, one entry per request. The
client's stdin is read into the region itself (`input`), never only into the daemon's memory, and
each read is accounted for by at most one state write (`accounted`).
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Callable
from typing import TYPE_CHECKING

from lazyd.handoff.recovery import Recovery
from lazyd.handoff.region import ENTRY_BYTES, HEAD_AREA_BYTES, READ_BYTES, TABLE_ENTRIES, Region, State
from lazyd.handoff.region import head_offset
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.jsonrpc import Invalid, Message
from lazyd.protocol.linepeek import LineInfo, id_key, message_info

if TYPE_CHECKING:
    from lazyd.protocol.linepeek import IdKey, JsonId

_UNRECORDED = -1  # the entry of a request in flight whose id the table cannot hold


class Ledger:
    """The in-flight table, handshake and head of one hand-off session."""

    def __init__(self, region: Region, later: Callable[[Callable[[], None]], None] = lambda release: release(), *,
                 recovery: Recovery | None = None) -> None:
        """The ledger of a new session, of one continued from its region (an upgrade, a shim's
        recovery), or with `recovery`, of one reclaimed from a lost daemon's region."""
        self.region = region
        self._later = later  # runs `_release` once the large lines are over
        self._release_asked = False
        previous = region.current
        self._entries: dict[IdKey, int] = {}
        self._init_key: IdKey | None = None
        self.state = previous or State()  # a continued region is never closed nor holds a tail
        used: set[int] = set()
        if previous is not None:
            # What is in the table is still in flight (a reclaimed session's: until its error is written).
            for entry, text in region.entries():
                try:
                    key = id_key(json.loads(text))
                except ValueError:
                    key = None
                if key is None or key in self._entries:
                    region.clear_id(entry)  # not an id the daemon wrote: nothing to answer
                    continue
                self._entries[key] = entry
                used.add(entry)
            # A reclaimed session's unanswered initialize gets the error, not an answer later.
            if previous.init and not previous.init_answered and recovery is None:
                handshake = line_info(rpc.parse(previous.init))
                self._init_key = handshake.requests[0][0] if handshake.requests else None
        # Entries given back, then those from `_next` on: a list of every free entry would cost
        # each session more than its region's pages.
        self._next = max(used, default=-1) + 1
        self._free = sorted(set(range(self._next)) - used, reverse=True)
        self.on_empty: Callable[[], None] | None = None  # called when the last request in flight leaves
        if recovery is not None and previous is not None:
            self._record_reclaim(recovery)
        else:
            region.write(self.state)  # a state from the start: the shim reads the table only beside one

    def _record_reclaim(self, recovery: Recovery) -> None:
        """Record the recovery of a lost daemon's region so that a kill -9 at any store leaves the
        next recovery the same duty: the scratch area emptied, the ids of the lines read after the
        head entered, then that read accounted for as the lost daemon would have. The outbox then
        writes the cut line's end and one error per id, each leaving the table once written."""
        self.region.release(self.state.head_area ^ 1)  # what a kill left there is nobody's
        if not recovery.read:
            self.region.write(self.state)
            return
        for text in recovery.ids:  # the table's own are in it already: entered once
            key = id_key(json.loads(text))
            if key is not None:
                self._enter(key, text)
        self.accounted(len(recovery.read), recovery.head, recovery.carried.discarding)

    def client_line(self, line: bytes, parsed: Message | Invalid | None = None) -> None:
        """A whole line read from the client, before it is relayed (`parsed`: `rpc.parse` of it)."""
        info = line_info(parsed if parsed is not None else rpc.parse(line))
        if info.kind == "initialize":
            self.state.init, self._init_key = line, info.requests[0][0]
            self.state.init_answered = False
            self.region.write(self.state)
        elif info.kind == "initialized":
            self.state.initialized = line
            self.region.write(self.state)
        for key, request_id in info.requests:
            self._enter(key, json.dumps(request_id).encode())
        for key in info.cancelled:
            self._leave(key)

    def answered(self, done: JsonId) -> None:
        """The line answering `done` is wholly in the client's stdout."""
        key = id_key(done)
        if key is None:
            return
        if key == self._init_key:
            self._init_key = None
            self.state.init_answered = True
            self.region.write(self.state)
        if self._leave(key) and not self._entries and self.on_empty is not None:
            self.on_empty()

    def input(self, limit: int = READ_BYTES) -> memoryview:
        """Where the next read of the client's stdin goes (at most `limit` bytes): the head area the
        state names, after the head."""
        at = head_offset(self.state.head_area) + self.state.head_len
        return memoryview(self.region.buf)[at : at + min(limit, READ_BYTES)]

    def accounted(self, got: int, head: bytes | bytearray, discarding: bool) -> None:
        """The read of `got` bytes after the head is relayed and its requests are entered: `head` is
        the start of the line left unfinished (with `discarding`, of an over-long line being
        skipped). Unless it is the area's bytes as they are (the head grown by the read), it goes
        to the other area, which one state write names; then the area left is zeroed (its pages kept
        while large lines come: given back at once, each would fault in and zero them again)."""
        state, used = self.state, self.state.head_len + got
        left = state.head_area
        if len(head) != used:
            state.head_area ^= 1
            self.region.write_head(head, 0, state.head_area)
        if (len(head), discarding, state.head_area) != (state.head_len, state.discarding, left):
            state.head_len, state.discarding = len(head), discarding
            self.region.write(state)
        if state.head_area == left:
            return
        self.region.write_head(_ZEROS[:used], 0, left)
        if used > READ_BYTES and not self._release_asked:
            self._release_asked = True  # once: asking again with each later line is a dict write
            self._later(self._release)

    def _release(self) -> None:
        """Give back the pages large lines left in the head areas: the one the state does not name
        unless it holds the tail, the other while it holds no head."""
        self._release_asked = False
        if getattr(self.region.buf, "closed", False):
            return
        if not self.state.tail_len:
            self.region.release(self.state.head_area ^ 1)
        if not self.state.head_len:
            self.region.release(self.state.head_area)

    def close(self, *, client_left: bool, tail: bytes | None = None) -> None:
        """The session's last state: `client_left` (nothing to answer), or handed back to the shim
        with the unwritten rest of a cut line (`tail`) for it to write first, in the other area."""
        self.state.closed = client_left
        if tail is not None:
            self.state.tail_len = len(tail[:HEAD_AREA_BYTES])
            self.region.write_head(tail[:HEAD_AREA_BYTES], 0, self.state.head_area ^ 1)
        self.region.write(self.state)

    def _enter(self, key: IdKey, text: bytes) -> None:
        if key in self._entries:
            return  # the same id again: the client's mistake, answered once by the relay
        entry = _UNRECORDED
        if len(text) < ENTRY_BYTES and self._free:
            entry = self._free.pop()
        elif len(text) < ENTRY_BYTES and self._next < TABLE_ENTRIES:
            entry, self._next = self._next, self._next + 1
        if entry != _UNRECORDED:
            self.region.set_id(entry, text)
        self._entries[key] = entry

    def _leave(self, key: IdKey) -> bool:
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        if entry != _UNRECORDED:
            self.region.clear_id(entry)
            self._free.append(entry)
        return True

    @property
    def inflight(self) -> int:
        return len(self._entries)


def line_info(msg: Message | Invalid) -> LineInfo:
    """What `inspect_line` (lazyd/protocol/linepeek.py, the shim's reader) finds in a line, read from
    the relay core's parse of it by the same rule. A response, or a refused line, is no request."""
    if isinstance(msg, Message) and msg.method is not None:
        return message_info(msg.method, msg.kind is rpc.Kind.REQUEST, msg.id, msg.obj.get("params"))
    return LineInfo()


_ZEROS = memoryview(mmap.mmap(-1, HEAD_AREA_BYTES, prot=mmap.PROT_READ))
# What `accounted` zeroes from: a mapping never written reads as the kernel's zero page and holds
# no memory, where zeroed bytes from the heap would be resident in an idle daemon.
