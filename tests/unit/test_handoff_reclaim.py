"""Taking back a lost daemon's hand-off session: the one decision (lazyd/handoff/recovery.py) the
shim's recovery and the reclaiming daemon share, and the daemon's in-place record of it
(`reclaim` decides it, the session's ledger writes it into the region), which a
kill -9 may cut after any write.

Testing policy: literal regions (a lost daemon's state, table, head areas and torn byte, written
through the region's own writers) in shared anonymous memory or a real sealed memfd; the shim's
recovery and the reclaiming daemon's session (its route a recorder) write into real pipes. A kill is played by a buffer that refuses every store after the k-th (a write, or pages
given back): each is a store a kill -9 cannot tear (single bytes, and states behind the state byte).
"""

from __future__ import annotations

import json
import mmap
import os
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from lazyd.daemon.gate import Gate
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.daemon.handoff.outbox import ClientEnds
from lazyd.daemon.handoff.session import HandoffSession
from lazyd.daemon.heap_trim import HeapTrimmer
from lazyd.handoff import region as hs
from lazyd.handoff.recovery import Recovery, error_line, plan, reclaim
from lazyd.handoff.region import Region, State, map_region, unmap
from lazyd.protocol.frames import MAX_LINE_BYTES, Hello
from lazyd.protocol.linepeek import LineSplitter
from shim import recover
from shim.options import Log, parse
from shim.stdout import Stdout

INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}'
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def call(request_id: int | str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}).encode()


def lost(*, torn: bool = True, landed: bool = True, closed: bool = False, tail: bytes = b"",
         stale: bool = True, buf: mmap.mmap | None = None) -> mmap.mmap:
    """A region as a daemon killed mid-session leaves it: ids 1 and "a" in the table, the start of
    call 9 as the head in area 1, and (with `landed`) a read after it that finishes call 9, holds
    call 10 and call 1 again and starts call 11; with `stale`, area 0 still holds a read the
    daemon had accounted for and not yet zeroed (killed between its state write and the zeroing).
    Written into `buf` (a mapped region) if given, else into anonymous memory."""
    buf = mmap.mmap(-1, hs.REGION_BYTES) if buf is None else buf
    region = Region(buf)
    state = State()
    state.init, state.initialized, state.init_answered = INIT, INITIALIZED, True
    region.set_id(0, b"1")
    region.set_id(3, b'"a"')
    region.write_head(call(9)[:20], 0, 1)
    state.head_len, state.head_area, state.closed = 20, 1, closed
    if tail:
        region.write_head(tail, 0, 0)  # the head area the state does not name
        state.tail_len = len(tail)
    elif stale:
        region.write_head(call(99) + b"\n", 0, 0)
    if landed:
        region.write_head(call(9)[20:] + b"\n" + call(10) + b"\n" + call(1) + b"\n" + call(11)[:15], 20, 1)
    region.write(state)
    region.torn = torn
    return buf


def reclaim_and_record(region: Region) -> Recovery | str:
    """What the reclaiming daemon does with `region`: decide, then its session's ledger records it."""
    done = reclaim(region)
    if isinstance(done, Recovery):
        Ledger(region, recovery=done)
    return done


class Route:
    """Where the reclaimed session's lines go (the relay core has tests of its own)."""

    name = "fixture"

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def client_line(self, cid: int, line: bytes, parsed: object = None) -> None:
        self.lines.append(line)

    def detach(self, cid: int) -> None:
        pass


async def reclaimed_by_the_daemon(torn: bool) -> tuple[bytes, Region, Route]:
    """Run a reclaiming daemon's session (HandoffSession.run) on a real region left as `lost`,
    for a client that then closes its stdin: what the client's stdout got, the region after it,
    and what was relayed."""
    fd = hs.create_region()
    unmap(lost(torn=torn, buf=map_region(fd)))
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    ends = ClientEnds(os.open(f"/proc/self/fd/{in_r}", os.O_RDONLY | os.O_NONBLOCK),
                      os.open(f"/proc/self/fd/{out_w}", os.O_WRONLY | os.O_NONBLOCK))
    os.close(in_r)
    os.close(out_w)
    os.close(in_w)  # the client's EOF: the session ends once its errors are written
    route = Route()

    async def open_session(hello: Hello, cancel: object, make_outbox: Any) -> tuple[Route, Any]:
        assert hello.resume == [INIT, INITIALIZED]  # the handshake the region recorded
        return route, make_outbox(1, hello.pid, cancel)

    registry = SimpleNamespace(reading=Gate(), heap=HeapTrimmer(), open_session=open_session,
                               note_client_line=lambda line, peek, cid: peek - 1)
    daemon_end, shim_end = trio.socket.socketpair()
    session = HandoffSession(registry, trio.SocketStream(daemon_end), os.getpid(), ends, os.dup(fd),  # type: ignore[arg-type]
                             reclaiming=True)
    await session.run(Hello("shim", os.getpid(), ["true"], "/", {}, {}, None, [], handoff=True, reclaim=True,
                            layout=hs.LAYOUT))
    assert await shim_end.recv(64) == b"\n"  # its waiter is told the client left
    shim_end.close()
    daemon_end.close()
    sent = os.read(out_r, 1 << 20)
    os.close(out_r)
    region = hs.read_region(fd)
    os.close(fd)
    assert region is not None
    return sent, region, route


def test_one_plan_finishes_the_cut_line_and_answers_each_id_in_the_table_and_after_the_head_once() -> None:
    done = plan(Region(lost()))
    assert done.finish == b"\n"
    assert done.ids == [b"1", b'"a"', b"9", b"10"]  # 1 is in the table and in the read: once
    assert done.head == call(11)[:15] and done.carried.head_len == 15 and not done.carried.discarding
    assert done.carried.resume_lines() == [INIT, INITIALIZED]
    nothing = plan(None)
    assert nothing.finish is None and nothing.ids == [] and nothing.carried.resume_lines() == []


@pytest.mark.parametrize("torn", [True, False])
async def test_the_shim_and_the_reclaiming_daemon_write_the_client_the_same_bytes(torn: bool) -> None:
    read_end, write_end = os.pipe()
    try:
        log = Log(parse(["--", "true"], {}))
        recover.answer(Region(lost(torn=torn)), Stdout(log, write_end), log)
        by_shim = os.read(read_end, 1 << 20)
    finally:
        os.close(read_end)
        os.close(write_end)
    by_daemon, region, route = await reclaimed_by_the_daemon(torn)
    assert by_daemon == by_shim and by_shim.startswith(b"\n") == torn
    # Every error written, the cut line ended: nothing left for a next recovery to write.
    assert region.entries() == [] and not region.torn
    assert route.lines == [call(11)[:15]]  # the partial line read after the head, relayed at EOF
    unmap(region.buf)


def test_the_shim_and_the_reclaiming_daemon_carry_the_same_session() -> None:
    read_end, write_end = os.pipe()
    try:
        log = Log(parse(["--", "true"], {}))
        carried, head = recover.answer(Region(lost()), Stdout(log, write_end), log)
    finally:
        os.close(read_end)
        os.close(write_end)
    buf = lost()
    done = reclaim_and_record(Region(buf))
    assert isinstance(done, Recovery)
    # What the next reader of the region continues from: the same handshake and partial line.
    region = Region(buf)
    after = region.current
    assert after is not None
    assert region.read_head(after.head_len, after.head_area) == head
    assert after.resume_lines() == carried.resume_lines()
    assert after.discarding == carried.discarding and region.unaccounted(after) == b""


class Killed(Exception):
    pass


class KilledAfter:
    """A region buffer whose stores stop after the `stores`-th: a kill -9 between two stores."""

    def __init__(self, buf: mmap.mmap, stores: int) -> None:
        self.buf, self.left = buf, stores

    def __getitem__(self, key: Any) -> Any:
        return self.buf[key]

    def _store(self) -> None:
        if self.left == 0:
            raise Killed
        self.left -= 1

    def __setitem__(self, key: Any, value: Any) -> None:
        self._store()
        self.buf[key] = value

    def madvise(self, *args: int) -> None:
        self._store()
        self.buf.madvise(*args)


@pytest.mark.parametrize("torn", [True, False])
def test_a_kill_after_any_write_of_the_reclaiming_leaves_the_next_recovery_the_same_duty(torn: bool) -> None:
    expected = plan(Region(lost(torn=torn)))
    writes = 0
    while True:
        buf = lost(torn=torn)
        try:
            reclaim_and_record(Region(KilledAfter(buf, writes)))
            done = True
        except Killed:
            done = False
        # The next recovery (a reclaiming or the shim's) of what this kill left.
        again = plan(Region(buf))
        assert set(again.ids) == set(expected.ids), (writes, again.ids)  # none lost, none invented
        assert again.finish == expected.finish, writes  # a cut line still ended
        assert again.head == expected.head and again.carried.resume_lines() == expected.carried.resume_lines()
        if done:
            assert again.read == b"" and writes > 3  # all of the read accounted for, in table and head
            break
        writes += 1


@pytest.mark.parametrize("rest", [b"", call(11)[:15]], ids=["a read ending a line", "a read starting one"])
def test_a_kill_after_any_store_of_a_read_s_accounting_leaves_the_recovery_its_requests_and_its_head(
        rest: bytes) -> None:
    read = call(9)[20:] + b"\n" + call(10) + b"\n" + rest
    stores = 0
    while True:
        buf = lost(torn=False, landed=False, stale=False)
        ledger = Ledger(Region(buf))  # the session's, as a daemon continuing it holds it
        Region(buf).write_head(read, 20, 1)  # the read of the client's stdin, after the head
        ledger.region.buf = KilledAfter(buf, stores)
        lines = LineSplitter(MAX_LINE_BYTES, call(9)[:20])
        try:
            for line, _ in lines.feed(read):
                ledger.client_line(line)
            ledger.accounted(len(read), lines.buffer, lines.discarding)
            done = True
        except Killed:
            done = False
        again = plan(Region(buf))
        assert set(again.ids) == {b"1", b'"a"', b"9", b"10"}, (stores, again.ids)
        assert again.head == rest and again.carried.head_len == len(rest), stores
        if done:
            assert again.read == b"" and stores > 3
            break
        stores += 1


@pytest.mark.parametrize("kind", ["the client left", "a tail to write"])
def test_a_region_whose_client_left_or_that_holds_a_tail_is_not_reclaimed_and_is_left_untouched(kind: str) -> None:
    buf = lost(closed=kind == "the client left", tail=b'rest of a line"}}\n' if kind == "a tail to write" else b"")
    before = bytes(buf)
    refused = reclaim_and_record(Region(buf))
    assert isinstance(refused, str)
    assert bytes(buf) == before


def test_a_reclaimed_session_s_ledger_holds_every_id_its_recovery_answers_and_the_table_empties_as_each_is_written() -> None:
    buf = lost()
    region = Region(buf)
    done = reclaim(region)
    assert isinstance(done, Recovery)
    ledger = Ledger(region, recovery=done)
    # One table: the ids the outbox will answer are the ledger's, and the region's table is
    # written from it (the landed 9 and 10 beside the lost daemon's 1 and "a").
    assert ledger.inflight == len(done.ids) == 4
    assert sorted(text for _, text in Region(buf).entries()) == sorted(done.ids)
    for text in done.ids:
        ledger.answered(json.loads(text))  # its error line wholly written
    assert ledger.inflight == 0 and Region(buf).entries() == []


def test_a_landed_request_the_table_cannot_hold_is_in_the_ledger_alone_until_its_error_is_written() -> None:
    long_id = "x" * hs.ENTRY_BYTES  # its JSON text is over an entry
    buf = lost(landed=False)
    region = Region(buf)
    region.write_head(call(9)[20:] + b"\n" + call(long_id) + b"\n", 20, 1)
    done = reclaim(region)
    assert isinstance(done, Recovery) and json.dumps(long_id).encode() in done.ids
    ledger = Ledger(region, recovery=done)
    assert ledger.inflight == len(done.ids) and len(Region(buf).entries()) == len(done.ids) - 1
    ledger.answered(long_id)
    assert ledger.inflight == len(done.ids) - 1
