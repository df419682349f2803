"""A hand-off session's two ends of the client, and the outbox that writes the client's stdout.

`ClientEnds` holds the client's stdin and stdout as the shim passed them: a pipe as a description
of its own opened with O_NONBLOCK, a socket (Node clients give socketpairs) as the very description
the shim has, used with MSG_DONTWAIT and never set non-blocking. Either way the shim's own
descriptors stay as the client made them, for the shim to use again if the daemon is lost.

`HandoffOutbox` is the `Outbox` (lazyd/daemon/runtime/outbox.py) a runtime delivers a client's lines
to: straight into the client's stdout when nothing is queued, else through a writer task. An
answer's id leaves the ledger only once its whole line is in the pipe.

Whole lines or none (docs/reliability.md): a line goes only once the client's stdout has room for
all of it (lazyd/daemon/handoff/whole_write.py), in one write the kernel makes whole, so that a
kill -9 at any moment leaves no cut line. Only a line over what the stdout can ever take whole
(`ClientEnds.bound`, after widening the pipe or raising the socket's buffer) goes in parts, with
the region's torn byte set until its last part. The flow-control bounds are a connection's.

While large lines pass, the client's pipes are widened to WIDE_PIPE_BYTES (in a default pipe a
large line is many trips through trio's scheduler) and narrowed again after the heap trimmer's
quiet spell (lazyd/daemon/heap_trim.py): a user's pipes share a budget (pipe-user-pages-soft).
"""

from __future__ import annotations

import array
import errno
import fcntl
import logging
import os
import select
import socket
import stat
import termios
from collections import deque
from collections.abc import Callable
from itertools import islice
from select import PIPE_BUF

import trio

from lazyd.core.relay.jsonrpc import JsonId
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.daemon.handoff.whole_write import pipe_room, socket_cost, socket_room
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
_SIOCOUTQ = termios.TIOCOUTQ  # the same request number: SIOCOUTQ on a socket
WIDE_SNDBUF_BYTES = socket_cost(WIDE_PIPE_BYTES, 1 << 30) // 2 + 4096
# SO_SNDBUF asked of a socket a large line needs whole (the kernel doubles it, capped at twice
# net.core.wmem_max): a line as long as a widened pipe holds then fits whole too.
ROOM_WAIT_FIRST_S = 0.0005
ROOM_WAIT_MAX_S = 0.02
# The kernel wakes a writer at one free page (a pipe) or a quarter of the buffer (a socket), not at
# the room a line needs: while the stdout is not full, the writer looks again on a doubling timer.


def _usable(fd: int, *, readable: bool) -> str | None:
    """Why `fd` cannot serve as the client's stdin (`readable`) or stdout; None if it can."""
    try:
        st = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError as exc:
        return f"cannot inspect it: {exc.strerror}"
    mode = flags & os.O_ACCMODE
    if mode != os.O_RDWR and mode != (os.O_RDONLY if readable else os.O_WRONLY):
        return "it is open in the wrong direction"
    if stat.S_ISFIFO(st.st_mode):  # O_NONBLOCK set here would change the shim's own copy
        return None if flags & os.O_NONBLOCK else "a pipe without O_NONBLOCK (not a description of its own)"
    if stat.S_ISSOCK(st.st_mode):
        kind = socket.socket(fileno=os.dup(fd))
        try:
            ok = kind.family == socket.AF_UNIX and kind.type == socket.SOCK_STREAM
        finally:
            kind.close()
        return None if ok else "a socket that is not a Unix stream socket"
    return "neither a pipe nor a socket"


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
        # Runs `narrow` once the large lines are over: the daemon's HeapTrimmer.later, given by the
        # session (lazyd/daemon/handoff/session.py); until then a widened pipe stays wide.
        self.later: Callable[[Callable[[], None]], None] | None = None
        self._sndbuf = 0  # the stdout socket's SO_SNDBUF, once read (only the daemon raises it)
        self._sndbuf_raised = False

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

    def widen(self, fd: int) -> bool:
        """Widen the client's pipe `fd` to WIDE_PIPE_BYTES while large lines pass (`narrow` gives
        the width back); False if it is not widened now (a socket, wide already, or refused)."""
        if fd not in (self.in_fd, self.out_fd) or self.closed:
            return False
        if (self._in_sock if fd == self.in_fd else self._out_sock) is not None:
            return False
        if fd in self._widened:
            if self.later is not None:
                self.later(self.narrow)  # an earlier narrowing found it too full
            return False
        try:
            size = fcntl.fcntl(fd, _F_GETPIPE_SZ)
            if size >= WIDE_PIPE_BYTES:
                return False
            fcntl.fcntl(fd, _F_SETPIPE_SZ, WIDE_PIPE_BYTES)
        except OSError:
            return False
        self._widened[fd] = size
        if self.later is not None:
            self.later(self.narrow)
        return True

    def narrow(self) -> None:
        """Each widened pipe back to its size, unless it holds more than that (EBUSY: the next
        spell's end tries again)."""
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
        poller = select.poll()
        poller.register(self.out_fd, 0)  # POLLERR and POLLHUP are always reported
        return bool(poller.poll(0))

    def room(self) -> int:
        """Bytes one write surely puts into the client's stdout whole now (whole_write.py); raises
        BrokenPipeError when the client's stdout can no longer be asked."""
        count = array.array("i", [0])
        try:
            if self._out_sock is not None:
                fcntl.ioctl(self.out_fd, _SIOCOUTQ, count)
                return socket_room(count[0], self._send_buffer())
            fcntl.ioctl(self.out_fd, termios.FIONREAD, count)
            return pipe_room(fcntl.fcntl(self.out_fd, _F_GETPIPE_SZ), count[0])
        except OSError as exc:
            raise BrokenPipeError(exc.errno, exc.strerror) from None

    def bound(self) -> int:
        """The longest write (a line and its newline) the client's stdout can ever take whole as
        it is now: all of an empty pipe, or what an empty socket buffer holds."""
        try:
            if self._out_sock is not None:
                return socket_room(0, self._send_buffer())
            size: int = fcntl.fcntl(self.out_fd, _F_GETPIPE_SZ)
            return size
        except OSError as exc:
            raise BrokenPipeError(exc.errno, exc.strerror) from None

    def whole_possible(self, size: int) -> bool:
        """Whether a write of `size` bytes can go whole into the client's stdout once it has
        room: a pipe is widened and a socket's buffer raised first where needed and allowed."""
        if self._out_sock is None and size <= PIPE_BUF:
            return True  # whole or nothing, whatever the room (POSIX)
        if size <= self.bound():
            return True
        if self._out_sock is None:
            self.widen(self.out_fd)
        elif not self._sndbuf_raised:
            self._sndbuf_raised = True  # once: the kernel caps it at twice wmem_max, and that stays
            if self._send_buffer() < 2 * WIDE_SNDBUF_BYTES:  # never lower a buffer the client made larger
                try:
                    self._out_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, WIDE_SNDBUF_BYTES)
                except OSError:
                    pass
                self._send_buffer(fresh=True)
        return size <= self.bound()

    def _send_buffer(self, *, fresh: bool = False) -> int:
        assert self._out_sock is not None
        if fresh or not self._sndbuf:
            self._sndbuf = self._out_sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        return self._sndbuf

    async def wait_for_room(self, delay: float) -> None:
        """One step of waiting for room for a whole line (see ROOM_WAIT_FIRST_S)."""
        poller = select.poll()
        poller.register(self.out_fd, select.POLLOUT)
        if not poller.poll(0):
            await trio.lowlevel.wait_writable(self.out_fd)
        else:
            await trio.sleep(delay)

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
        self._need_room = 0  # bytes the first queued line waits for in the client's stdout
        self._parts_logged = False  # a line over what the client's stdout takes whole was logged
        self._cut: _Pending | None = None  # the newline that ends a lost daemon's cut line

    def deliver(self, line: bytes, done: JsonId | None = None) -> None:
        if self.dropped or self.closed:
            return
        size = len(line) + 1
        if not self._queue and not self.ends.may_cut(size):
            # At most PIPE_BUF into a pipe: whole or not at all, no mark needed, no task switch.
            try:
                if self.ends.write([line, b"\n"]):
                    if done is not None:
                        self.ledger.answered(done)
                    return
            except BrokenPipeError:
                self._gone()
                return
            first = False  # the pipe is full: the writer waits for it
        else:
            first = not self._queue
        self._queue.append(_Pending(line, done, 0))
        self.backlog_bytes += size
        if first and not self.write_ready():
            return  # the client is gone
        if self.backlog_bytes > MAX_CLIENT_BACKLOG_BYTES or len(self._queue) > MAX_CLIENT_BACKLOG_FRAMES:
            self.dropped = True
            log.warning("client %d (shim pid %d) stopped reading: disconnecting it (%d lines, %d bytes queued)",
                        self.cid, self.pid, len(self._queue), self.backlog_bytes)
            self._on_overflow()
            return
        if self._queue:
            self._wake.set()

    def end_cut_line(self) -> None:
        """The client's stdout ends inside a line a lost daemon was writing: a newline goes first,
        through the writer; the torn byte is cleared once it is written."""
        self._cut = _Pending(b"", None, 0)
        self._queue.append(self._cut)
        self.backlog_bytes += 1
        self._wake.set()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.on_close()

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

    async def run_writer(self) -> None:
        """Write queued lines as the client takes them, until the session ends."""
        delay = ROOM_WAIT_FIRST_S
        while True:
            while not self._queue:
                await self._wake.wait()
                self._wake = trio.Event()
            if self._need_room:
                await self.ends.wait_for_room(delay)
                delay = min(2 * delay, ROOM_WAIT_MAX_S)
            else:
                await trio.lowlevel.wait_writable(self.ends.out_fd)
            backlog = self.backlog_bytes
            if not self.write_ready():
                return
            if self.backlog_bytes != backlog:
                delay = ROOM_WAIT_FIRST_S  # a line went: the next one's wait starts short again

    def write_ready(self) -> bool:
        """Write what the client's stdout takes now: whole lines, but for one over what it can ever
        take whole, which goes in parts. False once the client is gone."""
        self._need_room = 0
        try:
            while self._queue:
                head = self._queue[0]
                if head.offset or not self.ends.whole_possible(head.remaining()):
                    if not self._write_part(head):
                        break
                elif not self._write_whole():
                    break
        except BrokenPipeError:
            self._gone()
            return False
        if self._paused and not self.should_pause():
            self._paused = False
            self._drained.set()
            self._drained = trio.Event()
        return True

    def _write_whole(self) -> bool:
        """Write the queued lines the client's stdout has room for, in one write that goes whole
        or not at all; False when it has none for the first."""
        room = self.ends.room()
        batch: list[_Pending] = []
        size = 0
        for pending in islice(self._queue, MAX_IOV // 2):
            if pending.offset or size + pending.remaining() > room:
                break
            batch.append(pending)
            size += pending.remaining()
        if not batch:
            first = self._queue[0].remaining()
            if self.ends.may_cut(first):
                self._need_room = first  # the writer waits for that much room, not for a page
                return False
            batch, size = [self._queue[0]], first  # PIPE_BUF at most into a pipe: whole or nothing
        # Whole lines or none: a kill leaves nothing for the shim to end, and the ids still in the
        # table get their errors after them (at worst an answer twice).
        written = self.ends.write([part for pending in batch for part in pending.parts()])
        self.backlog_bytes -= written
        left = written
        for pending in batch:
            take = min(left, pending.remaining())
            pending.offset += take
            left -= take
            if pending.remaining():
                break
            self._retire()
        if written < size and self._queue and self._queue[0].offset:
            # The kernel stopped short of its room (no page, a fault): the rest goes by `_write_part`.
            self.ledger.torn(True)
            log.warning("client %d (shim pid %d): a write of %d bytes into its stdout stopped at %d",
                        self.cid, self.pid, size, written)
        return written == size

    def _write_part(self, head: _Pending) -> bool:
        """Write what the client's stdout takes of a line it cannot take whole, the torn byte set
        from its first byte until its last; False when the stdout is full."""
        if not head.offset:
            self.ledger.torn(True)  # before the write, which may stop inside the line
            if not self._parts_logged:
                self._parts_logged = True
                log.info("client %d (shim pid %d): a line of %d bytes is over the %d its stdout takes whole; "
                         "written in parts (a kill -9 meanwhile leaves it cut; logged once per session)",
                         self.cid, self.pid, head.remaining(), self.ends.bound())
        written = self.ends.write(head.parts())
        head.offset += written
        self.backlog_bytes -= written
        if head.remaining():
            return False
        self.ledger.torn(False)  # before the id is retired: a kill between leaves a whole line and an error
        self._retire()
        return True

    def _retire(self) -> None:
        """The first queued line is wholly in the client's stdout: its id leaves the ledger (after
        the newline ending a lost daemon's cut line, the torn byte is cleared)."""
        pending = self._queue.popleft()
        if pending is self._cut:
            self._cut = None
            self.ledger.torn(False)
        if pending.done is not None:
            self.ledger.answered(pending.done)

    def let_go(self) -> None:
        """Hand the session back to the shim: the unwritten rest of a line the client has a part
        of goes into the region's tail, for the shim to write first, and only then is its id
        retired (the other order could leave a request answered never, this one at worst twice)."""
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
