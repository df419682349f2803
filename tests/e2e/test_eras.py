"""Both protocol eras end to end: the python SDK's `Client` in its three modes ("auto",
"2026-07-28", "legacy") through lazyd-shim and a real daemon, against a dual-era server built with
the same SDK's `MCPServer` (tests/servers/dual_era_server.py) and against server-everything
(handshake era only).

Policy (as everywhere): no timing assertions; liveness from /proc; what reached the server from the
server's own request log (DUAL_LOG); every wait bounded.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp.client.subscriptions as sdk_subscriptions
import mcp_types as types
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from tests.conftest import SERVERS, UserEnv, everything_command, shim_command, start_daemon, wait_until
from tests.e2e.eras_support import STEP_TIMEOUT_S, restart_daemon, status_rows

pytestmark = pytest.mark.e2e

DUAL = [sys.executable, str(SERVERS / "dual_era_server.py")]
DUAL_NEEDLE = "dual_era_server"
MODES = ("auto", "2026-07-28", "legacy")


# These tests are about eras, and count one process per era: the registration says it is shareable
# (`--share true`, as LAZYD_SHARE). The server's own declaration is seen only once a start has told,
# and a stateless-era client opens without a request, so a second session opened beside it would
# get a process of its own (docs/configuration.md, "Sharing").
SHARE = {"LAZYD_SHARE": "true"}


def client(user: UserEnv, argv: list[str], mode: str, name: str = "era-test", env: dict[str, str] | None = None,
           **kwargs: Any) -> Client:
    params = StdioServerParameters(command=shim_command(), args=["--", *argv], env={**user.env, **SHARE, **(env or {})})
    return Client(params, mode=mode, client_info=types.Implementation(name=name, version="1"), **kwargs)


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def logged(path: Path, method: str, who: str | None = None) -> int:
    """How many `method` requests reached the server (from `who`, if given)."""
    if not path.exists():
        return 0
    rows = [line.split() for line in path.read_text().splitlines()]
    return sum(1 for row in rows if row[0] == method and (who is None or row[2] == who))


def daemon_pids_of_servers(user: UserEnv) -> list[object]:
    """The server pids the daemon reports (`lazyctl status --json`), None for a sleeping one."""
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "status", "--json"], env=user.env,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    return [row["pid"] for row in json.loads(done.stdout)["servers"]] if done.returncode == 0 else ["unknown"]


async def tool_names(c: Client) -> list[str]:
    return sorted(t.name for t in (await c.list_tools()).tools)


# ---- sessions from cache, in every mode -----------------------------------------------------------


async def test_each_sdk_mode_opens_a_session_on_the_dual_era_server_from_cache_with_no_process(user_env: UserEnv, tmp_path: Path) -> None:
    env = {"DUAL_LOG": str(tmp_path / "requests.log")}
    # One session of each era fills the cache: the server locks each connection to one era, so
    # each era's answers come from a process of that era.
    for mode in ("auto", "legacy"):
        with trio.fail_after(STEP_TIMEOUT_S):
            async with client(user_env, DUAL, mode, env=env) as c:
                assert c.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
                expected = await tool_names(c)
                prompts = [p.name for p in (await c.list_prompts()).prompts]
    assert "whoami" in expected and prompts == ["greet"]
    restart_daemon(user_env, DUAL_NEEDLE)
    for mode in MODES:
        with trio.fail_after(STEP_TIMEOUT_S):
            async with client(user_env, DUAL, mode, env=env) as c:
                assert c.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
                assert await tool_names(c) == expected
                assert [p.name for p in (await c.list_prompts()).prompts] == prompts
                user_env.assert_nothing_started(DUAL_NEEDLE)
    # The snapshot says what was learned about the server's eras.
    (snapshot_file,) = user_env.cache_dir.glob("*.json")
    stored = json.loads(snapshot_file.read_text())
    assert stored["mixed_connection"] in (None, False)
    assert any("2026-07-28" in (a.get("result") or {}).get("supportedVersions", []) for a in stored["discover"].values())
    # The first call starts exactly one process.
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "legacy", env=env) as c:
            pid = text(await c.call_tool("pid", {}))
            assert user_env.server_pids(DUAL_NEEDLE) == [int(pid)]


async def test_server_everything_serves_auto_and_legacy_from_cache_and_refuses_a_pinned_stateless_client(user_env: UserEnv) -> None:
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, everything_command(), "legacy") as c:
            expected = await tool_names(c)
    restart_daemon(user_env, "server-everything")
    for mode in ("auto", "legacy"):
        with trio.fail_after(STEP_TIMEOUT_S):
            async with client(user_env, everything_command(), mode) as c:
                assert c.protocol_version.startswith("2025")
                assert await tool_names(c) == expected
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, everything_command(), "2026-07-28") as c:
            with pytest.raises(MCPError) as refused:
                await c.list_tools()
    assert refused.value.error.code == -32022
    assert "handshake era" in refused.value.error.message and "2025-11-25" in refused.value.error.message
    user_env.assert_nothing_started("server-everything")  # refused from what the cache knows


# ---- ttlMs and cacheScope -------------------------------------------------------------------------


async def test_a_listing_with_ttl_zero_opens_a_session_from_cache_and_is_fetched_every_time_once_running(
        user_env: UserEnv, tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    env = {"DUAL_LOG": str(log), "DUAL_TTL_MS": "0"}
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", env=env) as c:
            expected = await tool_names(c)
    restart_daemon(user_env, DUAL_NEEDLE)
    before = logged(log, "tools/list")
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", env=env, cache=None) as c:
            # The server sleeps: the stale listing answers (the server said ttlMs 0, a hint a cache
            # may serve stale by while the origin is not there), and nothing is started for it.
            assert await tool_names(c) == expected
            user_env.assert_nothing_started(DUAL_NEEDLE)
            assert logged(log, "tools/list") == before
            await c.call_tool("pid", {})
            assert len(user_env.server_pids(DUAL_NEEDLE)) == 1
            # Running: every listing goes to the server, as it asked.
            after_start = logged(log, "tools/list")
            await tool_names(c)
            await tool_names(c)
            assert logged(log, "tools/list") == after_start + 2


async def test_an_expired_discovery_opens_a_session_from_cache_and_is_asked_again_once_running(
        user_env: UserEnv, tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    env = {"DUAL_LOG": str(log), "DUAL_TTL_MS": "0"}
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "auto", env=env) as c:
            assert c.protocol_version == "2026-07-28"
    restart_daemon(user_env, DUAL_NEEDLE)
    before = logged(log, "server/discover")
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "auto", env=env) as c:
            assert c.protocol_version == "2026-07-28"
            user_env.assert_nothing_started(DUAL_NEEDLE)
            assert logged(log, "server/discover") == before
            await c.call_tool("pid", {})
            started = logged(log, "server/discover")  # the relay's own era probe, at the start
            async with client(user_env, DUAL, "auto", env=env) as second:
                assert second.protocol_version == "2026-07-28"
            # The second client's expired discovery reached the live server.
            assert logged(log, "server/discover") == started + 1


async def test_a_private_listing_is_not_served_across_client_identities(user_env: UserEnv, tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    env = {"DUAL_LOG": str(log), "DUAL_SCOPE": "private"}
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", name="alice", env=env) as c:
            expected = await tool_names(c)
    restart_daemon(user_env, DUAL_NEEDLE)
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", name="alice", env=env, cache=None) as c:
            assert await tool_names(c) == expected
            user_env.assert_nothing_started(DUAL_NEEDLE)  # alice's own private entry
    assert logged(log, "tools/list", "bob") == 0
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", name="bob", env=env, cache=None) as c:
            assert await tool_names(c) == expected
            assert len(user_env.server_pids(DUAL_NEEDLE)) == 1  # bob's listing needed the server
    assert logged(log, "tools/list", "bob") >= 1


# ---- listen streams -------------------------------------------------------------------------------


async def test_listen_streams_deliver_each_change_to_the_client_that_asked_under_its_own_id(user_env: UserEnv, tmp_path: Path) -> None:
    env = {"DUAL_LOG": str(tmp_path / "requests.log")}
    seen: dict[str, list[tuple[str, object]]] = {"a": [], "b": []}

    def recorder(who: str) -> Any:
        async def handler(message: Any) -> None:
            if isinstance(message, types.ServerNotification):
                params = getattr(message, "params", None)
                meta = getattr(params, "meta", None) or {}
                seen[who].append((message.method, meta.get("io.modelcontextprotocol/subscriptionId")))
        return handler

    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", name="a", env=env, message_handler=recorder("a")) as a, \
                client(user_env, DUAL, "2026-07-28", name="b", env=env, message_handler=recorder("b")) as b:
            # Both clients use the same listen id, as two SDK processes always do ("listen-1").
            sdk_subscriptions._listen_ids = itertools.count(1)
            async with a.listen(tools_list_changed=True) as stream_a:
                sdk_subscriptions._listen_ids = itertools.count(1)
                async with b.listen(resource_subscriptions=["demo://note"]) as stream_b:
                    assert stream_a.subscription_id == stream_b.subscription_id == "listen-1"
                    assert stream_b.honored.resource_subscriptions == ["demo://note"]
                    assert text(await a.call_tool("add_tool", {"name": "extra"})) == "added extra"
                    assert isinstance(await stream_a.__anext__(), ToolsListChanged)
                    assert "extra" in await tool_names(a)  # the relay dropped its stale cached listing
                    await b.call_tool("touch", {"uri": "demo://note"})
                    assert await stream_b.__anext__() == ResourceUpdated(uri="demo://note")
                    # A barrier on a's connection: anything routed to a before it has arrived.
                    assert text(await a.call_tool("echo", {"text": "barrier"})) == "barrier"
    assert ("notifications/tools/list_changed", "listen-1") in seen["a"]
    assert ("notifications/resources/updated", "listen-1") in seen["b"]
    assert not any(m == "notifications/resources/updated" for m, _ in seen["a"])
    assert not any(m == "notifications/tools/list_changed" for m, _ in seen["b"])


async def test_a_listen_stream_survives_a_server_crash_because_the_relay_listens_again(user_env: UserEnv, tmp_path: Path) -> None:
    env = {"DUAL_LOG": str(tmp_path / "requests.log")}
    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", env=env) as c:
            async with c.listen(tools_list_changed=True) as stream:
                first = int(text(await c.call_tool("pid", {})))
                os.kill(first, signal.SIGKILL)
                # Wait for the daemon itself to record the exit: a call sent before that would
                # go to the dead process and fail, as it would on a direct connection. The open
                # stream may have the daemon start the next process at once, so the sign is that
                # the dead pid is gone from status (asleep or a new one), not that none runs.
                await trio.to_thread.run_sync(
                    wait_until, lambda: daemon_pids_of_servers(user_env) not in ([first], ["unknown"]), 20, "the crash")
                # The next call starts a new process; the change it makes reaches the old stream.
                await c.call_tool("add_tool", {"name": "after_crash"})
                assert isinstance(await stream.__anext__(), ToolsListChanged)
                assert int(text(await c.call_tool("pid", {}))) != first


# ---- mixed eras on one dual-era server --------------------------------------------------------------


async def test_clients_of_two_eras_get_a_process_each_of_a_dual_era_server_shared_within_each_era(user_env: UserEnv, tmp_path: Path) -> None:
    env = {"DUAL_LOG": str(tmp_path / "requests.log")}

    def answers_with(name: str) -> Any:
        async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            return types.ElicitResult(action="accept", content={"name": name})
        return elicit

    with trio.fail_after(STEP_TIMEOUT_S):
        async with client(user_env, DUAL, "2026-07-28", name="modern", env=env, elicitation_callback=answers_with("grace")) as modern, \
                client(user_env, DUAL, "2026-07-28", name="modern2", env=env) as modern2, \
                client(user_env, DUAL, "legacy", name="legacy", env=env) as legacy, \
                client(user_env, DUAL, "legacy", name="legacy2", env=env) as legacy2:
            assert (modern.protocol_version, legacy.protocol_version) == ("2026-07-28", "2025-11-25")
            # Each is served by the server in its own era, natively: the handshake clients on a
            # handshake connection (no bridge), the stateless ones on a stateless connection.
            assert text(await modern.call_tool("whoami", {})) == "2026-07-28 modern"
            assert text(await legacy.call_tool("whoami", {})) == "2025-11-25 legacy"
            modern_pid, legacy_pid = text(await modern.call_tool("pid", {})), text(await legacy.call_tool("pid", {}))
            assert modern_pid != legacy_pid
            # Clients of one era share its process.
            assert text(await modern2.call_tool("pid", {})) == modern_pid
            assert text(await legacy2.call_tool("pid", {})) == legacy_pid
            assert sorted(user_env.server_pids(DUAL_NEEDLE)) == sorted([int(modern_pid), int(legacy_pid)])
            # input_required: the stateless client drives its rounds itself.
            assert text(await modern.call_tool("ask", {})) == "hello grace"
            assert await tool_names(modern) == await tool_names(legacy)
            # lazyctl status shows each process with its era.
            rows = status_rows(user_env)
            assert sorted((r["era"], r["pid"]) for r in rows) == sorted(
                [("handshake", int(legacy_pid)), ("stateless", int(modern_pid))])
            assert {r["server_eras"] for r in rows} == {"both eras, one per connection"}


async def test_lazyctl_check_records_the_stateless_era_and_warms_the_cache_for_both_eras(user_env: UserEnv, tmp_path: Path) -> None:
    from mcp.client.stdio import get_default_environment

    start_daemon(user_env)
    env = {**get_default_environment(), **user_env.env}
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "check", "--json", "--", *DUAL], env=env,
                          cwd=os.getcwd(), capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["era"] == "stateless" and report["mixed_connection"] is False
    assert report["discover"] == {"kind": "result"}
    assert report["server_info"] == {"name": "dual-era-fixture", "version": "1.0"}
    assert report["listings"]["tools"]["count"] >= 5
    assert user_env.server_pids(DUAL_NEEDLE) == []
    for mode in ("legacy", "auto"):
        with trio.fail_after(STEP_TIMEOUT_S):
            async with client(user_env, DUAL, mode) as c:
                assert len(await tool_names(c)) == report["listings"]["tools"]["count"]
                user_env.assert_nothing_started(DUAL_NEEDLE)
