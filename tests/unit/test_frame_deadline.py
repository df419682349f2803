"""The daemon's per-frame deadline (connection.Frames) charges a peer only for time the daemon
spent waiting on it: a slowloris is still cut off, but a client whose half-read frame sat in the
socket while the daemon held back (backpressure toward a stalled server) is not.

Real socket pairs and trio's autojump clock: the 30 s deadline is checked exactly and costs nothing.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from lazyd.protocol import wire
from lazyd.daemon.connections.listener import Frames
from lazyd.daemon.gate import Gate
from lazyd.errors import SlowPeer
from lazyd.protocol.frames import Line

DEADLINE_S = 30.0


def line_frame(size: int) -> bytes:
    return wire.encode_line(b"x" * size)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[socket.socket, Frames]]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    try:
        yield theirs, Frames(stream, DEADLINE_S, Gate())
    finally:
        theirs.close()
        await stream.aclose()


async def test_a_frame_that_never_finishes_is_cut_off_at_the_deadline(
    pair: tuple[socket.socket, Frames], autojump_clock: trio.testing.MockClock
) -> None:
    peer, frames = pair
    peer.send(line_frame(1000)[:10])
    began = trio.current_time()
    with pytest.raises(SlowPeer):
        await frames.next()
    assert trio.current_time() - began == pytest.approx(DEADLINE_S)


async def test_time_the_daemon_spends_away_from_reading_is_not_charged_to_the_peer(
    pair: tuple[socket.socket, Frames], autojump_clock: trio.testing.MockClock
) -> None:
    peer, frames = pair
    second = line_frame(1000)
    peer.send(line_frame(10) + second[:500])  # one whole frame and the start of the next
    first = await frames.next()
    assert isinstance(first, Line) and first.d == b"x" * 10
    await trio.sleep(5 * DEADLINE_S)  # the daemon waits for room before it reads on
    async with trio.open_nursery() as nursery:
        async def finish_later() -> None:
            await trio.sleep(DEADLINE_S / 2)  # a slow peer within the deadline (virtual time)
            peer.send(second[500:])
        nursery.start_soon(finish_later)
        frame = await frames.next()
    assert isinstance(frame, Line) and frame.d == b"x" * 1000


async def test_waits_for_one_frame_add_up_across_reads(
    pair: tuple[socket.socket, Frames], autojump_clock: trio.testing.MockClock
) -> None:
    peer, frames = pair
    whole = line_frame(1000)
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        async def dribble() -> None:
            # A byte every 20 s: no single wait reaches the deadline, their sum does.
            for byte in whole[:5]:
                peer.send(bytes([byte]))
                await trio.sleep(20)
        nursery.start_soon(dribble)
        with pytest.raises(SlowPeer):
            await frames.next()
        nursery.cancel_scope.cancel()
    assert trio.current_time() - began == pytest.approx(DEADLINE_S)


async def test_between_frames_a_session_may_idle_forever(
    pair: tuple[socket.socket, Frames], autojump_clock: trio.testing.MockClock
) -> None:
    peer, frames = pair
    async with trio.open_nursery() as nursery:
        async def send_late() -> None:
            await trio.sleep(100 * DEADLINE_S)  # the idle spell under test, in virtual time (autojump clock)
            peer.send(line_frame(5))
        nursery.start_soon(send_late)
        frame = await frames.next()
    assert isinstance(frame, Line) and frame.d == b"x" * 5
