"""What a lost daemon leaves to answer, decided once for whoever takes its hand-off session back.

The shim (shim/recover.py) and the daemon systemd restarts with the session (`reclaim`: under
systemd the waiter never woke and cannot be given a new region) start from the same `plan` of the
region, so both answer the same requests, each once, and carry the same session (docs/protocol.md,
"Reclaiming"; lazyd/daemon/handoff/ledger.py records a reclaim). Standard library only: the shim
imports it.
"""

from __future__ import annotations

from lazyd.handoff.region import Region, State
from lazyd.protocol.frames import MAX_LINE_BYTES

LOST_CODE = -32603
LOST_MESSAGE = "lazyd: connection to the daemon was lost; the request may not have completed"
ERROR_TAIL = b',"error":{"code":%d,"message":"%s"}}' % (LOST_CODE, LOST_MESSAGE.encode())  # after an id


class Recovery:
    """What taking a session back owes the client, and what the next daemon continues from."""

    def __init__(self, finish: bytes | None, ids: list[bytes], carried: State, head: bytes, read: bytes) -> None:
        self.finish = finish  # what ends a cut line (the tail, or a newline); None: no line is cut
        self.ids = ids  # the JSON text of each request id to answer with the error, each once, in order
        self.carried = carried  # the handshake, the head's length and whether it is being discarded
        self.head = head  # the start of a line read and not relayed
        self.read = read  # input the lost daemon read after its head and did not account for


def error_line(text: bytes) -> bytes:
    """The lost-connection error for the request whose id has the JSON text `text` (no newline)."""
    return b'{"jsonrpc":"2.0","id":' + text + ERROR_TAIL


def plan(region: Region | None) -> Recovery:
    """What `region` (None: not one of this layout) leaves to do (the module docstring)."""
    state = region.current if region is not None else None
    if region is None or state is None:
        return Recovery(None, [], State(), b"", b"")  # a daemon killed before its first write
    tail = region.read_head(state.tail_len, state.head_area ^ 1) if state.tail_len else b""
    finish: bytes | None = None
    if state.out_torn or tail:
        finish = tail if tail.endswith(b"\n") else tail + b"\n"
    head = region.read_head(state.head_len, state.head_area) if state.head_len else b""
    read = region.unaccounted(state)
    found: list[bytes] = []
    discarding = state.discarding
    if read:  # json and re are imported only then: most recoveries find nothing there
        from lazyd.protocol.linepeek import request_ids_in

        found, head, discarding = request_ids_in(head, state.discarding, read, MAX_LINE_BYTES)
    carried = State()
    carried.init, carried.initialized, carried.init_answered = state.init, state.initialized, state.init_answered
    carried.head_len, carried.discarding = len(head), discarding
    ids = list(dict.fromkeys([*state.inflight, *found]))
    return Recovery(finish, ids, carried, head, read)


def reclaim(region: Region) -> Recovery | str:
    """What a reclaiming daemon owes the client for `region` and carries on, or why the shim
    recovers it instead: a region that says the client left, or holds the rest of a line its daemon
    let go of, is the shim's."""
    state = region.current
    if state is not None and state.closed:
        return "its daemon ended it because the client left"
    if state is not None and state.tail_len:
        return "its daemon let it go in the middle of a line"
    return plan(region)
