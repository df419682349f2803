"""A hand-off session's ledger: what its shim would need if the daemon were lost, kept in the region.

The session's one table of requests in flight: a request enters when its line is read, before it
is relayed, and leaves when its answer is wholly in the client's stdout or the client cancels it.
The region's table (lazyd/handoff/region.py) is written only from it, one entry per request. The
state (handshake, head, landing zone) is written at most once per read (`hold`). `Landing`: the
client's bytes are read into the region itself, never only into the daemon's memory.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Callable

from lazyd.handoff.recovery import Recovery
from lazyd.handoff.region import ENTRY_BYTES, HEAD_AREA_BYTES, LANDING_BYTES, TABLE_ENTRIES, Region, State
from lazyd.handoff.region import landing_offset
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.jsonrpc import Invalid, Message
from lazyd.protocol.linepeek import LineInfo, id_key, message_info

IdKey = tuple[bool, int | str]
JsonId = int | str

RELEASE_HEAD_BYTES = 1 << 20
# A consumed head this large is given back to the kernel after a quiet spell, with the heap's trim;
# given back at once, each large request would fault in and zero the same pages again.

_UNRECORDED = -1  # the entry of a request in flight whose id the table cannot hold


def _at_once(release: Callable[[], None]) -> None:
    release()




class Ledger:
    """The in-flight table and handshake of one hand-off session."""

    def __init__(self, region: Region, later: Callable[[Callable[[], None]], None] = _at_once, *,
                 recovery: Recovery | None = None) -> None:
        """The ledger of a new session, of one continued from its region (an upgrade, a shim's
        recovery), or with `recovery`, of one reclaimed from a lost daemon's region."""
        self.region = region
        self._later = later  # runs a release once the large lines are over (RELEASE_HEAD_BYTES)
        previous = region.current
        self._entries: dict[IdKey, int] = {}
        self._init_key: IdKey | None = None
        self.state = State()
        used: set[int] = set()
        if previous is not None:
            # What is in the table is still in flight (a reclaimed session's: until its error is written).
            source = previous if recovery is None else recovery.carried
            for field in ("init", "initialized", "init_answered", "head_len", "discarding"):
                setattr(self.state, field, getattr(source, field))
            self.state.landing, self.state.head_area = previous.landing, previous.head_area
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
        self._held = 0
        self._dirty = False
        self._release_asked = False  # `_release_heads` waits for its moment
        self._ended = False  # `close` wrote the last state: the region is the shim's to read
        self.on_empty: Callable[[], None] | None = None  # called when the last request in flight leaves
        if recovery is not None and previous is not None:
            self._record_reclaim(recovery, previous)
        else:
            self._changed()  # a state from the start: the shim reads the table only beside one
        self._head_peak = self.state.head_len
        self._head_written = self.state.head_len  # bytes of the current partial line in the region
        self._head_new = False  # the recorded head was relayed: the next one goes to the other area

    def _record_reclaim(self, recovery: Recovery, lost: State) -> None:
        """Record the recovery of a lost daemon's region, in an order that leaves the next recovery
        the same duty after a kill -9 at any store: (1) the ids of lines found in the landing zone
        enter the table beside its own; (2) the next read's zone is cleared and the head, extended
        by the landed input, goes to the area the state does not name; (3) one state write names
        both, then the landed zone is cleared. The outbox then writes the newline ending a cut
        line and one error per id, each id leaving the table once its line is written."""
        self.hold()  # no state until both the ids and the head are in the region
        if recovery.landed:
            for text in recovery.ids:  # the table's own are in it already: entered once
                key = id_key(json.loads(text))
                if key is not None:
                    self._enter(key, text)
            zone = lost.landing ^ 1
            _clear_landed(self.region, zone)  # what the lost daemon accounted for and left
            if recovery.head:
                self.state.head_area ^= 1
                self.region.write_head(recovery.head, 0, self.state.head_area)
            self.state.landing = zone
        self._changed()
        self.release()  # the state write that accounts for the landed read
        if recovery.landed:
            _clear_landed(self.region, lost.landing)

    def client_line(self, line: bytes, parsed: Message | Invalid | None = None) -> None:
        """A whole line read from the client, before it is relayed (`parsed`: `rpc.parse` of it)."""
        info = line_info(parsed if parsed is not None else rpc.parse(line))
        if info.kind == "initialize":
            self.state.init, self._init_key = line, info.requests[0][0]
            self.state.init_answered = False
            self._changed()
        elif info.kind == "initialized":
            self.state.initialized = line
            self._changed()
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
            self._changed()
        if self._leave(key) and not self._entries and self.on_empty is not None:
            self.on_empty()

    def torn(self, torn: bool) -> None:
        """Whether the client's stdout may now end in the middle of a line: set before any write
        that can be partial, cleared once the line is whole."""
        self.region.torn = torn

    def head_relayed(self) -> None:
        """The partial line recorded so far was completed and relayed: a new one starts."""
        self._head_written = 0
        self._head_new = self.state.head_len > 0

    def head(self, buffer: bytearray, discarding: bool) -> None:
        """`buffer` is the start of a line read and not yet relayed (with `discarding`, the start
        of an over-long line being skipped); what the region lacks of it goes there."""
        area = self.state.head_area
        if self._head_new and buffer:
            # The state still counts the relayed line's bytes until it is written: the new line's
            # start goes to the other area, so a daemon killed in between leaves a head of one line.
            area ^= 1
        self._head_new = False
        self._head_written = min(self._head_written, len(buffer))
        if len(buffer) > self._head_written:
            self.region.write_head(memoryview(buffer)[self._head_written :], self._head_written, area)
            self._head_written = len(buffer)
        if len(buffer) != self.state.head_len or discarding != self.state.discarding or area != self.state.head_area:
            self.state.head_len = len(buffer)
            self.state.discarding = discarding
            self.state.head_area = area
            self._head_peak = max(self._head_peak, len(buffer))
            self._changed()
        if not buffer and self._head_peak >= RELEASE_HEAD_BYTES and not self._release_asked:
            self._release_asked = True  # once: asking again with each later line is a dict write
            self._later(self._release_heads)

    def _release_heads(self) -> None:
        """Give a consumed head's pages back, unless a line's start is held again (the next empty
        head asks again), the session ended (the shim may be reading the tail) or is unmapped."""
        self._release_asked = False
        if self._ended or self._held or self.state.head_len or getattr(self.region.buf, "closed", False):
            return
        self.flush()
        self.region.release_heads()
        self._head_peak = 0

    def landed(self) -> None:
        """The read in the landing zone the state names is accounted for (its lines relayed and
        recorded, the start of a line in the head): the next read lands in the other zone."""
        self.state.landing ^= 1
        self._changed()

    def close(self, *, client_left: bool, tail: bytes | None = None) -> None:
        """The session's last state: `client_left` (nothing to answer), or handed back to the shim
        with the unwritten rest of a cut line (`tail`) for it to write first."""
        self._ended = True
        self.state.closed = client_left
        # The tail goes to the head area the written state does not name: a close is never inside a
        # hold (a reader's hold spans no checkpoint), so the state is written as the ledger has it.
        if tail is not None:
            self.state.tail_len = len(tail[:HEAD_AREA_BYTES])
            self.region.write_head(tail[:HEAD_AREA_BYTES], 0, self.state.head_area ^ 1)
        self._changed()
        self.flush()

    def _enter(self, key: IdKey, text: bytes) -> None:
        if key in self._entries:
            return  # the same id again: the client's mistake, answered once by the relay
        entry = self._free_entry() if len(text) < ENTRY_BYTES else None
        if entry is not None:
            self.region.set_id(entry, text)
        self._entries[key] = _UNRECORDED if entry is None else entry

    def _free_entry(self) -> int | None:
        """A free entry of the table; None when all TABLE_ENTRIES are in use."""
        if self._free:
            return self._free.pop()
        if self._next >= TABLE_ENTRIES:
            return None
        self._next += 1
        return self._next - 1

    def _leave(self, key: IdKey) -> bool:
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        if entry != _UNRECORDED:
            self.region.clear_id(entry)
            self._free.append(entry)
        return True

    def hold(self) -> None:
        """Defer state writes until `release` (a reader relaying one read's lines)."""
        self._held += 1

    def release(self) -> None:
        self._held -= 1
        if not self._held:
            self.flush()

    def flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self.region.write(self.state)

    def _changed(self) -> None:
        self._dirty = True
        if not self._held:
            self.flush()

    @property
    def inflight(self) -> int:
        return len(self._entries)


def line_info(msg: Message | Invalid) -> LineInfo:
    """What `inspect_line` (lazyd/protocol/linepeek.py, the shim's reader) finds in a line, read from
    the relay core's parse of it by the same rule. A response, or a refused line, is no request."""
    if isinstance(msg, Message) and msg.method is not None:
        return message_info(msg.method, msg.kind is rpc.Kind.REQUEST, msg.id, msg.obj.get("params"))
    return LineInfo()


class Landing:
    """The landing zones of a mapped region: the client's stdin is read straight into them."""

    def __init__(self, region: Region) -> None:
        self._region = region
        self._base = memoryview(region.buf)
        self.zones = tuple(self._base[landing_offset(zone) : landing_offset(zone) + LANDING_BYTES] for zone in (0, 1))

    def pending(self, zone: int) -> int:
        """How many bytes a read left in `zone` unaccounted for (`Region.read_landed`)."""
        return len(self._region.read_landed(zone))

    def take(self, zone: int, length: int) -> bytes:
        return bytes(self.zones[zone][:length])

    def clear(self, zone: int, length: int) -> None:
        """Zero what a read put in `zone` (its pages stay: freed, they would fault in again at the
        next read)."""
        self.zones[zone][:length] = _ZEROS[:length]

    def close(self) -> None:
        for view in (*self.zones, self._base):
            view.release()


_ZEROS = memoryview(mmap.mmap(-1, LANDING_BYTES, prot=mmap.PROT_READ))
# What `clear` copies from: a mapping never written reads as the kernel's zero page and holds no
# memory, where zeroed bytes from the heap would be resident in an idle daemon.


def _clear_landed(region: Region, zone: int) -> None:
    """Zero what a read left at the start of landing zone `zone` (up to its first NUL)."""
    length = len(region.read_landed(zone))
    if length:
        at = landing_offset(zone)
        region.buf[at : at + length] = _ZEROS[:length]
