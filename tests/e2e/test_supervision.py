"""Supervision end to end (issue 4): crash backoff and parking, keep_alive, spawn errors, linger
and idle stops, eager starts, wake predicates and the status model, with a real daemon.

Testing policy: the timing rules themselves (delays, jitter, windows, the order of decisions) are
proven exactly by tests/unit/test_lifecycle.py, without processes; here the question is whether
the daemon's shell obeys the lifecycle with real processes. Servers are the fixture server (named
in config.toml or registered through shim options), clients are real shims (the official SDK
through `lazyd-shim`, or a raw shim fed JSON lines when a client must stay attached after a failed
handshake). Spawns are counted from the "[lazyd] started pid" lines the daemon writes into each
server's log, state is read with the `status` control op, liveness from /proc. Every wait is a
poll with a bounded deadline. No test asserts that something was fast: the one timing check is a
set of floors (backoff intervals never shorter than their nominal lower bound), which a slow
machine can only satisfy more easily.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from lazyd.errors import CtlError
from tests.conftest import UserEnv, shim_command, shim_session, start_daemon
from tests.e2e.supervision_support import (
    DEADLINE_S,
    PARK_DEADLINE_S,
    SERVER,
    alive,
    await_for,
    control,
    daemon_log,
    named_session,
    recorded_pids,
    server_table,
    spawn_times,
    status_rows,
    tool_text,
    wait_for,
    wait_for_row,
    wait_for_value,
    write_config,
)

pytestmark = pytest.mark.e2e
# The documented supervision schedule, written out (not read from lazyd's constants, so a changed
# constant fails here): a crash loop is parked after five failed restarts, and the n-th restart
# waits at least 0.5 * 2**(n-1) s less 20 % jitter, never under 0.5 s.
PARK_AFTER_FAILURES = 5
BACKOFF_FLOORS_S = [0.5, 0.8, 1.6, 3.2, 6.4]
CRASH_CODE = 3
CRASH_STDERR = f"fixture: crashing on start with status {CRASH_CODE}"
INITIALIZE_PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "raw-test-client", "version": "1"}}


# ---- helpers of this module (the shared ones are in supervision_support.py) -----------------------


def failed_spawns(user: UserEnv, name: str) -> int:
    """Spawns of `name` that failed before a process existed, from the daemon's log."""
    return daemon_log(user).count(f"[{name}] cannot start")


class RawShim:
    """`lazyd-shim ARGS` driven with JSON lines: a client that stays attached whatever it is told."""

    def __init__(self, user: UserEnv, *args: str) -> None:
        self.stderr_path = user.root / f"raw-shim-{os.getpid()}-{time.monotonic_ns()}.stderr"
        with open(self.stderr_path, "wb") as errlog:
            self.proc = subprocess.Popen([shim_command(), *args], env=user.env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=errlog)
        self._buffer = b""

    def request(self, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request and return the response with its id (notifications are skipped)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + DEADLINE_S
        while True:
            message = json.loads(self._line(deadline))
            if message.get("id") == rid and "method" not in message:
                return dict(message)

    def _line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"the shim answered nothing; its stderr: {self.stderr_path.read_text()}"
            chunk = os.read(fd, 65536)
            assert chunk, f"the shim exited; its stderr: {self.stderr_path.read_text()}"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def error_message(answer: dict[str, Any]) -> str:
    assert "error" in answer, answer
    return str(answer["error"]["message"])


# ---- crash backoff, parking, keep_alive -----------------------------------------------------------


def test_a_crash_loop_backs_off_parks_after_five_failed_restarts_and_a_keep_alive_server_never_parks(
    user_env: UserEnv,
) -> None:
    crash = {"FIXTURE_CRASH_ON_START": str(CRASH_CODE)}
    write_config(user_env, server_table("loop", env=crash) + server_table("forever", env=crash, keep_alive=True))
    start_daemon(user_env)
    shim = RawShim(user_env, "--server", "loop")
    try:
        # The client's own start fails and it gets the reason; it stays attached, so the server is
        # still needed and the daemon restarts it on its own: five unrequested failed restarts.
        first = error_message(shim.request(1, "initialize", INITIALIZE_PARAMS))
        assert f"exited with status {CRASH_CODE}" in first and CRASH_STDERR in first
        seen_forever: set[str] = set()

        def loop_parked() -> bool:
            rows = status_rows(user_env)
            seen_forever.add(rows["forever"]["state"])
            return bool(rows["loop"]["state"] == "failed")

        wait_for(loop_parked, "the crash loop to be parked", PARK_DEADLINE_S)
        loop = status_rows(user_env)["loop"]
        assert (loop["pid"], loop["clients"], loop["restarts"]) == (None, 1, PARK_AFTER_FAILURES)
        assert f"exited with status {CRASH_CODE}" in loop["last_error"] and CRASH_STDERR in loop["last_error"]
        times = spawn_times(user_env, "loop")
        assert len(times) == 1 + PARK_AFTER_FAILURES, times  # the client's start, then five restarts
        intervals = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
        for failure, interval in enumerate(intervals, start=1):
            # Each restart waited at least its backoff: 0.5, 1, 2, 4, 8 s, less the jitter.
            floor = BACKOFF_FLOORS_S[failure - 1]
            assert interval >= floor - 0.002, (failure, intervals)  # log stamps are in milliseconds

        # The keep_alive server crashes the same way from boot, with nobody attached: past five
        # failed starts it still backs off and restarts.
        def forever_restarted() -> bool:
            seen_forever.add(status_rows(user_env)["forever"]["state"])
            return len(spawn_times(user_env, "forever")) > PARK_AFTER_FAILURES

        wait_for(forever_restarted, "a sixth start of the keep_alive server", PARK_DEADLINE_S)
        assert "failed" not in seen_forever and "backoff" in seen_forever, seen_forever

        # A parked server restarts on nothing but a request: that request gets one fresh start at
        # once, and its error carries the exit status and the stderr tail.
        assert len(spawn_times(user_env, "loop")) == 1 + PARK_AFTER_FAILURES
        again = error_message(shim.request(2, "tools/call", {"name": "echo", "arguments": {"text": "x"}}))
        assert f"exited with status {CRASH_CODE}" in again and CRASH_STDERR in again
        assert len(spawn_times(user_env, "loop")) == 2 + PARK_AFTER_FAILURES
        row = status_rows(user_env)["loop"]
        assert (row["state"], row["failures"]) == ("failed", 2 + PARK_AFTER_FAILURES)  # one try, parked again
    finally:
        shim.close()
    # `lazyctl wake` clears the failure count and tries once more; with nobody attached any more,
    # its failure parks the server with the reason (the operator asked for it to run) rather than
    # backing off or leaving it `sleeping`.
    wait_for_row(user_env, "loop", lambda r: r["clients"] == 0, "the client to detach")
    with pytest.raises(CtlError, match=f"loop did not start: exited with status {CRASH_CODE}"):
        control(user_env, "wake", name="loop")
    row = status_rows(user_env)["loop"]
    assert (row["state"], row["failures"], row["pid"]) == ("failed", 1, None)
    assert CRASH_STDERR in row["last_error"]
    assert len(spawn_times(user_env, "loop")) == 3 + PARK_AFTER_FAILURES


def test_a_command_that_cannot_be_executed_is_parked_at_once_and_other_spawn_errors_back_off(
    user_env: UserEnv,
) -> None:
    # An argument over the kernel's 128 KiB per-string limit makes execve fail with E2BIG: a spawn
    # error that is not "command not found", which is retried like a crash.
    write_config(user_env, server_table("missing", command=["/nonexistent/lazyd-test-server"])
                 + server_table("huge", command=[*SERVER, "x" * 200_000]))
    start_daemon(user_env)
    missing, huge = RawShim(user_env, "--server", "missing"), RawShim(user_env, "--server", "huge")
    try:
        refused = error_message(missing.request(1, "initialize", INITIALIZE_PARAMS))
        assert "cannot execute '/nonexistent/lazyd-test-server': No such file or directory" in refused
        row = status_rows(user_env)["missing"]
        assert row["state"] == "failed" and "No such file or directory" in row["last_error"]
        assert "Argument list too long" in error_message(huge.request(1, "initialize", INITIALIZE_PARAMS))
        # Two retries of `huge` take 0.5 + 1 s of backoff: `missing` would have retried meanwhile.
        wait_for(lambda: failed_spawns(user_env, "huge") >= 3, "two retries of huge")
        rows = status_rows(user_env)
        assert rows["huge"]["state"] in ("backoff", "starting") and rows["huge"]["restarts"] >= 2
        assert "Argument list too long" in rows["huge"]["last_error"]
        assert failed_spawns(user_env, "missing") == 1
        assert (rows["missing"]["state"], rows["missing"]["restarts"]) == ("failed", 0)
    finally:
        missing.close()
        huge.close()


# ---- linger and idle stops ----------------------------------------------------------------------


async def test_with_linger_0_the_server_stops_when_its_last_client_leaves_and_the_next_request_starts_it(
    user_env: UserEnv,
) -> None:
    start_daemon(user_env)
    with trio.fail_after(DEADLINE_S):
        async with shim_session(user_env, SERVER, shim_args=("--linger", "0")) as session:
            first = int(tool_text(await session.call_tool("pid", {})))
        await await_for(lambda: not alive(first), "the server to stop after its last client left")
        # The process is gone before the daemon has reaped it and recorded the exit: wait for that.
        await await_for(lambda: next(iter(status_rows(user_env).values()))["state"] == "sleeping", "the sleeping state")
        (row,) = status_rows(user_env).values()
        assert (row["state"], row["pid"], row["clients"]) == ("sleeping", None, 0)
        assert "stopping: last client left" in daemon_log(user_env)
        async with shim_session(user_env, SERVER, shim_args=("--linger", "0")) as session:
            second = int(tool_text(await session.call_tool("pid", {})))
            assert second != first and alive(second)


async def test_idle_timeout_stops_a_server_its_client_still_holds_but_never_one_busy_with_a_request(
    user_env: UserEnv,
) -> None:
    start_daemon(user_env)
    with trio.fail_after(DEADLINE_S):
        async with shim_session(user_env, SERVER, shim_args=("--idle-timeout", "1s")) as session:
            first = int(tool_text(await session.call_tool("pid", {})))
            await await_for(lambda: not alive(first), "the idle server to stop")
            await await_for(lambda: next(iter(status_rows(user_env).values()))["state"] == "sleeping", "the sleeping state")
            (row,) = status_rows(user_env).values()
            assert (row["state"], row["clients"]) == ("sleeping", 1)
            second = int(tool_text(await session.call_tool("pid", {})))
            assert second != first
            # Silent for 2.5 s, more than twice the idle timeout: a request in flight is use.
            slept = await session.call_tool("sleep", {"seconds": 2.5})
            assert not slept.is_error and "slept" in tool_text(slept).lower(), slept
    assert "idle for 1s" in daemon_log(user_env)


# ---- eager starts and the status model ------------------------------------------------------------


def test_an_eager_server_starts_at_boot_with_no_client_and_status_shows_the_whole_model(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    methods = tmp_path / "methods.log"
    write_config(user_env, server_table("early", env={"FIXTURE_LOG": str(methods)}, start="eager")
                 + server_table("late"))
    start_daemon(user_env)
    # Nobody ever initialized it: the daemon replays a handshake of its own, so the start completes.
    early = wait_for_row(user_env, "early", lambda r: r["state"] == "running" and r["cache_age_s"] is not None,
                         "the eager server to run and be cached")
    assert early["clients"] == 0 and alive(early["pid"])
    received = methods.read_text().splitlines()
    assert received.index("initialize") < received.index("notifications/initialized"), received
    model = {"state", "pid", "started_at", "uptime_s", "clients", "restarts", "last_error", "cache_age_s",
             "cache_updated_at", "listings", "era", "listen_streams", "predicate", "policy"}
    assert model <= set(early), set(early)
    # The unattended start probed discovery first; the fixture answers -32601: handshake era.
    assert (early["era"], early["listen_streams"]) == ("handshake", 0)
    assert early["listings"]["tools"] == 10 and early["predicate"] == "off" and early["restarts"] == 0
    assert early["policy"]["start"] == "eager" and early["last_error"] is None
    assert abs(early["started_at"] - time.time()) < 3600  # a Unix time, not a monotonic one
    late = status_rows(user_env)["late"]
    assert (late["state"], late["pid"], late["started_at"], late["cache_age_s"]) == ("sleeping", None, None, None)


# ---- wake predicates ------------------------------------------------------------------------------


def test_a_wake_predicate_that_flips_from_1_to_0_starts_the_server_with_no_client_connected(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    runs, flag = tmp_path / "runs", tmp_path / "flag"
    predicate = ["/bin/sh", "-c", f'echo run >> "{runs}"; test -e "{flag}"']
    write_config(user_env, server_table("watched", wake={"command": predicate, "interval": "200ms", "timeout": "5s"}))
    start_daemon(user_env)
    wait_for(lambda: runs.exists() and len(runs.read_text().splitlines()) >= 3, "three runs of the predicate")
    row = status_rows(user_env)["watched"]
    assert (row["state"], row["pid"], row["clients"]) == ("sleeping", None, 0)
    assert row["predicate"] in ("idle", "running") and spawn_times(user_env, "watched") == []
    flag.touch()
    row = wait_for_row(user_env, "watched", lambda r: r["state"] == "running", "the predicate to start the server")
    assert row["clients"] == 0 and alive(row["pid"]) and row["listings"]["tools"] == 10
    assert len(spawn_times(user_env, "watched")) == 1


async def test_a_wake_command_given_as_a_shim_option_starts_that_registration_with_no_client_connected(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    flag = tmp_path / "flag"
    options = ("--wake-command", json.dumps(["/bin/sh", "-c", f'test -e "{flag}"']), "--wake-interval", "200ms")
    start_daemon(user_env)
    with trio.fail_after(DEADLINE_S):
        async with shim_session(user_env, SERVER, shim_args=options) as session:
            first = int(tool_text(await session.call_tool("pid", {})))
            (name,) = status_rows(user_env)
            await trio.to_thread.run_sync(lambda: control(user_env, "sleep", name=name))
            assert not alive(first)
        row = await trio.to_thread.run_sync(
            wait_for_row, user_env, name, lambda r: r["clients"] == 0 and r["predicate"] != "off", "the session to leave")
        assert (row["state"], row["pid"], row["policy"]["wake"][0]) == ("sleeping", None, "/bin/sh")
        flag.touch()
        row = await trio.to_thread.run_sync(
            wait_for_row, user_env, name, lambda r: r["state"] == "running", "the predicate to start the server")
        assert row["clients"] == 0 and row["pid"] != first and alive(row["pid"])


def _hanging_predicate(tmp_path: Path, name: str) -> tuple[list[str], Path]:
    """A predicate that never exits and has a child of its own; it records both pids."""
    pids = tmp_path / f"{name}.pids"
    return ["/bin/sh", "-c", f'echo $$ >> "{pids}"; sleep 1000 & echo $! >> "{pids}"; wait'], pids


async def test_a_hanging_predicate_never_holds_back_a_tool_call_and_is_killed_with_its_group_at_its_timeout(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    stuck_argv, stuck_pids = _hanging_predicate(tmp_path, "stuck")
    slow_argv, slow_pids = _hanging_predicate(tmp_path, "slow")
    write_config(user_env, server_table("stuck", wake={"command": stuck_argv, "interval": "1h", "timeout": "1s"})
                 + server_table("slow", wake={"command": slow_argv, "interval": "1h", "timeout": "10m"}))
    daemon = start_daemon(user_env)
    with trio.fail_after(DEADLINE_S * 2):
        # `stuck` times out: its shell and the shell's own child are killed, and it stays asleep.
        stuck = await trio.to_thread.run_sync(wait_for_value, lambda: recorded_pids(stuck_pids, 2), "the stuck predicate")
        await await_for(lambda: not any(alive(pid) for pid in stuck), "the timed-out predicate's group to be killed")
        row = status_rows(user_env)["stuck"]
        assert (row["state"], row["predicate"], row["pid"]) == ("sleeping", "idle", None)
        assert "[stuck] wake predicate timed out after 1s" in daemon_log(user_env)
        # `slow` hangs for ten minutes: a tool call meanwhile starts the server and is answered
        # while the predicate is still running.
        slow = await trio.to_thread.run_sync(wait_for_value, lambda: recorded_pids(slow_pids, 2), "the slow predicate")
        async with named_session(user_env, "slow") as session:
            pid = int(tool_text(await session.call_tool("pid", {})))
            assert all(alive(p) for p in slow), "the tool call was answered while the predicate ran"
            row = status_rows(user_env)["slow"]
            assert (row["state"], row["pid"], row["predicate"]) == ("running", pid, "running")
    # A predicate still running at shutdown is killed with its group too.
    assert daemon.stop() == 0
    assert not any(alive(p) for p in slow)
