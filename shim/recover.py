"""Taking a hand-off session back when the daemon is lost or lets it go (docs/protocol.md, "Hand-off").

The waiter (shim/waiting.sh) execs this shim, same pid and descriptors, with ``--resume-handoff=FD``
naming the region. It answers what lazyd/handoff/recovery.py decides, then reconnects for up to
RECONNECT_WAIT_S with a fresh region holding the handshake and a partly read line; failing a
hand-off it relays over frames (shim/relay.py), failing a daemon it runs the server directly. A
client that closes its stdin meanwhile, or a region that says the client left, ends it with 0.
"""

from __future__ import annotations

import os
import select
import time

from lazyd.errors import Unavailable
from lazyd.handoff.recovery import plan
from lazyd.handoff.region import Region, State, create_region, read_region, unmap

from . import connect, handoff, slots
from .dial import RECONNECT_POLL_S, RECONNECT_WAIT_S
from .stdout import Stdout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import NoReturn

    from .options import Log, Options
    from .relay import Relay


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


def run(opts: Options, region_fd: int, args: list[str], log: Log, slot: int | None = None) -> NoReturn:
    """Recover the session whose region is `region_fd`, holding the resume slot `slot`
    (shim/slots.py) until the first attempt to reconnect has ended."""
    _close_inherited_hello()
    while True:
        # Returns when a daemon took the session and let go again, with its region.
        region_fd = _take_back(opts, region_fd, args, log, slot)
        slot = None


def _close_inherited_hello() -> None:
    """Close the reclaiming hello the waiter held for systemd's fd store (shim/handoff.py's
    `hello_memfd`): the next hand-off leaves a new one."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith(f"/memfd:{handoff.HELLO_MEMFD} "):
                os.close(int(name))
        except (OSError, ValueError):
            continue


def _take_back(opts: Options, region_fd: int, args: list[str], log: Log, slot: int | None) -> int:
    region = read_region(region_fd)
    os.close(region_fd)
    if region is not None and region.current is not None and region.current.closed:
        log("the daemon ended the session because the client left; exiting")
        os._exit(0)
    out = Stdout(log)
    log("the daemon let go of the session (or was lost); taking it back"
        + (f" (holding resume slot fd {slot})" if slot is not None else ""))
    state, head = answer(region, out, log)
    if region is not None:
        unmap(region.buf)
    fd = fresh_region(state, head, log) if opts.handoff else None
    resume = state.resume_lines()
    deadline = time.monotonic() + RECONNECT_WAIT_S
    reason = "no daemon"
    while True:
        _exit_if_client_left(0, log)
        offered = handoff.offer(fd, log) if fd is not None else None
        try:
            conn = connect.open_session(opts, resume, log, deadline, offered.fds if offered else None)
        except Unavailable as exc:
            reason = str(exc)
            if exc.final or exc.user_error or time.monotonic() >= deadline:
                break
            log(f"reconnect failed: {exc}")
            slots.release(slot)  # the CPU-heavy part is over; polling for a daemon is not
            slot = None
            _exit_if_client_left(max(0.0, min(RECONNECT_POLL_S, deadline - time.monotonic())), log)
            continue
        finally:
            if offered is not None:
                offered.close_passed()
        if conn.welcome.handoff and fd is not None:
            log(f"reconnected; handed off again, resuming {len(resume)} handshake line(s)")
            # The exec of the waiting program frees the slot (close-on-exec); so does `wait`
            # before it waits in this process.
            handoff.wait(conn, fd, args, log, connect.socket_path(opts), slot)
            return fd
        slots.release(slot)  # relaying from here on: the next waiting session may start its recovery
        log(f"reconnected without a hand-off; relaying, resuming {len(resume)} handshake line(s)")
        os._exit(_relay(opts, conn, state, head, fd, log).run())
    slots.release(slot)
    relay = _relay(opts, None, state, head, fd, log)
    os._exit(relay.run_direct(reason))


def _relay(opts: Options, conn: connect.Connection | None, state: State, head: bytes, fd: int | None,
           log: Log) -> Relay:
    """A frame relay that carries on from the region: its handshake, and the unrelayed input."""
    from .relay import Relay  # only here: it imports socket, threading and json

    relay = Relay(opts, conn, log)
    relay.seed(state.init, state.initialized, state.init_answered, head, state.discarding)
    if fd is not None:
        os.close(fd)
    return relay
