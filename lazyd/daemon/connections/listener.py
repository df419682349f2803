"""The daemon's listener and each accepted connection: peer check, hello, then a session or control.

Per connection a reader (the handler task) and, for sessions, a writer draining the bounded
outbox. Whatever goes wrong with one connection closes that connection only: a peer of another uid,
or one that finds the daemon near its descriptor limit, is judged before anything is read
(lazyd/daemon/connections/admit.py); the hello must come within ``HELLO_TIMEOUT_S`` and a started
frame finish within ``FRAME_DEADLINE_S`` (slowloris), while between frames a session may idle
forever; a bad frame, a control reply not taken within ``CONTROL_SEND_DEADLINE_S``, or a bug (logged
with its traceback) closes it.

The accept loop (``ConnectionHandler.serve``) outlives running out of descriptors: on EMFILE/ENFILE
it gives up its spare one to accept and refuse the waiting connection with the reason (fdlimit.py);
when even that fails it warns once and retries with a doubling delay (clients wait in the backlog).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from lazyd.protocol import wire
from lazyd.core.admission import Admission
from lazyd.daemon.handoff import stored_sessions
from lazyd.daemon.handoff import session as handoff
from lazyd.daemon.handoff.stored_sessions import Keeper, Kept
from lazyd.daemon.control import handshakes
from lazyd.daemon.runtime.era_lanes import EraRoute
from lazyd.daemon.fdlimit import Spare
from lazyd.daemon.control import progress
from lazyd.daemon.upgrade.connection_state import Live
from lazyd.daemon.upgrade.inherited import close_fds
from lazyd.daemon.runtime.outbox import ConnectionOutbox
from lazyd.daemon.gate import Gate
from lazyd.daemon.connections.admit import Admitter
from lazyd.daemon.connections.refusals import Refusals
from lazyd.daemon.sessions.registry import Registry
from lazyd.errors import Refused, SlowPeer, WireError
from lazyd.protocol.frames import AnyFrame, Ctl, ForeignHello, Hello, Line, Progress, Refusal, Reply, Welcome

if TYPE_CHECKING:  # only a type here: the hub is loaded by its first session, not kept by every daemon
    from lazyd.daemon.hub.server import HubSession

log = logging.getLogger("lazyd.conn")

HELLO_TIMEOUT_S = 10.0  # a peer that connects and does not finish its hello is cut loose (slowloris)
# A local peer writes a frame with one sendall, so even a maximal 16 MiB frame arrives in well under
# a second; 30 s also forgives a peer that was briefly stopped (SIGSTOP, swapping).
FRAME_DEADLINE_S = 30.0
# lazyctl reads its reply at once; a peer that leaves one unread this long holds a slot for nothing.
CONTROL_SEND_DEADLINE_S = 30.0
READ_BYTES = 256 * 1024  # one receive: up to ~16k tiny frames
# Frames decoded at a time: a decoded frame costs many times its wire size (docs/benchmarks.md).
FRAMES_PER_BATCH = 64
# Frames written in one send: batching cuts syscalls when a server streams many small lines.
WRITE_BATCH_FRAMES = 64
# accept(2) errors that mean "out of resources", not "broken listener" (trio's own list).
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_BACKOFF_FIRST_S = 0.1  # a descriptor often frees within one turn of the loop
ACCEPT_BACKOFF_MAX_S = 2.0  # clients wait in the backlog meanwhile; their own deadlines are 5-10 s

ControlHandler = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, Any, str | None]]]


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside `group` (nested groups flattened), else the group itself."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


class Frames:
    """Frames from a stream through one decoder; a WireError poisons the connection.

    A started frame must be complete within the frame deadline, counting only time spent waiting on
    the peer: while the consumer is away (backpressure toward a stalled server), the clock stops, or a
    well-behaved client would be cut off in the middle of a large frame (test_frame_deadline.py)."""

    def __init__(self, stream: trio.SocketStream, frame_deadline_s: float, reading: Gate) -> None:
        self.stream = stream
        self.reading = reading
        self.decoder = wire.FrameDecoder()
        # A deque: one read can hold thousands of tiny frames, and popping a list's head is O(n).
        self.pending: deque[AnyFrame] = deque()
        self.frame_deadline_s = frame_deadline_s
        self._in_frame = False  # the decoder holds the start of a frame that is not complete
        self._waited_s = 0.0  # time spent in receive for that unfinished frame
        # Until the hello is read: descriptors a shim passes with it (a hand-off, handoff.py).
        self.fds: list[int] | None = []

    async def next(self) -> AnyFrame | None:
        """The next frame, or None at EOF (an EOF in the middle of a frame is just a close)."""
        while not self.pending:
            if self.decoder.buffered:
                self.feed(b"")  # complete frames left over from the last batch come first
                if self.pending:
                    break
            await self.reading.passage()  # an upgrade stops reading here (lazyd/daemon/gate.py)
            budget = self.frame_deadline_s - self._waited_s if self._in_frame else math.inf
            data: bytes | None = None
            began = trio.current_time()
            with trio.move_on_after(max(budget, 0.0)):
                if self.fds is None:
                    data = await self.stream.receive_some(READ_BYTES)
                else:
                    data = await handoff.receive_with_fds(self.stream.socket, READ_BYTES, self.fds)
            if self._in_frame:
                self._waited_s += trio.current_time() - began
            if data is None:
                raise SlowPeer(f"a frame took longer than {self.frame_deadline_s:g} s to arrive "
                               f"({self.decoder.buffered} bytes of it so far)")
            if not data:
                return None
            self.feed(data)
        return self.pending.popleft()

    def feed(self, data: bytes) -> None:
        """Decode `data` (read from the stream, or by a predecessor daemon before an upgrade) into
        pending frames, a batch at a time: the rest waits in the decoder for `next`."""
        frames = self.decoder.feed(data, FRAMES_PER_BATCH)
        self.pending.extend(frames)
        if not self.decoder.buffered:
            self._in_frame = False
        elif frames or not self._in_frame:
            # The unfinished frame began in this read, or only now came next in line after a
            # batch: its clock starts from zero.
            self._in_frame = True
            self._waited_s = 0.0


class ConnectionHandler:
    def __init__(self, registry: Registry, control: ControlHandler, admission: Admission, refusals: Refusals,
                 keeper: Keeper | None) -> None:
        self.registry = registry
        self.control = control
        self.admitter = Admitter(admission, CONTROL_SEND_DEADLINE_S, refusals)
        self.refusals = refusals
        self.active = 0
        # Open connections as an upgrade's freeze reads them (lazyd/daemon/upgrade/connection_state.py), and
        # the op that carries an upgrade out on the connection that asked (lazyd/daemon/upgrade/handover.py).
        self.live: dict[int, Live] = {}
        self.upgrade: Callable[[trio.SocketStream], Awaitable[tuple[bool, Any, str | None]]] | None = None
        self.keeper = keeper  # hand-off sessions in systemd's fd store, where the daemon has one

    async def serve(self, listener: trio.SocketListener, kept: Sequence[Kept] = (), *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept connections forever, each served by `self` in its own task (see the docstring),
        beside the hand-off sessions systemd `kept` across a crash, each in its own task too."""
        spare = Spare()
        async with trio.open_nursery() as handlers, listener:
            for session in kept:
                handlers.start_soon(self.serve_kept, session)
            task_status.started()
            failures = 0
            first_failure = 0.0
            backoff_s = ACCEPT_BACKOFF_FIRST_S
            while True:
                # An upgrade leaves new connections in the backlog for its successor.
                await self.registry.reading.passage()
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    refuse = partial(self.admitter.refuse_now, self.active)
                    if exc.errno in (errno.EMFILE, errno.ENFILE) and await spare.refuse_one(listener, refuse):
                        continue
                    if failures == 0:
                        first_failure = trio.current_time()
                        log.warning("cannot accept connections: %s (%s) with %d connections open; "
                                    "retrying with backoff, clients wait in the backlog",
                                    os.strerror(exc.errno), errno.errorcode[exc.errno], self.active)
                    failures += 1
                    await trio.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, ACCEPT_BACKOFF_MAX_S)
                    continue
                if failures:
                    log.info("accepting connections again after %d failed attempts in %.1f s",
                             failures, trio.current_time() - first_failure)
                    failures = 0
                    backoff_s = ACCEPT_BACKOFF_FIRST_S
                handlers.start_soon(self, stream)

    async def __call__(self, stream: trio.SocketStream) -> None:
        self.active += 1
        admitted = self.admitter.judge(stream, self.active, len(self.registry.runtimes))
        if admitted is None:
            await self.guarded(stream, -1, None)
            return
        pid, busy = admitted
        if busy is None:
            await self.guarded(stream, pid, partial(self.serve_from_hello, stream, pid))
        else:
            await self.guarded(stream, pid, partial(self.admitter.refuse, stream, busy))

    async def serve_kept(self, kept: Kept) -> None:
        """Take back in place a hand-off session systemd kept across a crash (lazyd/daemon/handoff/stored_sessions.py),
        counted like an accepted connection; or let it go, its names out of the store, so that
        its waiter sees its socket end and resumes by itself."""
        shim = kept.fds.pop(stored_sessions.socket_name(kept.pid), None)
        if shim is None:
            log.info("shim pid %d: not taking back the session systemd kept (its socket did not come back); "
                     "it recovers it itself", kept.pid)
            stored_sessions.let_go(kept, self.keeper)
            return
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=shim)))
        self.active += 1
        await self.guarded(stream, kept.pid, partial(self._serve_kept, stream, shim, kept))

    async def _serve_kept(self, stream: trio.SocketStream, shim: int, kept: Kept) -> None:
        live = self.live[id(stream)] = Live(stream, wire.FrameDecoder(), deque())
        found = stored_sessions.reopen(kept, shim)
        if isinstance(found, str):
            log.info("shim pid %d: not taking back the session systemd kept (%s); it recovers it itself",
                     kept.pid, found)
            stored_sessions.let_go(kept, self.keeper)
            return
        hello, fds = found
        taken = handoff.take(hello, fds)
        close_fds(fds)
        refusal = Refused("reclaim", "its descriptors or region cannot be served by hand-off")
        if taken is not None:
            try:
                live.handoff = handoff.HandoffSession(self.registry, stream, hello.pid, *taken, self.keeper, reclaiming=True)
            except Refused as exc:
                refusal = exc
            except (OSError, ValueError) as exc:
                refusal = Refused("reclaim", f"its region cannot be mapped: {exc}")
        if live.handoff is None:
            log.info("shim pid %d: not reclaiming its session (%s); it recovers it itself", hello.pid, refusal.message)
            stored_sessions.let_go(kept, self.keeper)
            return
        live.kind = "handoff"
        await live.handoff.run(hello)

    async def guarded(self, stream: trio.SocketStream, pid: int, serve: Callable[[], Awaitable[None]] | None) -> None:
        """Run `serve` for one connection counted in `active` (a connection accepted here, or one a
        predecessor daemon handed over), judge how it ended, then count it out and close it."""
        try:
            try:
                if serve is not None:
                    await serve()
            except BaseExceptionGroup as group:
                # A session's nursery wraps what its read loop raised (a bad or slow frame) in a
                # group: judged below like the bare exception it is, not as an internal error.
                raise _sole(group) from None
        except WireError as exc:
            log.warning("closing a connection from pid %d after a bad frame: %s", pid, exc)
        except SlowPeer as exc:
            log.warning("closing a connection from pid %d: %s", pid, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except Exception:
            # A bug: it must cost this connection only, never the listener or the daemon.
            log.exception("internal error while serving a connection from pid %d; closing it", pid)
        finally:
            self.active -= 1
            self.live.pop(id(stream), None)
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def serve_from_hello(self, stream: trio.SocketStream, pid: int, frames: Frames | None = None) -> None:
        """Serve an admitted connection from its hello on (`frames`: with what was read of it
        already, by a predecessor daemon before an upgrade)."""
        if frames is None:
            frames = Frames(stream, FRAME_DEADLINE_S, self.registry.reading)
        try:
            await self._serve_hello(stream, frames, pid)
        finally:
            close_fds(frames.fds or [])  # descriptors passed with a hello and not taken

    async def _serve_hello(self, stream: trio.SocketStream, frames: Frames, pid: int) -> None:
        live = self.live[id(stream)] = Live(stream, frames.decoder, frames.pending)
        with trio.move_on_after(HELLO_TIMEOUT_S) as scope:
            hello = await frames.next()
        if scope.cancelled_caught:
            log.warning("closing a connection from pid %d: no hello within %g s", pid, HELLO_TIMEOUT_S)
            return
        if hello is None:
            return
        if isinstance(hello, ForeignHello):
            message = (f"wire version {hello.v} is not this daemon's {wire.WIRE_VERSION}: "
                       "restart the daemon (lazyctl stop) so the new version runs")
            self.refusals.note("version", message)
            await stream.send_all(wire.encode(Refusal("version", message)))
            return
        if not isinstance(hello, Hello):
            raise WireError(f"expected a hello frame, got {hello.t!r}")
        live.kind = "control" if hello.role == "ctl" else "opening"
        passed, frames.fds = frames.fds or [], None  # nothing more is received with descriptors
        taken = handoff.take(hello, passed) if hello.role == "shim" else None
        close_fds(passed)
        if hello.role == "ctl":
            await self._control(stream, frames)
        elif hello.reclaim:
            # Only a session systemd kept is reclaimed (`serve_kept`); a shim takes its own back.
            if taken is not None:
                taken[0].close()
                os.close(taken[1])
            await stream.send_all(wire.encode(Refusal("reclaim", "only a session kept by systemd is reclaimed")))
        elif taken is not None:
            # The shim passed the client's pipes: the daemon serves them itself (handoff.py).
            live.kind = "handoff"
            live.handoff = handoff.HandoffSession(self.registry, stream, hello.pid, *taken, self.keeper)
            await live.handoff.run(hello)
        else:
            await self._session(stream, frames, hello)

    async def _session(self, stream: trio.SocketStream, frames: Frames, hello: Hello) -> None:
        cancel = trio.CancelScope()
        try:
            runtime, session = await self.registry.open_session(hello, cancel.cancel, ConnectionOutbox)
            live = self.live.get(id(stream))
            if live is not None:
                live.kind, live.route, live.session = ("session" if isinstance(runtime, EraRoute) else "hub"), runtime, session
        except Refused as exc:
            log.warning("refused a session from pid %s: %s", hello.pid, exc.message)
            await stream.send_all(wire.encode(Refusal(exc.code, exc.message)))
            return
        try:
            await stream.send_all(wire.encode(Welcome(session.cid, runtime.name, os.getpid())))
            await self.relay_session(stream, frames, session, runtime, cancel, peek=handshakes.PEEK_LINES)
        finally:
            runtime.detach(session.cid)

    async def relay_session(self, stream: trio.SocketStream, frames: Frames, session: ConnectionOutbox,
                            route: EraRoute | HubSession, cancel: trio.CancelScope, *, peek: int = 0) -> None:
        """A session's read loop after its welcome (or after an upgrade, which carried it over),
        with its writer task, until the peer or `cancel` ends it; the caller detaches it. The
        first `peek` lines are shown to the registry (a client's `initialize`)."""
        with cancel:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, stream, session, cancel)
                session.fd = stream.socket.fileno()
                while (frame := await frames.next()) is not None:
                    if not isinstance(frame, Line):
                        raise WireError(f"unexpected {frame.t!r} frame in a session")
                    if peek:
                        peek = self.registry.note_client_line(frame.d, peek, session.cid)
                    route.client_line(session.cid, frame.d)
                    if isinstance(route, EraRoute) and not route.has_room():
                        await route.wait_for_room()
                    await session.backlog.wait_drained()  # returns at once, no checkpoint, unless paused
                nursery.cancel_scope.cancel()

    async def _writer(self, stream: trio.SocketStream, session: ConnectionOutbox, cancel: trio.CancelScope) -> None:
        receive = session.receive_channel
        try:
            async for frame in receive:
                batch = [frame]
                while len(batch) < WRITE_BATCH_FRAMES:
                    try:
                        batch.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                data = b"".join(batch) if len(batch) > 1 else frame
                await stream.send_all(data)
                session.backlog.took(len(data), len(batch))
                if receive.statistics().current_buffer_used == 0:
                    session.busy = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        session.fd = None
        cancel.cancel()  # the outbox closed (detached or overflowed) or the peer went away

    async def _with_progress(self, stream: trio.SocketStream, frame: Ctl) -> Any:
        """Run a ctl op while its steps go out as `progress` frames (lazyd/daemon/control/progress.py)."""
        async def send(step: str) -> None:
            with trio.move_on_after(CONTROL_SEND_DEADLINE_S):
                await stream.send_all(wire.encode(Progress(step)))

        pump = progress.Pump(send)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump.run)
            with pump.reporting():
                result = await self.control(frame.op, frame.args)
            nursery.cancel_scope.cancel()
        await pump.flush()
        return result

    async def _control(self, stream: trio.SocketStream, frames: Frames) -> None:
        await stream.send_all(wire.encode(Welcome(0, "control", os.getpid())))
        # Each op bounds its own duration (start timeout, stop ladder), so awaiting it here keeps
        # one request at a time per connection without letting a connection hang for ever.
        while (frame := await frames.next()) is not None:
            if not isinstance(frame, Ctl):
                raise WireError(f"unexpected {frame.t!r} frame on a control connection")
            if frame.op == "upgrade" and self.upgrade is not None:
                ok, data, error = await self.upgrade(stream)  # on success, the successor answers
            elif frame.args.get("progress") is True:
                ok, data, error = await self._with_progress(stream, frame)
            else:
                ok, data, error = await self.control(frame.op, frame.args)
            with trio.move_on_after(CONTROL_SEND_DEADLINE_S) as sending:
                await stream.send_all(wire.encode(Reply(ok, data, error)))
            if sending.cancelled_caught:
                log.warning("closing a control connection that left its reply unread for %g s",
                            CONTROL_SEND_DEADLINE_S)
                return

