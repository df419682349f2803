"""Handing the client's stdin and stdout to the daemon, and waiting while it serves them.

After the hello the daemon reads and writes the client's pipes itself (docs/protocol.md,
"Hand-off"): one hop instead of two. The shim must still be there: the client watches its process,
it holds its own copies of the pipes, and it must take over when the daemon is lost. It waits as
the installed waiting program, `waiting.sh` run by dash (docs/protocol.md, "Waiting").
"""

from __future__ import annotations

import os
import stat
import sys
import time

from lazyd.errors import Unavailable

from . import connect, slots
from .dial import budget
from .options import say
from .slots import RESUME_FLAG, SLOT_FD

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import NoReturn

    from .options import Log, Options

WAIT_FD = 9  # the daemon socket in the waiting program: dash's redirections take one digit only
HELLO_FD = 7  # the session's hello (`hello_memfd`) in the waiting program, closed by the recovery
SHELLS = ("/bin/dash", "/usr/bin/dash", "/bin/sh")
# Without any the session is not handed off: the frame path costs less than a Python shim waiting.
WAITING_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "waiting.sh")  # package data

MAX_NAME = 64  # of the server's name in the waiting program's argv[0]
# How long a shim tries to get a daemon back before running the server itself: a stopping daemon
# holds its instance lock for up to its shutdown bound, and a new one then needs its start.
RECONNECT_WAIT_S = 20.0
RECONNECT_POLL_S = 0.05  # between reconnect attempts when no daemon answers


def _passable(fd: int, flags: int) -> int | None:
    """The descriptor to pass for `fd` (itself, or one opened for that); None if it cannot be."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return fd
    if not stat.S_ISFIFO(mode):
        return None  # a terminal, a file, /dev/null: nothing a daemon should hold
    try:  # a description of its own: O_NONBLOCK set on the shim's would change the shim's copy too
        return os.open(f"/proc/self/fd/{fd}", flags | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # no /proc to reopen it through, or the reader of our stdout is gone


def shell() -> str | None:
    """The shell to run the waiting program with; None where there is none."""
    return next((path for path in SHELLS if os.access(path, os.X_OK)), None)


def offer(region: int | None, log: Log) -> list[int] | None:
    """What to pass with the hello: the client's stdin and stdout as the daemon will use them, and
    the region (a new one for None); None when the client's stdio cannot be handed off."""
    if shell() is None:
        log(f"no hand-off: no shell to wait in ({' or '.join(SHELLS)}); relaying")
        return None
    if not os.access(WAITING_PROGRAM, os.R_OK):
        log(f"no hand-off: the waiting program {WAITING_PROGRAM} is not installed; relaying")
        return None
    ends: list[int] = []
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
        found = _passable(fd, flags)
        if found is None:
            close_passed(ends)
            log(f"no hand-off: fd {fd} is neither a socket nor a pipe it can reopen through /proc/self/fd")
            return None
        ends.append(found)
    if region is None:
        from lazyd.handoff.region import create_region

        try:
            region = create_region()
        except OSError as exc:  # no memfd, no sealing (not Linux, an old kernel): frames
            close_passed(ends)
            log(f"no hand-off: cannot create the shared region: {exc.strerror or exc}")
            return None
    return [*ends, region]


def close_passed(fds: list[int]) -> None:
    """Close the copies of the client's stdin and stdout this shim opened only to pass them."""
    for place, fd in enumerate(fds[:2]):
        if fd != place:  # a socket is passed as it is, at 0 or 1
            os.close(fd)


def reconnect(opts: Options, resume: list[bytes], log: Log, region: int | None,
              slot: int | None = None) -> connect.Connection | str:
    """Connect as at start (autostart included) with `resume`, offering `region` for a hand-off when
    given, until one succeeds or RECONNECT_WAIT_S pass, RECONNECT_POLL_S apart; returns the
    welcomed connection or why there is none. The resume slot `slot` is freed after the first try:
    the CPU-heavy part of a recovery is over, polling for a daemon is not."""
    deadline = time.monotonic() + RECONNECT_WAIT_S
    while True:
        offered = offer(region, log) if region is not None else None
        try:
            return connect.open_session(opts, resume, log, deadline, offered)
        except Unavailable as exc:
            if exc.final or exc.user_error or time.monotonic() >= deadline:
                return str(exc)
            log(f"reconnect failed: {exc}")
        finally:
            slots.release(slot)
            slot = None
            close_passed(offered or [])
        time.sleep(budget(RECONNECT_POLL_S, deadline))


def hello_memfd(frame: bytes) -> int | None:
    """A data memfd (inheritable) holding the session's hello `frame` as it was sent, for a daemon
    restarted by systemd to read through the waiter's /proc/PID/fd and reclaim the session with.
    None where none can be made."""
    from lazyd.handoff.region import HELLO_MEMFD

    try:
        fd: int = os.memfd_create(HELLO_MEMFD, 0)
    except (AttributeError, OSError):
        return None
    try:
        view = memoryview(frame)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        os.close(fd)
        return None
    return fd


def wait(conn: connect.Connection, region: int, args: list[str], log: Log, socket_path: str) -> NoReturn:
    """Wait while the daemon serves the client in the waiting program; where no shell can be exec'd
    wait here, then run the recovery as the waiting program would (without a resume slot). The
    resume slots (shim/slots.py) are those beside `socket_path`."""
    log.clear_of((HELLO_FD, WAIT_FD))  # the log file goes on being written until the exec
    if region in (HELLO_FD, SLOT_FD, WAIT_FD):
        import fcntl

        region = fcntl.fcntl(region, fcntl.F_DUPFD_CLOEXEC, 10)
    os.set_inheritable(region, True)
    sock = conn.sock.fileno()
    if sock == WAIT_FD:
        os.set_inheritable(sock, True)
    else:
        os.dup2(sock, WAIT_FD)  # inheritable
    hello = hello_memfd(conn.hello_frame)
    if hello is not None and hello != HELLO_FD:  # made at 7 already when 3 to 6 are taken
        os.dup2(hello, HELLO_FD)  # inheritable
        os.close(hello)
    flock = slots.flock_path()
    if not flock:
        log(f"no flock(1) ({' or '.join(slots.FLOCKS)}): after a daemon crash this session resumes without a slot")
    # The recovery is this shim's own command line with the region named: sys.orig_argv is
    # [python, interpreter options, script | -m module, arguments...].
    prefix = sys.orig_argv[1 : len(sys.orig_argv) - (len(sys.argv) - 1)]
    recovery = [sys.executable, *prefix, f"{RESUME_FLAG}{region}", *args]
    shown = "".join(c if c.isprintable() else "?" for c in conn.welcome.name)[:MAX_NAME] or "?"
    argv = [f"lazyd-shim: waiting ({shown})", WAITING_PROGRAM, flock, slots.slot_path(socket_path, os.getpid()),
            *recovery]
    path = shell()
    if path is not None:
        log(f"handed off; waiting in {path} {WAITING_PROGRAM}")
        try:
            os.execv(path, argv)
        except OSError as exc:
            log(f"cannot run {path}: {exc.strerror or exc}")
    log("handed off; no shell to wait in, waiting in this process")
    try:
        if os.read(WAIT_FD, 1):
            log("the client left; exiting")
            os._exit(0)
    except OSError:
        pass
    os.close(WAIT_FD)
    try:
        os.execv(recovery[0], recovery)
    except OSError as exc:
        say(f"cannot run {recovery[0]} to take the session back: {exc.strerror or exc}; the session ends")
        os._exit(1)
