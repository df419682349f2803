"""A hand-off session's ledger: what its shim would need if the daemon were lost, kept in the region.

The shim answers every request in flight when the daemon is lost (docs/reliability.md); on a
hand-off session it no longer reads the client's lines, so the daemon keeps that table for it, the
way the shim keeps its own on the frame path (the same line reading, lazyd/linepeek.py): a request
enters when its line is read, before it reaches the relay, and leaves when the line that finally
answers it (its `done`) is wholly in the client's stdout, or when the client cancels it. Beside it:
the client's handshake lines (for `resume`), whether an answer is cut in the middle, and how much
of a line is read but not yet relayed. Every change reaches the region (lazyd/handoff_state.py)
before the next await; `hold` lets a reader batch the changes of one read into one write.
"""

from __future__ import annotations

import json

from lazyd.handoff_state import Region, State
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
            # A session resumed from an earlier daemon: its shim answered what was in flight and
            # kept the handshake and the unrelayed input for us.
            self.state.init, self.state.initialized = previous.init, previous.initialized
            self.state.init_answered = previous.init_answered
            self.state.head_len = previous.head_len
            self.state.discarding = previous.discarding
        self._held = 0
        self._dirty = False
        self._head_peak = self.state.head_len
        self._head_written = self.state.head_len  # bytes of the current partial line in the region
        self._head_stale = False  # the recorded head was relayed; its bytes may not be overwritten yet

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

    def torn(self, torn: bool) -> None:
        """Whether the client's stdout now ends in the middle of a line."""
        if self.state.out_torn != torn:
            self.state.out_torn = torn
            self._changed()

    def head_relayed(self) -> None:
        """The partial line recorded so far was completed and relayed: a new one starts."""
        self._head_written = 0
        self._head_stale = self.state.head_len > 0

    def head(self, buffer: bytearray, discarding: bool) -> None:
        """`buffer` is the start of a line read and not yet relayed (with `discarding`, the start
        of an over-long line being skipped); what the region lacks of it goes there."""
        if self._head_stale and buffer:
            # The state still counts the relayed line's bytes: say so before they are overwritten,
            # or a daemon killed in between would leave a head that mixes two lines.
            self._head_stale = False
            self.state.head_len = 0
            self._changed()
            self.flush()
        self._head_written = min(self._head_written, len(buffer))
        if len(buffer) > self._head_written:
            self.region.write_head(memoryview(buffer)[self._head_written :], self._head_written)
            self._head_written = len(buffer)
        if len(buffer) != self.state.head_len or discarding != self.state.discarding:
            self._head_stale = False
            self.state.head_len = len(buffer)
            self.state.discarding = discarding
            self._head_peak = max(self._head_peak, len(buffer))
            self._changed()
        if not buffer and self._head_peak >= RELEASE_HEAD_BYTES:
            self.flush()
            self.region.release()
            self._head_peak = 0

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
