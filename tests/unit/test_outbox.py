"""A client's outbox in the daemon (lazyd/daemon/runtime/outbox.py) is bounded by the bytes it holds now, not
by the bytes that passed through it: a client that keeps reading through a long stream stays
connected, one that falls behind has its own requests paused until it catches up, and one that
stops reading is dropped once 64 MiB wait for it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from lazyd.protocol import wire
from lazyd.daemon.runtime.outbox import LineOutbox, ConnectionOutbox

MIB = 1024 * 1024
# The documented bounds (docs/reliability.md), as numbers: test_documented_limits.py compares them
# with the code's constants once.
PAUSE_BYTES, PAUSE_FRAMES = 16 * MIB, 1_024  # "once 16 MiB (or 1,024 frames) of answers wait for it"
BACKLOG_BYTES, BACKLOG_FRAMES = 64 * MIB, 32_768  # "once 64 MiB (or 32,768 frames) wait in its outbox"
SERVER_BACKLOG_BYTES = 32 * MIB  # "once 32 MiB wait for a server's stdin"


class Outbox:
    """A ConnectionOutbox with no socket yet (every frame is queued) and a writer the test drives."""

    def __init__(self) -> None:
        self.overflows = 0
        self.session = ConnectionOutbox(cid=1, pid=4242, on_overflow=self._overflowed)

    def _overflowed(self) -> None:
        self.overflows += 1

    def deliver(self, count: int, size: int = MIB) -> None:
        """Deliver `count` lines, each encoded as a frame of `size` bytes (when `size` is more than
        a frame's overhead): the outbox counts the frames it holds, the bounds are in frame bytes."""
        line = b"x" * size
        overhead = len(wire.encode_line(line)) - size
        if overhead < size:
            line = b"x" * (size - overhead)
            assert len(wire.encode_line(line)) == size
        for _ in range(count):
            self.session.deliver(line)

    def write(self, count: int) -> None:
        """The writer takes `count` frames and puts them in the socket."""
        for _ in range(count):
            frame = self.session.receive_channel.receive_nowait()
            self.session.backlog.took(len(frame), 1)


BOUND_MIB = BACKLOG_BYTES // MIB


def test_a_client_that_keeps_reading_is_never_dropped_however_much_passes_through() -> None:
    box = Outbox()
    box.deliver(BOUND_MIB - 4)
    for _ in range(20):  # never empty, never more than the bound: 20 times the bound in all
        box.write(BOUND_MIB - 8)
        box.deliver(BOUND_MIB - 8)
    assert box.overflows == 0 and not box.session.dropped
    assert box.session.backlog.bytes == (BOUND_MIB - 4) * MIB


def test_a_client_that_stops_reading_is_dropped_once_the_bound_is_queued() -> None:
    box = Outbox()
    box.deliver(BOUND_MIB)
    assert box.overflows == 0
    box.deliver(1)
    assert box.overflows == 1 and box.session.dropped


def test_a_dropped_client_gets_nothing_more_and_is_reported_once() -> None:
    box = Outbox()
    box.deliver(BOUND_MIB + 5)
    assert box.overflows == 1
    assert box.session.receive_channel.statistics().current_buffer_used == BOUND_MIB


def test_a_client_that_stops_reading_tiny_answers_is_dropped_once_the_frame_bound_is_queued() -> None:
    box = Outbox()
    box.deliver(BACKLOG_FRAMES, size=10)
    assert box.overflows == 0
    box.deliver(1, size=10)
    assert box.overflows == 1 and box.session.dropped


PAUSE_MIB = PAUSE_BYTES // MIB


def test_the_pause_leaves_room_for_every_answer_already_on_its_way() -> None:
    # Answers no larger than their requests never overflow a paused client: what it can still be
    # owed is the pause, the server's backlog and two 1 MiB pipes.
    assert PAUSE_BYTES + SERVER_BACKLOG_BYTES + 2 * MIB < BACKLOG_BYTES


def test_a_client_that_falls_behind_is_paused_and_resumed_once_it_reads() -> None:
    box = Outbox()
    box.deliver(PAUSE_MIB - 1)
    assert not box.session.backlog.should_pause()
    box.deliver(1)
    assert box.session.backlog.should_pause()
    box.write(1)
    assert not box.session.backlog.should_pause()


async def test_a_paused_reader_wakes_when_the_writer_catches_up(autojump_clock: trio.testing.MockClock) -> None:
    box = Outbox()
    box.deliver(PAUSE_MIB + 3)
    woke_at: list[float] = []

    async def reader() -> None:
        await box.session.backlog.wait_drained()
        woke_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(10)  # virtual time (autojump clock): the reader must sleep through it
        box.write(3)  # still at the pause: the reader sleeps on
        await trio.sleep(10)  # virtual time (autojump clock), as above
        assert woke_at == []
        box.write(1)
    assert woke_at == [20.0]


def test_a_flood_of_tiny_answers_pauses_the_client_long_before_it_could_be_cut() -> None:
    box = Outbox()
    box.deliver(PAUSE_FRAMES - 1, size=10)
    assert not box.session.backlog.should_pause()
    box.deliver(1, size=10)
    assert box.session.backlog.should_pause()
    box.write(1)
    assert not box.session.backlog.should_pause()
    # What a paused client can still be owed: 10,000 requests queued for the server and a 1 MiB
    # pipe of the smallest requests (~60 bytes each), answered one frame each.
    assert PAUSE_FRAMES + 10_000 + (1024 * 1024) // 60 < BACKLOG_FRAMES


# ---- the outbox of a session inside the daemon (a hub call) --------------------------------------


READ_BOUND_S = 10.0  # taking what is queued is instant; reached only when the outbox never ends


class Internal:
    def __init__(self) -> None:
        self.overflows = 0
        self.outbox = LineOutbox(cid=-1, pid=4242, on_overflow=self._overflowed)

    def _overflowed(self) -> None:
        self.overflows += 1


async def taken(outbox: LineOutbox) -> list[tuple[bytes, object]]:
    """Every (line, done) the reader gets until the outbox ends (which must come: bounded)."""
    with trio.fail_after(READ_BOUND_S):
        return [item async for item in outbox.lines()]


async def test_an_internal_session_reads_the_lines_themselves_in_order_and_never_a_frame(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_wire(*args: object) -> bytes:
        raise AssertionError("an internal session encoded a frame")

    monkeypatch.setattr(wire, "encode_line", no_wire)
    box = Internal()
    box.outbox.deliver(b'{"a":1}')
    box.outbox.deliver(b'{"b":2}', 7)
    box.outbox.deliver(b'{"c":3}', "x")
    box.outbox.close()
    assert await taken(box.outbox) == [(b'{"a":1}', None), (b'{"b":2}', 7), (b'{"c":3}', "x")]
    assert box.outbox.backlog.bytes == 0 and box.overflows == 0


async def test_an_internal_session_that_falls_behind_by_the_byte_bound_is_dropped_and_ends() -> None:
    box = Internal()
    for _ in range(BOUND_MIB):
        box.outbox.deliver(b"x" * MIB)
    assert box.overflows == 0 and box.outbox.backlog.bytes == BACKLOG_BYTES
    box.outbox.deliver(b"x")
    box.outbox.deliver(b"y")  # nothing more once dropped, and reported once
    assert box.overflows == 1 and box.outbox.dropped
    lines = await taken(box.outbox)  # what was queued, then the end: the call is not left waiting
    assert len(lines) == BOUND_MIB and box.outbox.backlog.bytes == 0


async def test_an_internal_session_that_falls_behind_by_the_frame_bound_is_dropped() -> None:
    box = Internal()
    for _ in range(BACKLOG_FRAMES):
        box.outbox.deliver(b"{}")
    assert box.overflows == 0
    box.outbox.deliver(b"{}")
    assert box.overflows == 1 and len(await taken(box.outbox)) == BACKLOG_FRAMES


async def test_a_reader_that_keeps_up_passes_far_more_than_the_bound_through() -> None:
    box = Internal()
    async with trio.open_nursery() as nursery:
        got = []

        async def read() -> None:
            async for line, _ in box.outbox.lines():
                got.append(len(line))

        nursery.start_soon(read)
        for _ in range(3 * BOUND_MIB):
            box.outbox.deliver(b"x" * MIB)
            await trio.sleep(0)  # the reader's turn, as the daemon's loop gives it
        box.outbox.close()
    assert box.overflows == 0 and got == [MIB] * (3 * BOUND_MIB)
