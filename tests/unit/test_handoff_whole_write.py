"""How much the client's stdout surely takes whole (lazyd/daemon/handoff/whole_write.py), held to the kernel.

Testing policy: the bookkeeping is plain (sizes in, a bound out), and every bound it gives is
tried on a real pipe or Unix socketpair: random walks of nonblocking writes and reads, in which each
write the room promised must go whole. The walks also count the writes a naive bound ("size
minus FIONREAD") would have let stop inside a line, so that a walk that never tests the
difference fails instead of passing.
"""

from __future__ import annotations

import array
import fcntl
import os
import random
import socket
import termios

from lazyd.daemon.handoff.whole_write import MAX_TRACKED_WRITES, PAGE, PipeRoom, pages, socket_cost, socket_room


def unread(fd: int, request: int = termios.FIONREAD) -> int:
    count = array.array("i", [0])
    fcntl.ioctl(fd, request, count)
    return count[0]


def test_an_empty_pipe_has_all_its_slots_free_and_each_write_may_hold_one_more_than_its_pages() -> None:
    room = PipeRoom()
    assert room.free_slots(16 * PAGE, 0) == 16
    room.wrote(3000)
    room.wrote(3000)
    assert room.free_slots(16 * PAGE, 6000) == 16 - 2 - 1  # the two writes, and a page they may share
    assert room.free_slots(16 * PAGE, 3000) == 16 - 1 - 1  # the first is read: its page is free
    assert room.free_slots(16 * PAGE, 0) == 16
    assert pages(1) == 1 and pages(PAGE) == 1 and pages(PAGE + 1) == 2


def test_before_the_pipe_is_first_seen_empty_each_unread_byte_may_hold_a_slot() -> None:
    room = PipeRoom()
    room.wrote(10_000)  # not counted: the pipe's content is not known to be the daemon's alone
    assert room.free_slots(16 * PAGE, 5) == 11
    assert room.free_slots(16 * PAGE, 100) == 0
    room.free_slots(16 * PAGE, 0)
    room.wrote(10)
    assert room.free_slots(16 * PAGE, 20) == 0, "more unread than the daemon wrote: another writer, known no more"


def test_a_pipe_takes_whole_every_write_its_room_promises_where_size_minus_fionread_would_cut_some() -> None:
    rng = random.Random(26)
    promised = naive_cut = 0
    for capacity in (16 * PAGE, 64 * PAGE):
        read_end, write_end = os.pipe()
        try:
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, capacity)
            os.set_blocking(write_end, False)
            os.set_blocking(read_end, False)
            room = PipeRoom()
            for _ in range(3000):
                if rng.random() < 0.4:
                    try:
                        os.read(read_end, rng.choice((1, 100, 3000, PAGE, 5 * PAGE)))
                    except BlockingIOError:
                        pass
                    continue
                size = rng.choice((rng.randint(1, 200), rng.randint(1000, 3500), rng.randint(PAGE, 9 * PAGE)))
                before = unread(write_end)
                sure = room.room(capacity, before) >= size
                try:
                    written = os.write(write_end, b"x" * size)
                except BlockingIOError:
                    written = 0
                room.wrote(written)
                if sure:
                    promised += 1
                    assert written == size, f"the room promised {size} bytes and the pipe took {written}"
                elif capacity - before >= size and 0 < written < size:
                    naive_cut += 1
        finally:
            os.close(read_end)
            os.close(write_end)
    assert promised > 500 and naive_cut > 10, (promised, naive_cut)


def test_a_socket_takes_whole_every_send_its_room_promises_and_the_room_of_an_empty_buffer_is_its_bound() -> None:
    rng = random.Random(62)
    promised = 0
    for asked in (4096, 64 * 1024, 256 * 1024):
        ours, theirs = socket.socketpair()
        try:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, asked)
            sndbuf = ours.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            theirs.setblocking(False)
            bound = socket_room(0, sndbuf)
            assert ours.send(b"y" * bound, socket.MSG_DONTWAIT) == bound, "an empty buffer takes its bound whole"
            while unread(ours.fileno(), termios.TIOCOUTQ):
                theirs.recv(1 << 20)
            for _ in range(2000):
                if rng.random() < 0.4:
                    try:
                        theirs.recv(rng.choice((100, 5000, 40_000)))
                    except BlockingIOError:
                        pass
                    continue
                size = rng.choice((rng.randint(1, 300), rng.randint(1000, 20_000), rng.randint(1, max(1, bound))))
                sure = socket_room(unread(ours.fileno(), termios.TIOCOUTQ), sndbuf) >= size
                try:
                    sent = ours.send(b"z" * size, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                if sure:
                    promised += 1
                    assert sent == size, f"the room promised {size} bytes and the socket took {sent} (SO_SNDBUF {sndbuf})"
            assert 0 < bound and socket_cost(bound, sndbuf) < sndbuf
        finally:
            ours.close()
            theirs.close()
    assert promised > 300, promised


def test_a_long_run_of_small_writes_keeps_a_few_entries_and_still_never_promises_too_much() -> None:
    room = PipeRoom()
    room.free_slots(16 * PAGE, 0)
    for _ in range(10_000):
        room.wrote(100)
    assert room.tracked == MAX_TRACKED_WRITES
    assert room.free_slots(16 * PAGE, 1_000_000 - 500) == 0, "counted with the writes before: nothing freed yet"
    assert room.free_slots(16 * PAGE, 0) == 16
