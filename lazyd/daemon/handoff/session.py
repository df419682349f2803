"""Hand-off sessions: the daemon reads and writes the client's pipes itself (docs/protocol.md).

The shim passes the client's stdin, its stdout and a shared region with its hello (`take`); once
welcomed, the session has no frames: the daemon relays the client's lines from its stdin and
writes the answers into its stdout (lazyd/daemon/handoff/outbox.py), and the region holds what the
shim would need to take over again (lazyd/daemon/handoff/ledger.py). A session starts fresh or
reclaimed after a crash (`run`), or carried across an upgrade once its outbox is empty
(`carry_on`); how it ends is in docs/protocol.md ("Hand-off").
"""

from __future__ import annotations

import array
import json
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from lazyd.protocol import wire
from lazyd.daemon.control import handshakes
from lazyd.daemon.runtime.era_lanes import EraRoute
from lazyd.daemon.handoff.stored_sessions import Keeper, open_memfds
from lazyd.core.relay import jsonrpc as rpc
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.daemon.handoff.outbox import ClientEnds, HandoffOutbox
from lazyd.daemon.sessions.registry import Registry
from lazyd.daemon.upgrade.inherited import close_fds
from lazyd.errors import Refused
from lazyd.protocol.frames import Hello, Refusal, Welcome
from lazyd.handoff.recovery import Recovery, reclaim
from lazyd.handoff.recovery import error_line as lost_line
from lazyd.handoff.region import LAYOUT, MEMFD_NAME, READ_BYTES, Region, map_region, region_problem, table_extent, unmap
from lazyd.protocol.linepeek import EOF_WAIT_S, LineSplitter, too_long_answer

if TYPE_CHECKING:  # only a type here: the hub is loaded by its first session, not kept by every daemon
    from lazyd.daemon.hub.server import HubSession

log = logging.getLogger("lazyd.conn")

PASSED_FDS = 3  # the client's stdin, its stdout, the region: in this order
EXIT_CUE = b"\n"  # to the shim: the client left, exit 0
STDOUT_CHECK_S = 0.25  # while answering after the client's EOF: how often to see if its stdout closed
STEP_BYTES = 16 * 1024
# What a read after one that held several lines may take (about 64 small calls): the daemon serves
# every other session between two reads, so a client pipelining thousands of calls delays them by
# a short step each; inside a large line a read takes READ_BYTES (its cost is its bytes, not lines).


async def receive_with_fds(sock: Any, size: int, fds: list[int]) -> bytes:
    """One receive that also takes descriptors passed with the bytes (at most PASSED_FDS in all:
    any beyond are closed at once, so a peer cannot make the daemon hold more)."""
    data, ancdata, _flags, _addr = await sock.recvmsg(size, socket.CMSG_SPACE(PASSED_FDS * 4), socket.MSG_CMSG_CLOEXEC)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
    close_fds(fds[PASSED_FDS:])
    del fds[PASSED_FDS:]
    return bytes(data)


def take(hello: Hello, fds: list[int]) -> tuple[ClientEnds, int] | None:
    """The client's ends and the region from what came with `hello` (a hand-off, or a reclaim:
    lazyd/handoff/recovery.py), taken out of `fds`, if the daemon can serve them; else None, `fds`
    left for the caller to close (a hand-off then goes on with frames; a reclaim is refused)."""
    if not hello.handoff and not hello.reclaim:
        return None
    try:
        if len(fds) != PASSED_FDS:
            raise ValueError(f"{len(fds)} descriptors instead of {PASSED_FDS}")
        if hello.layout != LAYOUT:  # a shim of another version: its recovery would read the region otherwise
            raise ValueError(f"region layout {hello.layout}, this daemon writes {LAYOUT}")
        if (unsafe := region_problem(fds[2])) is not None:
            raise ValueError(f"a region the daemon cannot map safely: {unsafe}")
        ends = ClientEnds(fds[0], fds[1])
    except ValueError as exc:
        log.warning("shim pid %d: not taking its hand-off (%s); using frames", hello.pid, exc)
        return None
    region = fds[2]
    fds.clear()
    return ends, region


class HandoffSession:
    """One client served through its own pipes (see the module docstring)."""

    def __init__(self, registry: Registry, stream: trio.SocketStream, pid: int, ends: ClientEnds,
                 region_fd: int, keeper: Keeper | None = None, *, reclaiming: bool = False) -> None:
        """With `reclaiming`, the region is as a lost daemon left it: its recovery is written into
        it first (`reclaim`), or Refused ("reclaim") is raised with everything closed."""
        self.registry = registry
        self.keeper = keeper  # systemd's fd store, where the daemon has one
        self.stream = stream
        self.pid = pid  # the shim's
        self.ends = ends
        try:
            # Mapped whole, and the descriptor closed: the seals (checked by `take`) keep the mapping
            # valid. An upgrade reopens it (`region_fd`).
            self._region_stat = os.fstat(region_fd)
            region = Region(map_region(region_fd), table_extent(region_fd))
        except (OSError, ValueError):
            ends.close()
            raise
        finally:
            os.close(region_fd)
        later = ends.later = registry.heap.later  # what large lines left, given back after them
        self.recovery: Recovery | None = None  # what a reclaimed session still owes its client
        try:
            if reclaiming:
                recovered = reclaim(region)
                if isinstance(recovered, str):
                    raise Refused("reclaim", recovered)
                self.recovery = recovered
            self.ledger = Ledger(region, later, recovery=self.recovery)  # a reclaim is recorded first
        except Exception as exc:
            ends.close()
            unmap(region.buf)
            if not reclaiming or isinstance(exc, Refused):
                raise
            log.exception("shim pid %d: reclaiming its session failed", pid)
            raise Refused("reclaim", "its region could not be written") from None
        state = self.ledger.state  # what it continues from: the head of a partly read line
        head = region.read_head(state.head_len, state.head_area) if state.head_len else b""
        self.lines = LineSplitter(wire.MAX_LINE_BYTES, head, state.discarding)
        self.cancel = trio.CancelScope()
        self.outbox: HandoffOutbox | None = None
        self.route: EraRoute | HubSession | None = None
        self.client_left = False
        self._peek = handshakes.PEEK_LINES

    def make_outbox(self, cid: int, pid: int, on_overflow: Callable[[], None]) -> HandoffOutbox:
        self.outbox = HandoffOutbox(cid, pid, on_overflow, self.ends, self.ledger, self.cancel.cancel, self._client_gone)
        return self.outbox

    async def run(self, hello: Hello) -> None:
        """Open the session `hello` asks for, welcome it, and serve it until it ends. A reclaimed
        session (kept in systemd's fd store across a crash) is told nothing (its waiter takes any
        line for its cue to exit), and first gets what its recovery owes the client."""
        recovery, keeper = self.recovery, self.keeper
        if recovery is not None:
            hello.resume = recovery.carried.resume_lines()  # the handshake from the region
        try:
            try:
                route, outbox = await self.registry.open_session(hello, self.cancel.cancel, self.make_outbox)
            except Refused as exc:
                log.warning("refused a session from pid %s: %s", self.pid, exc.message)
                if recovery is None:
                    await self.stream.send_all(wire.encode(Refusal(exc.code, exc.message)))
                elif keeper is not None:
                    keeper.tally["let_go"] += 1
                return
            if recovery is None:
                await self.stream.send_all(wire.encode(Welcome(outbox.cid, route.name, os.getpid(), handoff=True)))
                log.info("session %d (%s): shim pid %d handed off the client's pipes", outbox.cid, route.name, self.pid)
                if keeper is not None:
                    keeper.keep(self.pid, self.stream.socket.fileno(), self.ends)
            else:
                if self.ledger.region.torn:
                    outbox.deliver(b"")  # a newline first: the lost daemon cut a line
                for text in recovery.ids:
                    outbox.deliver(lost_line(text), json.loads(text))
                log.info("session %d (%s): reclaimed from shim pid %d (kept by systemd across the crash); %d in-flight "
                         "request(s) answered with an error%s", outbox.cid, route.name, self.pid,
                         len(recovery.ids), ", a cut line ended" if recovery.finish is not None else "")
                if keeper is not None:
                    keeper.tally["taken_back"] += 1  # its names are in the store already
            await self._serve(route)
        finally:
            self.close()

    async def carry_on(self, route: EraRoute) -> None:
        """Serve a session a predecessor daemon handed over at an upgrade: no welcome, no
        handshake; the region holds what was in flight and the unrelayed input."""
        self._peek = 0
        await self._serve(route)

    async def _serve(self, route: EraRoute | HubSession) -> None:
        outbox = self.outbox
        assert outbox is not None
        self.route = route
        try:
            with self.cancel:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(outbox.run_writer)
                    nursery.start_soon(self._watch_shim)
                    await self._read_client()
                    await self._drain()
                    self._client_gone()
        finally:
            try:
                self._finish(route, outbox)
            finally:
                self.close()

    def carried(self) -> bool:
        """Whether an upgrade can hand this session over whole (it is not ending)."""
        return not (self.client_left or self.ends.closed or self.cancel.cancel_called)

    def close(self) -> None:
        """Close the daemon's copies of the client's ends and its mapping of the region, with
        the session's names out of the fd store first: the socket's close that follows must reach
        the shim."""
        if self.keeper is not None:
            self.keeper.drop(self.pid)
        self.ends.close()
        if not self.ledger.region.buf.closed:
            unmap(self.ledger.region.buf)

    def region_fd(self) -> int | None:
        """The region again, for an upgrade to pass on: the shim's own copy reopened through /proc
        and checked to be the same file; None if the shim holds it no more."""
        fds = open_memfds(self.pid, MEMFD_NAME, os.O_RDWR)
        same = [fd for fd in fds if os.path.samestat(os.fstat(fd), self._region_stat)][:1]
        close_fds(set(fds) - set(same))
        return same[0] if same else None

    def _client_gone(self) -> None:
        self.client_left = True
        if self.outbox is not None:
            self.outbox.closed = True  # nothing more reaches a client that left
        self.cancel.cancel()

    def _finish(self, route: EraRoute | HubSession, outbox: HandoffOutbox) -> None:
        """Detach, and leave the region as the shim will find it (docs/protocol.md, "Hand-off")."""
        if self.client_left:
            self.ledger.close(client_left=True)
            try:
                os.write(self.stream.socket.fileno(), EXIT_CUE)
            except OSError:
                pass  # the shim is gone already
        else:
            outbox.closed = True
            if not outbox.dropped:
                outbox.write_ready()  # what the client's stdout takes now; the rest is lost with us
            outbox.let_go()
        route.detach(outbox.cid)

    async def _watch_shim(self) -> None:
        # The shim sends nothing after its hello: EOF means it is gone, bytes that it is broken.
        data = await self.stream.receive_some(64)
        if data:
            log.warning("session %d: shim pid %d sent bytes after handing off; ending the session",
                        self.outbox.cid if self.outbox else 0, self.pid)
        self.cancel.cancel()

    async def _drain(self) -> None:
        """The client closed its stdin: answer what it asked before (as a server run directly
        does) until nothing is in flight, its stdout closes, or EOF_WAIT_S pass."""
        ledger, ends = self.ledger, self.ends
        if not ledger.inflight:
            return
        log.info("session %d: the client closed stdin; waiting for %d answer(s)",
                 self.outbox.cid if self.outbox else 0, ledger.inflight)
        answered = trio.Event()
        ledger.on_empty = answered.set
        with trio.move_on_after(EOF_WAIT_S):
            while ledger.inflight and not ends.out_closed():
                with trio.move_on_after(STDOUT_CHECK_S):
                    await answered.wait()
        ledger.on_empty = None

    async def _read_client(self) -> None:
        """Relay the client's lines until its stdin ends; returns at EOF. A read goes into the region
        (`Ledger.input`) and is relayed and accounted for before the next await: an upgrade finds
        every read accounted for, a kill -9 at most one read in the region and not accounted for."""
        route, outbox, ledger = self.route, self.outbox, self.ledger
        assert route is not None and outbox is not None
        emptied = False  # the last read found the pipe empty or took less than it could
        limit = STEP_BYTES
        while True:
            await self.registry.reading.passage()  # an upgrade stops reading here (lazyd/daemon/gate.py)
            if emptied:
                await trio.lowlevel.wait_readable(self.ends.in_fd)  # rather than a read that says EAGAIN
            else:
                await trio.lowlevel.checkpoint()  # a client that floods must not starve the others
            with ledger.input(limit) as view:  # released before the next await: an upgrade unmaps the region
                got = self.ends.read_into(view)
                data = bytes(view[:got]) if got else b""
            emptied = got is None or got < limit
            if got is None:
                continue
            if got:
                self._take(data)
            else:  # at EOF, a last line without its newline is still a line (lazyd/protocol/linepeek.py)
                self._relay(self.lines.finish())
            ledger.accounted(got, self.lines.buffer, self.lines.discarding)
            if not got:
                return
            limit = STEP_BYTES if self.lines.newlines > 1 else READ_BYTES
            if isinstance(route, EraRoute) and not route.has_room():
                await route.wait_for_room()
            await outbox.backlog.wait_drained()  # returns at once, no checkpoint, unless paused

    def _take(self, data: bytes) -> None:
        """Relay the lines of one read (a seam the kill tests hold: tests/e2e/seams/sitecustomize.py)."""
        self._relay(self.lines.feed(data))

    def _relay(self, lines: list[tuple[bytes, bool]]) -> None:
        route, outbox = self.route, self.outbox
        assert route is not None and outbox is not None
        for line, too_long in lines:
            if too_long:
                answer = too_long_answer(line, wire.MAX_LINE_BYTES)
                if answer is not None:
                    outbox.deliver(answer)
                log.info("session %d: %s a line over %d bytes", outbox.cid, "answered with -32600"
                         if answer is not None else "dropped (no readable request id)", wire.MAX_LINE_BYTES)
                continue
            parsed = rpc.parse(line)  # once, for the ledger and the relay
            self.ledger.client_line(line, parsed)
            if self._peek:
                self._peek = self.registry.note_client_line(line, self._peek, outbox.cid)
            route.client_line(outbox.cid, line, parsed)
