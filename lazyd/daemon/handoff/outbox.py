"""A hand-off session's two ends of the client, and the outbox that writes the client's stdout.

`ClientEnds` is the client's stdin and stdout as the shim passed them (lazyd/daemon/handoff/session.py):

- a **pipe** comes as a description of its own that the shim opened with O_NONBLOCK
  (`/proc/self/fd/N`), so the daemon reads and writes it without blocking and without changing
  the mode of the shim's copy;
- a **socket** (Node clients give their servers socketpairs) cannot be reopened, so the daemon
  holds the very description the shim has: it never sets O_NONBLOCK on it, and passes
  MSG_DONTWAIT to each call instead. Either way the shim's own descriptors stay as the client
  made them, for the shim to use again if the daemon is lost.

`HandoffOutbox` is what a runtime delivers a client's lines to (the `Outbox` of
lazyd/daemon/runtime/outbox.py): each line goes straight into the client's stdout when nothing is queued,
else behind the queued ones through a writer task; an answer's id is retired from the session's
ledger only once its whole line is in the pipe. The bounds are a connection's (`should_pause`
past CLIENT_PAUSE_BYTES, disconnected past MAX_CLIENT_BACKLOG_BYTES), so a client that stops
reading costs what a shim that stops reading costs.

While large lines pass, the client's pipes are widened to WIDE_PIPE_BYTES (`ClientEnds.widen`)
and narrowed again once they are over (after the heap trimmer's quiet spell,
lazyd/daemon/heap.py): in a pipe of the default 64 KiB a 1 MiB line is 16 trips through trio's
scheduler on the daemon's side, each waiting for the client to take the last 64 KiB, where a
server run directly only blocks in the kernel. Narrowed again, because a user's pipes share a
budget (pipe-user-pages-soft) and an idle session should not hold a megabyte of it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import stat
from collections import deque
from collections.abc import Callable
from itertools import islice
from select import PIPE_BUF

import trio

from lazyd.core.relay.jsonrpc import JsonId
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.daemon.heap import LARGE_BYTES, TRIMMER
from lazyd.daemon.runtime.outbox import (
    CLIENT_PAUSE_BYTES,
    CLIENT_PAUSE_FRAMES,
    MAX_CLIENT_BACKLOG_BYTES,
    MAX_CLIENT_BACKLOG_FRAMES,
)

log = logging.getLogger("lazyd.server")

_GONE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})
_SEND_FLAGS = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL
MAX_IOV = 64  # queued lines written in one writev (each line and its newline are two entries)
WIDE_PIPE_BYTES = 1024 * 1024  # Linux's default pipe-max-size for users, as the servers' pipes
DEFAULT_PIPE_BYTES = 64 * 1024  # a read this large took a default pipe's whole content
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


def _usable(fd: int, *, readable: bool) -> str | None:
    """Why `fd` cannot serve as the client's stdin (`readable`) or stdout; None if it can."""
    try:
        st = os.fstat(fd)
        flags = os_flags(fd)
    except OSError as exc:
        return f"cannot inspect it: {exc.strerror}"
    mode = flags & os.O_ACCMODE
    if mode != os.O_RDWR and mode != (os.O_RDONLY if readable else os.O_WRONLY):
        return "it is open in the wrong direction"
    if stat.S_ISFIFO(st.st_mode):
        # Shared with the shim unless it was opened afresh: setting O_NONBLOCK here would change
        # the shim's own copy, which it reads blocking after a recovery.
        return None if flags & os.O_NONBLOCK else "a pipe without O_NONBLOCK (not a description of its own)"
    if stat.S_ISSOCK(st.st_mode):
        kind = socket.socket(fileno=os.dup(fd))
        try:
            ok = kind.family == socket.AF_UNIX and kind.type == socket.SOCK_STREAM
        finally:
            kind.close()
        return None if ok else "a socket that is not a Unix stream socket"
    return "neither a pipe nor a socket"


def os_flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)


class ClientEnds:
    """The client's stdin and stdout, as the daemon holds them (see the module docstring)."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        """Take ownership of both descriptors; raises ValueError (closing nothing) if unusable."""
        for fd, readable in ((in_fd, True), (out_fd, False)):
            problem = _usable(fd, readable=readable)
            if problem is not None:
                raise ValueError(f"the client's {'stdin' if readable else 'stdout'} is {problem}")
        self.in_fd = in_fd
        self.out_fd = out_fd
        self._in_sock = socket.socket(fileno=in_fd) if stat.S_ISSOCK(os.fstat(in_fd).st_mode) else None
        self._out_sock = socket.socket(fileno=out_fd) if stat.S_ISSOCK(os.fstat(out_fd).st_mode) else None
        self.closed = False
        self._widened: dict[int, int] = {}  # a pipe widened while large lines pass: its size before

    def read(self, size: int) -> bytes | None:
        """Up to `size` bytes of the client's stdin; b"" at EOF; None if nothing is there yet."""
        try:
            if self._in_sock is not None:
                return self._in_sock.recv(size, socket.MSG_DONTWAIT)
            return os.read(self.in_fd, size)
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno in _GONE_ERRNOS:
                return b""
            raise

    def read_into(self, view: memoryview) -> int | None:
        """Read the client's stdin into `view` (the region's landing zone); how many bytes came,
        0 at EOF, None if nothing is there yet."""
        try:
            if self._in_sock is not None:
                return self._in_sock.recv_into(view, 0, socket.MSG_DONTWAIT)
            got = os.readv(self.in_fd, [view])
            if got >= DEFAULT_PIPE_BYTES:
                self.widen(self.in_fd)  # the pipe was full: the client has more to write
            return got
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno in _GONE_ERRNOS:
                return 0
            raise

    def write(self, parts: list[bytes | memoryview]) -> int:
        """Write what fits of `parts` into the client's stdout at once; how many bytes went.

        Raises BrokenPipeError when the client closed its end."""
        try:
            if self._out_sock is not None:
                return self._out_sock.sendmsg(parts, [], _SEND_FLAGS)
            return os.writev(self.out_fd, parts)
        except BlockingIOError:
            return 0
        except OSError as exc:
            if exc.errno in _GONE_ERRNOS and not isinstance(exc, BrokenPipeError):
                raise BrokenPipeError(exc.errno, exc.strerror) from None
            raise

    def widen(self, fd: int) -> bool:
        """Widen the client's pipe `fd` (one of its two ends) to WIDE_PIPE_BYTES while large
        lines pass; `narrow` gives the width back after them. False if it is not widened now: a
        socket, wide already, or refused (over the user's pipe budget: the pipe works as it is)."""
        if fd not in (self.in_fd, self.out_fd) or self.closed:
            return False
        if (self._in_sock if fd == self.in_fd else self._out_sock) is not None:
            return False
        TRIMMER.note(LARGE_BYTES)  # a spell of large lines: narrowed once it is over
        if fd in self._widened:
            TRIMMER.later(self.narrow)  # an earlier narrowing found it too full
            return False
        try:
            size = fcntl.fcntl(fd, _F_GETPIPE_SZ)
            if size >= WIDE_PIPE_BYTES:
                return False
            fcntl.fcntl(fd, _F_SETPIPE_SZ, WIDE_PIPE_BYTES)
        except OSError:
            return False
        self._widened[fd] = size
        TRIMMER.later(self.narrow)
        return True

    def narrow(self) -> None:
        """The large lines are over: each widened pipe back to its size, unless it still holds
        more than that (EBUSY; the next spell's end tries again)."""
        if self.closed:
            self._widened.clear()
            return
        for fd, size in list(self._widened.items()):
            try:
                fcntl.fcntl(fd, _F_SETPIPE_SZ, size)
            except OSError:
                continue
            del self._widened[fd]

    def out_closed(self) -> bool:
        """Whether the client closed its end of its stdout (a pipe's reader gone, a socket's peer)."""
        import select

        poller = select.poll()
        poller.register(self.out_fd, 0)  # POLLERR and POLLHUP are always reported
        return bool(poller.poll(0))

    def may_cut(self, size: int) -> bool:
        """Whether a write of `size` bytes into the client's stdout may stop inside a line: any
        write into a socket, and one larger than PIPE_BUF into a pipe (smaller ones go whole or
        not at all)."""
        return self._out_sock is not None or size > PIPE_BUF

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.in_fd)

    async def wait_writable(self) -> None:
        await trio.lowlevel.wait_writable(self.out_fd)

    def close(self) -> None:
        """Close the daemon's copies (the shim keeps its own); wakes any task waiting on them."""
        if self.closed:
            return
        self.closed = True
        for fd, sock in ((self.in_fd, self._in_sock), (self.out_fd, self._out_sock)):
            trio.lowlevel.notify_closing(fd)
            if sock is not None:
                sock.close()
            else:
                os.close(fd)


class _Pending:
    """One line (and its newline) not yet wholly in the client's stdout."""

    __slots__ = ("line", "done", "offset")

    def __init__(self, line: bytes, done: JsonId | None, offset: int) -> None:
        self.line = line
        self.done = done
        self.offset = offset  # bytes of line + b"\n" already written

    def parts(self) -> list[bytes | memoryview]:
        if self.offset < len(self.line):
            return [memoryview(self.line)[self.offset :], b"\n"]
        return [b"\n"]

    def remaining(self) -> int:
        return len(self.line) + 1 - self.offset


class HandoffOutbox:
    """Lines for the client, written into its stdout by the daemon itself (see the module docstring)."""

    def __init__(self, cid: int, pid: int, on_overflow: Callable[[], None], ends: ClientEnds, ledger: Ledger) -> None:
        self.cid = cid
        self.pid = pid
        self._on_overflow = on_overflow
        self.ends = ends
        self.ledger = ledger
        self.on_close: Callable[[], None] = lambda: None  # the session ends when its runtime lets go
        self.on_gone: Callable[[], None] = lambda: None  # the client closed its stdout
        self._queue: deque[_Pending] = deque()
        self.backlog_bytes = 0
        self.dropped = False
        self.closed = False
        self._wake = trio.Event()  # set when the queue got a line, for the writer
        self._drained = trio.Event()  # set (and replaced) when a paused reader may go on
        self._paused = False
        self._cut: _Pending | None = None  # the newline that ends a lost daemon's cut line

    # ---- the Outbox protocol -------------------------------------------------------------------

    def deliver(self, line: bytes, done: JsonId | None = None) -> None:
        if self.dropped or self.closed:
            return
        offset = 0
        if not self._queue:
            # Nothing queued: straight into the client's pipe, no task switch on the hot path.
            risky = self.ends.may_cut(len(line) + 1)
            if risky:
                self.ledger.torn(True)  # before: a daemon killed during the write leaves the line cut
            try:
                offset = self.ends.write([line, b"\n"])
                if offset <= len(line) and len(line) >= DEFAULT_PIPE_BYTES and self.ends.widen(self.ends.out_fd):
                    offset += self.ends.write(_Pending(line, done, offset).parts())  # the rest, at once
            except BrokenPipeError:
                self._gone()
                return
            if offset == len(line) + 1:
                if risky:
                    self.ledger.torn(False)
                if done is not None:
                    self.ledger.answered(done)
                return
            if not offset and risky:
                self.ledger.torn(False)  # nothing went: the client's stdout ends with a whole line
        pending = _Pending(line, done, offset)
        self._queue.append(pending)
        self.backlog_bytes += pending.remaining()
        if self.backlog_bytes > MAX_CLIENT_BACKLOG_BYTES or len(self._queue) > MAX_CLIENT_BACKLOG_FRAMES:
            self.dropped = True
            log.warning("client %d (shim pid %d) stopped reading: disconnecting it (%d lines, %d bytes queued)",
                        self.cid, self.pid, len(self._queue), self.backlog_bytes)
            self._on_overflow()
            return
        self._wake.set()

    def end_cut_line(self) -> None:
        """The client's stdout ends inside a line a lost daemon was writing (the region's torn
        byte is set): a newline goes first, ahead of every other line, through the writer; the
        torn byte is cleared only once it is written (lazyd/daemon/handoff/adopt.py)."""
        self._cut = _Pending(b"", None, 0)
        self._queue.append(self._cut)
        self.backlog_bytes += 1
        self._wake.set()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.on_close()

    # ---- flow control (as a connection's) ------------------------------------------------------

    @property
    def backlog_frames(self) -> int:
        """Lines not yet wholly in the client's stdout (named as a connection's outbox names them)."""
        return len(self._queue)

    def should_pause(self) -> bool:
        return self.backlog_bytes >= CLIENT_PAUSE_BYTES or len(self._queue) >= CLIENT_PAUSE_FRAMES

    async def wait_drained(self) -> None:
        while self.should_pause():
            self._paused = True
            await self._drained.wait()

    # ---- the writer task -----------------------------------------------------------------------

    async def run_writer(self) -> None:
        """Write queued lines as the client takes them, until the session ends."""
        while True:
            while not self._queue:
                await self._wake.wait()
                self._wake = trio.Event()
            await self.ends.wait_writable()
            if not self.write_ready():
                return

    def write_ready(self) -> bool:
        """Write what the pipe takes now; False once the client is gone."""
        while self._queue:
            batch = list(islice(self._queue, MAX_IOV // 2))
            parts = [part for pending in batch for part in pending.parts()]
            size = sum(pending.remaining() for pending in batch)
            if not batch[0].offset and self.ends.may_cut(size):
                self.ledger.torn(True)  # before the write, which may stop inside a line
            try:
                written = self.ends.write(parts)
            except BrokenPipeError:
                self._gone()
                return False
            self.backlog_bytes -= written
            left = written
            for pending in batch:
                take = min(left, pending.remaining())
                pending.offset += take
                left -= take
                if pending.remaining():
                    break
                self._queue.popleft()
                if pending.done is not None:
                    self.ledger.answered(pending.done)
            self.ledger.torn(bool(self._queue) and (self._queue[0].offset > 0 or self._queue[0] is self._cut))
            if self._paused and not self.should_pause():
                self._paused = False
                self._drained.set()
                self._drained = trio.Event()
            if written < size:
                return True  # the client's stdout is full: the writer waits for room
        return True

    def let_go(self) -> None:
        """Hand the session back to the shim. The unwritten rest of a line of which the client
        already has a part goes into the region's tail, for the shim to write first; only once the
        state names that tail is the id it answers retired. Retired first, a kill -9 in between
        would leave the line cut and its request in flight nowhere: never answered. In this order
        the worst a kill can do is answer it twice (the rest, then the shim's error)."""
        if not self._queue or self._queue[0].offset == 0:
            self.ledger.close(client_left=False)
            return
        pending = self._queue.popleft()
        rest = b"".join(bytes(part) for part in pending.parts())
        self.backlog_bytes -= len(rest)
        self.ledger.close(client_left=False, tail=rest)
        if pending.done is not None:
            self.ledger.answered(pending.done)

    def _gone(self) -> None:
        self.dropped = True
        self._queue.clear()
        self.backlog_bytes = 0
        self.on_gone()
