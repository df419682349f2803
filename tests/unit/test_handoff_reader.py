"""The reader of a hand-off session's client stdin (`HandoffSession._read_client`,
lazyd/daemon/handoff/session.py): a client that pipelines thousands of calls is read, relayed and
recorded in bounded steps (one short read each), with the daemon's other tasks run between two of them,
and at every moment it yields each byte it took from the client's stdin is either relayed and
recorded or in the region's head, where a kill -9 or an upgrade finds it.

Testing policy: a real pipe (opened afresh with O_NONBLOCK, as the shim passes it), a real sealed
memfd region mapped as the daemon maps it and read back as the shim reads it, the real
reader under trio. The route the lines are relayed to records them (the relay core has tests of
its own); no daemon, no processes.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import termios
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
import trio

from lazyd.daemon.handoff import session as handoff
from lazyd.daemon.handoff.outbox import ClientEnds
from lazyd.daemon.handoff.session import HandoffSession
from lazyd.daemon.heap_trim import HeapTrimmer
from lazyd.daemon.gate import Gate
from lazyd.handoff.region import State, read_region, unmap

CALLS = 3000  # about 260 KB of small calls, as a pipelining client writes them


def as_the_shim_reads(fd: int) -> tuple[State, bytes, bytes]:
    """The state, the input read and not accounted for, and the head, as a recovering shim reads them."""
    region = read_region(fd)
    assert region is not None and region.current is not None
    state = region.current
    landed, head = region.unaccounted(state), region.read_head(state.head_len, state.head_area)
    unmap(region.buf)
    return state, landed, head


def call(request_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": f"pipelined {request_id}"}}}).encode()


class Route:
    """Where the reader relays the client's lines (a route's `client_line`), each with the number
    of times the daemon's other tasks had run when it came."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, bytes]] = []
        self.ticks = 0

    def client_line(self, cid: int, line: bytes, parsed: object = None) -> None:
        self.lines.append((self.ticks, line))

    def relayed_bytes(self) -> int:
        return sum(len(line) + 1 for _, line in self.lines)


class Flood:
    """A client's stdin holding `CALLS` calls and then its EOF, and a session reading it."""

    def __init__(self, region_fd: int) -> None:
        read_end, write_end = os.pipe()
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)  # the whole flood fits: no writer task
        self.data = b"".join(call(n) + b"\n" for n in range(CALLS))
        assert len(self.data) < 1 << 20
        os.write(write_end, self.data)
        os.close(write_end)  # the client's EOF comes after its last call
        self.pipe = read_end
        in_fd = os.open(f"/proc/self/fd/{read_end}", os.O_RDONLY | os.O_NONBLOCK)
        out_r, out_w = os.pipe()
        out_fd = os.open(f"/proc/self/fd/{out_w}", os.O_WRONLY | os.O_NONBLOCK)
        os.close(out_w)
        self.stdout = out_r
        self.route = Route()
        self.registry = SimpleNamespace(reading=Gate(), heap=HeapTrimmer())  # the parts of the daemon its session uses
        self.session = self.open(ClientEnds(in_fd, out_fd), region_fd)

    def open(self, ends: ClientEnds, region_fd: int) -> HandoffSession:
        session = HandoffSession(self.registry, None, 0, ends, os.dup(region_fd))  # type: ignore[arg-type]
        session.make_outbox(1, 0, lambda: None)
        session.route = self.route  # type: ignore[assignment]
        session._peek = 0  # no handshake among these lines: nothing to show the registry
        return session

    def taken(self) -> int:
        """Bytes of the client's stdin the daemon has read so far (what the pipe no longer holds)."""
        left: int = struct.unpack("i", fcntl.ioctl(self.pipe, termios.FIONREAD, b"\0" * 4))[0]
        return len(self.data) - left

    def close(self) -> None:
        self.session.close()
        os.close(self.pipe)
        os.close(self.stdout)


@pytest.fixture
async def flood(fd: int) -> AsyncIterator[Flood]:
    peer = Flood(fd)
    yield peer
    peer.close()  # in trio: closing the client's ends wakes whoever waits on them


def expected_lines() -> list[bytes]:
    return [call(n) for n in range(CALLS)]


async def test_a_client_pipelining_thousands_of_calls_is_read_in_bounded_steps_with_the_other_tasks_run_between(
        fd: int, flood: Flood) -> None:
    moments: list[tuple[int, int, int, int]] = []  # (taken, relayed, landed + head, in the table)

    async def other_sessions() -> None:
        # Another task of the daemon: it runs once per scheduler round, between the reader's steps.
        while True:
            flood.route.ticks += 1
            state, landed, head = as_the_shim_reads(fd)
            moments.append((flood.taken(), flood.route.relayed_bytes(), len(landed) + len(head), len(state.inflight)))
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_sessions)
        await flood.session._read_client()
        nursery.cancel_scope.cancel()

    lines = [line for _, line in flood.route.lines]
    assert lines == expected_lines()  # each once, in order
    steps: dict[int, int] = {}
    for tick, _ in flood.route.lines:
        steps[tick] = steps.get(tick, 0) + 1
    # trio runs a round's tasks in either order, so two of the reader's steps can fall between two
    # of the other task's; one step is one read, of at most STEP_BYTES after a read of several lines.
    shortest = min(len(line) + 1 for line in lines)
    bound = 2 * (handoff.STEP_BYTES // shortest + 1)
    assert max(steps.values()) <= bound, f"{max(steps.values())} lines relayed without a yield"
    assert len(steps) >= CALLS // bound
    # At every moment the reader yielded, each byte it had taken was relayed and recorded (its
    # request in the region's table), or in the region for a kill -9 or an upgrade to find.
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    lines_of = {end: count for count, end in enumerate(offsets)}
    for taken, relayed, in_region, recorded in moments:
        assert taken == relayed + in_region
        assert recorded == lines_of[relayed]
    state, landed, head = as_the_shim_reads(fd)
    assert landed == b"" and head == b""
    assert sorted(int(i) for i in state.inflight) == list(range(CALLS))


async def test_a_reader_stopped_at_the_upgrade_gate_mid_flood_leaves_all_it_read_accounted_for_and_its_successor_relays_the_rest_once(
        fd: int, flood: Flood) -> None:
    """An upgrade closes the gate and execs once the readers stop (lazyd/daemon/upgrade/handover.py):
    the reader stops at its gate with every read it made relayed and recorded, and the successor, mapping the same
    region and reading the same pipe, relays what is left: every line once, in order."""
    parked = trio.Event()

    async def upgrade() -> None:
        while len(flood.route.lines) < CALLS // 3:
            await trio.lowlevel.checkpoint()
        flood.registry.reading.close()
        for _ in range(5):
            await trio.sleep(0)  # as the hand-over's settle does: readers with data run to their gate
        parked.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(upgrade)
            nursery.start_soon(flood.session._read_client)
            await parked.wait()
            # The exec: nothing of this daemon runs again; what it leaves is the region and the pipe.
            nursery.cancel_scope.cancel()
        before = len(flood.route.lines)
        state, landed, head = as_the_shim_reads(fd)
        assert flood.taken() == flood.route.relayed_bytes() + len(head) and landed == b""
        assert sorted(int(i) for i in state.inflight) == list(range(before))
    finally:
        flood.registry.reading.open()
    successor = flood.open(ClientEnds(os.dup(flood.session.ends.in_fd), os.dup(flood.session.ends.out_fd)), fd)
    successor._peek = 0
    try:
        await successor._read_client()
        assert [line for _, line in flood.route.lines] == expected_lines()
        state, _, _ = as_the_shim_reads(fd)
        assert sorted(int(i) for i in state.inflight) == list(range(CALLS))
    finally:
        successor.close()
