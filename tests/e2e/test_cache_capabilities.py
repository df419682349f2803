"""A cache made with one client's capabilities never answers a client whose capabilities could
change the listing: server-everything (tests/servers) lists 16 tools to a client declaring sampling
and elicitation and 13 to one declaring none, and each client is served its own (docs/relay.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import UserEnv, everything_command, shim_session

pytestmark = pytest.mark.e2e

STEP_TIMEOUT_S = 120.0
# What server-everything adds for a client declaring sampling and elicitation (form and url).
CAPABILITY_TOOLS = {"trigger-sampling-request", "trigger-elicitation-request", "trigger-url-elicitation"}


def lazyctl(user: UserEnv, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=user.env, cwd=user.root,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def _sampling(context: Any, params: Any) -> Any:
    from mcp import types
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="x"), model="test")


async def _elicitation(context: Any, params: Any) -> Any:
    from mcp import types
    return types.ElicitResult(action="decline")


async def tool_names(user: UserEnv, **callbacks: Any) -> set[str]:
    async with shim_session(user, everything_command(), **callbacks) as session:
        return {tool.name for tool in (await session.list_tools()).tools}


async def test_a_client_declaring_sampling_and_elicitation_is_not_answered_from_a_cache_made_without(
        user_env: UserEnv) -> None:
    # The check speaks for no client: capabilities {}, as a client declaring nothing does.
    report = lazyctl(user_env, "check", "--json", "--", *everything_command())
    assert report["handshake"] == "lazyctl's own" and report["listings"]["tools"]["count"] == 13
    bare = await tool_names(user_env)
    assert len(bare) == 13 and not bare & CAPABILITY_TOOLS
    user_env.assert_nothing_started("server-everything")  # the bare client's cache answered it
    # The client that declares more is never served the bare listing: it gets what a direct
    # connection lists to it, at once.
    full = await tool_names(user_env, sampling_callback=_sampling, elicitation_callback=_elicitation)
    assert len(full) == 16 and CAPABILITY_TOOLS <= full, sorted(full)
    # Both listings are cached now, each under its own handshake: with the server asleep, each
    # client is answered its own and nothing starts.
    for server in lazyctl(user_env, "status", "--json")["servers"]:
        lazyctl(user_env, "sleep", server["name"], "--json")
    assert await tool_names(user_env) == bare
    assert await tool_names(user_env, sampling_callback=_sampling, elicitation_callback=_elicitation) == full
    user_env.assert_nothing_started("server-everything")
