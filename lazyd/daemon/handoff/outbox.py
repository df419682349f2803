"""A hand-off session's two ends of the client, and the outbox that writes the client's stdout.

`ClientEnds` holds the client's stdin and stdout as the shim passed them: a pipe as a description
of its own opened with O_NONBLOCK, a socket (Node clients give socketpairs) as the very description
the shim has, used with MSG_DONTWAIT and never set non-blocking. Either way the shim's own
descriptors stay as the client made them, for the shim to use again if the daemon is lost.

`HandoffOutbox` is the `Outbox` (lazyd/daemon/runtime/outbox.py) a runtime delivers a client's lines
to: straight into the client's stdout when nothing is queued, else through a writer task, each
time as much of the queued lines as the stdout takes in one write. The flow-control bounds are a
connection's.

A kill -9 leaves the client's stdout as the region says (docs/reliability.md): the torn byte is set
before any write that may stop inside a line (any write into a socket, one over PIPE_BUF into a
pipe) and cleared once the stdout ends on a line's end again, and an answer's id leaves the ledger
only after that, once its whole line is written: a recovery then ends a cut line and answers each
id still in flight, so a request is answered at least once and at most twice.

While large lines pass, the client's pipes are widened to WIDE_PIPE_BYTES (in a default pipe a
large line is many trips through trio's scheduler) and narrowed again after the heap trimmer's
quiet spell (lazyd/daemon/heap_trim.py): a user's pipes share a budget (pipe-user-pages-soft). A
stdout socket's send buffer is raised to as much (never lowered): it bounds memory, holding none.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import select
import socket
import stat
from collections import deque
from collections.abc import Callable
from itertools import islice
from select import PIPE_BUF

import trio

from lazyd.core.relay.jsonrpc import JsonId
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.daemon.runtime.outbox import Backlog

log = logging.getLogger("lazyd.server")

_GONE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})
_SEND_FLAGS = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL
MAX_IOV = 64  # queued lines written in one writev (each line and its newline are two entries)
WIDE_PIPE_BYTES = 1024 * 1024  # Linux's default pipe-max-size for users, as the servers' pipes
DEFAULT_PIPE_BYTES = 64 * 1024  # a read this large took a default pipe's whole content


def _usable(fd: int, *, readable: bool) -> str | None:
    """Why `fd` cannot serve as the client's stdin (`readable`) or stdout; None if it can."""
    try:
        st = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError as exc:
        return f"cannot be inspected: {exc.strerror}"
    mode = flags & os.O_ACCMODE
    if mode != os.O_RDWR and mode != (os.O_RDONLY if readable else os.O_WRONLY):
        return "is open in the wrong direction"
    if stat.S_ISFIFO(st.st_mode):  # O_NONBLOCK set here would change the shim's own copy
        return None if flags & os.O_NONBLOCK else "is a pipe without O_NONBLOCK (not a description of its own)"
    if stat.S_ISSOCK(st.st_mode):
        with socket.socket(fileno=os.dup(fd)) as kind:
            ok = kind.family == socket.AF_UNIX and kind.type == socket.SOCK_STREAM
        return None if ok else "is a socket that is not a Unix stream socket"
    return "is neither a pipe nor a socket"


class ClientEnds:
    """The client's stdin and stdout, as the daemon holds them (see the module docstring)."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        """Take ownership of both descriptors; raises ValueError (closing nothing) if unusable."""
        for fd, readable in ((in_fd, True), (out_fd, False)):
            problem = _usable(fd, readable=readable)
            if problem is not None:
                raise ValueError(f"the client's {'stdin' if readable else 'stdout'} {problem}")
        self.in_fd = in_fd
        self.out_fd = out_fd
        self._in_sock = socket.socket(fileno=in_fd) if stat.S_ISSOCK(os.fstat(in_fd).st_mode) else None
        self._out_sock = socket.socket(fileno=out_fd) if stat.S_ISSOCK(os.fstat(out_fd).st_mode) else None
        self.closed = False
        self._widened: dict[int, int] = {}  # a pipe widened while large lines pass: its size before
        # Runs `narrow` once the large lines are over: the daemon's HeapTrimmer.later, given by the
        # session (lazyd/daemon/handoff/session.py); until then a widened pipe stays wide.
        self.later: Callable[[Callable[[], None]], None] = lambda _narrow: None

    def read_into(self, view: memoryview) -> int | None:
        """Read the client's stdin into `view` (the region, after the head); how many bytes came,
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

    def widen(self, fd: int) -> None:
        """Widen the client's pipe `fd` to WIDE_PIPE_BYTES while large lines pass (`narrow` gives
        the width back), or raise a stdout socket's send buffer to as much (never lowered)."""
        if self.closed:
            return
        if fd == self.out_fd and self._out_sock is not None:
            with contextlib.suppress(OSError):
                if self._out_sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < WIDE_PIPE_BYTES:
                    self._out_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, WIDE_PIPE_BYTES // 2)
            return
        if fd not in self._widened:  # else an earlier narrowing found it too full: asked again below
            try:
                size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
                if size >= WIDE_PIPE_BYTES:
                    return
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, WIDE_PIPE_BYTES)
            except OSError:
                return
            self._widened[fd] = size
        self.later(self.narrow)

    def narrow(self) -> None:
        """Each widened pipe back to its size, unless it holds more than that (EBUSY: the next
        spell's end tries again)."""
        if self.closed:
            self._widened.clear()
            return
        for fd, size in list(self._widened.items()):
            try:
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
            except OSError:
                continue
            del self._widened[fd]

    def out_closed(self) -> bool:
        """Whether the client closed its end of its stdout (a pipe's reader gone, a socket's peer)."""
        poller = select.poll()
        poller.register(self.out_fd, 0)  # POLLERR and POLLHUP are always reported
        return bool(poller.poll(0))

    def may_cut(self, size: int) -> bool:
        """Whether a write of `size` bytes may stop inside a line: any write into a socket, one
        over PIPE_BUF into a pipe."""
        return self._out_sock is not None or size > PIPE_BUF

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

    def __init__(self, line: bytes, done: JsonId | None) -> None:
        self.line = line
        self.done = done
        self.offset = 0  # bytes of line + b"\n" already written

    def parts(self) -> list[bytes | memoryview]:
        if self.offset < len(self.line):
            return [memoryview(self.line)[self.offset :], b"\n"]
        return [b"\n"]

    def remaining(self) -> int:
        return len(self.line) + 1 - self.offset


class HandoffOutbox:
    """Lines for the client, written into its stdout by the daemon itself (see the module docstring)."""

    def __init__(self, cid: int, pid: int, on_overflow: Callable[[], None], ends: ClientEnds, ledger: Ledger,
                 on_close: Callable[[], None], on_gone: Callable[[], None]) -> None:
        self.cid = cid
        self.pid = pid
        self._on_overflow = on_overflow
        self.ends = ends
        self.ledger = ledger
        self.on_close = on_close  # the session ends when its runtime lets go
        self.on_gone = on_gone  # the client closed its stdout
        self._queue: deque[_Pending] = deque()
        self.backlog = Backlog()  # the lines in the queue: a connection's bounds
        self.dropped = False
        self.closed = False
        self._wake = trio.Event()  # set when the queue got a line, for the writer

    def deliver(self, line: bytes, done: JsonId | None = None) -> None:
        if self.dropped or self.closed:
            return
        if not self._queue and not self.ends.may_cut(len(line) + 1) and not self.ledger.region.torn:
            # At most PIPE_BUF into a pipe, after a whole line: it goes whole or not at all, so no
            # queue entry and no task switch (the usual answer). A cut line's end goes through the
            # writer, which clears the torn byte.
            try:
                if self.ends.write([line, b"\n"]):
                    if done is not None:
                        self.ledger.answered(done)
                    return
            except BrokenPipeError:
                self._gone()
                return
        self._queue.append(_Pending(line, done))
        self.backlog.add(len(line) + 1)
        if len(self._queue) == 1:
            self.write_ready()  # nothing was queued: straight in, without a task switch
        if self.backlog.over():
            self.dropped = True
            log.warning("client %d (shim pid %d) stopped reading: disconnecting it (%d lines, %d bytes queued)",
                        self.cid, self.pid, len(self._queue), self.backlog.bytes)
            self._on_overflow()
        elif self._queue:
            self._wake.set()

    def close(self) -> None:
        self.closed = True
        self.on_close()  # idempotent: the session's cancel

    async def run_writer(self) -> None:
        """Write queued lines as the client takes them, until the session ends."""
        while True:
            while not self._queue:
                await self._wake.wait()
                self._wake = trio.Event()
            await trio.lowlevel.wait_writable(self.ends.out_fd)
            if not self.write_ready():
                return

    def write_ready(self) -> bool:
        """Write what the client's stdout takes now; False once the client is gone."""
        try:
            while self._queue and self._write_batch():
                pass
        except BrokenPipeError:
            self._gone()
            return False
        return True

    def _write_batch(self) -> bool:
        """One write of the first queued lines (at most MAX_IOV parts); whether all of them went."""
        region = self.ledger.region
        batch = list(islice(self._queue, MAX_IOV // 2))
        size = sum(pending.remaining() for pending in batch)
        if batch[0].remaining() > DEFAULT_PIPE_BYTES:
            self.ends.widen(self.ends.out_fd)
        if not region.torn and self.ends.may_cut(size):
            region.torn = True  # before the write, which may stop inside a line
        written = left = self.ends.write([part for pending in batch for part in pending.parts()])
        for pending in batch:
            take = min(left, pending.remaining())
            pending.offset += take
            left -= take
        whole = sum(not pending.remaining() for pending in batch)
        if region.torn and (whole == len(self._queue) or not self._queue[whole].offset):
            region.torn = False  # before the ids leave: a kill between leaves whole lines and errors
        for _ in range(whole):
            pending = self._queue.popleft()
            if pending.done is not None:
                self.ledger.answered(pending.done)
        self.backlog.took(written, whole)
        return whole == len(batch)

    def let_go(self) -> None:
        """Hand the session back to the shim: the unwritten rest of a line the client has a part
        of goes into the region's tail, for the shim to write first, and only then is its id
        retired (the other order could leave a request answered never, this one at worst twice)."""
        if not self._queue or self._queue[0].offset == 0:
            self.ledger.close(client_left=False)
            return
        pending = self._queue.popleft()
        rest = b"".join(bytes(part) for part in pending.parts())
        self.backlog.took(len(rest), 1)
        self.ledger.close(client_left=False, tail=rest)
        if pending.done is not None:
            self.ledger.answered(pending.done)

    def _gone(self) -> None:
        self.dropped = True
        self._queue.clear()
        self.backlog.took(self.backlog.bytes, self.backlog.frames)
        self.on_gone()
