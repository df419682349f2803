"""Clients that leave or stop reading: what the shim answers, and what the daemon does upstream.

Testing policy: a real daemon, real shims driven line by line (tests/e2e/faults_support.py)
and the fixture server, whose per-method log shows what reached it (a `notifications/cancelled`,
say). The daemon's memory is its VmHWM; waits are bounded polls, and no test asserts on elapsed
time.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import UserEnv, start_daemon
from tests.e2e.shim_paths import ShimPath, shim_path  # noqa: F401 (shim_path is a fixture)
from tests.e2e.faults_support import (
    DEADLINE_S,
    INIT_PARAMS,
    alive,
    call,
    daemon_log,
    lazyctl,
    peak_rss_kib,
    reset_peak_rss,
    server_status,
    text_of,
    tool_call,
    wait_for,
)

pytestmark = pytest.mark.e2e

# Small requests with big answers (the fixture's `env` tool returns a variable's value): what piles
# up is what the client does not read, not what it sends. 120 kB stays under the kernel's limit
# on one environment string (128 KiB).
BIG_VALUE = "y" * 120_000
BIG_CALLS = 1_000  # 120 MB of answers: far past the outbox's byte budget


def _methods(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_client_closing_stdin_and_then_stdout_ends_its_shim_with_0_and_its_calls_are_cancelled_upstream(
    user_env: UserEnv, tmp_path: Path, shim_path: ShimPath,
) -> None:
    # A client that closes stdin still gets what it asked (see the test below); one that also
    # closes its stdout (it is gone) ends the session at once, and the daemon cancels upstream.
    methods = tmp_path / "methods.log"
    shim = shim_path.started(user_env, env={"FIXTURE_LOG": str(methods)})
    try:
        shim.initialize()
        shim_path.check(shim)
        shim.send(tool_call(1, "pid"))
        server = int(text_of(shim.read()))
        shim.send(tool_call(2, "sleep", {"seconds": 60}), tool_call("3", "sleep", {"seconds": 60}))
        wait_for(lambda: _methods(methods).count("tools/call") == 3, "the two sleeps to reach the server")
        assert shim.proc.stdin is not None and shim.proc.stdout is not None
        shim.proc.stdin.close()
        time.sleep(0.5)  # time enough for a shim that does not wait to be gone
        assert shim.proc.poll() is None, "the shim left with two calls unanswered"
        shim.proc.stdout.close()
        assert shim.proc.wait(DEADLINE_S) == 0
        wait_for(lambda: _methods(methods).count("notifications/cancelled") == 2, "a cancel for each call in flight")
        # The server stays for its linger (10 minutes by default), with nothing in flight.
        (status,) = server_status(user_env)
        assert (status["pid"], status["state"], status["clients"], status["inflight"]) == (server, "running", 0, 0)
        assert alive(server)
    finally:
        shim.close()


ONE_SHOT: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT_PARAMS},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    tool_call(2, "echo", {"text": "one shot"}),
    tool_call("3", "sleep", {"seconds": 0.5}),
]


@pytest.mark.parametrize("server", ["running", "asleep"])
def test_every_request_a_client_wrote_before_closing_stdin_is_answered_before_the_shim_exits(
    user_env: UserEnv, tmp_path: Path, shim_path: ShimPath, server: str,
) -> None:
    # `printf '%s\n' "$INIT" "$INITIALIZED" "$LIST" "$CALL" | lazyd-shim -- SERVER`: a server run
    # directly answers all of it before it exits, and so must the shim, whichever path it takes.
    warm = shim_path.started(user_env)
    try:
        warm.initialize()
        text_of(call(warm, 1, "pid"))  # the cache is filled, the server runs
        if server == "asleep":
            assert warm.close_stdin_and_wait() == 0
            (status,) = server_status(user_env)
            assert lazyctl(user_env, "sleep", status["name"]).returncode == 0
            wait_for(lambda: server_status(user_env)[0]["state"] == "sleeping", "the server to sleep")
        shim_log = tmp_path / "shim.log"
        one = shim_path.started(user_env, env={"LAZYD_LOG_FILE": str(shim_log)})
        try:
            one.send(*ONE_SHOT)
            assert one.proc.stdin is not None and one.proc.stdout is not None
            one.proc.stdin.close()
            out = one.proc.stdout.read()  # to EOF: every byte the shim writes before it exits
            assert one.proc.wait(DEADLINE_S) == 0
        finally:
            one.close()
        answers = [json.loads(line) for line in out.splitlines()]
        ids = [json.dumps(a["id"]) for a in answers if "id" in a]
        assert sorted(ids) == ['"3"', "0", "1", "2"], answers  # each once, 3 as a string
        by_id = {json.dumps(a["id"]): a for a in answers if "id" in a}
        assert "result" in by_id["0"] and "tools" in by_id["1"]["result"], answers
        assert (text_of(by_id["2"]), text_of(by_id['"3"'])) == ("one shot", "slept 0.5")
        assert ("handed off" in shim_log.read_text()) == shim_path.handoff
    finally:
        warm.close()


def test_a_batch_written_before_closing_stdin_is_refused_once_and_the_shim_exits_without_waiting_for_its_ids(
    user_env: UserEnv, tmp_path: Path, shim_path: ShimPath,
) -> None:
    # The relay refuses a batch whole, with one error under a null id: nothing is ever answered
    # under the ids inside it. Counted in flight (as they once were, on both paths) they held the
    # session open for the 60 s a client's last requests may take (linepeek.EOF_WAIT_S).
    shim_log = tmp_path / "shim.log"
    one = shim_path.started(user_env, env={"LAZYD_LOG_FILE": str(shim_log)})
    try:
        one.initialize()
        batch = [tool_call(5, "echo", {"text": "a"}), tool_call("6", "echo", {"text": "b"})]
        assert one.proc.stdin is not None and one.proc.stdout is not None
        one.proc.stdin.write(json.dumps(batch).encode() + b"\n")
        one.proc.stdin.close()
        stdout, got = one.proc.stdout, []
        reader = threading.Thread(target=lambda: got.append(stdout.read()), daemon=True)  # to EOF
        reader.start()
        reader.join(DEADLINE_S)  # DEADLINE_S (20 s) is well under EOF_WAIT_S
        assert got, "the session was held open after the client closed its stdin"
        out = got[0]
        assert one.proc.wait(DEADLINE_S) == 0
    finally:
        one.close()
    answers = [json.loads(line) for line in out.splitlines()]
    if shim_path.handoff:  # the daemon refuses the line as it reads it, before it sees the EOF
        assert [a["id"] for a in answers if "error" in a] == [None], answers
    else:  # the shim sees the EOF with nothing in flight and need not wait for the refusal
        assert [a["id"] for a in answers if "error" in a] in ([], [None]), answers
    assert not [a for a in answers if a.get("id") in (5, "6")], answers  # never answered by those ids
    assert ("handed off" in shim_log.read_text()) == shim_path.handoff


def test_a_client_that_stops_reading_is_disconnected_at_its_outbox_budget_while_other_sessions_keep_working(
    user_env: UserEnv, shim_path: ShimPath,
) -> None:
    daemon = start_daemon(user_env)
    env = {"BIG": BIG_VALUE}
    other = shim_path.started(user_env, env=env)
    slow = shim_path.started(user_env, env=env)
    try:
        other.initialize()
        slow.initialize()
        shim_path.check(slow)
        other.send(tool_call(0, "pid"))
        server = text_of(other.read())
        reset_peak_rss(daemon.proc.pid)
        before_kib = peak_rss_kib(daemon.proc.pid)
        # From here on nobody reads the slow shim's stdout: its pipe fills, then its socket, then
        # the daemon's outbox for it.
        payload = b"".join(json.dumps(tool_call(i, "env", {"name": "BIG"})).encode() + b"\n"
                           for i in range(1, BIG_CALLS + 1))
        writer = threading.Thread(target=slow.send_raw, args=(payload,))
        writer.start()
        calls = 0
        give_up = time.monotonic() + DEADLINE_S
        while "stopped reading: disconnecting it" not in daemon_log(user_env):
            assert time.monotonic() < give_up, "the slow client was never disconnected"
            calls += 1  # the other session is served all along
            other.send(tool_call(calls, "echo", {"text": f"meanwhile {calls}"}))
            assert text_of(other.read()) == f"meanwhile {calls}"
        growth_bytes = (peak_rss_kib(daemon.proc.pid) - before_kib) * 1024
        assert growth_bytes < 2 * 64 * 1024 * 1024  # twice the documented 64 MiB outbox (docs/reliability.md)
        other.send(tool_call("after", "pid"))
        assert text_of(other.read()) == server, "the server was not restarted for it"
        # When the slow client reads again, every request it sent has exactly one answer: the
        # results that got through, then the shim's own error for each one the daemon dropped.
        writer.join()
        answered: dict[int, str] = {}
        for _ in range(BIG_CALLS):
            message = slow.read()
            assert message["id"] not in answered, f"id {message['id']} answered twice"
            if "result" in message:
                assert text_of(message) == BIG_VALUE
                answered[message["id"]] = "result"
            else:
                assert message["error"]["code"] == -32603
                answered[message["id"]] = "error"
        assert sorted(answered) == list(range(1, BIG_CALLS + 1))
        assert "error" in answered.values()
        slow.fence("fence")  # and its session goes on, through a new connection
    finally:
        other.close()
        slow.close()
