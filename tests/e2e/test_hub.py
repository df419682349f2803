"""The hub (issue 9) end to end: the official SDK client on `lazyd-shim --hub`, a real daemon, and
named servers from config.toml (the fixture server, mcp-server-time from PyPI, server-everything
from npm), with a `[policy]` table.

Testing policy: "started nothing" and "started" are read from /proc (bounded polls, no sleeps);
what a server received is read from the fixture's own method log (FIXTURE_LOG); results through
the hub are compared with results of a per-server shim session on the same daemon, the relay
that the e2e suite already compares with direct connections.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import ClientSession, StdioServerParameters, types

from tests.conftest import (
    EVERYTHING_JS,
    FIXTURE_SERVER,
    UserEnv,
    shim_command,
    shim_session,
    start_daemon,
    time_server_command,
    wait_until,
)
from tests.e2e.hub_support import hub_session, texts

pytestmark = pytest.mark.e2e

STEP_TIMEOUT_S = 30.0  # bound on one lazyctl run or one poll; reached only when something is broken
POLL_S = 0.02  # between looks at /proc or a log file while polling
POLICY = '"fixture.crash" = "deny", "*.delete_*" = "ask"'


def _config(user: UserEnv, log: Path, policy: str = POLICY) -> str:
    time_cmd = time_server_command()
    return f"""
[servers.fixture]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(FIXTURE_SERVER))}]
env = {{ FIXTURE_TOOLS_EXTRA = "delete_note", FIXTURE_LOG = {json.dumps(str(log))} }}

[servers.time]
command = {json.dumps(time_cmd[0])}
args = {json.dumps(time_cmd[1:])}

[servers.everything]
command = "node"
args = [{json.dumps(str(EVERYTHING_JS))}, "stdio"]

[policy]
rules = {{ {policy} }}
"""


@pytest.fixture
def hub_user(user_env: UserEnv, tmp_path: Path) -> UserEnv:
    """A daemon whose config names three servers and a policy; the fixture's cache is warm."""
    user_env.config_file.parent.mkdir(parents=True)
    user_env.config_file.write_text(_config(user_env, tmp_path / "fixture.log"))
    start_daemon(user_env)
    lazyctl(user_env, "check", "fixture")
    return user_env


def lazyctl(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=user.env,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return done


async def poll_until(predicate: Any, timeout_s: float, what: str) -> None:
    """wait_until for conditions the client's own tasks must bring about: polls without
    blocking the event loop those tasks run in."""
    with trio.move_on_after(timeout_s):
        while not predicate():
            await trio.sleep(POLL_S)
        return
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def fixture_methods(tmp_path: Path) -> list[str]:
    log = tmp_path / "fixture.log"
    return log.read_text().split() if log.exists() else []


async def hub_call(session: ClientSession, server: str, tool: str, arguments: dict[str, Any],
                   **kwargs: Any) -> types.CallToolResult:
    result: types.CallToolResult = await session.call_tool(
        "call_tool", {"server": server, "tool": tool, "arguments": arguments}, **kwargs)
    return result


async def warm_time_server(user: UserEnv) -> None:
    """Fill mcp-server-time's cache through a per-server shim, then put it back to sleep."""
    async with shim_session(user, [], shim_args=("--server", "time")) as session:
        await session.list_tools()
    lazyctl(user, "sleep", "time")
    wait_until(lambda: not user.server_pids("mcp-server-time"), STEP_TIMEOUT_S, "mcp-server-time to stop")


async def test_the_hub_lists_and_searches_every_server_from_cache_without_starting_one(hub_user: UserEnv) -> None:
    await warm_time_server(hub_user)
    async with hub_session(hub_user) as session:
        meta = sorted(t.name for t in (await session.list_tools()).tools)
        assert meta == ["call_tool", "get_tool_schema", "list_servers", "restart_server", "search_tools",
                        "server_status", "sleep_server", "wake_server"]
        listing = texts(await session.call_tool("list_servers", {}))[0]
        by_time = texts(await session.call_tool("search_tools", {"query": "timezones"}))[0]
        by_description = texts(await session.call_tool("search_tools", {"query": "increment"}))[0]
        hub_user.assert_nothing_started("fixture_server")
        assert hub_user.server_pids("mcp-server-time") == []
        assert hub_user.server_pids("server-everything") == []
    assert "- fixture [sleeping] 10 tools (+1 denied by policy)" in listing
    assert "- time [sleeping] 2 tools" in listing
    assert "- everything [sleeping] tools unknown until it runs once" in listing
    found = [line for line in by_time.splitlines() if line.startswith("- ")]
    assert {line.split(":")[0] for line in found} == {"- server=time tool=convert_time", "- server=time tool=get_current_time"}
    assert by_description.splitlines()[1].startswith("- server=fixture tool=counter: Increment an in-memory counter")
    assert "Tools not known yet (never ran): everything." in by_description


async def test_asking_for_a_tool_schema_answers_from_cache_and_starts_its_server_in_the_background(hub_user: UserEnv) -> None:
    async with hub_session(hub_user) as session:
        assert hub_user.server_pids("fixture_server") == []
        result = await session.call_tool("get_tool_schema", {"server": "fixture", "tool": "echo"})
        schema = json.loads(texts(result)[0])
        assert schema["name"] == "echo"
        assert schema["inputSchema"]["properties"] == {"text": {"type": "string"}}
        assert schema["server_state"] == "starting"
        wait_until(lambda: hub_user.server_pids("fixture_server"), STEP_TIMEOUT_S, "the pre-warmed fixture server")


async def test_a_hub_call_starts_the_server_and_returns_exactly_what_a_per_server_session_gets(hub_user: UserEnv) -> None:
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("time", "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        ("everything", "echo", {"message": "through the hub"}),
        ("everything", "get-sum", {"a": 2, "b": 40}),
        ("fixture", "echo", {"text": "hello"}),
    ]
    async with hub_session(hub_user) as session:
        through_hub = [await hub_call(session, server, tool, args) for server, tool, args in calls]
    direct = []
    for server, tool, args in calls:
        async with shim_session(hub_user, [], shim_args=("--server", server)) as one:
            direct.append(await one.call_tool(tool, args))
    assert [r.model_dump() for r in through_hub] == [r.model_dump() for r in direct]
    assert texts(through_hub[3]) == ["hello"]


async def test_progress_sampling_and_elicitation_of_a_proxied_call_reach_the_hub_client(hub_user: UserEnv) -> None:
    progress: list[float] = []
    prompts: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        content = params.messages[0].content
        prompts.append(content.text if isinstance(content, types.TextContent) else "")
        return types.CreateMessageResult(role="assistant", model="test",
                                         content=types.TextContent(type="text", text="sampled through the hub"))

    async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": f"yes to {params.message}"})

    async with hub_session(hub_user, sampling_callback=sampling, elicitation_callback=elicitation) as session:
        slept = await hub_call(session, "fixture", "sleep", {"seconds": 0.5}, progress_callback=on_progress)
        sampled = await hub_call(session, "fixture", "sample", {"prompt": "say hi"})
        elicited = await hub_call(session, "fixture", "elicit", {"message": "ready?"})
    assert json.loads(texts(elicited)[0]) == {"action": "accept", "content": {"answer": "yes to ready?"}}
    assert texts(slept) == ["slept 0.5"]
    assert progress and progress == sorted(progress)
    assert texts(sampled) == ["sampled through the hub"]
    assert prompts == ["say hi"]


async def test_cancelling_a_hub_call_cancels_the_request_at_the_server(hub_user: UserEnv, tmp_path: Path) -> None:
    started = trio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        started.set()

    async with hub_session(hub_user) as session:
        async with trio.open_nursery() as nursery:
            async def long_call() -> None:
                await hub_call(session, "fixture", "sleep", {"seconds": 60}, progress_callback=on_progress)

            nursery.start_soon(long_call)
            with trio.fail_after(STEP_TIMEOUT_S):
                await started.wait()
            nursery.cancel_scope.cancel()
        await poll_until(lambda: "notifications/cancelled" in fixture_methods(tmp_path), STEP_TIMEOUT_S,
                         "the cancel to reach the fixture server")
        # The session still works after a cancelled call.
        assert texts(await hub_call(session, "fixture", "echo", {"text": "after"})) == ["after"]


async def test_a_denied_tool_is_hidden_and_refused_by_the_hub_and_by_a_per_server_shim(
        hub_user: UserEnv, tmp_path: Path) -> None:
    async with hub_session(hub_user) as session:
        everything = texts(await session.call_tool("search_tools", {"query": "", "limit": 100}))[0]
        by_words = texts(await session.call_tool("search_tools", {"query": "exit at once with status"}))[0]
        schema = await session.call_tool("get_tool_schema", {"server": "fixture", "tool": "crash"})
        call = await hub_call(session, "fixture", "crash", {"code": 3})
    assert "tool=echo" in everything and "tool=crash" not in everything
    assert "tool=crash" not in by_words
    rule = 'denied by rule "fixture.crash" = "deny"'
    assert schema.is_error and rule in texts(schema)[0]
    assert call.is_error and rule in texts(call)[0]
    async with shim_session(hub_user, [], shim_args=("--server", "fixture")) as direct:
        listed = [tool.name for tool in (await direct.list_tools()).tools]  # from the cache
        assert "echo" in listed and "delete_note" in listed and "crash" not in listed
        pid = texts(await direct.call_tool("pid", {}))[0]
        listed = [tool.name for tool in (await direct.list_tools()).tools]  # the server is up now
        assert "echo" in listed and "crash" not in listed
        refused = await direct.call_tool("crash", {"code": 3})
        assert refused.is_error and rule in texts(refused)[0]
        assert texts(await direct.call_tool("pid", {})) == [pid]
    assert fixture_methods(tmp_path).count("tools/call") == 2  # the two pid calls, never crash


async def test_a_reload_that_denies_other_tools_tells_per_server_clients_and_their_next_listing_follows(
        hub_user: UserEnv, tmp_path: Path) -> None:
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if isinstance(method, str):
            seen.append(method)

    fetched = fixture_methods(tmp_path).count("tools/list")  # by the fixture's lazyctl check
    async with shim_session(hub_user, [], shim_args=("--server", "fixture"), message_handler=on_message) as direct:
        before = [tool.name for tool in (await direct.list_tools()).tools]
        assert "crash" not in before and "echo" in before
        hub_user.config_file.write_text(_config(hub_user, tmp_path / "fixture.log", '"fixture.echo" = "deny"'))
        lazyctl(hub_user, "reload")
        await poll_until(lambda: "notifications/tools/list_changed" in seen, STEP_TIMEOUT_S,
                         "the client to be told its tools changed")
        after = [tool.name for tool in (await direct.list_tools()).tools]
        assert "echo" not in after and "crash" in after
        # A reload that hides nothing new tells nobody anything.
        seen.clear()
        hub_user.config_file.write_text(_config(hub_user, tmp_path / "fixture.log", '"fixture.echo" = "deny", "time.*" = "ask"'))
        lazyctl(hub_user, "reload")
        assert [tool.name for tool in (await direct.list_tools()).tools] == after
    assert "notifications/tools/list_changed" not in seen
    assert fixture_methods(tmp_path).count("tools/list") == fetched  # every listing came from the cache


async def test_ask_runs_the_tool_after_the_user_accepts_and_refuses_it_after_a_decline(hub_user: UserEnv, tmp_path: Path) -> None:
    questions: list[str] = []
    answers = ["accept", "decline"]

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action=answers.pop(0))  # type: ignore[arg-type]

    async with hub_session(hub_user, elicitation_callback=elicit) as session:
        accepted = await hub_call(session, "fixture", "delete_note", {"text": "gone"})
        declined = await hub_call(session, "fixture", "delete_note", {"text": "kept-secret-value"})
    assert texts(accepted) == ["gone"] and not accepted.is_error
    assert declined.is_error and "declined" in texts(declined)[0]
    assert len(questions) == 2
    assert 'Allow the tool "delete_note" of the MCP server "fixture" to run?' in questions[0]
    assert '"text": "gone"' in questions[0] and '"*.delete_*" = "ask"' in questions[0]
    assert fixture_methods(tmp_path).count("tools/call") == 1
    # Every decision is in the daemon's log with the tool and the rule, never the arguments.
    daemon_log = (hub_user.state_dir / "lazyd.log").read_text()
    assert daemon_log.count('policy: fixture.delete_note: ask by rule "*.delete_*" = "ask"; asking the user') == 2
    assert 'answer accept: running it' in daemon_log and 'answer decline: refused' in daemon_log
    assert "kept-secret-value" not in daemon_log


async def test_ask_through_a_per_server_shim_asks_before_the_server_sees_the_call(hub_user: UserEnv, tmp_path: Path) -> None:
    answers = ["decline", "accept"]

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action=answers.pop(0))  # type: ignore[arg-type]

    async with shim_session(hub_user, [], shim_args=("--server", "fixture"), elicitation_callback=elicit) as session:
        declined = await session.call_tool("delete_note", {"text": "kept"})
        assert declined.is_error and "declined" in texts(declined)[0]
        assert "tools/call" not in fixture_methods(tmp_path)
        accepted = await session.call_tool("delete_note", {"text": "gone"})
    assert texts(accepted) == ["gone"]


async def test_ask_is_refused_with_a_clear_message_when_the_client_cannot_elicit(hub_user: UserEnv, tmp_path: Path) -> None:
    async with hub_session(hub_user) as session:
        through_hub = await hub_call(session, "fixture", "delete_note", {"text": "x"})
    async with shim_session(hub_user, [], shim_args=("--server", "fixture")) as session:
        direct = await session.call_tool("delete_note", {"text": "x"})
    for result in (through_hub, direct):
        assert result.is_error
        assert "does not support MCP elicitation" in texts(result)[0]
    assert "tools/call" not in fixture_methods(tmp_path)


async def test_servers_option_limits_the_hub_to_the_named_servers(hub_user: UserEnv) -> None:
    async with hub_session(hub_user, "--servers", "fixture,nosuch") as session:
        listing = texts(await session.call_tool("list_servers", {}))[0]
        outside = await hub_call(session, "time", "get_current_time", {"timezone": "UTC"})
    assert "- fixture [" in listing and "- time [" not in listing and "- everything [" not in listing
    assert "Not known to the daemon: nosuch" in listing
    assert outside.is_error and "not one of this hub's servers (fixture, nosuch)" in texts(outside)[0]
    hub_user.assert_nothing_started("mcp-server-time")


async def test_wake_and_sleep_through_the_hub_start_and_stop_the_server(hub_user: UserEnv) -> None:
    async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept")  # they ask by default (test_hub_control.py)

    async with hub_session(hub_user, elicitation_callback=accept) as session:
        woken = await session.call_tool("wake_server", {"server": "fixture"})
        pids = hub_user.server_pids("fixture_server")
        assert not woken.is_error and f"running (pid {pids[0]})" in texts(woken)[0]
        slept = await session.call_tool("sleep_server", {"server": "fixture"})
        assert "fixture is sleeping" in texts(slept)[0]
        assert hub_user.server_pids("fixture_server") == []
        unknown = await session.call_tool("wake_server", {"server": "fixtur"})
        assert unknown.is_error and "did you mean 'fixture'?" in texts(unknown)[0]


async def test_a_hub_hello_with_a_command_is_refused_by_the_shim_with_a_usage_error(user_env: UserEnv) -> None:
    done = subprocess.run([shim_command(), "--hub", "--", sys.executable, str(FIXTURE_SERVER)], env=user_env.env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert done.returncode == 2
    assert done.stderr == "lazyd-shim: --hub serves every server; it takes no COMMAND and no --server\n"


async def test_a_hub_session_carries_on_through_a_daemon_restart(hub_user: UserEnv) -> None:
    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", model="test", content=types.TextContent(type="text", text="still here"))

    async with hub_session(hub_user, sampling_callback=sampling) as session:
        assert texts(await hub_call(session, "fixture", "echo", {"text": "before"})) == ["before"]
        [old] = hub_user.daemon_pids()
        os.kill(old, signal.SIGTERM)
        await poll_until(lambda: old not in hub_user.daemon_pids() and not hub_user.server_pids("fixture_server"),
                         STEP_TIMEOUT_S, "the daemon and its servers to stop")
        # The shim autostarts a new daemon and resumes without a second initialize: the new hub
        # must know the client's capabilities from the resumed handshake, or sampling is refused.
        assert texts(await hub_call(session, "fixture", "sample", {"prompt": "x"})) == ["still here"]
        listing = texts(await session.call_tool("list_servers", {}))[0]
        assert hub_user.daemon_pids() != [old]
    assert "- fixture [running, pid" in listing


async def test_a_client_probing_server_discover_falls_back_to_the_hubs_handshake(hub_user: UserEnv) -> None:
    from mcp import Client

    params = StdioServerParameters(command=shim_command(), args=["--hub"], env=hub_user.env)
    async with Client(params, mode="auto") as client:
        assert client.protocol_version == "2025-11-25"  # the probe got -32601, then initialize
        tools = sorted(t.name for t in (await client.list_tools()).tools)
    assert "search_tools" in tools
