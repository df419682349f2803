"""What a lost daemon leaves to answer, decided once for whoever takes its hand-off session back.

A hand-off session whose daemon is lost (or let it go) is taken back from its region
(lazyd/handoff/region.py) either by the shim itself (shim/recover.py, which then hands a fresh
region to the next daemon) or by the next daemon, which adopts it in place
(lazyd/daemon/handoff/reclaim.py). Both start from the same decision, `plan`, so that both answer the
same requests and carry the same handshake and head:

1. a line the daemon had begun to write to the client is finished: with its rest (the tail, when
   the daemon let go itself) or with a newline (a daemon killed mid-write);
2. every request in flight is answered with -32603 under its original id: those in the table and
   those in lines found in the landing zone (read by the daemon, not accounted for), each once;
3. what the next daemon continues from: the client's handshake, and the start of a line read and
   not relayed (the head, which input from the landing zone may extend).

Standard library only: the shim imports it.
"""

from __future__ import annotations

from lazyd.protocol.frames import MAX_LINE_BYTES
from lazyd.handoff.region import State

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from lazyd.handoff.snapshot import Snapshot

ERROR_TAIL = (b',"error":{"code":-32603,"message":"lazyd: connection to the daemon was lost; '
              b'the request may not have completed"}}')
# The lost-connection error after an id (shim/relay.py's LOST_CODE and LOST_MESSAGE).


class Recovery:
    """What taking a session back owes the client, and what the next daemon continues from."""

    __slots__ = ("finish", "ids", "carried", "head", "landed", "unrecorded")

    def __init__(self, finish: bytes | None, ids: list[bytes], carried: State, head: bytes, landed: int,
                 unrecorded: int) -> None:
        self.finish = finish  # what ends a cut line (the tail, or a newline); None: no line is cut
        self.ids = ids  # the JSON text of each request id to answer with the error, each once, in order
        self.carried = carried  # the handshake, the head's length and whether it is being discarded
        self.head = head  # the start of a line read and not relayed
        self.landed = landed  # bytes of input found in the landing zone
        self.unrecorded = unrecorded  # requests the lost daemon could not record: no one can answer them

    def output(self) -> bytes:
        """Every byte owed to the client's stdout, in order: the cut line's end, then the errors."""
        return (self.finish or b"") + b"".join(error_line(text) + b"\n" for text in self.ids)


def error_line(text: bytes) -> bytes:
    """The lost-connection error for the request whose id has the JSON text `text` (no newline)."""
    return b'{"jsonrpc":"2.0","id":' + text + ERROR_TAIL


def plan(snap: Snapshot | None) -> Recovery:
    """What the region's snapshot (None: a region with no state) leaves to do (the module docstring)."""
    if snap is None:
        return Recovery(None, [], State(), b"", 0, 0)
    state = snap.state
    finish: bytes | None = None
    if state.out_torn or snap.tail:
        finish = snap.tail if snap.tail.endswith(b"\n") else snap.tail + b"\n"
    found: list[bytes] = []
    rest, discarding = snap.head, state.discarding
    if snap.landed:  # json and re are imported only then: most recoveries find nothing there
        from lazyd.protocol.linepeek import request_ids_in

        found, rest, discarding = request_ids_in(snap.head, state.discarding, snap.landed, MAX_LINE_BYTES)
    carried = State()
    carried.init, carried.initialized, carried.init_answered = state.init, state.initialized, state.init_answered
    carried.head_len, carried.discarding = len(rest), discarding
    ids = list(dict.fromkeys([*state.inflight, *found]))
    return Recovery(finish, ids, carried, rest, len(snap.landed), state.unrecorded)
