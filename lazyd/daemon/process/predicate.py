"""A wake predicate's run: argv without a shell, in its own process group, bounded by its timeout.

The lifecycle decides when it runs (lazyd/core/lifecycle/predicate.py); the runtime runs it here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping

import trio

from lazyd.host import procfs
from lazyd.config.load import WakePredicate
from lazyd.config.durations import format_duration
from lazyd.daemon import fdlimit
from lazyd.daemon.systemd_env import scrubbed_environ

log = logging.getLogger("lazyd.server")


async def run_predicate(wake: WakePredicate, cwd: str, env: Mapping[str, str], name: str,
                        on_child: Callable[[tuple[int, int] | None], None] = lambda _: None) -> int | None:
    """Run a wake predicate: argv without a shell, stdin closed, output discarded, in its own
    session, bounded by its timeout; its exit code, or None on a timeout or launch error. Whatever
    happens the group is SIGKILLed before the leader is reaped (its group id cannot be reused until
    then), so no background child outlives it. `on_child` hears (pid, start ticks), then None."""
    try:
        proc = await trio.lowlevel.open_process(
            list(wake.argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd=cwd, env=scrubbed_environ(env), start_new_session=True,
            close_fds=True, preexec_fn=fdlimit.child_preexec(),  # the descriptor limit the daemon inherited
        )
    except OSError as exc:
        log.warning("[%s] wake predicate cannot run: %s", name, exc)
        return None
    pidfd: int | None = None
    timed_out = True
    try:
        # Not reaped yet, so the pid is surely this process.
        pidfd = os.pidfd_open(proc.pid)
        on_child((proc.pid, procfs.start_time_ticks(proc.pid)))
        with trio.move_on_after(wake.timeout_s) as scope:
            await trio.lowlevel.wait_readable(pidfd)  # readable once it exited; nothing reaped
        timed_out = scope.cancelled_caught
    finally:
        with trio.CancelScope(shield=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the leader is unreaped: the group is ours
            if pidfd is not None:
                trio.lowlevel.notify_closing(pidfd)
                os.close(pidfd)
            await proc.wait()
        on_child(None)
    if timed_out:
        log.warning("[%s] wake predicate timed out after %s: its process group was killed",
                    name, format_duration(wake.timeout_s))
        return None
    return proc.returncode


def kill_left_predicate(pid: int, ticks: int) -> None:
    """Kill the group of a wake predicate a predecessor daemon left running (`pid`, started at
    `ticks`: not a process that took its pid since) and reap it; it is our child, or gone."""
    try:
        if procfs.start_time_ticks(pid) == ticks:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except (OSError, ChildProcessError):
        pass
