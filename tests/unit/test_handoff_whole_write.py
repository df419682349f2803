"""How much the client's stdout surely takes whole (lazyd/daemon/handoff/whole_write.py), held to the kernel.

Testing policy: every bound the module gives is tried on a real pipe or Unix socketpair: random walks of nonblocking writes and reads, in which each
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

from lazyd.daemon.handoff.whole_write import PAGE, pipe_room, socket_cost, socket_room


def unread(fd: int, request: int = termios.FIONREAD) -> int:
    count = array.array("i", [0])
    fcntl.ioctl(fd, request, count)
    return count[0]


def test_a_pipe_takes_whole_every_write_its_room_promises_where_size_minus_fionread_would_cut_some() -> None:
    rng = random.Random(26)
    promised = naive_cut = 0
    for capacity in (16 * PAGE, 64 * PAGE):
        read_end, write_end = os.pipe()
        try:
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, capacity)
            os.set_blocking(write_end, False)
            os.set_blocking(read_end, False)
            for _ in range(3000):
                if rng.random() < 0.4:
                    try:
                        os.read(read_end, rng.choice((1, 100, 3000, PAGE, 5 * PAGE, 64 * PAGE)))
                    except BlockingIOError:
                        pass
                    continue
                size = rng.choice((rng.randint(1, 200), rng.randint(1000, 3500), rng.randint(PAGE, 9 * PAGE)))
                before = unread(write_end)
                sure = pipe_room(capacity, before) >= size
                try:
                    written = os.write(write_end, b"x" * size)
                except BlockingIOError:
                    written = 0
                if sure:
                    promised += 1
                    assert written == size, f"the room promised {size} bytes and the pipe took {written}"
                elif capacity - before >= size and 0 < written < size:
                    naive_cut += 1
        finally:
            os.close(read_end)
            os.close(write_end)
    assert promised > 100 and naive_cut > 10, (promised, naive_cut)


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
