"""A wrapped registration works end to end: lazyctl edits a Claude-style config in place, and the
official python SDK, started with exactly the command, args and env the entry now holds, reaches
the fixture server through lazyd-shim and a real daemon. With --check, the first session is
answered from the cache and starts nothing.

Policy: no timing assertions; liveness and parentage are read from /proc.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import FIXTURE_SERVER, Daemon, UserEnv
from tests.e2e.wrap_support import REPO, SECRET, claude_config, wrap_lazyctl

pytestmark = pytest.mark.e2e


def _texts(result: Any) -> list[str]:
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


async def _roots(context: Any) -> Any:
    from mcp import types
    return types.ListRootsResult(roots=[])


async def _elicitation(context: Any, params: Any) -> Any:
    from mcp import types
    return types.ElicitResult(action="decline")


@asynccontextmanager
async def _session_for(entry: dict[str, Any], user: UserEnv, *, as_claude: bool = False) -> AsyncIterator[ClientSession]:
    """An initialized SDK session started with exactly the command, args and env `entry` holds;
    `as_claude`: declaring Claude Code's capabilities (roots and elicitation, form and url), so
    that it is served the listings a check with Claude Code's handshake recorded."""
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env={**user.env, **entry["env"]},
                                   cwd=str(REPO))  # fmt: skip
    callbacks: dict[str, Any] = {"list_roots_callback": _roots, "elicitation_callback": _elicitation} if as_claude else {}
    with open(user.root / "shim.stderr", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **callbacks) as session:
                await session.initialize()
                yield session


async def _session_through(entry: dict[str, Any], user: UserEnv) -> tuple[list[str], list[str], int]:
    """Tool names, echo output, and the server's pid, from an SDK session run as the client would."""
    async with _session_for(entry, user) as session:
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        echoed = _texts(await session.call_tool("echo", {"text": "through lazyd"}))
        pid = int(_texts(await session.call_tool("pid", {}))[0])
    return tools, echoed, pid


async def test_the_sdk_reaches_the_server_through_the_command_a_wrapped_entry_holds(user_env: UserEnv,
                                                                                    daemon: Daemon) -> None:  # fmt: skip
    path = claude_config(user_env)
    done = wrap_lazyctl(user_env, "wrap", "--client", "claude", "--all", "--env", "LAZYD_LINGER=30s")
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    entry = json.loads(path.read_text())["mcpServers"]["fixture"]
    assert os.path.basename(entry["command"]) == "lazyd-shim"
    assert entry["args"] == [sys.executable, str(FIXTURE_SERVER)]
    assert entry["env"] == {"FIXTURE_TOKEN": SECRET, "LAZYD_IDENTITY_ENV": "FIXTURE_TOKEN", "LAZYD_LINGER": "30s"}
    tools, echoed, pid = await _session_through(entry, user_env)
    assert "echo" in tools and echoed == ["through lazyd"]
    # The server is the daemon's child, not the shim's: the session went through lazyd.
    assert _parent(pid) == daemon.proc.pid
    undone = wrap_lazyctl(user_env, "unwrap", "--client", "claude", "--all")
    assert undone.returncode == 0, undone.stderr
    assert json.loads(path.read_text())["mcpServers"]["fixture"] == {
        "type": "stdio", "command": sys.executable, "args": [str(FIXTURE_SERVER)], "env": {"FIXTURE_TOKEN": SECRET}}  # fmt: skip


async def test_wrap_with_check_warms_the_cache_so_the_first_session_starts_nothing(user_env: UserEnv,
                                                                                   daemon: Daemon) -> None:  # fmt: skip
    path = claude_config(user_env)
    done = wrap_lazyctl(user_env, "wrap", "--client", "claude", "--server", "fixture", "--check", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, (done.stdout, done.stderr)
    (checked,) = report["checks"]
    assert checked["ok"] and "tools" in checked["message"], checked
    assert not user_env.server_pids(str(FIXTURE_SERVER))  # the check's own server was stopped
    entry = json.loads(path.read_text())["mcpServers"]["fixture"]
    async with _session_for(entry, user_env, as_claude=True) as session:
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        assert "echo" in tools
        assert not user_env.server_pids(str(FIXTURE_SERVER))  # answered from the cache
