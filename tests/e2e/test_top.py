"""`lazyctl top` under a real pseudo-terminal: it draws the servers, its frames move on, its keys
act, and `q` leaves the terminal as it found it (termios attributes equal before and after).

The frame's layout is checked without a terminal in tests/unit/test_top_frame.py; here the
program runs as a user runs it, against a real daemon, its output read from the pty's master.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import time

import pytest

from tests.conftest import UserEnv, start_daemon
from tests.e2e.supervision_support import server_table, wait_for_row, write_config

pytestmark = pytest.mark.e2e
CSI = re.compile(rb"\x1b(\[[0-9;?]*[A-Za-z]|[()][0-9A-Za-z]|[=>78MDEc])")
UPTIME = re.compile(r"kept +running +\d+ +\S+ \S+ +\S+ +\S+ +\S+ +(\d[\dsmhd]*)")


class Pty:
    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.seen = b""

    def read_until(self, done: "re.Pattern[str] | None", timeout_s: float, what: str) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            text = CSI.sub(b" ", self.seen).decode("utf-8", "replace")
            if done is not None and done.search(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen so far:\n{text[-3000:]}")
            os.set_blocking(self.master, False)
            try:
                self.seen += os.read(self.master, 65536)
            except (BlockingIOError, OSError):
                time.sleep(0.05)


def test_top_draws_the_servers_and_q_restores_the_terminal(user_env: UserEnv) -> None:
    write_config(user_env, server_table("idle") + server_table("kept", keep_alive=True, memory_max="1GiB"))
    start_daemon(user_env)
    wait_for_row(user_env, "kept", lambda r: r["state"] == "running", "the keep_alive server to run")
    pty = Pty()
    before = termios.tcgetattr(pty.slave)
    proc = subprocess.Popen([sys.executable, "-m", "lazyd.ctl.main", "top"], stdin=pty.slave, stdout=pty.slave,
                            stderr=pty.slave, env={**user_env.env, "TERM": "xterm-256color"}, start_new_session=True)
    try:
        text = pty.read_until(UPTIME, 20, "a frame with the kept server's uptime")
        assert "idle" in text and "sleeping" in text and "own " in text and "q quit" in text
        first = UPTIME.findall(text)[-1]
        # Frames come every second: a later one shows the uptime moved on.
        deadline = time.monotonic() + 15
        uptimes = [first]
        while len(set(uptimes)) < 2:
            assert time.monotonic() < deadline, f"the uptime stayed {uptimes}"
            uptimes = UPTIME.findall(_screen(pty))
        os.write(pty.master, b"w")  # the first row, `idle`, is selected
        wait_for_row(user_env, "idle", lambda r: r["state"] == "running", "w to wake the selected server")
        pid = wait_for_row(user_env, "idle", lambda r: r["pid"] is not None, "its pid")["pid"]
        os.write(pty.master, b"r")
        wait_for_row(user_env, "idle", lambda r: r["state"] == "running" and r["pid"] not in (None, pid),
                     "r to restart it with a new process")
        os.write(pty.master, b"s")
        wait_for_row(user_env, "idle", lambda r: r["state"] == "sleeping", "s to put it to sleep")
        os.write(pty.master, b"q")
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert termios.tcgetattr(pty.slave) == before
    os.close(pty.master)
    os.close(pty.slave)


def _screen(pty: Pty) -> str:
    """What the pty showed so far (read for half a second), escape sequences as spaces."""
    end = time.monotonic() + 0.5
    os.set_blocking(pty.master, False)
    while time.monotonic() < end:
        try:
            pty.seen += os.read(pty.master, 65536)
        except (BlockingIOError, OSError):
            time.sleep(0.05)
    return CSI.sub(b" ", pty.seen).decode("utf-8", "replace")


def test_top_refuses_without_a_terminal(user_env: UserEnv) -> None:
    start_daemon(user_env)
    out = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "top"], env=user_env.env, capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert out.returncode == 2 and "needs a terminal" in out.stderr
