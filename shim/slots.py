"""Resume slots: how many hand-off sessions are taken back at once after their daemon is lost.

A lost daemon wakes every waiter (shim/waiting.sh) at once; a herd of Python shims would starve
the new daemon (docs/reliability.md, "Two paths, one set of promises"). A waiter first takes one
of `count()` slots, an exclusive `flock(1)` on `resume.<n>` beside the daemon's socket, on a
descriptor (SLOT_FD) the shim inherits and marks close-on-exec: the slot is freed when the shim
ends or execs, or after its first attempt to reconnect (shim/recover.py).
"""

from __future__ import annotations

import os

SLOT_FD = 8  # written into shim/waiting.sh (dash's redirections take one digit; 9 is the socket's)

RESUME_FLAG = "--resume-handoff="  # the waiter's run of the shim, naming the region (shim/recover.py); not for users
SLOT_ENV = "LAZYD_RESUME_SLOT"  # set by the waiter holding a slot; taken out before a server or hello sees it

FLOCKS = ("/usr/bin/flock", "/bin/flock")  # util-linux's: dash has no builtin that takes a lock


def count() -> int:
    """Slots per daemon socket: two per CPU, to keep the CPUs busy while a recovery waits for the daemon."""
    return 2 * (os.cpu_count() or 1)


def flock_path() -> str:
    """The flock(1) to take a slot with, "" where there is none."""
    return next((path for path in FLOCKS if os.access(path, os.X_OK)), "")


def slot_path(socket_path: str, pid: int) -> str:
    """The lock file of the slot this process queues for: its pid spreads the sessions over them."""
    return os.path.join(os.path.dirname(socket_path) or ".", f"resume.{pid % count()}")


def taken() -> int | None:
    """The slot descriptor this shim was started holding (removed from the environment), or None.
    Made close-on-exec: an exec (the next waiting program, or a server run directly) frees it."""
    value = os.environ.pop(SLOT_ENV, None)
    if value is None:
        return None
    try:
        fd = int(value)
        os.set_inheritable(fd, False)
    except (ValueError, OSError):
        return None
    return fd


def release(fd: int | None) -> None:
    """Free the slot (closing the last descriptor of its lock file's description unlocks it)."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
