"""`lazyctl restart NAME`: the stop ladder, then a start, waited for; a call in flight gets an
error, the session goes on with the new process."""

from __future__ import annotations

import json

import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.conftest import UserEnv, start_daemon
from tests.e2e.lazyctl_support import lazyctl
from tests.e2e.supervision_support import named_session, server_table, tool_text, write_config

pytestmark = pytest.mark.e2e


async def test_restart_replaces_the_process_and_the_session_goes_on(user_env: UserEnv) -> None:
    write_config(user_env, server_table("fixture"))
    start_daemon(user_env)
    async with named_session(user_env, "fixture") as session:
        first = int(tool_text(await session.call_tool("pid", {})))
        errors: list[str] = []

        async def held() -> None:
            try:
                await session.call_tool("sleep", {"seconds": 60})
            except MCPError as exc:
                errors.append(exc.error.message)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(held)
            await trio.sleep(0.5)
            done = await trio.to_thread.run_sync(lazyctl, user_env, "restart", "fixture", "--json")
        assert done.returncode == 0, done.stderr
        row = json.loads(done.stdout)
        second = int(tool_text(await session.call_tool("pid", {})))
    assert row["state"] == "running" and row["pid"] == second != first
    assert errors and errors[0].startswith("lazyd: server fixture stopped before answering")


async def test_restart_of_an_unknown_server_says_which_exist(user_env: UserEnv) -> None:
    write_config(user_env, server_table("fixture"))
    start_daemon(user_env)
    done = await trio.to_thread.run_sync(lazyctl, user_env, "restart", "nope")
    assert done.returncode == 1 and "no server named 'nope' (known: fixture)" in done.stderr
