"""One real server process: spawning it, talking to it by lines, and the stop ladder.

- It runs in its own session (`setsid`): signals to the group reach every grandchild a launcher
  like `npx` leaves, never the daemon. It inherits no descriptor beyond 0-2 and none of systemd's
  per-service variables (a server that speaks sd_notify must not talk to our supervisor).
- The leader's exit is seen through a pidfd without reaping it: an unreaped zombie's pid, and so
  the group id, cannot be recycled until SIGKILL went to what is left of the group. (trio's
  `wait()`, `poll()` and `returncode` all reap, so none is touched before that.)
- Stopping is the ladder of docs/supervision.md, shielded from cancellation and bounded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import subprocess
from dataclasses import dataclass
from typing import AsyncIterator

import trio

from lazyd.host import procfs
from lazyd.daemon import fdlimit
from lazyd.daemon.process.command import ExitInfo, SpawnSpec, executable_for
from lazyd.daemon.process.stderr_log import LogRing
from lazyd.daemon.process.handle import InheritedProcess
from lazyd.daemon.process.stdout_lines import StdoutLines
from lazyd.daemon.process.read_buffer import ReadBuffer
from lazyd.daemon.process.stdout_reader import StdoutReader
from lazyd.daemon.systemd_env import scrubbed_environ
from lazyd.errors import SpawnError

STDIN_EOF_GRACE_S = 2.0
"""Wait after closing stdin: the python SDK's value; well-behaved servers exit on EOF at once."""

TERM_GRACE_S = 2.0
"""Wait after SIGTERM before SIGKILL: the python SDK's value; enough to flush and close files."""

KILL_WAIT_S = 5.0
"""Wait after SIGKILL: death takes milliseconds unless the process is stuck in the kernel (D)."""

STDERR_DRAIN_S = 1.0
"""After the group is killed stderr ends at once; only an escaped process can hold it longer."""

READ_CHUNK_BYTES = 1024 * 1024
"""One widened pipe buffer (PIPE_BYTES) per read, into the read buffer (asking this much costs a
short line nothing); bounds how far a read can overshoot the line limit."""
STDERR_READ_BYTES = 64 * 1024  # below glibc's mmap threshold: receive_some allocates what it asks


@dataclass(frozen=True)
class ProcessState:
    """A process as a successor daemon takes it over (lazyd/daemon/upgrade/inherited.py)."""

    pid: int
    pgid: int
    start_ticks: int
    stdin: int | None  # None: the ladder had closed it
    stdout: int
    stderr: int
    pending: bytes  # what was read of its stdout and not relayed


class ChildProcess:
    """A running server process; made by `spawn` or `take_over`, never directly."""

    def __init__(
        self, process: trio.Process | InheritedProcess, spec: SpawnSpec, ring: LogRing, pidfd: int, start_ticks: int,
        read_buffer: ReadBuffer | None = None,
    ) -> None:
        self.pid: int = process.pid
        self.pgid: int = process.pid  # setsid() made the leader's pid the group (and session) id
        self.start_time_ticks = start_ticks
        self.spec = spec
        # Pipes, both for a spawned process and one handed over: the reader waits on their fds.
        assert process.stdin is not None and isinstance(process.stdout, trio.lowlevel.FdStream)
        assert process.stderr is not None
        self._process = process
        self._stdin: trio.abc.SendStream = process.stdin
        self._stdout = process.stdout
        self._stderr: trio.abc.ReceiveStream = process.stderr
        self._ring = ring
        self._pidfd: int | None = pidfd
        self._send_lock = trio.Lock()
        self._exit_lock = trio.Lock()
        self._stderr_done = trio.Event()
        self._pump_scope = trio.CancelScope()
        self._reaped_rc: int | None = None
        self._reaped = False
        self._exit_info: ExitInfo | None = None
        self._lines = StdoutLines(spec.max_line_bytes)
        self._reader = StdoutReader(process.stdout, READ_CHUNK_BYTES, read_buffer)

    # -- talking -----------------------------------------------------------------------------

    async def send_line(self, line: bytes) -> None:
        """Write one message and a newline to the child's stdin, one writer at a time. Raises
        ValueError for a newline in `line`, trio.BrokenResourceError once the child closed its
        stdin or died, trio.ClosedResourceError once `stop` closed it."""
        if b"\n" in line:
            raise ValueError("a line sent to a server must not contain a newline")
        async with self._send_lock:
            await self._stdin.send_all(line + b"\n")

    def write_nowait(self, *parts: bytes | memoryview) -> int:
        """Write what the stdin pipe takes of `parts` (one writev) now, without blocking: the
        relay's hot path skips a task switch. 0 while a `send_line`/`send_raw` is in progress
        (writes never interleave) or the pipe is full or closed: the caller queues the rest."""
        if self._send_lock.locked():
            return 0
        try:
            fd = self._stdin.fileno() if isinstance(self._stdin, trio.lowlevel.FdStream) else -1
            return os.writev(fd, parts) if fd >= 0 else 0
        except (OSError, trio.ClosedResourceError):
            return 0

    async def send_raw(self, *parts: bytes | memoryview) -> None:
        """Write bytes that are already framed (complete lines, or the rest of one), in order."""
        async with self._send_lock:
            for data in parts:
                await self._stdin.send_all(data)

    async def receive_line(self) -> bytes | None:
        """The next non-blank stdout line without its newline (a last one without newline at
        EOF), or None at EOF; one reader at a time. Raises LineTooLong, then and on every later
        call, once a line passes the limit (at most the limit plus one read buffered)."""
        lines = self._lines
        while True:
            # Lines that came before an overlong one are still delivered, in order.
            line = lines.next_line()
            if line is not None:
                return line
            if lines.error is not None:
                # Nothing more will be read: release the pipe now rather than at garbage collection.
                with trio.CancelScope(shield=True):
                    await self._stdout.aclose()
                raise lines.error
            if lines.ended:
                return None
            if not await self._reader.read_into(lines.feed):
                lines.end()
                with trio.CancelScope(shield=True):
                    await self._stdout.aclose()

    async def lines(self) -> AsyncIterator[bytes]:
        """Iterate over `receive_line()` until EOF."""
        while (line := await self.receive_line()) is not None:
            yield line

    # -- exit --------------------------------------------------------------------------------

    async def wait_exit(self) -> ExitInfo:
        """Wait for the leader to exit, SIGKILL what is left of its group, reap it. Any number of
        tasks may wait, and cancelling one disturbs no other. The result carries the stderr tail,
        read until EOF (bounded by STDERR_DRAIN_S)."""
        if self._exit_info is not None:
            return self._exit_info
        async with self._exit_lock:
            if self._exit_info is not None:
                return self._exit_info
            if not self._reaped:
                assert self._pidfd is not None
                await trio.lowlevel.wait_readable(self._pidfd)
                with trio.CancelScope(shield=True):
                    # The leader is a zombie: the group id is still ours, so killpg can't hit a stranger.
                    self._signal_group(signal.SIGKILL)
                    self._reaped_rc = await self._process.wait()
                    self._reaped = True
                    trio.lowlevel.notify_closing(self._pidfd)
                    os.close(self._pidfd)
                    self._pidfd = None
                    # Nothing can read stdin any more; send_line now fails with ClosedResourceError.
                    await self._stdin.aclose()
            with trio.move_on_after(STDERR_DRAIN_S):
                await self._stderr_done.wait()
            # Whatever still holds stderr escaped the group: stop reading so the nursery can end.
            self._pump_scope.cancel()
            info = ExitInfo.from_returncode(self._reaped_rc, self._ring.tail())
            self._ring.note(f"pid {self.pid} {info.describe(tail_lines=0)}")
            self._ring.close()
            self._exit_info = info
            return info

    def _leader_exited(self) -> bool:
        if self._reaped or self._pidfd is None:
            return True
        readable, _, _ = select.select([self._pidfd], [], [], 0)
        return bool(readable)

    def _signal_group(self, sig: int) -> None:
        # After the reap the group id may belong to someone else: never signal then.
        if self._reaped:
            return
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
            os.killpg(self.pgid, sig)

    def kill_group(self) -> None:
        """SIGKILL the whole group now (a start timeout); the exit watcher then reaps it."""
        self._signal_group(signal.SIGKILL)

    async def stop(
        self, eof_grace_s: float = STDIN_EOF_GRACE_S, term_grace_s: float = TERM_GRACE_S
    ) -> ExitInfo:
        """Stop the process by the ladder; returns how it ended. Shielded and bounded (past
        KILL_WAIT_S after SIGKILL the report says "exit status unknown"). A signal goes only
        while the leader runs; once it exited, the rest of its group always gets SIGKILL."""
        steps = ((eof_grace_s, "stdin EOF", signal.SIGTERM), (term_grace_s, "SIGTERM", signal.SIGKILL),
                 (KILL_WAIT_S, "SIGKILL", None))
        with trio.CancelScope(shield=True):
            await self._stdin.aclose()
            for grace, after, sig in steps:
                with trio.move_on_after(grace):
                    return await self.wait_exit()
                if sig is not None and not self._leader_exited():
                    self._ring.note(f"pid {self.pid} still running {grace}s after {after}: {sig.name}")
                    self._signal_group(sig)
        # Unkillable for now (uninterruptible sleep): say so, and let the exit watcher reap it
        # whenever the kernel lets go; a later wait_exit() gets the real status.
        self._ring.note(f"pid {self.pid} still running {KILL_WAIT_S}s after SIGKILL")
        return ExitInfo(returncode=None, signal=None, stderr_tail=self._ring.tail())

    # -- handing over to a successor daemon (lazyd/daemon/upgrade/) ----------------------------

    def to_state(self) -> ProcessState | None:
        """What a successor daemon needs to take this process over. None once stdout or stderr is
        closed: the process is ending, and the successor sees it as lost."""
        stdout, stderr = _fd(self._stdout), _fd(self._stderr)
        if stdout is None or stderr is None:
            return None
        return ProcessState(self.pid, self.pgid, self.start_time_ticks, _fd(self._stdin), stdout, stderr,
                            self._lines.leftover())

    @classmethod
    def take_over(cls, process: InheritedProcess, spec: SpawnSpec, ring: LogRing, pidfd: int, start_ticks: int,
                  nursery: trio.Nursery, read_buffer: ReadBuffer | None, *, stdout: bytes = b"") -> ChildProcess:
        """A process a predecessor daemon spawned (lazyd/daemon/upgrade/inherited.py checked it):
        the stdout it had read and not relayed (`stdout`) is handed out first."""
        child = cls(process, spec, ring, pidfd, start_ticks, read_buffer)
        if stdout:
            child._lines.feed(stdout)
        child._start_tasks(nursery)
        return child

    # -- background tasks --------------------------------------------------------------------

    async def _pump_stderr(self) -> None:
        stream = self._stderr
        try:
            with self._pump_scope:
                while True:
                    try:
                        data = await stream.receive_some(STDERR_READ_BYTES)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        break
                    if not data:
                        break
                    self._ring.feed(data)
        finally:
            self._ring.finish()
            self._stderr_done.set()
            with trio.CancelScope(shield=True):
                await stream.aclose()

    def _start_tasks(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._pump_stderr)
        # Reap promptly and kill orphaned grandchildren even if nobody awaits the exit.
        nursery.start_soon(self.wait_exit)


async def spawn(spec: SpawnSpec, nursery: trio.Nursery, read_buffer: ReadBuffer | None = None) -> ChildProcess:
    """Start `spec` in its own session, its stderr pump and exit watcher in `nursery` (they end once
    it exited; `stop()` it). Raises SpawnError, with nothing left running, if it cannot be executed."""
    child = await _launch(spec, read_buffer)
    child._start_tasks(nursery)
    return child


async def _launch(spec: SpawnSpec, read_buffer: ReadBuffer | None = None) -> ChildProcess:
    executable = executable_for(spec)
    ring = LogRing(spec.log_path)
    try:
        process = await trio.lowlevel.open_process(
            list(spec.argv),
            executable=executable,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.cwd,
            env=scrubbed_environ(spec.env),  # without systemd's per-service variables
            start_new_session=True, close_fds=True,
            preexec_fn=fdlimit.child_preexec())  # the descriptor limit the daemon inherited
    except OSError as exc:
        err = exc.errno or errno.EIO
        message = f"cannot execute '{spec.argv[0]}': {os.strerror(err)}"
        ring.note(message)
        ring.close()
        raise SpawnError(err, message) from None
    try:
        # Nobody has waited for the child yet, so this pid is surely still ours.
        pidfd = os.pidfd_open(process.pid)
        start_ticks = procfs.start_time_ticks(process.pid)
    except OSError as exc:
        with trio.CancelScope(shield=True):
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        ring.close()  # out of descriptors, most likely: a failed start (backoff), never a crash
        raise SpawnError(exc.errno or errno.EIO, f"cannot watch '{spec.argv[0]}': {exc.strerror}") from None
    ring.note(f"started pid {process.pid}: {executable}")
    _widen_pipes(process)
    return ChildProcess(process, spec, ring, pidfd, start_ticks, read_buffer)


def _fd(stream: object) -> int | None:
    """A pipe's descriptor, or None once it is closed."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, trio.ClosedResourceError, OSError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


PIPE_BYTES = 1024 * 1024
"""Pipe capacity asked for on the child's stdin and stdout: a large message in few wake-ups of
each side; Linux's default pipe-max-size for users."""

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _widen_pipes(process: trio.Process) -> None:
    for stream in (process.stdin, process.stdout):
        if isinstance(stream, trio.lowlevel.FdStream):
            with contextlib.suppress(OSError):  # over the system's pipe-max-size: the default size still works
                fcntl.fcntl(stream.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
