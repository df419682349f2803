"""Server faults through the whole stack: cold-start races, spawn failures, crashes mid-request,
hostile output, environments and descriptors, and no orphan after any way a server stops.

Testing policy: a real daemon, real shims driven line by line (tests/e2e/faults_support.py),
and the fixture server (tests/servers/fixture_server.py), sometimes wrapped to misbehave in a way
it has no switch for. A server and its grandchildren carry a marker of their own in their
environment; "no orphan" is a /proc scan for it. What a server received is read from the
fixture's per-method log; memory is the daemon's VmHWM. Waits are bounded polls, never sleeps,
and no test asserts on elapsed time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import SERVERS, Daemon, UserEnv, start_daemon
from tests.e2e.faults_support import (
    FIXTURE,
    SERVER_MARKER_VAR,
    RawShim,
    alive,
    daemon_log,
    lazyctl,
    peak_rss_kib,
    reset_peak_rss,
    server_side_processes,
    server_status,
    session_members,
    text_of,
    tool_call,
    wait_for,
    write_named_config,
)

pytestmark = pytest.mark.e2e

# The documented limits (docs/relay.md, docs/lazyctl.md), as numbers: test_documented_limits.py
# compares them with the constants once.
STDOUT_LINE_LIMIT = 16 * 1024 * 1024  # a server's stdout line
LOG_LIMIT = 1024 * 1024  # a server's log file, rotated at 1 MiB
SYSTEMD_VARIABLES = {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}

# The fixture server plus one tool it has no switch for: write 64 MiB to stdout with no newline.
STDOUT_FLOODER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import fixture_server as fs

plain_call_tool = fs.Server.call_tool

def call_tool(self, params, cancel):
    if params.get("name") != "flood_stdout":
        return plain_call_tool(self, params, cancel)
    with self.out_lock:
        try:
            sys.stdout.buffer.write(b"x" * (64 << 20))
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            pass
    cancel.wait()
    return None

fs.Server.call_tool = call_tool
fs.main()
"""


def _methods(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _initialize(request_id: int) -> dict[str, object]:
    """A client's initialize request, sent by hand when the test expects it to fail."""
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


# ---- starting ------------------------------------------------------------------------------------


def test_ten_concurrent_first_requests_from_three_shims_to_a_cold_server_spawn_exactly_one_process(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    methods = tmp_path / "methods.log"
    # A slow start keeps the server cold while all ten requests arrive.
    env = {"FIXTURE_LOG": str(methods), "FIXTURE_START_DELAY_S": "0.3"}
    warm = RawShim(user_env, env=env)
    warm.initialize()
    warm.fence(1)
    name = server_status(user_env)[0]["name"]
    assert lazyctl(user_env, "sleep", name).returncode == 0  # the cache is warm, no process runs
    assert _methods(methods).count("initialize") == 1
    warm.close()
    shims = [RawShim(user_env, env=env) for _ in range(3)]
    try:
        for shim in shims:
            shim.initialize()  # from cache: starts nothing
        row = server_status(user_env)[0]
        assert (row["state"], row["pid"]) == ("sleeping", None)
        counts = [4, 3, 3]
        for shim, count in zip(shims, counts):
            shim.send(*(tool_call(i, "pid") for i in range(count)))
        pids = {text_of(shim.read()) for shim, count in zip(shims, counts) for _ in range(count)}
        assert len(pids) == 1, "every request was answered by the one process"
        assert _methods(methods).count("initialize") == 2, "exactly one more process was started"
        assert _methods(methods).count("tools/call") == 10
    finally:
        for shim in shims:
            shim.close()


def test_a_server_command_that_is_not_executable_fails_the_waiting_request_and_is_parked_with_the_os_error(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    # (A command that does not exist: tests/e2e/test_supervision.py.)
    command, reason = str(tmp_path / "not-executable"), "Permission denied"
    Path(command).write_text("#!/bin/sh\n")
    os.chmod(command, 0o644)
    start_daemon(user_env)
    shim = RawShim(user_env, [command])
    try:
        shim.send(_initialize(0))
        error = shim.read()
        assert error["id"] == 0 and reason in error["error"]["message"]
        (status,) = server_status(user_env)
        assert status["state"] == "failed"
        assert reason in status["last_error"]
        assert status["restarts"] == 0
        assert shim.proc.poll() is None, "the session goes on"
        shim.fence(1)
    finally:
        shim.close()


# ---- crashes ----------------------------------------------------------------------------------------


def test_a_server_killed_with_three_requests_in_flight_answers_each_once_under_its_original_id(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    methods = tmp_path / "methods.log"
    # Shared by the user's word: two hellos at once on a cold cache would otherwise each get a
    # process when the first start comes later than the undecided grace (a loaded machine).
    env = {"FIXTURE_LOG": str(methods), "LAZYD_SHARE": "true"}
    a, b = RawShim(user_env, env=env), RawShim(user_env, env=env)
    try:
        a.initialize()
        b.initialize()
        a.send(tool_call(1, "pid"))
        server = int(text_of(a.read()))
        a.send(tool_call(2, "sleep", {"seconds": 60}), tool_call("2", "sleep", {"seconds": 60}))
        b.send(tool_call(2, "sleep", {"seconds": 60}))  # the same id as a's, on purpose
        wait_for(lambda: _methods(methods).count("tools/call") == 4, "the three sleeps to reach the server")
        before = len(_methods(methods))
        os.kill(server, signal.SIGKILL)
        got_a = [a.read(), a.read()]
        got_b = [b.read()]
        assert sorted((type(m["id"]).__name__, m["id"]) for m in got_a) == [("int", 2), ("str", "2")]
        assert [m["id"] for m in got_b] == [2]
        for message in got_a + got_b:
            assert "stopped before answering: killed by SIGKILL" in message["error"]["message"]
        a.fence("fence")  # exactly one answer each: nothing else is waiting
        b.fence("fence")
        # The next request starts the server again; it first gets the replayed handshake.
        a.send(tool_call(3, "pid"))
        restarted = int(text_of(a.read()))
        assert restarted != server
        after = _methods(methods)[before:]
        assert after.index("initialize") < after.index("notifications/initialized") < after.index("tools/call")
        b.send(tool_call(3, "pid"))
        assert int(text_of(b.read())) == restarted
    finally:
        a.close()
        b.close()


# ---- hostile output -----------------------------------------------------------------------------------


def test_non_json_lines_on_a_servers_stdout_are_logged_and_dropped_while_every_session_keeps_working(
    user_env: UserEnv,
) -> None:
    env = {"FIXTURE_GARBAGE_STDOUT": "1"}  # a non-JSON line before every response
    a, b = RawShim(user_env, env=env), RawShim(user_env, env=env)
    try:
        a.initialize()
        b.initialize()
        for i in range(5):
            a.send(tool_call(i, "echo", {"text": f"a{i}"}))
            b.send(tool_call(i, "echo", {"text": f"b{i}"}))
        # The fixture answers each request in its own thread: answers may come in any order.
        for shim, name in ((a, "a"), (b, "b")):
            answers = {reply["id"]: text_of(reply) for reply in (shim.read() for _ in range(5))}
            assert answers == {i: f"{name}{i}" for i in range(5)}
        a.fence("fence")
        b.fence("fence")
        assert "dropped a line from the server that is not a JSON-RPC message" in daemon_log(user_env)
    finally:
        a.close()
        b.close()


def test_a_64_mib_stdout_line_without_newline_restarts_the_server_and_daemon_memory_stays_under_twice_the_limit(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    flooder = tmp_path / "flooder.py"
    flooder.write_text(STDOUT_FLOODER)
    daemon = start_daemon(user_env)
    shim = RawShim(user_env, [sys.executable, str(flooder), str(SERVERS)])
    try:
        shim.initialize()
        shim.send(tool_call(1, "pid"))
        first = int(text_of(shim.read()))
        reset_peak_rss(daemon.proc.pid)
        before_kib = peak_rss_kib(daemon.proc.pid)
        shim.send(tool_call(2, "flood_stdout"))
        error = shim.read()
        assert error["id"] == 2 and f"wrote a stdout line over {STDOUT_LINE_LIMIT} bytes" in error["error"]["message"]
        growth_bytes = (peak_rss_kib(daemon.proc.pid) - before_kib) * 1024
        assert growth_bytes < 2 * STDOUT_LINE_LIMIT
        wait_for(lambda: not alive(first), "the flooding server to be killed")
        shim.send(tool_call(3, "pid"))
        assert int(text_of(shim.read())) != first
    finally:
        shim.close()


def test_a_200_mb_stderr_flood_never_blocks_the_server_and_daemon_memory_stays_bounded(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    quiet = RawShim(user_env)
    flooding = RawShim(user_env, env={"FIXTURE_STDERR_FLOOD_MB": "200"})
    try:
        quiet.initialize()
        quiet.fence(1)  # the daemon has served a session: its baseline memory is in place
        reset_peak_rss(daemon.proc.pid)
        before_kib = peak_rss_kib(daemon.proc.pid)
        flooding.initialize()
        # The fixture floods before it reads stdin: an answer proves the flood went through.
        flooding.send(tool_call(1, "echo", {"text": "after the flood"}))
        assert text_of(flooding.read()) == "after the flood"
        quiet.fence(2)
        growth_bytes = (peak_rss_kib(daemon.proc.pid) - before_kib) * 1024
        assert growth_bytes < 32 * 1024 * 1024
        name = next(s["name"] for s in server_status(user_env) if s["pid"] is not None and s["clients"] == 1
                    and _environ_has_flood(s["pid"]))
        log = user_env.state_dir / "logs" / f"{name}.log"
        assert log.stat().st_size <= LOG_LIMIT
        assert b"fixture: stderr flood done" in log.read_bytes()
    finally:
        quiet.close()
        flooding.close()


def _environ_has_flood(pid: int) -> bool:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return b"FIXTURE_STDERR_FLOOD_MB=200" in f.read().split(b"\0")


# ---- what a server inherits ---------------------------------------------------------------------------


def _environ_names(pid: int) -> set[str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return {item.split(b"=", 1)[0].decode() for item in f.read().split(b"\0") if item}


def test_no_server_inherits_systemd_variables_or_any_descriptor_beyond_stdio(user_env: UserEnv, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    systemd_env = {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1",
                   "LISTEN_FDS": "1", "LISTEN_PID": "1", "LISTEN_FDNAMES": "lazyd.sock"}
    write_named_config(user_env, {"named": {"command": FIXTURE[0], "args": FIXTURE[1:],
                                            "env": {SERVER_MARKER_VAR: marker, "FIXTURE_GRANDCHILDREN": "1"}}})
    log = open(user_env.root / "daemon.stderr", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "lazyd.daemon"], env={**user_env.env, **systemd_env},
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    daemon = Daemon(proc, user_env)
    # A client whose own environment has them too: the shim passes its environment on.
    shim = RawShim(user_env, env={**systemd_env, SERVER_MARKER_VAR: marker, "FIXTURE_GRANDCHILDREN": "1"})
    try:
        wait_for(user_env.socket.exists, "the daemon socket")
        assert lazyctl(user_env, "wake", "named").returncode == 0
        shim.initialize()
        shim.send(tool_call(1, "pid"))
        unnamed = int(text_of(shim.read()))
        named = next(s["pid"] for s in server_status(user_env) if s["name"] == "named")
        servers = server_side_processes(marker)
        assert len(servers) == 4 and {named, unnamed} <= set(servers)  # two servers, a grandchild each
        for pid in servers:
            assert _environ_names(pid) & SYSTEMD_VARIABLES == set(), pid
            assert SERVER_MARKER_VAR in _environ_names(pid)  # the environment was read
        for pid in (named, unnamed):
            # The daemon holds its socket, a lock, logs and client connections: none reaches a server.
            assert sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")) == [0, 1, 2]
    finally:
        shim.close()
        daemon.stop()
        log.close()
        notify.close()


# ---- no orphan, whatever the way out ------------------------------------------------------------------

STOP_PATHS = ["client exit", "shim killed", "lazyctl sleep", "linger", "idle timeout", "crash",
              "start timeout", "daemon sigterm", "daemon kill -9 and restart"]


def _shim_args(path: str) -> tuple[str, ...]:
    return {"client exit": ("--linger", "0s"), "shim killed": ("--linger", "0s"), "linger": ("--linger", "1s"),
            "idle timeout": ("--idle-timeout", "1s"), "start timeout": ("--start-timeout", "3s")}.get(path, ())


@pytest.mark.parametrize("path", STOP_PATHS)
def test_no_process_of_a_server_or_its_grandchildren_survives_any_way_it_stops(user_env: UserEnv, path: str) -> None:
    marker = uuid.uuid4().hex
    env = {SERVER_MARKER_VAR: marker, "FIXTURE_GRANDCHILDREN": "2"}  # the first ignores SIGTERM
    if path == "start timeout":
        env["FIXTURE_HANG_ON_INITIALIZE"] = "1"
    daemon = start_daemon(user_env)
    shim = RawShim(user_env, shim_args=_shim_args(path), env=env)
    try:
        if path == "start timeout":
            shim.send(_initialize(0))
            wait_for(lambda: len(server_side_processes(marker)) == 3, "the server and its grandchildren")
            assert "start timeout" in shim.read()["error"]["message"]
        else:
            shim.initialize()
            shim.send(tool_call(1, "pid"))
            leader = int(text_of(shim.read()))
            wait_for(lambda: len(session_members(leader)) == 3, "the server and its grandchildren")
            assert server_side_processes(marker) == session_members(leader)
            _stop(path, user_env, daemon, shim, leader)
        wait_for(lambda: server_side_processes(marker) == [], f"nothing of the server to remain after: {path}")
    finally:
        shim.close()


def _stop(path: str, user: UserEnv, daemon: Daemon, shim: RawShim, leader: int) -> None:
    if path in ("client exit", "linger"):
        assert shim.close_stdin_and_wait() == 0
    elif path == "shim killed":
        shim.kill()
    elif path == "lazyctl sleep":
        assert lazyctl(user, "sleep", server_status(user)[0]["name"]).returncode == 0
    elif path == "idle timeout":
        pass  # the session stays attached and sends nothing
    elif path == "crash":
        shim.send(tool_call(2, "crash", {"code": 3}))
        assert "exited with status 3" in shim.read()["error"]["message"]
    elif path == "daemon sigterm":
        assert daemon.stop() == 0
    elif path == "daemon kill -9 and restart":
        shim.kill()  # so that no shim autostarts a daemon: this test restarts it by hand
        daemon.proc.kill()
        daemon.proc.wait()
        # The server exits on stdin EOF, but nothing ends its grandchildren: only the sweep will.
        wait_for(lambda: not alive(leader), "the server to exit on stdin EOF")
        assert len(session_members(leader)) == 2
        start_daemon(user)
    else:
        raise AssertionError(f"unknown stop path {path}")
