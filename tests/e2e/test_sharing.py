"""One server process for every session (issue 3), with real SDK clients and real servers.

Misrouting is made visible by giving every client something only it can recognise: its own
step count for progress, its own text for echoes, its own sampling answer.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio

from tests.conftest import (
    FIXTURE_SERVER,
    UserEnv,
    everything_command,
    shim_command,
    shim_session,
    start_daemon,
    wait_until,
)
from tests.e2e.eras_support import STEP_TIMEOUT_S, status_rows

pytestmark = pytest.mark.e2e

FIXTURE = [sys.executable, str(FIXTURE_SERVER)]


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def test_two_then_ten_concurrent_sessions_share_one_server_process(user_env: UserEnv) -> None:
    async with AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(shim_session(user_env, FIXTURE)) for _ in range(2)]
        pids = {_text(await s.call_tool("pid", {})) for s in sessions}
        assert len(pids) == 1
        sessions += [await stack.enter_async_context(shim_session(user_env, FIXTURE)) for _ in range(8)]
        results: dict[int, str] = {}

        async def call(i: int, session: Any) -> None:
            results[i] = _text(await session.call_tool("pid", {}))

        async with trio.open_nursery() as nursery:
            for i, session in enumerate(sessions):
                nursery.start_soon(call, i, session)
        assert set(results.values()) == pids
        assert user_env.server_pids("fixture_server") == [int(pids.pop())]


async def test_each_client_gets_only_its_own_progress_from_concurrent_long_operations(user_env: UserEnv) -> None:
    received: dict[int, list[float]] = {}

    async def run(i: int) -> None:
        steps = i + 2  # a different count per client: any misrouted progress changes a count
        received[i] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            received[i].append(progress)

        async with shim_session(user_env, everything_command()) as session:
            await session.call_tool("trigger-long-running-operation", {"duration": 1, "steps": steps},
                                    progress_callback=on_progress)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(run, i)
    for i in range(3):
        assert len(received[i]) == i + 2, received


async def test_a_sampling_request_reaches_the_calling_client_and_a_client_without_sampling_gets_an_error(user_env: UserEnv) -> None:
    from mcp import types

    asked: list[str] = []

    async def sampling(context: Any, params: Any) -> Any:
        asked.append("A")
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="answer from A"), model="test")

    async with shim_session(user_env, everything_command(), sampling_callback=sampling) as a:
        result = await a.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5})
        assert "answer from A" in _text(result)
        assert asked == ["A"]
        async with shim_session(user_env, everything_command()) as b:
            refused = await b.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5})
            assert refused.is_error or "sampling" in _text(refused)
            assert "answer from A" not in _text(refused)
        assert asked == ["A"]


async def test_a_client_restart_attaches_to_the_same_running_server_with_its_state(user_env: UserEnv) -> None:
    async with shim_session(user_env, FIXTURE) as first:
        pid = _text(await first.call_tool("pid", {}))
        assert _text(await first.call_tool("counter", {})) == "1"
    async with shim_session(user_env, FIXTURE) as second:
        assert _text(await second.call_tool("pid", {})) == pid
        assert _text(await second.call_tool("counter", {})) == "2"


async def test_a_different_token_in_the_environment_gets_its_own_server_process(user_env: UserEnv) -> None:
    async with shim_session(user_env, FIXTURE, env={"API_TOKEN": "alpha"}) as a:
        async with shim_session(user_env, FIXTURE, env={"API_TOKEN": "beta"}) as b:
            pid_a = _text(await a.call_tool("pid", {}))
            pid_b = _text(await b.call_tool("pid", {}))
            assert pid_a != pid_b
            assert _text(await b.call_tool("env", {"name": "API_TOKEN"})) == "beta"


async def test_sessions_from_different_terminals_share_one_process(user_env: UserEnv) -> None:
    async with shim_session(user_env, FIXTURE, env={"TERM_SESSION_ID": "w1", "WINDOWID": "1", "SHLVL": "1"}) as a:
        async with shim_session(user_env, FIXTURE, env={"TERM_SESSION_ID": "w2", "WINDOWID": "2", "SHLVL": "3"}) as b:
            assert _text(await a.call_tool("pid", {})) == _text(await b.call_tool("pid", {}))


async def test_share_false_gives_each_session_its_own_process_and_the_next_session_a_fresh_one(user_env: UserEnv) -> None:
    async with shim_session(user_env, FIXTURE, shim_args=("--share", "false")) as a:
        async with shim_session(user_env, FIXTURE, shim_args=("--share", "false")) as b:
            pid_a = _text(await a.call_tool("pid", {}))
            pid_b = _text(await b.call_tool("pid", {}))
            assert pid_b != pid_a
            assert _text(await a.call_tool("counter", {})) == "1"
    # A process of a session's own holds that session's state: it stops with its session (as a
    # direct server would) rather than lingering for the next session to find.
    wait_until(lambda: not user_env.server_pids("fixture_server"), STEP_TIMEOUT_S, "both private processes to stop")
    # The private instance went with its session: no row stays for a process nobody has.
    assert [r["clients"] for r in status_rows(user_env)] == [0]
    async with shim_session(user_env, FIXTURE, shim_args=("--share", "false")) as c:
        # A fresh process in the registration's own slot: the counter starts again.
        assert _text(await c.call_tool("pid", {})) not in {pid_a, pid_b}
        assert _text(await c.call_tool("counter", {})) == "1"
        assert len(status_rows(user_env)) == 1


def _raw(user: UserEnv) -> subprocess.Popen[bytes]:
    return subprocess.Popen([shim_command(), "--", *FIXTURE], env=user.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def _send(proc: subprocess.Popen[bytes], obj: dict[str, Any]) -> None:
    assert proc.stdin
    proc.stdin.write(json.dumps(obj).encode() + b"\n")
    proc.stdin.flush()


def _read(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout
    reply: dict[str, Any] = json.loads(proc.stdout.readline())
    return reply


INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


def test_share_false_sessions_opened_at_the_same_moment_each_get_their_own_process(user_env: UserEnv) -> None:
    # Every hello arrives before any session has asked anything, so each private instance is still
    # starting when the next hello looks for a free one: a starting instance is not free.
    start_daemon(user_env)
    shims = [subprocess.Popen([shim_command(), "--share", "false", "--", *FIXTURE], env=user_env.env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
             for _ in range(6)]
    try:
        for proc in shims:
            _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        pids = []
        for proc in shims:
            assert "result" in _read(proc)
            _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "pid", "arguments": {}}})
            pids.append(_read(proc)["result"]["content"][0]["text"])
        assert len(set(pids)) == len(shims), pids
    finally:
        for proc in shims:
            assert proc.stdin
            proc.stdin.close()
            proc.wait(timeout=10)


async def test_killing_one_shim_mid_call_leaves_the_other_sessions_calls_intact(user_env: UserEnv) -> None:
    victim = _raw(user_env)
    _send(victim, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
    _read(victim)
    async with shim_session(user_env, FIXTURE) as survivor:
        pid = _text(await survivor.call_tool("pid", {}))
        _send(victim, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sleep", "arguments": {"seconds": 30}}})
        assert _text(await survivor.call_tool("echo", {"text": "during"})) == "during"
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        for i in range(5):
            assert _text(await survivor.call_tool("echo", {"text": f"after {i}"})) == f"after {i}"
        assert _text(await survivor.call_tool("pid", {})) == pid


def test_twenty_clients_times_five_hundred_interleaved_calls_lose_and_misroute_nothing(user_env: UserEnv) -> None:
    clients, calls = 20, 500
    procs = [_raw(user_env) for _ in range(clients)]
    failures: list[str] = []

    def drive(c: int, proc: subprocess.Popen[bytes]) -> None:
        try:
            _send(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT})
            _read(proc)
            # Every client uses the same ids 1..500 (collisions on purpose) and its own texts.
            assert proc.stdin
            payload = b"".join(
                json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                            "params": {"name": "echo", "arguments": {"text": f"c{c}-{i}"}}}).encode() + b"\n"
                for i in range(1, calls + 1))
            writer = threading.Thread(target=lambda: (proc.stdin.write(payload), proc.stdin.flush()))  # type: ignore[union-attr]
            writer.start()
            seen: dict[int, str] = {}
            while len(seen) < calls:
                reply = _read(proc)
                ident = reply["id"]
                if ident in seen:
                    failures.append(f"client {c}: id {ident} answered twice")
                seen[ident] = reply["result"]["content"][0]["text"]
            writer.join()
            wrong = [i for i, text in seen.items() if text != f"c{c}-{i}"]
            if wrong:
                failures.append(f"client {c}: {len(wrong)} misrouted answers")
        except Exception as exc:  # collected and reported by the main thread
            failures.append(f"client {c}: {exc!r}")

    threads = [threading.Thread(target=drive, args=(c, p)) for c, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    for proc in procs:
        assert proc.stdin
        proc.stdin.close()
        proc.wait(timeout=10)
    assert failures == []
    assert len(user_env.server_pids("fixture_server")) == 1
