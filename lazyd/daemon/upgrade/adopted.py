"""A server process a predecessor daemon spawned, taken over with its pid and its pipes.

After an upgrade the new daemon is the same process (exec keeps the pid), so the servers are
still its children: it reaps them and learns how they ended, as it would its own. After a crash
under systemd (lazyd/daemon/upgrade/fdstore.py) the restarted daemon is a new process: the servers were
re-parented to the user manager, which reaps them; the daemon still watches each through a pidfd
and stops it by its process group, but an exit status it cannot learn is reported as unknown.

The rules that make taking over a pid safe:

- The pid is checked before anything is signalled: a pidfd is opened on it, then its start time
  (/proc) must be the one recorded. A pidfd keeps naming the process it was opened on, so once
  the start time matched, no recycled pid can be hit through it. A mismatch or a missing process
  is an `AdoptionError`, and that server is not adopted.
- A child's leader is reaped only after SIGKILL went to what is left of its group, as for a
  spawned one (lazyd/daemon/process/child.py): while it is an unreaped zombie its group id cannot be
  recycled. For a process that is not our child, the group is killed the moment its leader's
  exit is seen; only a group emptied and a pid recycled in that moment could be missed.
"""

from __future__ import annotations

import os

import trio

from lazyd import procfs
from lazyd.daemon.process.command import SpawnSpec
from lazyd.daemon.process.stderr_log import LogRing
from lazyd.daemon.process.child import ChildProcess
from lazyd.errors import AdoptionError

__all__ = ["AdoptedProcess", "adopt_child", "stdout_leftover"]


class AdoptedProcess:
    """The `ProcessHandle` (lazyd/daemon/process/handle.py) of a process taken over."""

    def __init__(self, pid: int, stdin_fd: int | None, stdout_fd: int, stderr_fd: int, child: bool) -> None:
        self._pid = pid
        self._child = child
        self._stdin = trio.lowlevel.FdStream(stdin_fd if stdin_fd is not None else _closed_writer())
        if stdin_fd is None:
            self._stdin.close()  # the ladder had closed it: sends fail, as they did before
        self._stdout = trio.lowlevel.FdStream(stdout_fd)
        self._stderr = trio.lowlevel.FdStream(stderr_fd)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def stdin(self) -> trio.abc.SendStream:
        return self._stdin

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return self._stderr

    async def wait(self) -> int | None:
        # Called once the pidfd said the leader exited, so waitpid returns at once.
        if not self._child:
            return None
        try:
            _, status = os.waitpid(self._pid, 0)
        except ChildProcessError:
            return None
        return os.waitstatus_to_exitcode(status)


def _closed_writer() -> int:
    return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)


def adopt_child(pid: int, start_ticks: int, fds: tuple[int | None, int, int], spec: SpawnSpec,
                nursery: trio.Nursery, *, child: bool, stdout: bytes = b"", note: str = "") -> ChildProcess:
    """The `ChildProcess` of a running server from its pid and its (stdin, stdout, stderr)
    descriptors; its stderr pump and exit watcher run in `nursery`. `stdout` is what the
    predecessor had read of its stdout and not yet relayed (see `stdout_leftover`). Raises
    AdoptionError when the pid is not that process any more; the descriptors are then closed."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        _close(fds)
        raise AdoptionError(f"pid {pid} is gone ({exc.strerror})") from None
    try:
        ticks = procfs.start_time_ticks(pid)
    except OSError:
        ticks = None
    if ticks != start_ticks:
        os.close(pidfd)
        _close(fds)
        raise AdoptionError(f"pid {pid} is another process now (start time {ticks}, recorded {start_ticks})")
    ring = LogRing(spec.log_path)
    ring.note(note or f"pid {pid} adopted by lazyd {os.getpid()}")
    process = AdoptedProcess(pid, fds[0], fds[1], fds[2], child)
    proc = ChildProcess(process, spec, ring, pidfd, start_ticks)
    if stdout:
        proc._lines.feed(stdout)  # lines the predecessor read but did not relay come first
    proc._start_tasks(nursery)
    return proc


def stdout_leftover(proc: ChildProcess) -> bytes:
    """What `proc` read from its stdout and has not handed out yet, as bytes to feed again:
    complete lines (each with its newline) then the start of the next."""
    lines = proc._lines
    return b"".join(line + b"\n" for line in lines._pending) + bytes(lines._buf)


def _close(fds: tuple[int | None, ...]) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
