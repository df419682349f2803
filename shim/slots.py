"""Resume slots: how many hand-off sessions are taken back at once after their daemon is lost.

A daemon killed with hundreds of sessions wakes every waiting program (shim/waiting.sh) at the
same instant, and each would exec a Python shim (~10 MiB and tens of ms of CPU) to take its
session back: a herd that starves the new daemon of the CPU it needs to start and answer them. So
a waiter first takes one of `count()` slots, an exclusive `flock(1)` on a lock file beside the
daemon's socket (`resume.<n>`, n chosen by pid), and only then execs Python; the lock is on a
descriptor (SLOT_FD) that the Python shim inherits, so the kernel frees the slot when that process
ends or execs (the shim marks the descriptor close-on-exec), and the shim frees it at once after
its first attempt to reconnect (shim/recover.py). The waiters queue in the kernel, blocked in
flock(1) without CPU, for at most 120 s each (waiting.sh's `-w`): a holder keeps its slot for one
reconnect attempt (~0.1 s when the next daemon is up, at most the autostart and hello budgets),
so only a queue longer than that ends the bound, and a waiter whose wait ran out resumes without.

Where flock(1) (util-linux) is missing, or the socket's directory is gone, a waiter resumes
without a slot.
"""

from __future__ import annotations

import os

SLOT_FD = 8
# The slot's lock descriptor in the waiting program and the shim it execs (dash's redirections
# take one digit only; WAIT_FD, 9, is the daemon socket's). Written into shim/waiting.sh.

SLOT_ENV = "LAZYD_RESUME_SLOT"
# Set by the waiting program (to SLOT_FD) when it holds a slot; the shim takes it out of its
# environment before anything else reads it, so no server and no hello ever sees it.

FLOCKS = ("/usr/bin/flock", "/bin/flock")
# util-linux's flock(1): dash has no builtin that takes a lock.


def count() -> int:
    """Slots per daemon socket: two per CPU. A recovery is mostly a Python start, CPU bound, but
    it also waits for the daemon's answer to its hello: two per CPU keep the CPUs busy while one
    waits, and more would only share the same CPUs, the new daemon's part of them too."""
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
