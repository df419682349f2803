"""Connection floods against a real daemon: the connection cap and running out of descriptors (case 34).

Testing policy: real daemon, raw sockets, real resource limits (`prlimit --nofile` on the daemon,
skipped with the reason printed when prlimit is missing). Outcomes are read from the sockets and
from the daemon's log, polled with bounded deadlines; the log lines asserted are written once per
event by design (one warning when accept starts failing, one line when it works again), so the
counts do not depend on timing.
"""

from __future__ import annotations

import shutil
import socket

import pytest

from lazyd.daemon.connection import MAX_CONNECTIONS
from tests.conftest import UserEnv, wait_until
from tests.e2e.test_security_frames import (
    STEP_S,
    Conn,
    closed_by_peer,
    daemon_log,
    launch_daemon,
    ping,
    wait_for_log,
)

pytestmark = pytest.mark.e2e

NOFILE_LIMIT = 64  # the daemon needs ~15 descriptors idle: the rest go to connections quickly
FLOOD_CONNECTIONS = 80  # more than the limit can hold, fewer than the listen backlog (128)


def test_connections_beyond_the_cap_are_accepted_and_closed_at_once_and_a_freed_slot_is_reused(
    user_env: UserEnv,
) -> None:
    proc = launch_daemon(user_env)
    held = []
    try:
        for _ in range(MAX_CONNECTIONS):
            conn = Conn(user_env.socket)
            conn.open_ctl()  # answered: its handler runs and counts against the cap
            held.append(conn)
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.connect(str(user_env.socket))
        # Closed without a word, before any hello: nothing is read from it, nothing is sent.
        assert closed_by_peer(extra) == b""
        extra.close()
        assert f"connections open (limit {MAX_CONNECTIONS})" in daemon_log(user_env)
        assert held[0].ctl("ping")["data"]["pid"] == proc.pid  # the admitted ones still work
        held.pop().close()

        def admitted() -> bool:
            try:
                return ping(user_env.socket) == proc.pid
            except (OSError, AssertionError):
                return False

        wait_until(admitted, STEP_S, "a connection to be admitted once a slot was free")
    finally:
        for conn in held:
            conn.close()
        proc.terminate()
        proc.wait(timeout=STEP_S)


def test_running_out_of_descriptors_makes_accept_back_off_and_it_recovers_when_they_free_up(
    user_env: UserEnv,
) -> None:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        print("skipping: prlimit is not installed")
        pytest.skip("prlimit is not installed")
    # A long hello timeout: the flood holds its descriptors until the test lets go of them.
    proc = launch_daemon(user_env, env={"LAZYD_TEST_HELLO_TIMEOUT_S": "300"},
                         prefix=(prlimit, f"--nofile={NOFILE_LIMIT}:{NOFILE_LIMIT}"))
    flood: list[socket.socket] = []
    try:
        with open(f"/proc/{proc.pid}/limits") as f:
            assert any(line.startswith("Max open files") and f" {NOFILE_LIMIT} " in line for line in f)
        for _ in range(FLOOD_CONNECTIONS):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(user_env.socket))  # queued in the backlog when the daemon cannot accept
            flood.append(sock)
        wait_for_log(user_env, "cannot accept connections: Too many open files (EMFILE)")
        # Waiting, not crashing: the daemon is alive, and a client queued now is not refused.
        assert proc.poll() is None
        waiting = Conn(user_env.socket)
        for sock in flood:
            sock.close()
        # Once the flood's descriptors are closed the queued client gets its answer.
        waiting.open_ctl()
        assert waiting.ctl("ping")["data"]["pid"] == proc.pid
        waiting.close()
        wait_for_log(user_env, "accepting connections again after")
        log = daemon_log(user_env)
        assert log.count("cannot accept connections") == 1, log  # one line per episode, no flood
        assert "Traceback" not in log
        assert ping(user_env.socket) == proc.pid
    finally:
        for sock in flood:
            sock.close()
        proc.terminate()
        assert proc.wait(timeout=STEP_S) == 0, daemon_log(user_env)
