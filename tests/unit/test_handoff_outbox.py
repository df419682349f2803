"""The client's ends and the outbox of a hand-off session (lazyd/daemon/handoff/outbox.py): lines
reach the client whole and in order however slowly it reads, and a daemon killed at any moment
leaves a region from which the shim makes a stream the client can split into lines
(docs/reliability.md: each write takes what the client's stdout takes now; the torn byte is set
before any write that may stop inside a line and cleared once the stdout ends on a line's end; an
answer's id retired only once its whole line is written).

Testing policy: real pipes (shrunk to 4096 bytes with F_SETPIPE_SZ, opened afresh with O_NONBLOCK
as the shim passes them) and Unix socketpairs (a small SO_SNDBUF), a real sealed memfd region
mapped as the daemon maps it, and the shim's own recovery (`recover.answer`) run on it. No
daemon, no processes. A kill -9 cannot be placed inside a system call from here, so the test kills
the daemon where it can be seen: right after each write into the client's stdout returns (the
region as it was during that write, the client's stdout as after it) and right after each change
of the region; at each of those moments the client's stream plus what the shim would add to it
must parse line by line but for at most one cut line, on a line of its own, and answer every
request.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from select import PIPE_BUF

import pytest
import trio

from lazyd.handoff import region as hs
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.daemon.handoff.outbox import DEFAULT_PIPE_BYTES, WIDE_PIPE_BYTES, ClientEnds, HandoffOutbox
from lazyd.handoff.region import Region
from lazyd.protocol.linepeek import id_key
from shim import recover
from shim.options import Log, parse
from shim.stdout import Stdout

SMALL_PIPE = 4096  # the smallest pipe Linux makes: a 10 KiB line takes three writes
SMALL_SNDBUF = 4096  # Linux doubles it and keeps a floor; either way far below a 20 KiB line
BIG = 20_000  # bytes of an answer over PIPE_BUF: its writes can stop inside it
HUGE = 5 * WIDE_PIPE_BYTES // 2  # bytes of an answer over what a widened pipe holds


def call(request_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}).encode()


def answer(request_id: int, size: int) -> bytes:
    """An answer line of about `size` bytes."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"text": "x" * size}}).encode()


def notification(size: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"d": "n" * size}}).encode()


# ---- the region, the client's ends, and a shim that takes over at every moment --------------


class Client:
    """The client's side of its stdin and stdout, and the daemon's `ClientEnds` of them."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "pipe":
            in_r, self.stdin = os.pipe()
            self.stdout, out_w = os.pipe()
            fcntl.fcntl(out_w, fcntl.F_SETPIPE_SZ, SMALL_PIPE)
            # Descriptions of the daemon's own, as the shim opens them (lazyd/daemon/handoff/session.py).
            self.in_fd = os.open(f"/proc/self/fd/{in_r}", os.O_RDONLY | os.O_NONBLOCK)
            self.out_fd = os.open(f"/proc/self/fd/{out_w}", os.O_WRONLY | os.O_NONBLOCK)
            os.close(in_r)
            os.close(out_w)
        else:
            a, b = socket.socketpair()
            c, d = socket.socketpair()
            d.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_SNDBUF)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_SNDBUF)
            self.stdin, self.in_fd = a.detach(), b.detach()
            self.stdout, self.out_fd = c.detach(), d.detach()
        os.set_blocking(self.stdout, False)
        self.received = b""

    async def read_slowly(self, until: int, chunk: int = 1000) -> None:
        """Read the client's stdout `chunk` bytes at a time, letting the daemon run between reads,
        until `until` bytes came."""
        while len(self.received) < until:
            await trio.lowlevel.wait_readable(self.stdout)
            try:
                data = os.read(self.stdout, chunk)
            except BlockingIOError:
                continue
            assert data, "the client's stdout ended early"
            self.received += data
            await trio.sleep(0)  # a checkpoint: the writer's turn, as the daemon's loop gives it

    def close(self) -> None:
        for end in (self.stdin, self.stdout):
            os.close(end)


@pytest.fixture(params=["pipe", "socketpair"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    peer = Client(request.param)
    yield peer
    peer.close()


class Witness:
    """Kills the daemon (in thought) at a moment: what the client would end up reading is the bytes
    already in its stdout and what the shim writes after them from the region (`recover.answer`)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sent = b""  # every byte the daemon put into the client's stdout, in order
        self.asked: list[int] = []  # the requests the client sent (entered in the ledger)
        self.lines: list[bytes] = []  # the lines the daemon was given to deliver, in order
        self.moments = 0
        self.watching = True  # False: no kill is considered (a test looking at one moment only)
        self.cut_writes = 0  # writes that could stop inside a line
        self.partial_writes = 0  # writes that took some of what they were given, not all
        self.torn_during_cut_writes: list[bool] = []
        self.cuts = 0  # moments at which a kill would have left a cut line

    def shim_would_write(self) -> bytes:
        read_end, write_end = os.pipe()
        taken: list[bytes] = []

        def take() -> None:  # a reader meanwhile: a tail can be larger than any pipe
            while chunk := os.read(read_end, 1 << 20):
                taken.append(chunk)

        reader = threading.Thread(target=take)
        reader.start()
        try:
            log = Log(parse(["--", "true"], {}))  # logs nowhere
            recover.answer(hs.read_region(self.fd), Stdout(log, write_end), log)
        finally:
            os.close(write_end)
            reader.join()
            os.close(read_end)
        return b"".join(taken)

    def killed_now(self, where: str) -> None:
        """Assert the client reads a clean stream if the daemon is killed at this moment."""
        if not self.watching:
            return
        self.moments += 1
        stream = self.sent + self.shim_would_write()
        assert stream.endswith(b"\n") or not stream, f"killed {where}: the client's last line is cut off"
        answered: set[object] = set()
        cut = 0
        for line in stream.split(b"\n")[:-1]:
            try:
                message = json.loads(line)
            except ValueError:
                # The one line a kill can cut, ended by the shim's newline (or, right after a line's
                # last byte went and before the torn byte was cleared, an empty line).
                assert any(whole.startswith(line) for whole in self.lines), \
                    f"killed {where}: the client reads a line that is no line the daemon wrote"
                cut += 1
                continue
            answered.add(id_key(message.get("id")))
        assert cut <= 1, f"killed {where}: {cut} cut lines"
        self.cuts += cut
        missing = [i for i in self.asked if id_key(i) not in answered]
        assert not missing, f"killed {where}: requests {missing} are never answered"


class WatchedEnds(ClientEnds):
    """The client's ends, with the daemon killed in thought right after each write into its stdout."""

    witness: Witness

    def write(self, parts: list[bytes | memoryview]) -> int:
        size = sum(len(part) for part in parts)
        if self.may_cut(size):
            self.witness.cut_writes += 1
            region = hs.read_region(self.witness.fd)
            assert region is not None
            self.witness.torn_during_cut_writes.append(region.torn)
        written = super().write(parts)
        self.witness.partial_writes += 0 < written < size
        self.witness.sent += b"".join(bytes(part) for part in parts)[:written]
        self.witness.killed_now(f"after a write of {written} of {size} bytes")
        return written


class WatchedRegion(Region):
    """The region, with the daemon killed in thought right after each change of its torn byte."""

    witness: Witness

    @property
    def torn(self) -> bool:
        return bool(self.buf[hs.TORN_OFFSET])

    @torn.setter
    def torn(self, torn: bool) -> None:
        self.buf[hs.TORN_OFFSET] = torn
        self.witness.killed_now(f"after the torn byte was {'set' if torn else 'cleared'}")


class WatchedLedger(Ledger):
    """The ledger, with the daemon killed in thought right after each request leaves it."""

    witness: Witness

    def answered(self, done: int | str) -> None:
        super().answered(done)
        self.witness.killed_now(f"after {done!r} was retired")


def session(fd: int, mapped: Region, client: Client) -> tuple[HandoffOutbox, Witness]:
    """An outbox over `client`'s ends, watched."""
    witness = Witness(fd)
    region = WatchedRegion(mapped.buf)
    region.witness = witness
    ledger = WatchedLedger(region)
    ledger.witness = witness
    ends = WatchedEnds(client.in_fd, client.out_fd)
    ends.witness = witness
    overflowed: list[bool] = []
    outbox = HandoffOutbox(1, os.getpid(), lambda: overflowed.append(True), ends, ledger, lambda: None, lambda: None)
    return outbox, witness


def ask(outbox: HandoffOutbox, witness: Witness, *ids: int) -> None:
    for request_id in ids:
        outbox.ledger.client_line(call(request_id))
        witness.asked.append(request_id)


def give(outbox: HandoffOutbox, witness: Witness, line: bytes, done: int | None = None) -> None:
    witness.lines.append(line)
    outbox.deliver(line, done)


def expected(witness: Witness) -> bytes:
    return b"".join(line + b"\n" for line in witness.lines)


async def serve(outbox: HandoffOutbox, client: Client, witness: Witness, deliver: Callable[[], None],
                chunk: int = 1000) -> None:
    """Run the outbox's writer while `deliver` gives it lines and the client reads slowly."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run_writer)
        deliver()
        await client.read_slowly(len(expected(witness)), chunk)
        nursery.cancel_scope.cancel()
    outbox.ends.close()


# ---- the outbox -----------------------------------------------------------------------------


async def test_lines_of_every_size_reach_a_slow_client_in_order_and_a_kill_at_any_moment_leaves_at_most_one_cut_line_and_every_request_answered(
        fd: int, mapped: Region, client: Client) -> None:
    outbox, witness = session(fd, mapped, client)
    ask(outbox, witness, *range(1, 9))

    def deliver() -> None:
        give(outbox, witness, answer(1, BIG), 1)  # straight in, as much as the stdout takes
        give(outbox, witness, notification(100))
        give(outbox, witness, answer(2, 10), 2)
        give(outbox, witness, answer(3, 5000), 3)
        give(outbox, witness, answer(4, 50), 4)
        give(outbox, witness, answer(5, 200_000), 5)  # a pipe is widened for it
        give(outbox, witness, answer(6, HUGE), 6)
        give(outbox, witness, answer(7, BIG), 7)
        give(outbox, witness, answer(8, 10), 8)

    await serve(outbox, client, witness, deliver, chunk=16 * 1024)
    assert client.received == expected(witness) == witness.sent
    assert outbox.ledger.inflight == 0 and not mapped.torn and not mapped.entries()
    assert witness.partial_writes >= 2 and witness.cuts >= 2, "no write stopped inside a line: the test proves nothing"
    assert all(witness.torn_during_cut_writes) and witness.moments > 15, witness.moments


async def test_after_each_write_the_torn_byte_says_whether_the_stdout_ends_inside_a_line_and_only_unfinished_lines_stay_in_flight(
        fd: int, mapped: Region, client: Client) -> None:
    outbox, witness = session(fd, mapped, client)
    sizes = [10, BIG, 10, 3000, 10, BIG, 200, 10]
    ask(outbox, witness, *range(len(sizes)))
    for request_id, size in enumerate(sizes):
        give(outbox, witness, answer(request_id, size), request_id)  # the first ones fill the stdout
    assert outbox.backlog.frames > 1
    ends = list(itertools.accumulate(len(line) + 1 for line in witness.lines))
    while len(client.received) < ends[-1]:
        try:
            client.received += os.read(client.stdout, 1500)
        except BlockingIOError:
            pass
        outbox.write_ready()  # what the stdout takes now
        whole = sum(end <= len(witness.sent) for end in ends)
        assert mapped.torn == (len(witness.sent) not in (0, *ends)), (len(witness.sent), ends)
        assert sorted(int(text) for _, text in mapped.entries()) == list(range(whole, len(sizes)))
    assert client.received == expected(witness) and outbox.ledger.inflight == 0
    assert witness.partial_writes >= 2, "no write stopped inside a line: the test proves nothing"
    outbox.ends.close()


async def test_a_small_line_into_a_socket_is_written_with_the_torn_byte_set_and_leaves_it_clear(
        fd: int, mapped: Region) -> None:
    # Any write into a socket could stop inside a line, whatever its size.
    client = Client("socketpair")
    try:
        outbox, witness = session(fd, mapped, client)
        ask(outbox, witness, 7)
        give(outbox, witness, answer(7, 10), 7)
        assert witness.torn_during_cut_writes == [True] and not mapped.torn
        assert outbox.ledger.inflight == 0 and witness.sent == expected(witness)
        outbox.ends.close()
    finally:
        client.close()


async def test_a_line_of_at_most_pipe_buf_goes_into_a_pipe_whole_without_touching_the_torn_byte(
        fd: int, mapped: Region) -> None:
    client = Client("pipe")
    try:
        outbox, witness = session(fd, mapped, client)
        ask(outbox, witness, 1)
        line = answer(1, PIPE_BUF - 60)
        assert len(line) < PIPE_BUF
        give(outbox, witness, line, 1)
        assert witness.cut_writes == 0 and witness.sent == line + b"\n" and outbox.ledger.inflight == 0
        outbox.ends.close()
    finally:
        client.close()


async def test_a_line_larger_than_the_pipe_s_free_room_goes_in_part_at_once_and_the_rest_as_the_client_reads(
        fd: int, mapped: Region) -> None:
    # Ten lines of 3,000 bytes take ten pages of a 16-page pipe: a 26 KiB line does not fit the
    # six free pages; what fits goes at once, with the torn byte set, instead of waiting for room.
    client = Client("pipe")
    try:
        outbox, witness = session(fd, mapped, client)
        fcntl.fcntl(client.out_fd, fcntl.F_SETPIPE_SZ, DEFAULT_PIPE_BYTES)
        ask(outbox, witness, *range(1, 12))
        for request_id in range(1, 11):
            give(outbox, witness, answer(request_id, 3000 - 1 - len(answer(request_id, 0))), request_id)
        assert len(witness.sent) == 10 * 3000 and not outbox.backlog.frames
        give(outbox, witness, answer(11, 26 * 1024), 11)
        assert 10 * 3000 < len(witness.sent) < len(expected(witness)), "it waited for room for all of it"
        assert mapped.torn and [text for _, text in mapped.entries()] == [b"11"]
        assert pipe_size(client.out_fd) == DEFAULT_PIPE_BYTES
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.run_writer)
            await client.read_slowly(len(expected(witness)), chunk=3000)
            nursery.cancel_scope.cancel()
        assert client.received == expected(witness) and not mapped.torn and outbox.ledger.inflight == 0
        outbox.ends.close()
    finally:
        client.close()


async def test_a_client_that_stops_reading_has_its_requests_paused_then_is_dropped_at_a_connection_s_bounds(
        fd: int, mapped: Region, client: Client) -> None:
    outbox, witness = session(fd, mapped, client)
    witness.watching = False
    line = b"x" * (1024 * 1024 - 1)  # a MiB with its newline
    given = 0
    while not outbox.backlog.should_pause():
        give(outbox, witness, line)
        given += 1
    paused_at = given
    while not outbox.dropped and given < 100:
        give(outbox, witness, line)
        given += 1
    # 16 MiB and 64 MiB queued (docs/reliability.md), besides what the client's stdout took.
    assert 16 <= paused_at <= 18 and 65 <= given <= 67 and outbox.dropped
    outbox.ends.close()


async def test_an_answer_stays_in_flight_in_the_region_until_the_last_byte_of_its_line_is_written(
        fd: int, mapped: Region, client: Client) -> None:
    outbox, witness = session(fd, mapped, client)
    witness.watching = False  # the region is looked at here; a kill at each write is the first test's
    ask(outbox, witness, 9)
    emptied: list[bool] = []
    outbox.ledger.on_empty = lambda: emptied.append(True)
    line = answer(9, HUGE)
    give(outbox, witness, line, 9)
    assert 0 < len(witness.sent) < len(line) + 1, "the first write should have been partial"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run_writer)
        while len(witness.sent) < len(line):
            assert [text for _, text in mapped.entries()] == [b"9"] and mapped.torn and not emptied
            await client.read_slowly(min(len(client.received) + 64 * 1024, len(line)), chunk=64 * 1024)
        await client.read_slowly(len(line) + 1, chunk=64 * 1024)
        nursery.cancel_scope.cancel()
    assert client.received == line + b"\n"
    assert mapped.entries() == [] and not mapped.torn and emptied == [True]
    outbox.ends.close()


def let_go_mid_line(fd: int, mapped: Region, client: Client, *, watching: bool) -> tuple[HandoffOutbox, Witness]:
    """A session let go as HandoffSession._finish does it: what the client's stdout takes now,
    then the rest of the cut line into the region's tail, for the shim to write first."""
    outbox, witness = session(fd, mapped, client)
    ask(outbox, witness, 1, 2)
    give(outbox, witness, answer(1, HUGE), 1)
    give(outbox, witness, answer(2, 10), 2)
    outbox.closed = True
    outbox.write_ready()
    assert 0 < len(witness.sent) < len(witness.lines[0])
    witness.watching = watching
    outbox.let_go()
    witness.watching = True
    return outbox, witness


async def test_a_session_let_go_in_the_middle_of_a_line_hands_the_shim_its_rest_and_the_client_reads_it_whole(
        fd: int, mapped: Region, client: Client) -> None:
    outbox, witness = let_go_mid_line(fd, mapped, client, watching=False)
    witness.killed_now("after the session was let go")
    lines = (witness.sent + witness.shim_would_write()).split(b"\n")
    assert lines[0] == witness.lines[0], "the shim finishes the cut line from its tail"
    assert json.loads(lines[1])["id"] == 2 and json.loads(lines[1])["error"]["code"] == -32603
    outbox.ends.close()


def test_a_daemon_killed_while_letting_a_session_go_in_the_middle_of_a_line_still_has_that_request_answered(
        fd: int, mapped: Region) -> None:
    # Not a trio test: the witness's AssertionError surfaces as itself (not inside a group).
    client = Client("pipe")
    try:
        let_go_mid_line(fd, mapped, client, watching=True)
    finally:
        os.close(client.in_fd)  # ClientEnds.close needs a trio run; a pipe's ends are plain descriptors
        os.close(client.out_fd)
        client.close()


# ---- the client's ends ----------------------------------------------------------------------


async def test_client_ends_refuse_a_pipe_without_o_nonblock_a_wrong_direction_and_a_regular_file(
        tmp_path: object) -> None:
    r, w = os.pipe()
    nonblocking_w = os.open(f"/proc/self/fd/{w}", os.O_WRONLY | os.O_NONBLOCK)
    nonblocking_r = os.open(f"/proc/self/fd/{r}", os.O_RDONLY | os.O_NONBLOCK)
    path = os.path.join(str(tmp_path), "file")
    regular = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK)
    udp = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        with pytest.raises(ValueError, match="stdin is a pipe without O_NONBLOCK"):
            ClientEnds(r, nonblocking_w)
        with pytest.raises(ValueError, match="stdout is open in the wrong direction"):
            ClientEnds(nonblocking_r, nonblocking_r)
        with pytest.raises(ValueError, match="neither a pipe nor a socket"):
            ClientEnds(nonblocking_r, regular)
        with pytest.raises(ValueError, match="not a Unix stream socket"):
            ClientEnds(nonblocking_r, udp.fileno())
        for end in (r, w, nonblocking_w, nonblocking_r, regular):
            os.fstat(end)  # a refusal closes nothing
    finally:
        udp.close()
        for end in (r, w, nonblocking_w, nonblocking_r, regular):
            os.close(end)


async def test_client_ends_read_what_is_there_none_when_nothing_is_and_empty_at_eof(client: Client) -> None:
    ends = ClientEnds(client.in_fd, client.out_fd)
    view = memoryview(bytearray(10))
    assert ends.read_into(view) is None
    os.write(client.stdin, b"abc")
    assert ends.read_into(view) == 3 and bytes(view[:3]) == b"abc"
    assert ends.read_into(view) is None
    if client.kind == "pipe":
        os.close(client.stdin)
        client.stdin = os.open("/dev/null", os.O_RDONLY)  # for the fixture to close
    else:
        peer = socket.socket(fileno=client.stdin)
        peer.shutdown(socket.SHUT_WR)
        peer.detach()  # the fixture closes it
    assert ends.read_into(view) == 0
    ends.close()


async def test_client_ends_write_what_fits_zero_when_full_and_broken_pipe_once_the_client_closed(
        client: Client) -> None:
    ends = ClientEnds(client.in_fd, client.out_fd)
    big = b"y" * (8 * BIG)
    first = ends.write([big, b"\n"])
    assert 0 < first < len(big)
    assert ends.write([big[first:], b"\n"]) == 0, "full: nothing more goes, and nothing blocks"
    assert not ends.out_closed()
    os.close(client.stdout)
    client.stdout = os.open("/dev/null", os.O_RDONLY)  # for the fixture to close
    assert ends.out_closed()
    with pytest.raises(BrokenPipeError):
        ends.write([b"late\n"])
    ends.close()
    assert ends.closed
    ends.close()  # twice is harmless


async def test_client_ends_say_which_writes_may_stop_inside_a_line(client: Client) -> None:
    ends = ClientEnds(client.in_fd, client.out_fd)
    if client.kind == "pipe":
        assert not ends.may_cut(PIPE_BUF) and ends.may_cut(PIPE_BUF + 1)
    else:
        assert ends.may_cut(1) and ends.may_cut(PIPE_BUF + 1)
    ends.close()


# ---- widened while large lines pass ---------------------------------------------------------


def pipe_size(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)


async def test_a_large_answer_widens_the_clients_stdout_goes_in_at_once_and_the_width_is_given_back_after(
        fd: int, mapped: Region) -> None:
    client = Client("pipe")
    try:
        outbox, witness = session(fd, mapped, client)
        ask(outbox, witness, 1)
        line = answer(1, 200_000)  # fifty times the pipe: without widening, fifty writes of the writer
        give(outbox, witness, line, 1)
        assert witness.sent == line + b"\n" and outbox.backlog.frames == 0 and outbox.ledger.inflight == 0
        assert pipe_size(client.out_fd) == WIDE_PIPE_BYTES and not mapped.torn
        outbox.ends.narrow()  # the quiet spell's end, while the client has not read it: kept wide
        assert pipe_size(client.out_fd) == WIDE_PIPE_BYTES
        await client.read_slowly(len(line) + 1, chunk=1 << 20)
        assert client.received == line + b"\n"
        outbox.ends.narrow()
        assert pipe_size(client.out_fd) == SMALL_PIPE
        outbox.ends.close()
    finally:
        client.close()


async def test_a_full_read_of_the_clients_stdin_widens_it_for_the_rest_and_narrowing_gives_the_width_back() -> None:
    client = Client("pipe")
    try:
        ends = ClientEnds(client.in_fd, client.out_fd)
        default = pipe_size(client.in_fd)
        assert default == DEFAULT_PIPE_BYTES
        os.write(client.stdin, b"x" * 1000)
        zone = memoryview(bytearray(hs.READ_BYTES))
        assert ends.read_into(zone) == 1000 and pipe_size(client.in_fd) == default  # not full: as it is
        os.set_blocking(client.stdin, False)
        written = os.write(client.stdin, b"y" * hs.READ_BYTES)
        assert written == default  # the client's write stopped at a full pipe
        assert ends.read_into(zone) == default
        assert pipe_size(client.in_fd) == WIDE_PIPE_BYTES  # the client's next write goes in whole
        assert os.write(client.stdin, b"z" * hs.READ_BYTES) == hs.READ_BYTES
        assert ends.read_into(zone) == hs.READ_BYTES
        ends.narrow()
        assert pipe_size(client.in_fd) == default
        ends.close()
    finally:
        client.close()


async def test_a_large_answer_raises_a_socket_s_send_buffer_once_and_never_lowers_a_larger_one(
        fd: int, mapped: Region) -> None:
    for made in (SMALL_SNDBUF, 4 * WIDE_PIPE_BYTES):
        client = Client("socketpair")
        try:
            peer = socket.socket(fileno=client.out_fd)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, made)
            before = peer.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            peer.detach()
            outbox, witness = session(fd, mapped, client)
            witness.watching = False
            give(outbox, witness, answer(1, 10))
            assert sndbuf(client.out_fd) == before, "a small line leaves the buffer as the client made it"
            give(outbox, witness, answer(2, 200_000))
            raised = sndbuf(client.out_fd)
            wmem_max = int(open("/proc/sys/net/core/wmem_max").read())  # what the kernel caps it at, doubled
            assert raised == (2 * min(WIDE_PIPE_BYTES // 2, wmem_max) if made == SMALL_SNDBUF else before), raised
            outbox.ends.close()
        finally:
            client.close()


def sndbuf(fd: int) -> int:
    peer = socket.socket(fileno=fd)
    try:
        return peer.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    finally:
        peer.detach()
