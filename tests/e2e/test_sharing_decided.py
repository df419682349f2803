"""Sharing decided before a second session joins, with real servers and nothing cached.

Real daemon, real shims, the official SDK as the clients. The servers: published
`@modelcontextprotocol/server-sequential-thinking` (it keeps a thought history and branches in the
process) and `@playwright/mcp` (one browser per process; `tools/list` needs no browser, and none is
installed, so processes are what is counted), both found by the known-servers table, and once
with the table's entry unlisted, so the tool-name rule decides while the second session waits;
the fixture server for a server nothing knows about (its start slowed down, so the second
session really waits) and for a session-aware one (it echoes the `_meta` each call carried).
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent

from tests.conftest import FIXTURE_SERVER, SERVERS, UserEnv, shim_session, start_daemon, wait_until
from tests.e2e.lazyctl_support import lazyctl
from tests.e2e.supervision_support import control, status_rows, write_config

pytestmark = pytest.mark.e2e

STEP_S = 60.0  # node servers start in seconds on a loaded machine
BIN = SERVERS / "node_modules" / ".bin"
THINKING = [str(BIN / "mcp-server-sequential-thinking")]
PLAYWRIGHT = [str(BIN / "playwright-mcp"), "--headless"]
FIXTURE = [sys.executable, str(FIXTURE_SERVER)]
SECRET_BRANCH = "clientA-secret-branch"


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def think(session: ClientSession, number: int, **extra: Any) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(text_of(await session.call_tool("sequentialthinking", {
        "thought": f"thought {number}", "nextThoughtNeeded": True, "thoughtNumber": number, "totalThoughts": 3,
        **extra})))
    return answer


async def a_then_b(a: ClientSession, b: ClientSession) -> dict[str, Any]:
    """A records a thought and a branch with its secret id; B's first thought's answer."""
    await think(a, 1)
    assert SECRET_BRANCH in (await think(a, 2, branchFromThought=1, branchId=SECRET_BRANCH))["branches"]
    return await think(b, 1)


async def direct_answer(user: UserEnv) -> dict[str, Any]:
    """The same two sessions straight to the server, one process each, as a client runs it."""
    async with AsyncExitStack() as stack:
        sessions = []
        for _ in range(2):
            params = StdioServerParameters(command=THINKING[0], args=THINKING[1:], env=user.env)
            read, write = await stack.enter_async_context(stdio_client(params, errlog=open("/dev/null", "w")))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)
        return await a_then_b(*sessions)


async def test_two_sessions_of_sequential_thinking_never_see_each_others_thoughts_as_direct(
    user_env: UserEnv,
) -> None:
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        expected = await direct_answer(user_env)
        assert expected["branches"] == [] and expected["thoughtHistoryLength"] == 1
        # Nothing cached: the first two sessions, open at once.
        async with shim_session(user_env, THINKING) as a, shim_session(user_env, THINKING) as b:
            assert await a_then_b(a, b) == expected
        # One after the other: B never gets the process that holds A's thoughts.
        async with shim_session(user_env, THINKING) as a:
            await think(a, 1)
            await think(a, 2, branchFromThought=1, branchId=SECRET_BRANCH)
        async with shim_session(user_env, THINKING) as b:
            assert await think(b, 1) == expected
    rules = {row["share_rule"] for row in status_rows(user_env).values()}
    assert rules == {"auto: isolated (known server: sequential-thinking)"}


async def open_two_first_sessions(user: UserEnv, argv: list[str]) -> tuple[str, dict[str, dict[str, Any]]]:
    """Two sessions of a server nothing is cached for, the second opened while the first starts
    it (its initialize did), each making a real request (a browser tool: it fails, no browser is
    installed, but the process that serves it runs); `lazyctl status` and the status rows while
    both are open."""
    async with AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(shim_session(user, argv)) for _ in range(2)]
        for session in sessions:
            await session.call_tool("browser_tabs", {"action": "list"})
        wait_until(lambda: len(user.server_pids("playwright-mcp")) == 2, STEP_S, "two playwright processes")
        human: str = lazyctl(user, "status").stdout
        assert len(user.server_pids("playwright-mcp")) == 2, human
        return human, status_rows(user)


async def test_two_concurrent_first_sessions_of_playwright_get_a_browser_process_each_and_true_labels(
    user_env: UserEnv,
) -> None:
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        human, rows = await open_two_first_sessions(user_env, PLAYWRIGHT)
    (base,) = [name for name in rows if not rows[name]["instance_of"]]
    # Numbered from 1, the rule as it is, and not listed as another identity of the command.
    assert sorted(rows) == [base, f"{base}.1"]
    assert rows[f"{base}.1"]["instance_of"] == base
    assert {(r["share"], r["sharing"], r["share_setting"], r["share_rule"]) for r in rows.values()} == {
        (False, "isolated", "auto", "auto: isolated (known server: playwright)")}
    lines = human.splitlines()
    assert "same command, different identities (explain NAME NAME says why in full):" not in lines
    assert "share = false" not in human
    tail = lines[lines.index("one process per session:") + 1:-1]
    assert tail == [f"  {base}: auto: isolated (known server: playwright)",
                    f"  {base}.1: auto: isolated (known server: playwright)"]
    explained = lazyctl(user_env, "explain", base).stdout
    assert "  sharing  one process per session (auto: isolated (known server: playwright))" in explained
    # Its private instance went with its session: no row for a process nobody has.
    assert sorted(status_rows(user_env)) == [base]


async def test_with_playwright_unlisted_its_tool_names_decide_and_two_first_sessions_still_get_a_process_each(
    user_env: UserEnv,
) -> None:
    write_config(user_env, '[known_servers.playwright]\nsharing = "auto"\n')
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        await open_two_first_sessions(user_env, PLAYWRIGHT)
    rules = {row["share_rule"] for row in status_rows(user_env).values()}
    assert len(rules) == 1 and rules.pop().startswith("auto: isolated (tool names: browser_")


async def pids_of_two_sessions_opened_at_once(user: UserEnv, env: dict[str, str]) -> list[str]:
    """Two sessions opened at the same moment (the second's hello arrives before the first start
    has answered), each asking which process serves it while both are open."""
    pids: list[str] = []
    both = trio.Event()

    async def one() -> None:
        async with shim_session(user, FIXTURE, env=env) as session:
            pids.append(text_of(await session.call_tool("pid", {})))
            if len(pids) == 2:
                both.set()
            await both.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        nursery.start_soon(one)
    return pids


@pytest.mark.parametrize(("sharing", "shared", "rule"), [
    ("", False, "auto: isolated (not known to be shareable)"),
    ("shared", True, "auto: shared (declared: experimental.lazyd.sharing)"),
])
async def test_a_server_nothing_is_cached_for_holds_the_second_session_until_its_first_start_tells(
    user_env: UserEnv, sharing: str, shared: bool, rule: str,
) -> None:
    # Its start is slow: the second session's hello arrives while the first start is under way,
    # and waits for it (what it declares, what its tree runs): then as on a warm cache.
    env = {"FIXTURE_SHARING": sharing, "FIXTURE_START_DELAY_S": "1"}
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        cold = await pids_of_two_sessions_opened_at_once(user_env, env)
        warm = await pids_of_two_sessions_opened_at_once(user_env, env)
    assert (cold[0] == cold[1], warm[0] == warm[1]) == (shared, shared)
    log = (user_env.root / "daemon.stderr").read_text()
    assert f"for the sharing decision: {rule}" in log


async def test_a_session_aware_server_gets_one_process_and_every_call_carries_its_sessions_id(
    user_env: UserEnv,
) -> None:
    env = {"FIXTURE_CAPABILITIES": json.dumps({"x-mux": {"sharing": "session-aware"}}), "FIXTURE_ECHO_META": "1"}
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        async with shim_session(user_env, FIXTURE, env=env) as a, shim_session(user_env, FIXTURE, env=env) as b:
            metas = [json.loads(text_of(await s.call_tool("meta", {}))) for s in (a, b, a, b)]
            pids = {text_of(await s.call_tool("pid", {})) for s in (a, b)}
        # share = "session-aware" does the same for a server that declares nothing.
        async with shim_session(user_env, FIXTURE, env={"FIXTURE_ECHO_META": "1", "FIXTURE_MARK": "plain"},
                                shim_args=("--share", "session-aware")) as c:
            forced = json.loads(text_of(await c.call_tool("meta", {})))
    assert len(pids) == 1
    ids = [m["muxSessionId"] for m in metas]
    assert ids[0] == ids[2] and ids[1] == ids[3] and ids[0] != ids[1]
    assert all(m["lazyd/sessionId"] == m["muxSessionId"] and m["muxSessionId"].startswith("sess_") for m in metas)
    assert forced["muxSessionId"].startswith("sess_")
    rows = status_rows(user_env)
    aware = [r for r in rows.values() if r["share_setting"] == "auto"]
    assert [(r["sharing"], r["share_rule"], r["clients"]) for r in aware] == [
        ("session-aware", "auto: session-aware (declared: x-mux.sharing)", 0)]
