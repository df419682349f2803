"""Taking a hand-off session back when the daemon is lost or lets it go (docs/protocol.md, "Hand-off").

The waiter (shim/waiting.sh) execs this shim, same pid and descriptors, with ``--resume-handoff=FD``
naming the region. It answers what lazyd/handoff/recovery.py decides, then reconnects
(shim/handoff.py's `reconnect`) offering a fresh region holding the handshake and a partly read
line; failing a hand-off it relays over frames (shim/relay.py), failing a daemon it runs the
server directly, as the frame relay does. A region that says the client left ends it with 0.
"""

from __future__ import annotations

import os

from lazyd.handoff.recovery import error_line, plan
from lazyd.handoff.region import Region, State, create_region, read_region, unmap

from . import connect, handoff
from .stdout import Stdout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import NoReturn

    from .options import Log, Options


def answer(region: Region | None, out: Stdout, log: Log) -> tuple[State, bytes]:
    """End a cut line and answer what was in flight; returns what the next daemon continues from:
    the handshake, and the head."""
    done = plan(region)
    out.write((done.finish or b"") + b"".join(error_line(text) + b"\n" for text in done.ids))
    log(f"answered {len(done.ids)} in-flight request(s) with an error"
        + (", ended a line the daemon had begun" if done.finish is not None else "")
        + (f", took {len(done.read)} byte(s) it had read and not recorded" if done.read else ""))
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
    conn = handoff.reconnect(opts, resume, log, fd, slot)
    if not isinstance(conn, str) and conn.welcome.handoff and fd is not None:
        log(f"reconnected; handed off again, resuming {len(resume)} handshake line(s)")
        handoff.wait(conn, fd, args, log, connect.socket_path(opts))
    if fd is not None:
        os.close(fd)
    from .relay import Relay  # only here: it imports socket, threading and json

    if isinstance(conn, str):
        os._exit(Relay(opts, None, log, state, head).run(conn))
    log(f"reconnected without a hand-off; relaying, resuming {len(resume)} handshake line(s)")
    os._exit(Relay(opts, conn, log, state, head).run())

