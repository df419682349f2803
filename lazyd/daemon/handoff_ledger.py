"""A hand-off session's ledger: what its shim would need if the daemon were lost, kept in the region.

The shim answers every request in flight when the daemon is lost (docs/reliability.md); on a
hand-off session it no longer reads the client's lines, so the daemon keeps that table for it, the
way the shim keeps its own on the frame path (the same line reading, lazyd/linepeek.py): a request
enters when its line is read, before it reaches the relay, and leaves when the line that finally
answers it (its `done`) is wholly in the client's stdout, or when the client cancels it. Beside it:
the client's handshake lines (for `resume`), whether an answer is cut in the middle, and how much
of a line is read but not yet relayed. Every change reaches the region (lazyd/handoff_state.py)
before the next await; `hold` lets a reader batch the changes of one read into one write.

`Landing` is the other half of the region's promise: the client's bytes are read into the region
itself, so none is ever only in the daemon's memory (lazyd/handoff_state.py says how a read is
accounted for).
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Callable

from lazyd.handoff_state import HEAD_OFFSET, LANDING_BYTES, LANDING_OFFSET, Region, State
from lazyd.linepeek import id_key, inspect_line

IdKey = tuple[bool, int | str]
JsonId = int | str

RELEASE_HEAD_BYTES = 1 << 20
# A consumed head this large is given back to the kernel (the memfd's pages); smaller ones stay
# for the next partial line, which costs nothing more.


class Ledger:
    """The in-flight table and handshake of one hand-off session (see the module docstring)."""

    def __init__(self, region: Region) -> None:
        self.region = region
        previous = region.current
        self._inflight: dict[IdKey, bytes] = {}
        self._init_key: IdKey | None = None
        self.state = State()
        if previous is not None:
            # A session continued from an earlier daemon: resumed by its shim (which answered what
            # was in flight and kept the handshake and the unrelayed input for us), or handed over
            # by an upgrade (what is in flight is still in flight).
            for field in ("init", "initialized", "init_answered", "head_len", "discarding", "landing", "head_area"):
                setattr(self.state, field, getattr(previous, field))
            for text in previous.inflight:
                key = id_key(json.loads(text))
                if key is not None:
                    self._inflight[key] = text
            self.state.unrecorded = previous.unrecorded
            if previous.init and not previous.init_answered:
                handshake = inspect_line(previous.init)
                self._init_key = handshake.requests[0][0] if handshake.requests else None
        self._held = 0
        self._dirty = False
        self.on_empty: Callable[[], None] | None = None  # called when the last request in flight leaves
        self._head_peak = self.state.head_len
        self._head_written = self.state.head_len  # bytes of the current partial line in the region
        self._head_new = False  # the recorded head was relayed: the next one goes to the other area

    # ---- changes -------------------------------------------------------------------------------

    def client_line(self, line: bytes) -> None:
        """A whole line read from the client, before it is relayed."""
        info = inspect_line(line)
        if info.kind == "initialize":
            self.state.init, self._init_key = line, info.requests[0][0]
            self.state.init_answered = False
        elif info.kind == "initialized":
            self.state.initialized = line
        for key, request_id in info.requests:
            self._inflight[key] = json.dumps(request_id).encode()
        for key in info.cancelled:
            self._inflight.pop(key, None)
        if info.requests or info.cancelled or info.kind:
            self._changed()

    def answered(self, done: JsonId) -> None:
        """The line answering `done` is wholly in the client's stdout."""
        key = id_key(done)
        if key is None:
            return
        if self._inflight.pop(key, None) is not None or key == self._init_key:
            if key == self._init_key:
                self.state.init_answered = True
            self._changed()
            if not self._inflight and self.on_empty is not None:
                self.on_empty()

    def torn(self, torn: bool) -> None:
        """Whether the client's stdout now ends in the middle of a line."""
        if self.state.out_torn != torn:
            self.state.out_torn = torn
            self._changed()

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
        if not buffer and self._head_peak >= RELEASE_HEAD_BYTES:
            self.flush()
            self.region.release()
            self._head_peak = 0

    def landed(self) -> None:
        """The read in the landing zone the state names is accounted for (its lines relayed and
        recorded, the start of a line in the head): the next read lands in the other zone."""
        self.state.landing ^= 1
        self._changed()

    def close(self, *, client_left: bool, tail: bytes | None = None) -> None:
        """The session's last state: `client_left` (nothing to answer), or handed back to the shim
        with the unwritten rest of a cut line (`tail`) for it to write first."""
        self.state.closed = client_left
        if tail is not None:
            self.state.tail_len = self.region.write_tail([tail])
        self._changed()
        self.flush()

    # ---- writing -------------------------------------------------------------------------------

    def hold(self) -> None:
        """Defer writes until `release` (a reader relaying one read's lines)."""
        self._held += 1

    def release(self) -> None:
        self._held -= 1
        if not self._held:
            self.flush()

    def flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self.state.inflight = list(self._inflight.values())
            self.region.write(self.state)

    def _changed(self) -> None:
        self._dirty = True
        if not self._held:
            self.flush()

    @property
    def inflight(self) -> int:
        return len(self._inflight)


class Landing:
    """The landing zones of a region, mapped: the client's stdin is read straight into them."""

    def __init__(self, fd: int) -> None:
        if os.fstat(fd).st_size < HEAD_OFFSET:
            os.ftruncate(fd, HEAD_OFFSET)  # a mapped page past the end of the file would fault
        self._map = mmap.mmap(fd, 2 * LANDING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                              offset=LANDING_OFFSET)
        whole = memoryview(self._map)
        self.zones = (whole[:LANDING_BYTES], whole[LANDING_BYTES:])
        self._whole = whole

    def pending(self, zone: int) -> int:
        """How many bytes a read left in `zone` unaccounted for (up to the first NUL)."""
        end = self._map.find(b"\0", zone * LANDING_BYTES, (zone + 1) * LANDING_BYTES)
        return (end if end >= 0 else (zone + 1) * LANDING_BYTES) - zone * LANDING_BYTES

    def take(self, zone: int, length: int) -> bytes:
        return bytes(self.zones[zone][:length])

    def clear(self, zone: int, length: int) -> None:
        """Zero what a read put in `zone` (its pages stay: freed, they would fault in again at the
        next read; at most 2 * LANDING_BYTES per session, and only after reads that large)."""
        self.zones[zone][:length] = _ZEROS[:length]

    def close(self) -> None:
        for view in (*self.zones, self._whole):
            view.release()
        self._map.close()


_ZEROS = memoryview(bytes(LANDING_BYTES))
