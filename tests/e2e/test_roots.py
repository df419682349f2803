"""Roots are a session's: the published filesystem server, started with no directory, serves each
session the roots that session declared, through lazyd as on a direct connection.

Real daemon, real shims, the official SDK as the clients (each with a `list_roots_callback`),
`@modelcontextprotocol/server-filesystem` (tests/servers/package.json) as the server. The
known-servers table calls filesystem shared; sessions whose roots differ must still never share
its process, and a server asking `roots/list` is answered with the roots of the session it serves.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import ClientSession, types
from pydantic import FileUrl

from tests.conftest import UserEnv, shim_session, start_daemon, wait_until
from tests.e2e.hub_support import hub_session, texts
from tests.e2e.lazyctl_support import shim_env
from tests.e2e.supervision_support import control, server_table, write_config

pytestmark = pytest.mark.e2e

STEP_S = 60.0
FILESYSTEM_JS = Path(__file__).resolve().parents[1] / "servers" / "node_modules" / "@modelcontextprotocol" / \
    "server-filesystem" / "dist" / "index.js"


def filesystem() -> list[str]:
    assert FILESYSTEM_JS.exists(), "server-filesystem is missing: run `npm ci --prefix tests/servers`"
    return [shutil.which("node") or "node", str(FILESYSTEM_JS)]


def roots_callback(directory: Path) -> Callable[[Any], Awaitable[types.ListRootsResult]]:
    async def list_roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl(directory.as_uri()), name=directory.name)])
    return list_roots


def projects(user: UserEnv) -> tuple[Path, Path]:
    """Two directories, each with a file only its own session may read."""
    a, b = user.root / "dirA", user.root / "dirB"
    for directory, secret in ((a, "secret-of-A"), (b, "secret-of-B")):
        directory.mkdir()
        (directory / f"{directory.name[-1]}.txt").write_text(secret)
    return a, b


async def read(session: ClientSession, path: Path) -> tuple[bool, str]:
    """(whether the server refused, its text) for `read_text_file` of `path`."""
    result = await session.call_tool("read_text_file", {"path": str(path)})
    text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
    return bool(result.is_error), text


async def allowed(session: ClientSession) -> str:
    result = await session.call_tool("list_allowed_directories", {})
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def each_reaches_only_its_own_root(user: UserEnv, a: Path, b: Path) -> None:
    """Two concurrent sessions, A declaring dirA and B dirB: each reads its own file and is refused
    the other's, whichever calls first."""
    async with AsyncExitStack() as stack:
        session_a = await stack.enter_async_context(shim_session(user, filesystem(), list_roots_callback=roots_callback(a)))
        session_b = await stack.enter_async_context(shim_session(user, filesystem(), list_roots_callback=roots_callback(b)))
        assert await read(session_a, a / "A.txt") == (False, "secret-of-A")
        refused, text = await read(session_a, b / "B.txt")
        assert refused and "secret-of-B" not in text, text
        assert await read(session_b, b / "B.txt") == (False, "secret-of-B")
        refused, text = await read(session_b, a / "A.txt")
        assert refused and "secret-of-A" not in text, text
        assert str(b) not in await allowed(session_a)
        assert str(a) not in await allowed(session_b)


async def test_two_sessions_with_different_roots_each_reach_only_their_own_on_a_cold_and_a_warm_cache(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)  # the sessions' cwd is part of their identity
    a, b = projects(user_env)
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        await each_reaches_only_its_own_root(user_env, a, b)  # cold: nothing cached
    assert any(user_env.cache_dir.iterdir()), "the first run left no cache"
    with trio.fail_after(STEP_S):
        await each_reaches_only_its_own_root(user_env, a, b)  # warm: answered from the cache, then started


async def test_sessions_with_the_same_roots_share_the_filesystem_process(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    a, _ = projects(user_env)
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        async with AsyncExitStack() as stack:
            sessions = [await stack.enter_async_context(shim_session(user_env, filesystem(), list_roots_callback=roots_callback(a)))
                        for _ in range(2)]
            for session in sessions:
                assert await read(session, a / "A.txt") == (False, "secret-of-A")
            assert len(user_env.server_pids(str(FILESYSTEM_JS))) == 1


async def test_the_first_call_after_a_lazy_start_lists_the_sessions_roots(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    a, _ = projects(user_env)
    start_daemon(user_env)
    stop_at_once = ("--linger", "0")  # each round's session leaves its server stopped: the next start is lazy
    with trio.fail_after(STEP_S):
        async with shim_session(user_env, filesystem(), shim_args=stop_at_once, list_roots_callback=roots_callback(a)) as warming:
            await warming.list_tools()  # a cache for the starts below
    for _ in range(3):
        wait_until(lambda: not user_env.server_pids(str(FILESYSTEM_JS)), STEP_S, "the filesystem server to stop")
        with trio.fail_after(STEP_S):
            async with shim_session(user_env, filesystem(), shim_args=stop_at_once,
                                    list_roots_callback=roots_callback(a)) as session:
                await session.list_tools()  # from the cache: nothing started yet
                user_env.assert_nothing_started(str(FILESYSTEM_JS))
                # The first call starts the server; it is answered once the server has its roots.
                assert str(a) in await allowed(session)


async def test_a_hub_session_calling_a_shared_filesystem_reaches_only_its_own_roots(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    a, b = projects(user_env)
    write_config(user_env, server_table("files", command=filesystem()))
    start_daemon(user_env)

    async def hub_read(hub: ClientSession, path: Path) -> tuple[bool, str]:
        result = await hub.call_tool("call_tool", {"server": "files", "tool": "read_text_file", "arguments": {"path": str(path)}})
        text = " ".join(texts(result))
        return "secret-of" not in text, text

    with trio.fail_after(STEP_S):
        async with shim_session(user_env, [], shim_args=("--server", "files"), list_roots_callback=roots_callback(a)) as shim:
            assert await read(shim, a / "A.txt") == (False, "secret-of-A")  # the shim session holds the shared process
            async with hub_session(user_env, list_roots_callback=roots_callback(b)) as hub:
                assert await hub_read(hub, b / "B.txt") == (False, "secret-of-B")
                refused, text = await hub_read(hub, a / "A.txt")
                assert refused, text
                assert await hub_read(hub, b / "B.txt") == (False, "secret-of-B")  # its later calls too
            refused, text = await read(shim, b / "B.txt")
            assert refused and "secret-of-B" not in text, text


def test_a_check_with_a_handshake_that_declares_roots_completes_and_gives_the_server_none(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    start_daemon(user_env)
    params = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": True}},
              "clientInfo": {"name": "rooted", "version": "1"}}
    # filesystem asks roots/list at start: the check has none to give, says so, and goes on.
    report = control(user_env, "check", argv=filesystem(), cwd=str(user_env.root), env=shim_env(user_env, {}),
                     initialize=params)
    assert report["listings"]["tools"]["count"] > 10, report
    log = Path(report["log_path"]).read_text()
    assert "No valid root directories provided by client" in log, log  # it was given an empty list
