"""Taking a hand-off session back when the daemon is lost or lets it go (docs/protocol.md, "Hand-off").

The waiter (shim/waiting.sh) execs this shim, same pid and descriptors, with ``--resume-handoff=FD``
naming the region. It answers what lazyd/handoff/recovery.py decides, then reconnects
(shim/handoff.py's `reconnect`) offering a fresh region holding the handshake and a partly read
line; failing a hand-off it relays over frames (shim/relay.py), failing a daemon it runs the
server directly. A client that closes its stdin meanwhile, or a region that says the client left,
ends it with 0.
"""

from __future__ import annotations

import os
import select
import time

from lazyd.handoff.recovery import plan
from lazyd.handoff.region import Region, State, create_region, read_region, unmap

from . import connect, handoff
from .stdout import Stdout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import NoReturn

    from .options import Log, Options


def _exit_if_client_left(wait_s: float, log: Log) -> None:
    """Wait up to `wait_s`; exit 0 if the client closes our stdin meanwhile with nothing left in it."""
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
    import array
    import fcntl
    import termios

    count = array.array("i", [0])
    try:
        fcntl.ioctl(0, termios.FIONREAD, count)
    except OSError:
        return 0
    return count[0]


def answer(region: Region | None, out: Stdout, log: Log) -> tuple[State, bytes]:
    """End a cut line and answer what was in flight; returns what the next daemon continues from:
    the handshake, and the head."""
    done = plan(region)
    out.write(done.output())
    if done.finish is not None:
        log(f"finished a line the daemon had begun ({len(done.finish) - 1} bytes of it were left to write)")
    if done.ids:
        log(f"answered {len(done.ids)} in-flight request(s) with an error")
    if done.read:
        log(f"took {len(done.read)} byte(s) of input the daemon had read and not recorded")
    return done.carried, done.head


def fresh_region(state: State, head: bytes, log: Log) -> int | None:
    """A new region holding `state` and its `head`, for the next daemon to continue from; None
    where none can be made (the session then goes on over frames)."""
    try:
        fd = create_region()
    except OSError as exc:
        log(f"no hand-off: cannot create the shared region: {exc.strerror or exc}")
        return None
    region = read_region(fd)
    if region is None:
        log("no hand-off: cannot map the shared region")
        os.close(fd)
        return None
    region.write_head(head, 0, 0)
    region.write(state)
    unmap(region.buf)
    return fd


def run(opts: Options, region_fd: int, args: list[str], log: Log, slot: int | None) -> NoReturn:
    """Recover the session whose region is `region_fd`, holding the resume slot `slot`
    (shim/slots.py) until the first attempt to reconnect has ended."""
    try:
        os.close(handoff.HELLO_FD)  # the waiter's reclaiming hello: the next hand-off leaves a new one
    except OSError:
        pass
    region = read_region(region_fd)
    os.close(region_fd)
    if region is not None and region.current is not None and region.current.closed:
        log("the daemon ended the session because the client left; exiting")
        os._exit(0)
    log("the daemon let go of the session (or was lost); taking it back"
        + (f" (holding resume slot fd {slot})" if slot is not None else ""))
    state, head = answer(region, Stdout(log), log)
    if region is not None:
        unmap(region.buf)
    fd = fresh_region(state, head, log) if opts.handoff else None
    resume = state.resume_lines()
    _exit_if_client_left(0, log)
    conn = handoff.reconnect(opts, resume, log, fd, lambda wait_s: _exit_if_client_left(wait_s, log), slot)
    if not isinstance(conn, str) and conn.welcome.handoff and fd is not None:
        log(f"reconnected; handed off again, resuming {len(resume)} handshake line(s)")
        handoff.wait(conn, fd, args, log, connect.socket_path(opts))
    if fd is not None:
        os.close(fd)
    from .relay import Relay  # only here: it imports socket, threading and json

    relay = Relay(opts, None if isinstance(conn, str) else conn, log, state, head)
    if isinstance(conn, str):
        os._exit(relay.run_direct(conn))
    log(f"reconnected without a hand-off; relaying, resuming {len(resume)} handshake line(s)")
    os._exit(relay.run())

