"""systemd notify gaps left by test_systemd.py: failure counts in STATUS=, and the watchdog pings.

Testing policy: neither test needs a user manager: the notify socket is a datagram socket the
test binds, exactly what systemd gives a Type=notify service (as in test_systemd.py). The ping
test sees each WATCHDOG=1 and when it came, so it checks the interval and that a stopped loop
(SIGSTOP: the pings come from a task of the daemon's event loop) sends none. systemd acting on the
missed pings is test_systemd_manager.py's, under a real user manager of its own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lazyd.protocol import wire
from tests.conftest import FIXTURE_SERVER, UserEnv, wait_until
from tests.e2e.raw_daemon_support import STEP_S, Conn, daemon_log, hello

pytestmark = pytest.mark.e2e

WATCHDOG_SEC = 2  # the service's WatchdogSec: short, and still 4 pings (every 0.5 s) when healthy


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def status_until(sock: socket.socket, wanted: str) -> list[str]:
    """Every STATUS= value received up to and including `wanted`."""
    seen: list[str] = []
    deadline = time.monotonic() + STEP_S
    while time.monotonic() < deadline:
        for assignment in sock.recv(4096).decode().split("\n"):
            if assignment.startswith("STATUS="):
                seen.append(assignment.removeprefix("STATUS="))
                if seen[-1] == wanted:
                    return seen
    raise AssertionError(f"no STATUS={wanted!r} among {seen}")


def test_status_counts_a_failed_server_and_the_attached_clients(
    user_env: UserEnv, notify_socket: tuple[socket.socket, str]
) -> None:
    notify, notify_path = notify_socket
    config = user_env.config_file
    config.parent.mkdir(parents=True)
    config.write_text(f'[servers.fixture]\ncommand = "{sys.executable}"\nargs = ["{FIXTURE_SERVER}"]\n'
                      '[servers.missing]\ncommand = "/nonexistent/lazyd-test-server"\n')
    config.chmod(0o600)
    log = open(user_env.root / "daemon.stderr", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "lazyd.daemon"], env={**user_env.env, "NOTIFY_SOCKET": notify_path},
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    try:
        status_until(notify, "2 servers: 0 running, 2 sleeping, 0 failed; 0 clients")
        conn = Conn(user_env.socket)
        conn.open_ctl()
        assert not conn.ctl("wake", name="missing")["ok"]  # spawn failure: parked as failed at once
        conn.close()
        status_until(notify, "2 servers: 0 running, 1 sleeping, 1 failed; 0 clients")
        session = Conn(user_env.socket)
        session.sock.sendall(wire.encode(hello("shim", server="fixture")))
        assert session.read()["t"] == "welcome"
        status_until(notify, "2 servers: 0 running, 1 sleeping, 1 failed; 1 clients")
        session.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=STEP_S) == 0, daemon_log(user_env)


# The watchdog pings, as systemd's own notify socket would see them. WatchdogSec=6 s: lazyd pings
# every 3 s (half, as sd_watchdog_enabled(3) advises). A gap under 2.5 s would be a daemon pinging
# on some other schedule (a status change, a busy loop); a gap over 5 s leaves less than a second
# before systemd would kill it (a daemon pinging at the full timeout shows 6 s gaps), which a
# healthy loop never comes near: the 2 s of slack are for a loaded machine.
PING_WATCHDOG_USEC = 6_000_000
PING_GAP_MIN_S = 2.5
PING_GAP_MAX_S = 5.0
PINGS_OBSERVED = 3
STOPPED_FOR_S = 5.0  # longer than the ping interval: a stopped loop must send nothing all that time


def watchdog_pings(sock: socket.socket, count: int) -> list[float]:
    """The monotonic arrival times of the next `count` datagrams that are exactly WATCHDOG=1
    (status datagrams between them are read and left aside)."""
    times: list[float] = []
    deadline = time.monotonic() + STEP_S
    while len(times) < count:
        assert time.monotonic() < deadline, f"only {len(times)} WATCHDOG=1 pings within {STEP_S} s"
        if sock.recv(4096) == b"WATCHDOG=1":
            times.append(time.monotonic())
    return times


def test_the_daemon_pings_the_watchdog_at_half_its_timeout_and_not_while_its_loop_is_stopped(
    user_env: UserEnv, notify_socket: tuple[socket.socket, str]
) -> None:
    notify, notify_path = notify_socket
    env = {**user_env.env, "NOTIFY_SOCKET": notify_path, "WATCHDOG_USEC": str(PING_WATCHDOG_USEC)}
    log = open(user_env.root / "daemon.stderr", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "lazyd.daemon"], env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, start_new_session=True)
    log.close()
    try:
        pings = watchdog_pings(notify, PINGS_OBSERVED)
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        assert all(PING_GAP_MIN_S <= gap <= PING_GAP_MAX_S for gap in gaps), gaps
        # The pings come from the event loop: a stopped loop sends none, however long it is stopped.
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            # Once the kernel shows it stopped, whatever it sent before is queued: drain that, then
            # nothing may come.
            wait_until(lambda: process_state(proc.pid) == "T", STEP_S, "the daemon to be stopped")
            notify.setblocking(False)
            while True:
                try:
                    notify.recv(4096)
                except BlockingIOError:
                    break
            notify.settimeout(STOPPED_FOR_S)
            with pytest.raises(TimeoutError):
                datagram = notify.recv(4096)
                raise AssertionError(f"a stopped daemon sent {datagram!r}")
        finally:
            notify.settimeout(STEP_S)
            os.kill(proc.pid, signal.SIGCONT)
        watchdog_pings(notify, 1)  # and they resume with the loop
    finally:
        proc.terminate()
        assert proc.wait(timeout=STEP_S) == 0, daemon_log(user_env)
