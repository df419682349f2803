"""The lazy relay end to end: the official python SDK over real stdio, lazyd-shim, a real daemon,
and real published servers (server-everything from npm, mcp-server-time from PyPI) plus the
fixture server for faults.

Policy: no timing assertions (speed is the benchmarks' job); liveness is read from /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import (
    FIXTURE_SERVER,
    UserEnv,
    everything_command,
    shim_command,
    shim_session,
    start_daemon,
    time_server_command,
    wait_until,
)

pytestmark = pytest.mark.e2e

FIXTURE = [sys.executable, str(FIXTURE_SERVER)]


def _texts(result: Any) -> list[str]:
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


async def _direct_session_results(argv: list[str], env: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = sorted(t.name for t in (await session.list_tools()).tools)
                results = [_texts(await session.call_tool(name, args)) for name, args in calls]
    return tools, results


async def _shim_session_results(user: UserEnv, argv: list[str], calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    async with shim_session(user, argv) as session:
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        results = [_texts(await session.call_tool(name, args)) for name, args in calls]
    return tools, results


async def test_server_everything_through_the_shim_answers_exactly_like_a_direct_connection(user_env: UserEnv) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [("echo", {"message": "hello through lazyd"}), ("get-sum", {"a": 2, "b": 40})]
    direct = await _direct_session_results(everything_command(), user_env.env, calls)
    cold = await _shim_session_results(user_env, everything_command(), calls)
    warm = await _shim_session_results(user_env, everything_command(), calls)
    assert cold == direct
    assert warm == direct
    assert "echo" in direct[0]


async def test_mcp_server_time_through_the_shim_answers_exactly_like_a_direct_connection(user_env: UserEnv) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})]
    direct = await _direct_session_results(time_server_command(), user_env.env, calls)
    through = await _shim_session_results(user_env, time_server_command(), calls)
    assert through == direct
    assert direct[0] == ["convert_time", "get_current_time"]


async def test_a_warm_session_start_starts_no_server_and_the_first_call_starts_exactly_one(user_env: UserEnv) -> None:
    async with shim_session(user_env, FIXTURE) as session:
        await session.call_tool("echo", {"text": "record"})
    # A fresh daemon has no process but the snapshot on disk.
    for pid in user_env.daemon_pids():
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not user_env.daemon_pids() and not user_env.server_pids("fixture_server"), 15, "daemon and server to stop")
    start_daemon(user_env)
    async with shim_session(user_env, FIXTURE) as session:
        tools = await session.list_tools()
        await session.send_ping()
        assert "echo" in [t.name for t in tools.tools]
        user_env.assert_nothing_started("fixture_server")
        result = await session.call_tool("pid", {})
        servers = user_env.server_pids("fixture_server")
        assert servers == [int(_texts(result)[0])]


async def test_the_sdk_auto_mode_probe_falls_back_to_initialize_and_is_answered_from_cache(user_env: UserEnv) -> None:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=shim_command(), args=["--", *everything_command()], env=user_env.env)
    async with Client(params, mode="auto") as client:
        assert client.protocol_version.startswith("2025")
        first = sorted(t.name for t in (await client.list_tools()).tools)
    for pid in user_env.daemon_pids():
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not user_env.daemon_pids() and not user_env.server_pids("server-everything"), 20, "stop")
    start_daemon(user_env)
    async with Client(params, mode="auto") as client:
        again = sorted(t.name for t in (await client.list_tools()).tools)
        user_env.assert_nothing_started("server-everything")
    assert again == first


async def test_a_crashed_server_fails_its_call_and_the_next_request_starts_it_again(user_env: UserEnv) -> None:
    async with shim_session(user_env, FIXTURE) as session:
        first_pid = _texts(await session.call_tool("pid", {}))[0]
        with pytest.raises(MCPError, match="exited with status 3"):
            await session.call_tool("crash", {"code": 3})
        second_pid = _texts(await session.call_tool("pid", {}))[0]
        assert second_pid != first_pid
        assert user_env.server_pids("fixture_server") == [int(second_pid)]


async def test_listing_drift_after_a_restart_updates_the_cache_and_notifies_the_client(user_env: UserEnv, tmp_path: Path) -> None:
    drift = tmp_path / "drift"
    env = {"FIXTURE_DRIFT_FILE": str(drift)}
    async with shim_session(user_env, FIXTURE, env=env) as session:
        await session.call_tool("echo", {"text": "x"})
    for pid in user_env.daemon_pids():
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not user_env.daemon_pids(), 15, "daemon to stop")
    drift.write_text("brand_new_tool")
    start_daemon(user_env)
    notifications: list[str] = []

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if isinstance(method, str):
            notifications.append(method)

    async with shim_session(user_env, FIXTURE, env=env, message_handler=on_message) as session:
        cached = [t.name for t in (await session.list_tools()).tools]
        assert "brand_new_tool" not in cached
        await session.call_tool("echo", {"text": "wake"})
        fresh = [t.name for t in (await session.list_tools()).tools]
    assert "brand_new_tool" in fresh
    assert "notifications/tools/list_changed" in notifications


async def test_a_start_that_exceeds_start_timeout_fails_the_waiting_request_and_kills_the_server(user_env: UserEnv) -> None:
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="start timeout"), flatten_subgroups=True):
        async with shim_session(user_env, FIXTURE, shim_args=("--start-timeout", "1s"), env={"FIXTURE_HANG_ON_INITIALIZE": "1"}):
            pass
    wait_until(lambda: user_env.server_pids("fixture_server") == [], 10, "the hung server to be killed")


def _raw_shim(user: UserEnv, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([shim_command(), "--", *argv], env=user.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def _exchange(proc: subprocess.Popen[bytes], line: bytes) -> dict[str, Any]:
    assert proc.stdin and proc.stdout
    proc.stdin.write(line + b"\n")
    proc.stdin.flush()
    reply: dict[str, Any] = json.loads(proc.stdout.readline())
    return reply


def test_malformed_client_lines_get_json_rpc_errors_and_the_session_goes_on(user_env: UserEnv) -> None:
    proc = _raw_shim(user_env, *FIXTURE)
    try:
        assert _exchange(proc, b"this is not json")["error"]["code"] == -32700
        assert _exchange(proc, b'{"jsonrpc":"2.0","id":true,"method":"ping"}')["error"]["code"] == -32600
        assert _exchange(proc, b"[1,2]")["error"]["code"] == -32600
        assert _exchange(proc, b'{"jsonrpc":"2.0","id":"7","method":"ping"}') == {"jsonrpc": "2.0", "id": "7", "result": {}}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
        assert _exchange(proc, json.dumps(init).encode())["result"]["serverInfo"]["name"] == "fixture"
    finally:
        assert proc.stdin
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0


def test_twenty_shims_racing_to_autostart_end_with_exactly_one_daemon(user_env: UserEnv) -> None:
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    procs = [_raw_shim(user_env, *FIXTURE) for _ in range(20)]
    try:
        outputs = []
        for proc in procs:
            assert proc.stdin and proc.stdout
            proc.stdin.write(ping)
            proc.stdin.flush()
        for proc in procs:
            assert proc.stdout
            outputs.append(json.loads(proc.stdout.readline()))
        assert all(o == {"jsonrpc": "2.0", "id": 1, "result": {}} for o in outputs)
        assert len(user_env.daemon_pids()) == 1
    finally:
        for proc in procs:
            assert proc.stdin
            proc.stdin.close()
            proc.wait(timeout=10)


def test_killing_the_clients_process_group_leaves_the_autostarted_daemon_running(user_env: UserEnv) -> None:
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    proc = subprocess.Popen([shim_command(), "--", *FIXTURE], env=user_env.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    assert _exchange(proc, ping)["result"] == {}
    daemons = user_env.daemon_pids()
    assert len(daemons) == 1
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.1)  # the MCP SDK's own gap between TERM and KILL, not a wait for a condition
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)
    assert user_env.daemon_pids() == daemons
    other = _raw_shim(user_env, *FIXTURE)
    try:
        assert _exchange(other, ping)["result"] == {}
    finally:
        assert other.stdin
        other.stdin.close()
        other.wait(timeout=10)
