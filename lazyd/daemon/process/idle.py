"""Whether a server is done with what it was given: every thread of its process group asleep.

A server that acts on an answer asynchronously (filesystem checks the roots it is given) says
nothing when done; the kernel does: while it works a thread is running or waiting for the disk,
once done every thread sleeps. A start waits for that before its first request (docs/relay.md,
"Starting: replay, refresh, then forward").
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from lazyd.host import procfs

# Sampled every IDLE_STEP_S; two quiet samples in a row mean idle. At most IDLE_BOUND_S, so that
# a server busy on its own (a background thread) delays its first request by no more than that.
IDLE_STEP_S = 0.005
IDLE_BOUND_S = 1.0


async def wait_idle(pgid: int, pid: int, alive: Callable[[], bool], then: Callable[[], None]) -> None:
    """Until every thread of process group `pgid` (at least `pid`) sleeps, twice in a row, or
    IDLE_BOUND_S passed; then `then()`, unless `alive()` turned false (the process went)."""
    with trio.move_on_after(IDLE_BOUND_S):
        quiet = 0
        while alive() and quiet < 2:
            await trio.sleep(IDLE_STEP_S)
            members = procfs.group_members(pgid) or [pid]
            quiet = quiet + 1 if not any(procfs.busy_threads(member) for member in members) else 0
    if alive():
        then()
