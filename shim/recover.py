"""Taking a hand-off session back when the daemon is lost or lets it go (shim/handoff.py).

The waiting shell execs this shim again, same pid and descriptors, with ``--resume-handoff=FD``
naming the region (lazyd/handoff_state.py). From what the daemon left there it does what the shim
of a frame session does at once when its daemon is lost (docs/reliability.md):

1. a line the daemon had begun to write to the client is finished (the rest, if the daemon put it
   in the region when it let go) or ended with a newline (a daemon killed mid-write), so that the
   client reads whole lines again;
2. every request in flight is answered with -32603 under its original id;
3. the shim reconnects (autostarting a daemon as at start) for up to RECONNECT_WAIT_S, passing its
   descriptors and the region again with the client's answered ``initialize`` as ``resume``; the
   next daemon continues from the region, a partly read line included. Meanwhile the client's
   new lines wait in its pipe, and a client that closes its stdin ends the shim with 0 at once;
4. if the daemon will not take the descriptors, the session goes on over frames (shim/relay.py);
   if no daemon comes back, the server is run directly, as a frame session would.

A region that says the client left ends the shim with 0; one with nothing in it (a daemon killed
before it wrote any) has nothing in flight to answer.
"""

from __future__ import annotations

import array
import json
import os
import select
import time

from lazyd.errors import Unavailable
from lazyd.handoff_state import Region, State, migrate_legacy
from lazyd.linepeek import request_ids_in
from lazyd.frames import MAX_LINE_BYTES

from . import connect, handoff
from .relay import LOST_CODE, LOST_MESSAGE, RECONNECT_POLL_S, RECONNECT_WAIT_S, Relay
from .stdout import Stdout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import NoReturn

    from .options import Log, Options

_ERROR_TAIL = b',"error":' + json.dumps({"code": LOST_CODE, "message": LOST_MESSAGE}, separators=(",", ":")).encode() + b"}"


def _exit_if_client_left(wait_s: float, log: Log) -> None:
    """Wait up to `wait_s`; exit 0 if the client closes its end of our stdin meanwhile (a pipe's
    writers all gone, a socket's peer shut down) and left nothing in it. Requests it wrote before
    closing it are still to be answered: the next daemon (or the server run directly) reads them."""
    poller = select.poll()
    poller.register(0, select.POLLRDHUP)
    for _, events in poller.poll(int(wait_s * 1000)):
        if events & (select.POLLHUP | select.POLLRDHUP | select.POLLERR):
            if not _unread_input():
                log("client closed stdin; exiting")
                os._exit(0)
            time.sleep(wait_s)  # closed with lines in it: no poll would wait any more


def _unread_input() -> int:
    """How many bytes wait in our stdin (a pipe or a socket)."""
    import fcntl
    import termios

    count = array.array("i", [0])
    try:
        fcntl.ioctl(0, termios.FIONREAD, count)
    except OSError:
        return 0
    return count[0]


def answer(state: State, region: Region, out: Stdout, log: Log) -> None:
    """Finish a torn line and answer what was in flight (steps 1 and 2 of the module docstring)."""
    if state.legacy:
        migrate_legacy(region, state)
        log("the region was of the layout before the landing zones; moved to this one")
    if state.out_torn:
        rest = region.read_tail(state.tail_len) if state.tail_len else b""
        out.write(rest if rest.endswith(b"\n") else rest + b"\n")
        log(f"finished a line the daemon had begun ({len(rest)} bytes of it were left to write)")
    # What the daemon read and had not accounted for (lazyd/handoff_state.py): the requests among
    # it are in flight as well, and the start of a line among it joins the head.
    landed = region.read_landed(state.landing)
    head = region.read_head(state.head_len, state.head_area) if state.head_len else b""
    found, rest, discarding = request_ids_in(head, state.discarding, landed, MAX_LINE_BYTES)
    texts = list(dict.fromkeys([*state.inflight, *found]))  # each id once, in order
    for text in texts:
        out.write(b'{"jsonrpc":"2.0","id":' + text + _ERROR_TAIL + b"\n")
    if texts:
        log(f"answered {len(texts)} in-flight request(s) with an error")
    if state.unrecorded:
        log(f"{state.unrecorded} in-flight request(s) could not be recorded by the daemon and stay unanswered")
    if landed:
        log(f"took {len(landed)} byte(s) of input the daemon had read and not recorded")
        state.head_area ^= 1  # not over the head the state still names
        region.write_head(rest, 0, state.head_area)
        state.head_len, state.discarding = len(rest), discarding
    state.inflight, state.unrecorded, state.out_torn, state.tail_len = [], 0, False, 0
    region.write(state)
    region.clear_landed(state.landing, len(landed))
    region.release(state.head_len, state.head_area)


def run(opts: Options, region_fd: int, args: list[str], log: Log) -> NoReturn:
    """Recover the session whose region is `region_fd` (see the module docstring)."""
    while True:
        _take_back(opts, region_fd, args, log)  # returns when a daemon took it and let go again


def _take_back(opts: Options, region_fd: int, args: list[str], log: Log) -> None:
    region = Region(region_fd)
    state = region.current or State()
    if state.closed:
        log("the daemon ended the session because the client left; exiting")
        os._exit(0)
    out = Stdout(log)
    log("the daemon let go of the session (or was lost); taking it back")
    answer(state, region, out, log)
    resume = state.resume_lines()
    deadline = time.monotonic() + RECONNECT_WAIT_S
    reason = "no daemon"
    while True:
        _exit_if_client_left(0, log)
        offered = handoff.offer(region_fd, log) if opts.handoff else None
        try:
            conn = connect.open_session(opts, resume, log, deadline, offered.fds if offered else None)
        except Unavailable as exc:
            reason = str(exc)
            if exc.final or exc.user_error or time.monotonic() >= deadline:
                break
            log(f"reconnect failed: {exc}")
            _exit_if_client_left(max(0.0, min(RECONNECT_POLL_S, deadline - time.monotonic())), log)
            continue
        finally:
            if offered is not None:
                offered.close_passed()
        if conn.welcome.handoff:
            log(f"reconnected; handed off again, resuming {len(resume)} handshake line(s)")
            handoff.wait(conn, region_fd, args, log)
            return
        log(f"reconnected without a hand-off; relaying, resuming {len(resume)} handshake line(s)")
        os._exit(_relay(opts, conn, state, region, log).run())
    relay = _relay(opts, None, state, region, log)
    os._exit(relay.run_direct(reason))


def _relay(opts: Options, conn: connect.Connection | None, state: State, region: Region, log: Log) -> Relay:
    """A frame relay that carries on from the region: its handshake, and the unrelayed input."""
    relay = Relay(opts, conn, log)
    head = region.read_head(state.head_len, state.head_area) if state.head_len else b""
    relay.seed(state.init, state.initialized, state.init_answered, head, state.discarding)
    os.close(region.fd)
    return relay
