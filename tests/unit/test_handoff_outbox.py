"""The client's ends and the outbox of a hand-off session (lazyd/daemon/handoff/outbox.py): lines
reach the client whole and in order however slowly it reads, and a daemon killed at any moment
leaves a region from which the shim makes a clean stream (docs/reliability.md: a line the client's
stdout can take whole goes in one write that the kernel makes whole, marked by the whole byte; only
a line over that bound goes in parts, with the torn byte set from before its first write; an
answer's id retired only once its line is whole).

Testing policy: real pipes (shrunk to 4096 bytes with F_SETPIPE_SZ, opened afresh with O_NONBLOCK
as the shim passes them) and Unix socketpairs (a small SO_SNDBUF), a real sealed memfd region
mapped as the daemon maps it, and the shim's own recovery (`recover.answer`) run on it. No
daemon, no processes. A kill -9 cannot be placed inside a system call from here, so the test kills
the daemon where it can be seen: right after each write into the client's stdout returns (the
region as it was during that write, the client's stdout as after it) and right after each change
of the region; at each of those moments the client's stream plus what the shim would add to it
must parse line by line (no cut line at all but for a line over the whole-write bound, and then
at most one, on a line of its own) and answer every request.
"""

from __future__ import annotations

import fcntl
import json
import logging
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
        self.bound = 1 << 62  # the longest line (with its newline) the client's stdout takes whole

    def over_bound(self, line: bytes) -> bool:
        return len(line) + 1 > self.bound

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
                # The one line a kill can cut: an answer over the whole-write bound begun, on a line
                # of its own (or, right after its last part went, an empty line).
                assert any(whole.startswith(line) for whole in self.lines), \
                    f"killed {where}: the client reads a line that is no line the daemon wrote"
                assert any(whole.startswith(line) for whole in self.lines if self.over_bound(whole)), \
                    f"killed {where}: a line of at most {self.bound} bytes is cut ({len(line)} bytes of it)"
                cut += 1
                continue
            answered.add(id_key(message.get("id")))
        assert cut <= 1, f"killed {where}: {cut} cut lines"
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


class WatchedLedger(Ledger):
    """The ledger, with the daemon killed in thought right after each change the outbox makes."""

    witness: Witness

    def torn(self, torn: bool) -> None:
        super().torn(torn)
        self.witness.killed_now(f"after the torn byte was {'set' if torn else 'cleared'}")

    def answered(self, done: int | str) -> None:
        super().answered(done)
        self.witness.killed_now(f"after {done!r} was retired")


def session(fd: int, mapped: Region, client: Client, *, wide: bool = True) -> tuple[HandoffOutbox, Witness]:
    """An outbox over `client`'s ends, watched. With `wide`, the client's stdout is widened (a
    pipe) or its buffer raised (a socket) first, as for a large line, and the witness told the
    whole-write bound that gives."""
    witness = Witness(fd)
    ledger = WatchedLedger(mapped)
    ledger.witness = witness
    ends = WatchedEnds(client.in_fd, client.out_fd)
    ends.witness = witness
    overflowed: list[bool] = []
    outbox = HandoffOutbox(1, os.getpid(), lambda: overflowed.append(True), ends, ledger)
    if wide:
        assert not ends.whole_possible(1 << 40)
        witness.bound = ends.bound()
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


def at_bound(witness: Witness, request_id: int) -> bytes:
    """An answer line that, with its newline, is exactly the longest the client's stdout takes whole."""
    line = answer(request_id, witness.bound - 1 - len(answer(request_id, 0)))
    assert len(line) + 1 == witness.bound
    return line


def over_bound(witness: Witness, request_id: int) -> bytes:
    """An answer line longer than the client's stdout can ever take whole: it goes in parts (twice
    the bound: a socket takes more than `bound` at once, which is what it surely takes whole)."""
    return answer(request_id, 2 * witness.bound)


async def test_lines_below_at_and_above_the_whole_write_bound_reach_a_slow_client_in_order_and_a_kill_at_any_moment_cuts_none_within_it(
        fd: int, mapped: Region, client: Client) -> None:
    outbox, witness = session(fd, mapped, client)
    ask(outbox, witness, *range(1, 9))

    def deliver() -> None:
        give(outbox, witness, answer(1, BIG), 1)  # straight in, whole
        give(outbox, witness, notification(100))
        give(outbox, witness, answer(2, 10), 2)
        give(outbox, witness, answer(3, witness.bound // 3), 3)  # waits for room for all of it
        give(outbox, witness, answer(4, 50), 4)
        give(outbox, witness, at_bound(witness, 5), 5)  # waits for an empty pipe (socket buffer)
        give(outbox, witness, over_bound(witness, 6), 6)  # in parts, behind the others
        give(outbox, witness, answer(7, BIG), 7)
        give(outbox, witness, answer(8, 10), 8)

    await serve(outbox, client, witness, deliver, chunk=16 * 1024)
    assert client.received == expected(witness) == witness.sent
    assert outbox.ledger.inflight == 0 and not mapped.torn and not mapped.entries()
    marks = witness.torn_during_cut_writes
    assert sum(marks) >= 2, "the line over the bound did not go in parts: the test proves nothing"
    assert len(marks) - sum(marks) >= 4 and witness.moments > 15, (marks, witness.moments)


async def test_a_line_over_the_bound_queued_behind_whole_lines_has_the_torn_byte_set_from_its_first_part_to_its_last(
        fd: int, mapped: Region, client: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lazyd.server")
    outbox, witness = session(fd, mapped, client)
    ask(outbox, witness, 1, 2, 3)

    def deliver() -> None:
        give(outbox, witness, answer(1, witness.bound // 2), 1)
        give(outbox, witness, over_bound(witness, 2), 2)  # by the writer only, once the first is read
        give(outbox, witness, over_bound(witness, 3), 3)

    await serve(outbox, client, witness, deliver, chunk=64 * 1024)
    marks = witness.torn_during_cut_writes
    assert marks[0] is False and len(marks) >= 5 and all(marks[1:]), marks
    assert not mapped.torn, "cleared once the last line is whole"
    said = [r.getMessage() for r in caplog.records if "written in parts" in r.getMessage()]
    assert len(said) == 1 and f"over the {witness.bound} its stdout takes whole" in said[0], said


async def test_a_small_line_into_a_socket_goes_whole_and_is_never_marked_torn(fd: int, mapped: Region) -> None:
    # Any write into a socket could stop inside a line, whatever its size: one with room for all
    # of it goes whole, and the torn byte stays clear (the shim then ends nothing).
    client = Client("socketpair")
    try:
        outbox, witness = session(fd, mapped, client, wide=False)
        ask(outbox, witness, 7)
        give(outbox, witness, answer(7, 10), 7)
        assert witness.torn_during_cut_writes == [False]
        assert outbox.ledger.inflight == 0 and witness.sent == expected(witness)
        outbox.ends.close()
    finally:
        client.close()


async def test_a_line_of_at_most_pipe_buf_goes_into_a_pipe_whole_without_touching_the_torn_byte(
        fd: int, mapped: Region) -> None:
    client = Client("pipe")
    try:
        outbox, witness = session(fd, mapped, client, wide=False)
        ask(outbox, witness, 1)
        line = answer(1, PIPE_BUF - 60)
        assert len(line) < PIPE_BUF
        give(outbox, witness, line, 1)
        assert witness.cut_writes == 0 and witness.sent == line + b"\n" and outbox.ledger.inflight == 0
        outbox.ends.close()
    finally:
        client.close()


async def test_a_line_that_does_not_fit_the_pipe_s_free_slots_waits_for_room_instead_of_going_in_part(
        fd: int, mapped: Region) -> None:
    # Ten lines of 3,000 bytes take ten pages of a 4 KiB-page pipe (none merges into the page
    # before it), holding 30,000 bytes: "size minus FIONREAD" would say a 26 KiB line fits a
    # pipe of 16 pages, where only 6 pages are free, and a write of it would stop after 6 pages
    # (its first 2,098 bytes do not fit the last page's rest, so it is not merged there).
    client = Client("pipe")
    try:
        outbox, witness = session(fd, mapped, client, wide=False)
        fcntl.fcntl(client.out_fd, fcntl.F_SETPIPE_SZ, DEFAULT_PIPE_BYTES)
        ask(outbox, witness, *range(1, 12))
        for request_id in range(1, 11):
            give(outbox, witness, answer(request_id, 3000 - 1 - len(answer(request_id, 0))), request_id)
        assert len(witness.sent) == 10 * 3000 and not outbox.backlog_frames
        give(outbox, witness, answer(11, 26 * 1024), 11)
        assert len(witness.sent) == 10 * 3000 and outbox.backlog_bytes == len(witness.lines[-1]) + 1, "it went at once"
        assert pipe_size(client.out_fd) == DEFAULT_PIPE_BYTES
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.run_writer)
            await client.read_slowly(len(expected(witness)), chunk=3000)
            nursery.cancel_scope.cancel()
        assert client.received == expected(witness) and witness.partial_writes == 0
        outbox.ends.close()
    finally:
        client.close()


async def test_an_answer_stays_in_flight_in_the_region_until_the_last_byte_of_its_line_is_written(
        fd: int, mapped: Region, client: Client) -> None:
    outbox, witness = session(fd, mapped, client)
    ask(outbox, witness, 9)
    emptied: list[bool] = []
    outbox.ledger.on_empty = lambda: emptied.append(True)
    line = over_bound(witness, 9)
    give(outbox, witness, line, 9)
    assert 0 < len(witness.sent) < len(line) + 1, "the first write should have been partial"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run_writer)
        while len(witness.sent) < len(line):
            assert [text for _, text in mapped.entries()] == [b"9"] and mapped.torn and not emptied
            await client.read_slowly(len(client.received) + 64 * 1024, chunk=64 * 1024)
        await client.read_slowly(len(line) + 1, chunk=64 * 1024)
        nursery.cancel_scope.cancel()
    assert client.received == line + b"\n"
    assert mapped.entries() == [] and not mapped.torn and emptied == [True]
    outbox.ends.close()


def let_go_mid_line(fd: int, mapped: Region, client: Client, *, watching: bool) -> tuple[HandoffOutbox, Witness]:
    """A session let go as HandoffSession._finish does it: what the client's stdout takes now,
    then the rest of the cut line (one over the bound) into the region's tail, for the shim to
    write first."""
    outbox, witness = session(fd, mapped, client)
    ask(outbox, witness, 1, 2)
    give(outbox, witness, over_bound(witness, 1), 1)
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
        with pytest.raises(ValueError, match="stdout is it is open in the wrong direction|wrong direction"):
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
        assert witness.sent == line + b"\n" and outbox.backlog_frames == 0 and outbox.ledger.inflight == 0
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
