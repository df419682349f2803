"""The process a `ChildProcess` (lazyd/daemon/process/child.py) owns: spawned, or taken over.

A process this daemon spawned is a `trio.Process`; one a predecessor handed over
(lazyd/daemon/upgrade/inherited.py) is an `InheritedProcess`, rebuilt from its pid and pipes. Both
give the same four things, so the ladder, the pipes and the exit report work alike.
"""

from __future__ import annotations

import os

import trio


class InheritedProcess:
    """A process taken over, with what `ChildProcess` uses of a `trio.Process`: its pid, its pipes, `wait`."""

    def __init__(self, pid: int, stdin_fd: int | None, stdout_fd: int, stderr_fd: int, child: bool) -> None:
        self.pid = pid
        self._child = child
        self.stdin = trio.lowlevel.FdStream(stdin_fd if stdin_fd is not None else _closed_writer())
        if stdin_fd is None:
            self.stdin.close()  # the ladder had closed it: sends fail, as they did before
        self.stdout = trio.lowlevel.FdStream(stdout_fd)
        self.stderr = trio.lowlevel.FdStream(stderr_fd)

    async def wait(self) -> int | None:
        # Called once the pidfd said the leader exited, so waitpid returns at once.
        if not self._child:
            return None
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return None
        return os.waitstatus_to_exitcode(status)


def _closed_writer() -> int:
    return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
