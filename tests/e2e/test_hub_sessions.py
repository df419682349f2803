"""A hub session is a session of its own: its calls never reach the process another session holds.

Real daemon, the official SDK on `lazyd-shim --hub` and on `lazyd-shim --server thinking`, and the
published `@modelcontextprotocol/server-sequential-thinking` (tests/servers/package.json) as a
named server: it keeps each connection's thought history and branches in its process, so a
session must never see another's. Its answer says what it holds: `thoughtHistoryLength` and the
names of its `branches`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import ClientSession, types

from tests.conftest import UserEnv, shim_session, start_daemon, wait_until
from tests.e2e.hub_support import hub_session, texts
from tests.e2e.supervision_support import server_table, write_config

pytestmark = pytest.mark.e2e

STEP_S = 60.0
THINKING_JS = Path(__file__).resolve().parents[1] / "servers" / "node_modules" / "@modelcontextprotocol" / \
    "server-sequential-thinking" / "dist" / "index.js"


def thought(number: int, branch: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"thought": f"thought {number}", "thoughtNumber": number, "totalThoughts": 5,
                            "nextThoughtNeeded": True}
    if branch is not None:
        args.update({"branchFromThought": 1, "branchId": branch})
    return args


def held(text: str) -> tuple[int, list[str]]:
    """(thoughtHistoryLength, branches) of one answer of the server."""
    answer = json.loads(text)
    return answer["thoughtHistoryLength"], answer["branches"]


async def by_shim(session: ClientSession, number: int, branch: str | None = None) -> tuple[int, list[str]]:
    result = await session.call_tool("sequentialthinking", thought(number, branch))
    return held(" ".join(c.text for c in result.content if isinstance(c, types.TextContent)))


async def by_hub(session: ClientSession, number: int, branch: str | None = None) -> tuple[int, list[str]]:
    result = await session.call_tool("call_tool", {"server": "thinking", "tool": "sequentialthinking",
                                                    "arguments": thought(number, branch)})
    (text,) = texts(result)
    return held(text)


def configure(user: UserEnv) -> None:
    assert THINKING_JS.exists(), "server-sequential-thinking is missing: run `npm ci --prefix tests/servers`"
    write_config(user, server_table("thinking", command=[shutil.which("node") or "node", str(THINKING_JS)],
                                    env={"DISABLE_THOUGHT_LOGGING": "true"}))


async def test_a_hub_session_and_a_shim_session_never_see_each_others_thoughts_whoever_comes_first(
    user_env: UserEnv,
) -> None:
    configure(user_env)
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        # The shim session first: it holds the registration's process.
        async with shim_session(user_env, [], shim_args=("--server", "thinking")) as shim:
            assert await by_shim(shim, 1) == (1, [])
            assert await by_shim(shim, 2, "shim-secret-branch") == (2, ["shim-secret-branch"])
            async with hub_session(user_env) as hub:
                assert await by_hub(hub, 1) == (1, [])  # not the shim's two thoughts
                assert await by_hub(hub, 2, "hub-secret-branch") == (2, ["hub-secret-branch"])  # its own, kept
                assert await by_shim(shim, 3) == (3, ["shim-secret-branch"])
    with trio.fail_after(STEP_S):
        # The hub session first, then a shim session (warm cache now): the same, the other way round.
        async with hub_session(user_env) as hub:
            assert await by_hub(hub, 1, "hub-branch-2") == (1, ["hub-branch-2"])
            async with shim_session(user_env, [], shim_args=("--server", "thinking")) as shim:
                assert await by_shim(shim, 1) == (1, [])
                assert await by_hub(hub, 2, "hub-branch-2") == (2, ["hub-branch-2"])
                assert await by_shim(shim, 2) == (2, [])
    # Both sessions left: their processes, each a session's own, stop with them (the hub's too).
    wait_until(lambda: not user_env.server_pids(str(THINKING_JS)), STEP_S, "the sessions' processes to stop")
