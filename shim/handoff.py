"""Handing the client's stdin and stdout to the daemon, and waiting while it serves them.

After the hello the daemon can read and write the client's pipes itself (docs/protocol.md,
"Hand-off"): one hop instead of two. The shim then only has to be there: the client watches its
process, it holds its own copies of the pipes (so they stay open if the daemon goes), and it must
take over when the daemon is lost. So it waits in something small:

- `offer` prepares what goes with the hello: for a pipe, a description of its own opened through
  /proc/self/fd with O_NONBLOCK (the daemon needs non-blocking reads, and setting O_NONBLOCK on the
  shim's own description would change the shim's copy too); a socket (Node clients give socketpairs)
  as it is, the daemon then using MSG_DONTWAIT; and the shared region (lazyd/handoff_state.py).
  A terminal, a file or /dev/null is not offered: the frame path serves those.
- `wait` replaces this process (same pid, same descriptors) with a shell whose `read` blocks on the
  daemon socket, about 1.7 MiB where Python is 10: a line from the daemon means "the client left,
  exit 0"; EOF means the daemon is gone or let the session go, and the shell execs this shim again
  with `--resume-handoff=FD` to recover (shim/recover.py). Where no shell can be run, the shim
  waits itself.
"""

from __future__ import annotations

import os
import stat
import sys

from . import connect

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from .options import Log

WAIT_FD = 9
# The daemon socket's descriptor in the waiting shell: dash's redirections take one digit only.

SHELLS = ("/bin/dash", "/usr/bin/dash", "/bin/sh")
# dash first where it is installed (1.7 MiB resident against bash's 3), whatever /bin/sh is.

WAIT_SCRIPT = f"trap 'exit 0' TERM HUP; trap 'exit 130' INT; read -r _ <&{WAIT_FD} && exit 0; exec {WAIT_FD}<&-; exec \"$@\""
# The shim's own signal rules (main.py): SIGTERM and SIGHUP end it quietly with 0, SIGINT with 130.

RESUME_FLAG = "--resume-handoff="  # as shim/main.py reads it
WAITER_ENV = "LAZYD_TEST_WAITER"
# Undocumented test seam: "python" makes the shim wait itself, as where no shell can be run.


class Offer:
    """The descriptors a hello carries: the client's stdin and stdout as the daemon will use them,
    and the region. `close_passed` drops this process's extra copies once they are sent."""

    def __init__(self, fds: list[int], own: list[int], region: int) -> None:
        self.fds = fds
        self._own = own  # descriptors opened only to be passed
        self.region = region

    def close_passed(self) -> None:
        for fd in self._own:
            os.close(fd)
        self._own = []


def _passable(fd: int, flags: int) -> tuple[int, bool] | None:
    """The descriptor to pass for `fd` and whether it was opened for that; None if it cannot be."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return fd, False
    if not stat.S_ISFIFO(mode):
        return None  # a terminal, a file, /dev/null: nothing a daemon should hold
    try:
        return os.open(f"/proc/self/fd/{fd}", flags | os.O_NONBLOCK | os.O_CLOEXEC), True
    except OSError:
        return None  # no /proc, or the reader of our stdout is gone


def offer(region: int | None, log: Log) -> Offer | None:
    """What to pass with the hello, or None when the client's stdio cannot be handed off."""
    ends: list[tuple[int, bool]] = []
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
        found = _passable(fd, flags)
        if found is None:
            _close_own(ends)
            log(f"no hand-off: fd {fd} is neither a pipe nor a socket")
            return None
        ends.append(found)
    if region is None:
        from lazyd.handoff_state import create_region

        try:
            region = create_region()
        except OSError as exc:
            _close_own(ends)
            log(f"no hand-off: cannot create the shared region: {exc.strerror}")
            return None
    return Offer([ends[0][0], ends[1][0], region], [opened for opened, own in ends if own], region)


def _close_own(ends: list[tuple[int, bool]]) -> None:
    """Close the descriptors this shim opened for an offer it gives up (not the client's own)."""
    for opened, own in ends:
        if own:
            os.close(opened)


def recovery_argv(region: int, args: list[str]) -> list[str]:
    """This shim's own command line, to run it again as the recovery of a hand-off session."""
    # sys.orig_argv is [python, interpreter options, script | -c code | -m module, arguments...];
    # sys.argv[1:] are those arguments, so what comes before them runs this shim again.
    orig = list(sys.orig_argv)
    prefix = orig[: len(orig) - (len(sys.argv) - 1)]
    return [sys.executable, *prefix[1:], f"{RESUME_FLAG}{region}", *args]


def wait(conn: connect.Connection, region: int, args: list[str], log: Log) -> None:
    """Wait while the daemon serves the client (see the module docstring). Ends the process, or
    execs the waiting shell; returns (with `conn` closed) only where this process itself waited
    and the daemon let go: the caller then takes the session back (shim/recover.py)."""
    sock = conn.sock.fileno()
    if region == WAIT_FD:
        region = os.dup(region)  # keep it clear of the socket's place (the copy is close-on-exec)
    os.set_inheritable(region, True)
    if os.environ.get(WAITER_ENV) != "python":
        if sock != WAIT_FD:
            os.dup2(sock, WAIT_FD)  # inheritable
        else:
            os.set_inheritable(sock, True)
        argv = recovery_argv(region, args)
        for shell in SHELLS:
            log(f"handed off; waiting in {shell}")
            try:
                os.execv(shell, [shell, "-c", WAIT_SCRIPT, "lazyd-shim", *argv])
            except OSError:
                continue
        os.set_inheritable(WAIT_FD, False)
        log("no shell to wait in; waiting in this process")
    else:
        log("handed off; waiting in this process")
    try:
        data = conn.sock.recv(1)
    except OSError:
        data = b""
    if data:
        log("the client left; exiting")
        os._exit(0)
    conn.sock.close()
