"""A server process a predecessor daemon spawned, taken over with its pid and its pipes.

After an upgrade (exec keeps the pid) the servers are still the daemon's children: it reaps them
and learns how they ended. After a crash under systemd (lazyd/daemon/upgrade/stored_servers.py)
they were re-parented to the user manager: the daemon watches each through a pidfd and stops it by
its group, but reports its exit status as unknown. Taking a pid over is safe because a pidfd is
opened first and then the start time must be the one recorded (a pidfd keeps naming its process,
so no recycled pid can be hit through it; a mismatch is an `InheritError` and that server is not
inherited), and because a child's leader is reaped only after SIGKILL went to its group, as for a
spawned one (lazyd/daemon/process/child.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from lazyd.host import procfs
from lazyd.daemon.process.command import SpawnSpec
from lazyd.daemon.process.stderr_log import LogRing
from lazyd.daemon.process.child import ChildProcess, ProcessState
from lazyd.daemon.process.handle import InheritedProcess
from lazyd.daemon.process.read_buffer import ReadBuffer
from lazyd.errors import InheritError


def state_fds(state: Mapping[str, Any] | None) -> list[int]:
    """The descriptors a process's state (`ChildProcess.to_state`) names: what the successor inherits."""
    if not isinstance(state, Mapping):
        return []
    return [fd for fd in (state.get("stdin"), state.get("stdout"), state.get("stderr")) if isinstance(fd, int)]


def inherit_child(handed: ProcessState, spec: SpawnSpec, nursery: trio.Nursery, read_buffer: ReadBuffer, *,
                child: bool) -> ChildProcess:
    """The `ChildProcess` of the running server `handed` describes; its stderr pump and exit
    watcher run in `nursery`. Raises InheritError when the pid is not that process any more; the
    descriptors are then closed."""
    pid, start_ticks, fds = handed.pid, handed.start_ticks, (handed.stdin, handed.stdout, handed.stderr)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        close_fds(fds)
        raise InheritError(f"pid {pid} is gone ({exc.strerror})") from None
    try:
        ticks = procfs.start_time_ticks(pid)
    except OSError:
        ticks = None
    if ticks != start_ticks:
        os.close(pidfd)
        close_fds(fds)
        raise InheritError(f"pid {pid} is another process now (start time {ticks}, recorded {start_ticks})")
    ring = LogRing(spec.log_path)
    ring.note(f"pid {pid} taken over by lazyd {os.getpid()} ({'upgrade' if child else 'restart after a crash'})")
    process = InheritedProcess(pid, fds[0], fds[1], fds[2], child)
    return ChildProcess.take_over(process, spec, ring, pidfd, start_ticks, nursery, read_buffer, stdout=handed.pending)


def close_fds(fds: Iterable[int | None]) -> None:
    """Close what a predecessor handed over and nobody takes: a descriptor already gone is no harm."""
    for fd in fds:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(frozen=True)
class HandedRuntime:
    """What a runtime rebuilt from a predecessor's state (lazyd/daemon/runtime/supervisor.py's
    `from_state`) takes up: the small facts of its status row, and what it takes over once it runs.
    The runtime's `to_state` writes one, with its config, relay core and lifecycle beside it."""

    proc: ProcessState | None  # None: it had no process (or none that could be handed over)
    gate: object  # the tool-policy gate's state
    predicate_child: tuple[int, int] | None  # a wake predicate left running: (pid, start time)
    kill: str | None  # kill the process once taken over, for this reason
    last_exit: str | None
    started_wall: float | None
    spawned_wall: float | None
    kill_reason: str | None
    stop_requested: bool
    stop_reason: str | None
    last_stop: tuple[float, str] | None
    upgrades: int
