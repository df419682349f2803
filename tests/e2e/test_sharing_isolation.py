"""One session's directory, files, keys, thoughts and tabs never reach another session through
lazyd: published servers, registered as a user would (a script path, a one-line wrapper), two
concurrent SDK sessions A and B with the same cwd and environment (two windows of one client).

Each server is tried three ways: both sessions at once on a cold cache, again on the warm cache
the first round left, and one after the other (B after A left: no process of A's lingers for it).
Beside them: a server nothing is known about gets a process per concurrent session, and a known
shareable server behind a wrapper script keeps its one shared process (the table is matched
against what the process tree runs, not only against the registered command line).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio
from mcp import ClientSession
from mcp.types import TextContent

from tests.conftest import FIXTURE_SERVER, SERVERS, UserEnv, shim_session, start_daemon, wait_until
from tests.e2e.eras_support import restart_daemon
from tests.e2e.lazyctl_support import lazyctl, shim_env
from tests.e2e.supervision_support import control, server_table, status_rows, write_config

pytestmark = pytest.mark.e2e

NODE_MODULES = SERVERS / "node_modules"
GIT_SERVER = NODE_MODULES / "@cyanheads" / "git-mcp-server" / "dist" / "index.js"
TASK_MASTER = NODE_MODULES / "task-master-ai" / "dist" / "mcp-server.js"
THINKING = NODE_MODULES / "@modelcontextprotocol" / "server-sequential-thinking" / "dist" / "index.js"
PLAYWRIGHT = NODE_MODULES / "@playwright" / "mcp" / "cli.js"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
CHROMIUM = shutil.which("chromium")
STEP_S = 90.0  # a round: two sessions of a node server, under load

Act = Callable[[ClientSession], Awaitable[Any]]
Probe = Callable[[ClientSession], Awaitable[str]]


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def wrapper(user: UserEnv, name: str, *argv: str) -> list[str]:
    """A one-line wrapper script, as users write them: `exec` the real command."""
    path = user.root / name
    path.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in argv) + ' "$@"\n')
    path.chmod(0o755)
    return [str(path)]


def rows_of(user: UserEnv, prefix: str) -> list[dict[str, Any]]:
    return [row for row in status_rows(user).values() if row["name"].startswith(prefix)]


async def never_see_each_other(user: UserEnv, server: list[str], a_sets: Act, b_looks: Probe, secret: str,
                               env: dict[str, str] | None = None) -> None:
    """A sets its state, B looks: B never sees `secret`, concurrently on a cold and a warm cache
    and one after the other."""
    for round_name in ("cold", "warm"):
        with trio.fail_after(STEP_S):
            async with AsyncExitStack() as stack:
                a = await stack.enter_async_context(shim_session(user, server, env=env))
                await a_sets(a)
                b = await stack.enter_async_context(shim_session(user, server, env=env))
                seen = await b_looks(b)
        assert secret not in seen, f"{round_name} cache: B saw A's {secret!r}: {seen[:400]}"
    with trio.fail_after(STEP_S):
        async with shim_session(user, server, env=env) as a:
            await a_sets(a)
        async with shim_session(user, server, env=env) as b:
            seen = await b_looks(b)
    assert secret not in seen, f"one after the other: B saw A's {secret!r}: {seen[:400]}"


async def test_git_mcp_server_keeps_each_sessions_working_directory_its_own(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    repo = user_env.root / "repoA"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "secret-of-A-r1.txt").write_text("A's\n")
    start_daemon(user_env)

    async def a_sets(session: ClientSession) -> None:
        result = await session.call_tool("git_set_working_dir", {"path": str(repo)})
        assert not result.is_error, text_of(result)

    async def b_looks(session: ClientSession) -> str:
        status = text_of(await session.call_tool("git_status", {}))
        resource = await session.read_resource("git://working-directory")
        return status + json.dumps(resource.model_dump(mode="json"))

    await never_see_each_other(user_env, ["node", str(GIT_SERVER)], a_sets, b_looks, "secret-of-A")
    (row,) = [r for r in status_rows(user_env).values() if not r.get("instance_of")]
    assert row["name"].startswith("git-mcp-server-")  # named after its package, not `index`
    assert row["share_rule"] == "auto: isolated (known server: git-mcp-server)"


async def test_task_master_never_lends_one_projects_env_keys_to_another_session(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    tasks = {"master": {"tasks": [{"id": 1, "title": "t", "description": "d", "status": "pending", "dependencies": [],
                                   "priority": "high", "details": "", "testStrategy": "", "subtasks": []}],
                        "metadata": {"created": "2026-01-01T00:00:00Z", "updated": "2026-01-01T00:00:00Z",
                                     "description": "x"}}}
    for project in ("projA", "projB"):
        (user_env.root / project / ".taskmaster" / "tasks").mkdir(parents=True)
        (user_env.root / project / ".taskmaster" / "tasks" / "tasks.json").write_text(json.dumps(tasks))
    # A's keys, and base URLs on a port fetch refuses: a call made with them reaches no network.
    (user_env.root / "projA" / ".env").write_text(
        "ANTHROPIC_API_KEY=sk-ant-secret-of-A\nPERPLEXITY_API_KEY=pplx-secret-of-A\n"
        "ANTHROPIC_BASE_URL=http://127.0.0.1:9\nPERPLEXITY_BASE_URL=http://127.0.0.1:9\n")
    start_daemon(user_env)

    async def a_sets(session: ClientSession) -> None:
        result = await session.call_tool("get_tasks", {"projectRoot": str(user_env.root / "projA")})
        assert not result.is_error, text_of(result)

    async def b_looks(session: ClientSession) -> str:
        result = text_of(await session.call_tool("expand_task", {"projectRoot": str(user_env.root / "projB"),
                                                                 "id": "1"}))
        # Direct, B has no key: the check is local and fails at once. With A's key it would call out.
        assert "is not set" in result, result
        return result

    await never_see_each_other(user_env, ["node", str(TASK_MASTER)], a_sets, b_looks, "API error")
    names = {row["name"].rsplit("-", 1)[0] for row in status_rows(user_env).values()}
    assert names == {"task-master-ai"}, names  # named after its package, not its script (`mcp-server`)


async def test_sequential_thinking_behind_a_wrapper_keeps_each_sessions_thoughts(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    server = wrapper(user_env, "thinking.sh", "node", str(THINKING))
    start_daemon(user_env)

    async def a_sets(session: ClientSession) -> None:
        for number, branch in ((1, {}), (2, {"branchId": "clientA-secret-branch", "branchFromThought": 1})):
            await session.call_tool("sequentialthinking", {
                "thought": f"A's thought {number}", "thoughtNumber": number, "totalThoughts": 3,
                "nextThoughtNeeded": True, **branch})

    async def b_looks(session: ClientSession) -> str:
        seen = text_of(await session.call_tool("sequentialthinking", {
            "thought": "B's first", "thoughtNumber": 1, "totalThoughts": 1, "nextThoughtNeeded": False}))
        assert json.loads(seen)["thoughtHistoryLength"] == 1, seen
        return seen

    await never_see_each_other(user_env, server, a_sets, b_looks, "clientA-secret-branch")
    rules = {row["share_rule"] for row in status_rows(user_env).values()}
    assert rules == {"auto: isolated (known server: sequential-thinking)"}, rules


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
async def test_playwright_behind_a_wrapper_keeps_each_sessions_tabs(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    assert CHROMIUM is not None
    server = wrapper(user_env, "browser.sh", "node", str(PLAYWRIGHT), "--headless", "--isolated", "--no-sandbox",
                     "--browser", "chromium", "--executable-path", CHROMIUM)
    start_daemon(user_env)

    async def a_sets(session: ClientSession) -> None:
        result = await session.call_tool("browser_navigate", {"url": "data:text/html,<title>tab-secret-of-A</title>"})
        assert not result.is_error, text_of(result)

    async def b_looks(session: ClientSession) -> str:
        return text_of(await session.call_tool("browser_tabs", {"action": "list"}))

    await never_see_each_other(user_env, server, a_sets, b_looks, "tab-secret-of-A")


async def pids_of_concurrent_sessions(user: UserEnv, server: list[str], env: dict[str, str],
                                      shim_args: tuple[str, ...] = ()) -> list[int]:
    async with AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(shim_session(user, server, env=env, shim_args=shim_args))
                    for _ in range(2)]
        return [int(text_of(await session.call_tool("pid", {}))) for session in sessions]


async def test_a_server_nothing_is_known_about_gets_a_process_per_concurrent_session_cold_and_warm(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    start_daemon(user_env)
    unknown = {"FIXTURE_SHARING": ""}  # declares nothing; its tool names (echo, pid, …) are innocent
    server = [sys.executable, str(FIXTURE_SERVER)]
    with trio.fail_after(STEP_S):
        cold = await pids_of_concurrent_sessions(user_env, server, unknown)
        warm = await pids_of_concurrent_sessions(user_env, server, unknown)
    assert cold[0] != cold[1] and warm[0] != warm[1]
    rows = rows_of(user_env, "fixture_server-")
    assert {row["share_rule"] for row in rows} == {"auto: isolated (not known to be shareable)"}
    # The instance the second session had goes with it: no row for a process nobody has.
    assert len(rows) == 1 and rows[0]["name"].count(".") == 0
    # Each process stopped with its session, and the log says so (nobody ran `lazyctl sleep`).
    log = user_env.root / "daemon.stderr"
    wait_until(lambda: log.read_text().count("stopping: its session left") >= 2, STEP_S, "the stop lines")
    assert "lazyctl sleep" not in log.read_text()
    assert log.read_text().count(": dropped (a process of a session's own") >= 2


async def test_a_known_shareable_server_behind_a_wrapper_keeps_one_shared_process_cold_and_warm(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    server = wrapper(user_env, "everything.sh", "node", str(EVERYTHING))
    start_daemon(user_env)
    for _ in ("cold", "warm"):
        with trio.fail_after(STEP_S):
            async with AsyncExitStack() as stack:
                for _ in range(2):
                    session = await stack.enter_async_context(shim_session(user_env, server))
                    await session.call_tool("echo", {"message": "hi"})
                rows = rows_of(user_env, "everything-")
                assert [(row["clients"], row["share_rule"]) for row in rows] == [
                    (2, "auto: shared (known server: everything)")], rows
                assert all(not row.get("instance_of") for row in rows)
    # The next daemon knows what the wrapper runs before any start (the record of its tree).
    restart_daemon(user_env, "server-everything")
    explained = control(user_env, "identity", registrations=[
        {"argv": server, "cwd": str(user_env.root), "env": shim_env(user_env)}])["registrations"][0]
    assert explained["share_rule"] == "auto: shared (known server: everything)"



async def test_lazyctl_share_opts_a_client_registration_in_and_out_with_one_config_entry(
    user_env: UserEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(user_env.root)
    start_daemon(user_env)
    unknown = {"FIXTURE_SHARING": ""}
    server = [sys.executable, str(FIXTURE_SERVER)]
    with trio.fail_after(STEP_S):
        before = await pids_of_concurrent_sessions(user_env, server, unknown)
    assert before[0] != before[1]
    (name,) = status_rows(user_env)
    done = lazyctl(user_env, "share", name)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('[known_servers.fixture_server] sharing = "shared" written to ')
    assert 'runs = ["fixture_server"]' in user_env.config_file.read_text()
    with trio.fail_after(STEP_S):
        after = await pids_of_concurrent_sessions(user_env, server, unknown)
    assert after[0] == after[1]
    assert status_rows(user_env)[name]["share_rule"] == "auto: shared (known server: fixture_server)"
    assert lazyctl(user_env, "share", "--off", name).returncode == 0
    with trio.fail_after(STEP_S):
        off = await pids_of_concurrent_sessions(user_env, server, unknown)
    assert off[0] != off[1]
    missing = lazyctl(user_env, "share", "no-such-server")
    assert (missing.returncode, missing.stderr.count("\n")) == (2, 1), missing.stderr


async def test_lazyctl_share_writes_share_true_for_a_named_server(user_env: UserEnv) -> None:
    write_config(user_env, "# mine\n" + server_table("fx", env={"FIXTURE_SHARING": ""}))
    start_daemon(user_env)
    with trio.fail_after(STEP_S):
        before = await pids_of_concurrent_sessions(user_env, [], {}, ("--server", "fx"))
    assert before[0] != before[1]
    status = lazyctl(user_env, "status").stdout
    assert ("  fx: isolated: not known to be shareable — `share = true` in [servers.fx] "
            "if it keeps no session's state") in status.splitlines()
    assert ("  sharing  one process per session (isolated: not known to be shareable — `share = true` in "
            "[servers.fx] if it keeps no session's state)") in lazyctl(user_env, "explain", "fx").stdout.splitlines()
    assert lazyctl(user_env, "share", "fx").returncode == 0
    assert user_env.config_file.read_text().startswith("# mine\n[servers.fx]\n")
    assert "share = true" in user_env.config_file.read_text()
    with trio.fail_after(STEP_S):
        after = await pids_of_concurrent_sessions(user_env, [], {}, ("--server", "fx"))
    assert after[0] == after[1]
