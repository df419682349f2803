"""Connection floods against a real daemon: the connection cap and running out of descriptors (case 34).

Testing policy: real daemon, raw sockets, real resource limits (`prlimit --nofile` on the daemon,
skipped with the reason printed when prlimit is missing; a hard limit equal to the soft one, so
that the daemon cannot raise it). Outcomes are read from the sockets and from the daemon's log,
polled with bounded deadlines; the log lines asserted are written once per episode by design
(one warning when refusing starts, one line when connections are admitted again), so the counts
do not depend on timing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from lazyd.protocol import wire
from lazyd.core.admission import Admission
from lazyd.protocol.frames import Line
from lazyd.ctl import format as fmt
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_command, wait_until
from tests.e2e.raw_daemon_support import STEP_S, Conn, daemon_log, hello, launch_daemon, ping

pytestmark = pytest.mark.e2e

INIT_PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
CAP_LIMIT = 128  # soft = hard: the daemon idles at ~20 descriptors, the cap comes after ~70 connections
NOFILE_LIMIT = 64  # soft = hard


def _prlimit(limit: int) -> tuple[str, ...]:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        print("skipping: prlimit is not installed")
        pytest.skip("prlimit is not installed")
    return (prlimit, f"--nofile={limit}:{limit}")


def _refusal(conn: Conn) -> dict[str, object] | None:
    """The daemon's first frame on a connection opened as a ctl: None if it was welcomed."""
    try:
        conn.sock.sendall(wire.encode(hello("ctl")))
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused and closed before the hello went out: the refusal is still there to read
    frame = conn.read()
    return None if frame["t"] == "welcome" else frame


def test_beyond_the_cap_from_the_descriptor_limit_a_connection_is_refused_with_the_reason_and_status_counts_it(
    user_env: UserEnv,
) -> None:
    proc = launch_daemon(user_env, prefix=_prlimit(CAP_LIMIT))
    held: list[Conn] = []
    try:
        refused = None
        for _ in range(CAP_LIMIT):  # a connection needs one descriptor: the cap comes before this
            conn = Conn(user_env.socket)
            refused = _refusal(conn)
            if refused is not None:
                conn.close()
                break
            held.append(conn)
        assert refused is not None, "no connection was refused"
        assert refused["t"] == "refused" and refused["code"] == "busy", refused
        assert "near its descriptor limit" in str(refused["message"]), refused
        # Most of the limit went to connections: the reserve is for servers and the daemon's files.
        assert len(held) >= CAP_LIMIT - Admission(CAP_LIMIT).reserve(0) - 32, len(held)
        assert held[0].ctl("ping")["data"]["pid"] == proc.pid  # the admitted ones still work
        _a_refused_shim_says_why_runs_its_server_directly_and_is_counted(user_env, held[0])
        held.pop().close()

        def admitted() -> bool:
            try:
                return ping(user_env.socket) == proc.pid
            except (OSError, AssertionError):
                return False

        wait_until(admitted, STEP_S, "a connection to be admitted once a slot was free")
        log = daemon_log(user_env)
        assert log.count("refusing connections") == 1, log
        assert "admitting connections again after" in log, log
    finally:
        for conn in held:
            conn.close()
        proc.terminate()
        proc.wait(timeout=STEP_S)


def _a_refused_shim_says_why_runs_its_server_directly_and_is_counted(user_env: UserEnv, ctl: Conn) -> None:
    """A real shim at the wall: the reason on its stderr and in its log, its server run directly
    (the session answers), and `lazyctl status` counting both the refusal and the fallback."""
    log_file = user_env.root / "shim.log"
    shim = subprocess.run([shim_command(), "--log-file", str(log_file), "--", sys.executable, str(FIXTURE_SERVER)],
                          env=user_env.env, input=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                                              "params": INIT_PARAMS}).encode() + b"\n",
                          capture_output=True, timeout=STEP_S)
    assert json.loads(shim.stdout.splitlines()[0])["id"] == 1  # answered by the server it ran itself
    stderr = shim.stderr.decode()
    assert "refused by the daemon: the daemon is near its descriptor limit" in stderr, stderr
    assert "[busy]); running the server directly" in stderr, stderr
    assert "near its descriptor limit" in log_file.read_text(), log_file.read_text()
    status = ctl.ctl("status")["data"]
    assert status["refused"]["busy"]["count"] == 2, status["refused"]  # the raw connection, then the shim
    assert status["fallbacks"]["refused"]["count"] == 1, status["fallbacks"]
    assert "near its descriptor limit" in status["fallbacks"]["refused"]["last_reason"]
    assert "unreachable" not in status["fallbacks"]
    human = fmt.walls(status["refused"], status["fallbacks"])
    assert "refused since start: 2: 2 busy (last: the daemon is near its descriptor limit" in human, human
    assert "servers run directly by their shim since start: 1: 1 refused" in human, human


INHERITED_FROM = 34  # the daemon inherits descriptors 34 .. 63: its own and its connections get the rest


def test_out_of_descriptors_a_new_client_is_refused_at_once_with_the_reason_and_served_once_they_free_up(
    user_env: UserEnv,
) -> None:
    # Descriptors the daemon does not know it holds fill the top of its table, as servers started
    # after the sessions would: its reserve judges by the number a connection gets (low here), so
    # accept(2) itself runs out, and the spare descriptor is what lets the daemon still say why.
    null = os.open(os.devnull, os.O_RDONLY)
    inherited = list(range(INHERITED_FROM, NOFILE_LIMIT))
    for fd in inherited:
        os.dup2(null, fd, inheritable=True)
    os.close(null)
    try:
        proc = launch_daemon(user_env, prefix=_prlimit(NOFILE_LIMIT), pass_fds=tuple(inherited))
    finally:
        for fd in inherited:
            os.close(fd)
    held: list[Conn] = []
    try:
        refused = None
        for _ in range(INHERITED_FROM):
            conn = Conn(user_env.socket, timeout_s=2.0)  # told at once, not left in the backlog
            refused = _refusal(conn)
            if refused is not None:
                conn.close()
                break
            held.append(conn)
        assert refused is not None and refused["code"] == "busy", refused
        assert "out of descriptors" in str(refused["message"]), refused
        assert proc.poll() is None
        held.pop().close()
        wait_until(lambda: _served(user_env, proc.pid), STEP_S, "a connection to be served again")
        log = daemon_log(user_env)
        assert log.count("refusing connections: the daemon is out of descriptors") == 1, log
        assert "Traceback" not in log, log
    finally:
        for conn in held:
            conn.close()
        proc.terminate()
        assert proc.wait(timeout=STEP_S) == 0, daemon_log(user_env)


def _served(user_env: UserEnv, pid: int) -> bool:
    try:
        return ping(user_env.socket) == pid
    except (OSError, AssertionError):
        return False


def _soft_nofile(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    return int(line.split()[3])


def test_the_daemon_raises_its_soft_descriptor_limit_to_the_hard_one_and_its_servers_keep_the_inherited_one(
    user_env: UserEnv,
) -> None:
    prlimit = _prlimit(1024)[0]
    proc = launch_daemon(user_env, prefix=(prlimit, "--nofile=1024:4096"))
    try:
        assert _soft_nofile(proc.pid) == 4096
        conn = Conn(user_env.socket)
        conn.sock.sendall(wire.encode(hello("shim", argv=[sys.executable, str(FIXTURE_SERVER)], env=user_env.env)))
        assert conn.read()["t"] == "welcome"
        for message in ({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT_PARAMS},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}):
            conn.sock.sendall(wire.encode(Line(json.dumps(message).encode())))
        while (answer := json.loads(conn.read()["d"])).get("id") != 1:
            pass
        server_pid = int(answer["result"]["content"][0]["text"])
        # As systemd does for its services: a server sees the limit it would have had directly.
        assert _soft_nofile(server_pid) == 1024
        conn.close()
        assert "descriptor limit 4096 (raised from 1024; hard 4096)" in daemon_log(user_env)
    finally:
        proc.terminate()
        assert proc.wait(timeout=STEP_S) == 0, daemon_log(user_env)
