"""`share = "auto"` (the default) end to end: one process per session for servers that must not be
shared, one shared process for the others, decided from the cache.

Real daemon, real shims, the official SDK as the clients, the fixture server as the server: it can
declare mcp-mux's `x-mux` capability (FIXTURE_CAPABILITIES) or list extra tools
(FIXTURE_TOOLS_EXTRA). Caches are warmed by `check` (the control op `lazyctl check -- CMD` uses),
so the decision costs no start. Which process answered a session is the fixture's `pid` tool.
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio
from mcp import ClientSession
from mcp.types import TextContent

from tests.conftest import FIXTURE_SERVER, UserEnv, shim_session, start_daemon
from tests.e2e.lazyctl_support import lazyctl, shim_env
from tests.e2e.supervision_support import control, server_table, status_rows, write_config

pytestmark = pytest.mark.e2e

STEP_S = 30.0
SERVER = [sys.executable, str(FIXTURE_SERVER)]
ISOLATED = {"FIXTURE_CAPABILITIES": json.dumps({"x-mux": {"sharing": "isolated"}})}
BROWSER = {"FIXTURE_TOOLS_EXTRA": "browser_navigate,take_screenshot", "FIXTURE_SHARING": ""}
UNKNOWN = {"FIXTURE_SHARING": ""}  # declares nothing, and its tool names are innocent


async def pid_of(session: ClientSession) -> int:
    block = (await session.call_tool("pid", {})).content[0]
    assert isinstance(block, TextContent)
    return int(block.text)


def check(user: UserEnv, env: dict[str, str]) -> dict[str, Any]:
    """`lazyctl check -- SERVER` with the environment the sessions below will have."""
    report: dict[str, Any] = control(user, "check", argv=SERVER, cwd=str(user.root), env=shim_env(user, env))
    return report


OPEN_ROWS: dict[str, dict[str, Any]] = {}  # status rows seen while the last two sessions were open


async def pids_of_two_sessions(user: UserEnv, env: dict[str, str], *shim_args: str) -> list[int]:
    """Two sessions open at once; the pid that answered each (status rows then: OPEN_ROWS)."""
    async with AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(shim_session(user, SERVER, env=env, shim_args=shim_args))
                    for _ in range(2)]
        pids = [await pid_of(session) for session in sessions]
        OPEN_ROWS.clear()
        OPEN_ROWS.update(status_rows(user))
        return pids


def rows_for(user: UserEnv, name: str, rows: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [row for row in (rows if rows is not None else status_rows(user)).values()
            if row["name"] == name or row["name"].startswith(name + ".")]


async def test_a_declared_isolated_server_gets_a_process_per_session_and_a_declared_shared_one_a_shared_process(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)  # the sessions' cwd is part of their identity, as the check's
    start_daemon(user_env)
    isolated, plain, browser, unknown = (check(user_env, env)["name"] for env in (ISOLATED, {}, BROWSER, UNKNOWN))
    open_rows = {}
    with trio.fail_after(STEP_S):
        isolated_pids = await pids_of_two_sessions(user_env, ISOLATED)
        open_rows[isolated] = dict(OPEN_ROWS)
        plain_pids = await pids_of_two_sessions(user_env, {})
        browser_pids = await pids_of_two_sessions(user_env, BROWSER)
        open_rows[browser] = dict(OPEN_ROWS)
        unknown_pids = await pids_of_two_sessions(user_env, UNKNOWN)
        open_rows[unknown] = dict(OPEN_ROWS)
    assert isolated_pids[0] != isolated_pids[1]
    assert plain_pids[0] == plain_pids[1]
    assert browser_pids[0] != browser_pids[1]
    assert unknown_pids[0] != unknown_pids[1]  # declares nothing, innocent tool names: not shared
    # Status says which rule decided, for each instance; the plain server is one shared runtime.
    (plain_row,) = rows_for(user_env, plain)
    assert (plain_row["share"], plain_row["share_rule"]) == (True, "auto: shared (declared: experimental.lazyd.sharing)")
    # Each registration's instances are numbered from 1 on their own (no number skipped for another's),
    # and a private instance goes with its session.
    for name in (isolated, browser, unknown):
        assert sorted(row["name"] for row in rows_for(user_env, name, open_rows[name])) == [name, f"{name}.1"]
        assert [row["name"] for row in rows_for(user_env, name)] == [name]
    rules = {row["share_rule"] for row in rows_for(user_env, isolated, open_rows[isolated])}
    assert rules == {"auto: isolated (declared: x-mux.sharing)"}
    assert {row["share"] for row in rows_for(user_env, browser, open_rows[browser])} == {False}
    assert {row["share_rule"] for row in rows_for(user_env, browser, open_rows[browser])} == {
        "auto: isolated (tool names: browser_navigate, take_screenshot)"}
    assert {row["share_rule"] for row in rows_for(user_env, unknown, open_rows[unknown])} == {
        "auto: isolated (not known to be shareable)"}
    human = lazyctl(user_env, "status").stdout.splitlines()
    tail = human[human.index("one process per session:") + 1:]
    assert f"  {browser}: auto: isolated (tool names: browser_navigate, take_screenshot)" in tail
    assert (f"  {unknown}: isolated: not known to be shareable — `lazyctl share {unknown}` "
            "if it keeps no session's state") in tail
    assert all(not line.startswith(f"  {plain}") for line in tail)
    explained = control(user_env, "identity", registrations=[
        {"argv": SERVER, "cwd": str(user_env.root), "env": shim_env(user_env, ISOLATED)}])
    assert explained["registrations"][0]["share_rule"] == "auto: isolated (declared: x-mux.sharing)"


async def test_share_true_still_wins_and_a_server_nothing_is_known_about_learns_from_its_first_start(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        forced = await pids_of_two_sessions(user_env, ISOLATED, "--share", "true")
        assert forced[0] == forced[1]
        # No check and no cache for this one: the first session shares (nothing to decide from);
        # its start records the declaration, so a second session gets a process of its own.
        fresh = {**ISOLATED, "FIXTURE_MARK": "fresh"}
        async with shim_session(user_env, SERVER, env=fresh) as first:
            first_pid = await pid_of(first)
            async with shim_session(user_env, SERVER, env=fresh) as second:
                assert await pid_of(second) != first_pid


async def test_a_named_server_that_must_not_be_shared_gets_private_instances_a_reload_drops_with_it(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("iso", env=ISOLATED))
    start_daemon(user_env)
    control(user_env, "check", name="iso")
    with trio.fail_after(STEP_S):
        pids = await pids_of_two_sessions(user_env, {}, "--server", "iso")
    assert pids[0] != pids[1]
    assert sorted(OPEN_ROWS) == ["iso", "iso.1"]
    assert sorted(status_rows(user_env)) == ["iso"]  # the private instance went with its session
    assert status_rows(user_env)["iso"]["share_rule"] == "auto: isolated (declared: x-mux.sharing)"
    write_config(user_env, server_table("iso", env=ISOLATED, linger="1m"))
    assert control(user_env, "reload")["changed"] == ["iso"]
    assert sorted(status_rows(user_env)) == ["iso"]
    # share = false on a named server is honoured too (it used to share regardless).
    write_config(user_env, server_table("iso", share=False))
    control(user_env, "reload")
    with trio.fail_after(STEP_S):
        pids = await pids_of_two_sessions(user_env, {}, "--server", "iso")
    assert pids[0] != pids[1]
    assert status_rows(user_env)["iso"]["share_rule"] == "share = false"
