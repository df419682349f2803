"""The quick resumer (shim/quick.py) run by a real waiting shell whose daemon is gone, against a
socket this test plays the next daemon on: it offers the adopting hello with the client's stdin,
stdout and the region, and goes back to waiting on `adopted`; with no daemon, a refusal, or a
daemon that keeps silent, it execs the full shim, and in the last case only once the daemon has
closed the socket (never two owners of the session).

Testing policy: real dash, real interpreter, real sockets and pipes; the "full shim" is a probe
that records how it was started. The next daemon is played by the test, since what is checked is
the resumer's side of the exchange (the daemon's side: tests/e2e/test_adoption.py).
"""

from __future__ import annotations

import array
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lazyd import wire
from lazyd.frames import Hello, Refusal
from lazyd.handoff.region import LAYOUT, create_region
from shim import handoff, quick

PROBE = """
import os, sys
fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))  # before the record opens one
open(sys.argv[1], "w").write(repr((sys.argv[2:], fds)))
"""
SILENT_WAIT_S = 0.5  # the resumer's wait for a reply, in the silent daemon's case


def _dash() -> str:
    dash = next((shell for shell in handoff.SHELLS if os.access(shell, os.X_OK)), None)
    if dash is None:
        print("skipping: no dash here")
        pytest.skip("no dash")
    return dash


class Waiter:
    """A waiting shell as a handed-off shim execs it, its daemon socket (fd 9) already at EOF."""

    def __init__(self, tmp_path: Path, socket_path: str, wait_s: float = quick.HELLO_WAIT_S) -> None:
        dash = _dash()
        self.record = tmp_path / "full-shim"
        self.region = create_region()
        self.stdin_r, self.stdin_w = os.pipe()
        self.stdout_r, self.stdout_w = os.pipe()
        hello = Hello("shim", 4242, ["server"], "/", {"SECRET": "only-in-the-memfd"}, {}, None, [b"x"])
        fd = quick.hello_memfd(hello)
        assert fd is not None
        self.hello = fd
        script = quick.script(dash, handoff.WAIT_SCRIPT, handoff.WAIT_FD).replace(
            repr(quick.HELLO_WAIT_S), repr(wait_s))
        argv = [dash, "-c", handoff.WAIT_SCRIPT, "lazyd-shim", "0", "", "", "unused", script, socket_path,
                str(fd), sys.executable, "-c", PROBE, str(self.record), f"--resume-handoff={self.region}"]
        self.argv = argv
        # The lost daemon: EOF on fd 9 at once.
        self.proc = subprocess.Popen([dash, "-c", f'exec {handoff.WAIT_FD}</dev/null; exec "$@"', "wrap", *argv],
                                     stdin=self.stdin_r, stdout=self.stdout_w, pass_fds=(self.region, fd))

    def full_shim(self, timeout_s: float = 20.0) -> tuple[list[str], list[int]]:
        """How the full shim was started: its arguments and its descriptors."""
        assert self.proc.wait(timeout_s) == 0
        argv, fds = eval(self.record.read_text())  # the probe's own repr of two lists
        return argv, fds

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.region, self.hello, self.stdin_r, self.stdin_w, self.stdout_r, self.stdout_w):
            os.close(fd)


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "lazyd.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    server.settimeout(20)
    yield server, path
    server.close()


def _offer(conn: socket.socket) -> tuple[bytes, list[int]]:
    """The hello and the descriptors an accepted resumer sends."""
    data, ancdata, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * 4))
    fds = array.array("i")
    for _level, _kind, payload in ancdata:
        fds.frombytes(payload)
    return data, list(fds)


def test_with_no_daemon_listening_the_quick_resumer_execs_the_full_shim_with_its_region(tmp_path: Path) -> None:
    waiter = Waiter(tmp_path, str(tmp_path / "nobody.sock"))
    try:
        argv, fds = waiter.full_shim()
        assert argv == [f"--resume-handoff={waiter.region}"]
        assert waiter.region in fds and waiter.hello not in fds  # the hello's memfd is the resumer's only
    finally:
        waiter.close()


def test_a_refusal_has_the_quick_resumer_exec_the_full_shim(
        tmp_path: Path, listening: tuple[socket.socket, str]) -> None:
    server, path = listening
    waiter = Waiter(tmp_path, path)
    try:
        conn, _ = server.accept()
        hello, fds = _offer(conn)
        for fd in fds:
            os.close(fd)
        conn.sendall(wire.encode(Refusal("adopt", "its daemon let it go in the middle of a line")))
        conn.close()
        argv, _ = waiter.full_shim()
        assert argv == [f"--resume-handoff={waiter.region}"]
    finally:
        waiter.close()


def test_adopted_the_quick_resumer_offers_the_hello_and_descriptors_and_waits_again_on_the_daemon(
        tmp_path: Path, listening: tuple[socket.socket, str]) -> None:
    server, path = listening
    waiter = Waiter(tmp_path, path)
    try:
        conn, _ = server.accept()
        frame, fds = _offer(conn)
        assert frame == os.pread(waiter.hello, 1 << 16, 0)
        decoder = wire.FrameDecoder()
        (hello,) = decoder.feed(frame, 1)
        assert isinstance(hello, Hello) and hello.adopt == LAYOUT and hello.handoff is None and hello.resume == []
        assert hello.env == {"SECRET": "only-in-the-memfd"}
        assert not any("only-in-the-memfd" in arg for arg in waiter.argv)  # never in argv
        stdin, stdout, region = fds
        assert os.fstat(region).st_ino == os.fstat(waiter.region).st_ino
        assert os.fstat(stdin).st_ino == os.fstat(waiter.stdin_r).st_ino and os.get_blocking(stdin) is False
        assert os.fstat(stdout).st_ino == os.fstat(waiter.stdout_w).st_ino and os.get_blocking(stdout) is False
        conn.sendall(quick.ADOPTED)
        # Waiting again in the shell, on this socket: a newline (the client left) ends it with 0.
        deadline = time.monotonic() + 20
        while os.path.basename(os.readlink(f"/proc/{waiter.proc.pid}/exe")) != "dash" and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert waiter.proc.poll() is None and not waiter.record.exists()
        conn.sendall(b"\n")
        assert waiter.proc.wait(20) == 0 and not waiter.record.exists()
        for fd in fds:
            os.close(fd)
        conn.close()
    finally:
        waiter.close()


def test_a_daemon_that_keeps_silent_is_waited_for_until_it_closes_before_the_full_shim_runs(
        tmp_path: Path, listening: tuple[socket.socket, str]) -> None:
    # Once the descriptors are sent, the daemon may hold the session: the resumer that has no
    # reply in time shuts its side and waits for the daemon to close, and only then recovers.
    server, path = listening
    waiter = Waiter(tmp_path, path, wait_s=SILENT_WAIT_S)
    try:
        conn, _ = server.accept()
        _, fds = _offer(conn)
        conn.settimeout(20)
        assert conn.recv(1) == b""  # the resumer shut its side after its wait
        time.sleep(0.3)
        assert not waiter.record.exists() and waiter.proc.poll() is None  # still waiting for our close
        for fd in fds:
            os.close(fd)
        conn.close()
        argv, _ = waiter.full_shim()
        assert argv == [f"--resume-handoff={waiter.region}"]
    finally:
        waiter.close()
