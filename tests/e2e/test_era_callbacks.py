"""Server-to-client requests through lazyd work exactly where they work direct, in both eras.

The server is the python SDK's dual-era `MCPServer` (tests/servers/dual_era_server.py), which
locks each connection to the era of its first request. Its tools call back in both styles: the
handshake era's (`ctx.session.create_message`, `ctx.elicit`, `ctx.elicit_url`, `list_roots`,
logging and progress), which the SDK serves only on a handshake connection, and the stateless
era's (`input_required` results), which it refuses there. Each test runs the same calls with
the same SDK client direct and through lazyd-shim and compares what every call gave and what
every callback saw: lazyd must never be worse than the direct connection.

Policy (as everywhere): no timing assertions; every wait bounded; processes counted from /proc and
`lazyctl status`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import FileUrl

from tests.conftest import SERVERS, UserEnv, shim_command, start_daemon
from tests.e2e.eras_support import restart_daemon, status_rows

pytestmark = pytest.mark.e2e

DUAL = [sys.executable, str(SERVERS / "dual_era_server.py")]
NEEDLE = "dual_era_server"
STEP_TIMEOUT_S = 90  # a bound on each step, far above what any takes; never an assertion on speed
HANDSHAKE_STYLE = [("sample", {"prompt": "hi"}), ("elicit_form", {}), ("elicit_url", {}), ("roots", {}),
                   ("log_progress", {})]
STATELESS_STYLE = [("ask", {}), ("ask_sample", {"prompt": "hi"}), ("ask_roots", {})]
ALL_CALLS = HANDSHAKE_STYLE + STATELESS_STYLE


@dataclass
class Seen:
    """What one client's callbacks were asked, in order."""

    name: str
    asked: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)

    def kwargs(self) -> dict[str, Any]:
        async def sampling(ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
            self.asked.append("sampling")
            return types.CreateMessageResult(role="assistant", model="m",
                                             content=types.TextContent(type="text", text=f"model of {self.name}"))

        async def elicitation(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            if isinstance(params, types.ElicitRequestURLParams):
                self.asked.append(f"url {params.url}")
                return types.ElicitResult(action="accept")
            self.asked.append("form")
            return types.ElicitResult(action="accept", content={"name": self.name})

        async def roots(ctx: ClientRequestContext) -> types.ListRootsResult:
            self.asked.append("roots")
            return types.ListRootsResult(roots=[types.Root(uri=FileUrl(f"file:///home/{self.name}"))])

        async def logging(params: types.LoggingMessageNotificationParams) -> None:
            self.logs.append(str(params.data))

        return {"sampling_callback": sampling, "elicitation_callback": elicitation, "list_roots_callback": roots,
                "logging_callback": logging, "client_info": types.Implementation(name=self.name, version="1")}


# These tests are about eras, and count one process per era: the registration says it is shareable
# (`--share true`, as LAZYD_SHARE). The server's own declaration is seen only once a start has told,
# and a stateless-era client opens without a request, so a second session opened beside it would
# get a process of its own (docs/configuration.md, "Sharing").
SHARE = {"LAZYD_SHARE": "true"}


def through_lazyd(user: UserEnv, mode: str, seen: Seen, shim_args: tuple[str, ...] = (),
                  env: dict[str, str] | None = None, argv: list[str] = DUAL) -> Client:
    params = StdioServerParameters(command=shim_command(), args=[*shim_args, "--", *argv],
                                   env={**user.env, **SHARE, **(env or {})})
    return Client(params, mode=mode, log_level="debug" if mode != "legacy" else None, **seen.kwargs())


def direct(user: UserEnv, mode: str, seen: Seen, env: dict[str, str] | None = None, argv: list[str] = DUAL) -> Client:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env={**user.env, **(env or {})})
    return Client(params, mode=mode, log_level="debug" if mode != "legacy" else None, **seen.kwargs())


async def outcome(c: Client, tool: str, args: dict[str, Any]) -> str:
    """What one call gave: its text, any progress reported, or the JSON-RPC error."""
    reported: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    try:
        result = await c.call_tool(tool, args, progress_callback=on_progress)
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    block = result.content[0] if result.content else None
    said = block.text if isinstance(block, types.TextContent) else repr(block)
    return f"{'tool error: ' if result.is_error else ''}{said}{f' progress={reported}' if reported else ''}"


async def run_calls(c: Client, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [await outcome(c, tool, args) for tool, args in calls]


async def direct_outcomes(user: UserEnv, mode: str, name: str, calls: list[tuple[str, dict[str, Any]]],
                          argv: list[str] = DUAL) -> tuple[list[str], Seen]:
    seen = Seen(name)
    with trio.fail_after(STEP_TIMEOUT_S):
        async with direct(user, mode, seen, argv=argv) as c:
            return await run_calls(c, calls), seen


def server_count(user: UserEnv) -> int:
    return len(user.server_pids(NEEDLE))


# ---- one client, each era ---------------------------------------------------------------------------


async def test_a_handshake_client_gets_every_call_back_through_lazyd_as_it_does_direct(user_env: UserEnv) -> None:
    expected, seen_direct = await direct_outcomes(user_env, "legacy", "ada", ALL_CALLS)
    # Direct, the handshake-era style works and the stateless-era style is refused by the SDK.
    assert expected[:4] == ["sampled: model of ada", "form: accept ada", "url: accept", "roots: file:///home/ada"]
    assert expected[4] == "logged progress=[1.0, 2.0]"
    assert all(o.startswith("error") for o in expected[5:]), expected
    seen = Seen("ada")
    with trio.fail_after(STEP_TIMEOUT_S):
        async with through_lazyd(user_env, "legacy", seen) as c:
            assert await run_calls(c, ALL_CALLS) == expected
    # The same call-backs, each once; lazyd asks for the roots when the session starts (they are
    # the session's: docs/relay.md), and answers the server's roots/list with them.
    assert sorted(seen.asked) == sorted(seen_direct.asked) and seen.asked[0] == "roots"
    assert seen.logs == seen_direct.logs == ["step one", "step two"]


async def test_a_stateless_client_gets_input_required_rounds_through_lazyd_as_it_does_direct(user_env: UserEnv) -> None:
    for mode in ("2026-07-28", "auto"):
        expected, seen_direct = await direct_outcomes(user_env, mode, "grace", ALL_CALLS)
        assert expected[5:] == ["hello grace", "sampled: model of grace", "roots: file:///home/grace"], expected
        assert "no back-channel" in expected[0]  # the handshake-era style needs a handshake connection
        seen = Seen("grace")
        with trio.fail_after(STEP_TIMEOUT_S):
            async with through_lazyd(user_env, mode, seen) as c:
                assert c.protocol_version == "2026-07-28"
                assert await run_calls(c, ALL_CALLS) == expected, mode
        assert seen.asked == seen_direct.asked == ["form", "sampling", "roots"], mode


# ---- both eras, and several clients sharing ----------------------------------------------------------


async def test_both_eras_at_once_get_two_processes_each_serving_its_clients_as_direct(user_env: UserEnv) -> None:
    legacy_expected, _ = await direct_outcomes(user_env, "legacy", "ada", ALL_CALLS)
    modern_expected, _ = await direct_outcomes(user_env, "2026-07-28", "grace", ALL_CALLS)
    got: dict[str, list[str]] = {}
    legacy_seen, modern_seen = Seen("ada"), Seen("grace")
    with trio.fail_after(STEP_TIMEOUT_S):
        async with through_lazyd(user_env, "legacy", legacy_seen) as legacy, \
                through_lazyd(user_env, "2026-07-28", modern_seen) as modern:

            async def run(key: str, c: Client) -> None:
                got[key] = await run_calls(c, ALL_CALLS)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "legacy", legacy)
                nursery.start_soon(run, "modern", modern)
            assert server_count(user_env) == 2
            eras = sorted(r["era"] for r in status_rows(user_env))
            assert eras == ["handshake", "stateless"]
    assert got == {"legacy": legacy_expected, "modern": modern_expected}


async def test_several_clients_of_each_era_each_get_their_own_call_backs(user_env: UserEnv) -> None:
    names = ("ada", "alan")
    expected = {name: (await direct_outcomes(user_env, "legacy", name, HANDSHAKE_STYLE))[0] for name in names}
    seen = {name: Seen(name) for name in ("ada", "alan", "grace", "barbara")}
    with trio.fail_after(STEP_TIMEOUT_S):
        async with through_lazyd(user_env, "legacy", seen["ada"]) as ada, \
                through_lazyd(user_env, "legacy", seen["alan"]) as alan, \
                through_lazyd(user_env, "2026-07-28", seen["grace"]) as grace, \
                through_lazyd(user_env, "2026-07-28", seen["barbara"]) as barbara:
            # Handshake era: a server-to-client request names no client, so the relay gives it to
            # the one client with a call in flight; the two take turns.
            for (tool, args), want_ada, want_alan in zip(HANDSHAKE_STYLE, expected["ada"], expected["alan"], strict=True):
                assert await outcome(ada, tool, args) == want_ada
                assert await outcome(alan, tool, args) == want_alan
            # Stateless era: each input round belongs to its own request, so they may overlap.
            results: dict[str, list[str]] = {}

            async def run(name: str, c: Client) -> None:
                results[name] = await run_calls(c, STATELESS_STYLE)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "grace", grace)
                nursery.start_soon(run, "barbara", barbara)
            # A process per era, shared within it where roots allow: ada and alan declare different
            # roots, so each has one (docs/relay.md, "Roots are a session's"); grace and barbara's
            # stateless era asks for roots within each request, so they share one.
            assert server_count(user_env) == 3
    for name in ("grace", "barbara"):
        assert results[name] == [f"hello {name}", f"sampled: model of {name}", f"roots: file:///home/{name}"]
    for name in ("ada", "alan"):  # lazyd asks for the roots as the session starts, then the rest comes in order
        assert seen[name].asked == ["roots", "sampling", "form", "url https://example.invalid/sign-in"]


# ---- the bridge: era = "stateless", and a server that speaks only the stateless era -----------------


async def test_era_stateless_serves_bridged_clients_what_it_can_and_refuses_the_rest_with_a_clear_error(
        user_env: UserEnv) -> None:
    seen = {name: Seen(name) for name in ("ada", "alan")}
    got: dict[str, list[str]] = {}
    with trio.fail_after(STEP_TIMEOUT_S):
        async with through_lazyd(user_env, "legacy", seen["ada"], ("--era", "stateless")) as ada, \
                through_lazyd(user_env, "legacy", seen["alan"], ("--era", "stateless")) as alan:

            async def run(name: str, c: Client) -> None:
                got[name] = await run_calls(c, ALL_CALLS)

            async with trio.open_nursery() as nursery:  # bridged rounds belong to their request: overlap is fine
                nursery.start_soon(run, "ada", ada)
                nursery.start_soon(run, "alan", alan)
            assert server_count(user_env) == 1
            (row,) = status_rows(user_env)
            assert (row["era"], row["era_setting"]) == ("stateless", "stateless")
    for name in ("ada", "alan"):
        refused, served = got[name][:5], got[name][5:]
        assert served == [f"hello {name}", f"sampled: model of {name}", f"roots: file:///home/{name}"]
        for text in refused[:4]:
            assert text.startswith("error -32600: Cannot send"), text
            assert 'era = "stateless" is set for it' in text
        assert refused[4] == "logged progress=[1.0, 2.0]"  # logging and progress need no call-back
    # A log line names no request; with both calls in flight each client may see the other's too
    # (as every log line reaches every client of a shared handshake-era process: relay.md).
    assert set(seen["ada"].logs) == set(seen["alan"].logs) == {"step one", "step two"}


async def test_a_stateless_only_server_serves_handshake_clients_through_the_bridge_on_the_one_process(
        user_env: UserEnv) -> None:
    env = {"DUAL_ONLY": "stateless"}
    argv = [*DUAL]
    # Direct, a handshake-era client cannot even begin: the server refuses initialize.
    seen_direct = Seen("ada")
    with trio.fail_after(STEP_TIMEOUT_S), pytest.RaisesGroup(pytest.RaisesGroup(
            pytest.RaisesExc(MCPError, check=lambda e: e.error.code == -32022))):
        async with direct(user_env, "legacy", seen_direct, env=env, argv=argv) as c:
            await c.list_tools()
    seen = {name: Seen(name) for name in ("ada", "grace")}
    with trio.fail_after(STEP_TIMEOUT_S):
        async with through_lazyd(user_env, "legacy", seen["ada"], env=env, argv=argv) as ada:
            assert await run_calls(ada, STATELESS_STYLE) == ["hello ada", "sampled: model of ada", "roots: file:///home/ada"]
            async with through_lazyd(user_env, "2026-07-28", seen["grace"], env=env, argv=argv) as grace:
                assert await outcome(grace, "ask", {}) == "hello grace"
                assert server_count(user_env) == 1  # one process serves both eras
                (row,) = status_rows(user_env)
                assert (row["era"], row["server_eras"]) == ("stateless", "stateless only")


# ---- era = "handshake" ---------------------------------------------------------------------------------


async def test_era_handshake_makes_stateless_clients_fall_back_or_be_refused_and_runs_one_process(user_env: UserEnv) -> None:
    seen = Seen("grace")
    with trio.fail_after(STEP_TIMEOUT_S):
        async with through_lazyd(user_env, "auto", seen, ("--era", "handshake")) as auto:
            assert auto.protocol_version == "2025-11-25"  # discovery refused: it fell back
            assert await outcome(auto, "sample", {"prompt": "hi"}) == "sampled: model of grace"
            async with through_lazyd(user_env, "2026-07-28", Seen("pinned"), ("--era", "handshake")) as pinned:
                with pytest.raises(MCPError) as refused:
                    await pinned.list_tools()
            assert refused.value.error.code == -32022 and 'era = "handshake"' in refused.value.error.message
            assert server_count(user_env) == 1


# ---- cached session starts start nothing -----------------------------------------------------------


async def test_cached_session_starts_of_either_era_leave_every_process_asleep(user_env: UserEnv) -> None:
    for mode in ("auto", "legacy"):
        with trio.fail_after(STEP_TIMEOUT_S):
            async with through_lazyd(user_env, mode, Seen("warm")) as c:
                await c.list_tools()
                await c.list_prompts()
    restart_daemon(user_env, NEEDLE)
    for mode in ("auto", "2026-07-28", "legacy"):
        with trio.fail_after(STEP_TIMEOUT_S):
            async with through_lazyd(user_env, mode, Seen(f"cached-{mode}")) as c:
                await c.list_tools()
                await c.list_prompts()
                # The lifecycle's own state, not merely "no pid yet": nothing was asked to start.
                states = {r["name"]: r["state"] for r in status_rows(user_env)}
                assert set(states.values()) == {"sleeping"}, (mode, states)
    assert server_count(user_env) == 0


async def test_lazyctl_explain_says_why_two_sessions_got_two_processes(user_env: UserEnv) -> None:
    with trio.fail_after(STEP_TIMEOUT_S):
        async with through_lazyd(user_env, "legacy", Seen("ada")) as legacy, \
                through_lazyd(user_env, "2026-07-28", Seen("grace")) as modern:
            await legacy.call_tool("pid", {})
            await modern.call_tool("pid", {})
            names = sorted(r["name"] for r in status_rows(user_env))
            assert len(names) == 2 and names[1] == f"{names[0]}@stateless"
            done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "explain", *names], env=user_env.env,
                                  capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
            assert done.returncode == 0, done.stderr
            assert "same registration" in done.stdout and "locks each connection to the era" in done.stdout, done.stdout
            data = json.loads(subprocess.run(
                [sys.executable, "-m", "lazyd.ctl.main", "explain", "--json", names[0]], env=user_env.env,
                capture_output=True, text=True, timeout=STEP_TIMEOUT_S).stdout)
            lanes = {lane["name"]: lane["era"] for lane in data["eras"]}
            assert lanes == {names[0]: "handshake", names[1]: "stateless"}


# ---- a handshake-only server --------------------------------------------------------------------------

EVERYTHING_CALLS: list[tuple[str, dict[str, Any]]] = [("trigger-sampling-request", {"prompt": "hi", "maxTokens": 10}),
                    ("trigger-elicitation-request", {}),
                    ("trigger-url-elicitation", {"url": "https://example.invalid/sign-in", "message": "Sign in",
                                                 "elicitationId": "sign-in-1"}),
                    ("get-roots-list", {}),
                    ("trigger-long-running-operation", {"duration": 1, "steps": 2})]


async def test_a_handshake_only_server_calls_back_each_client_through_lazyd_as_it_does_direct(user_env: UserEnv) -> None:
    from tests.conftest import everything_command

    argv = everything_command()
    for mode in ("legacy", "auto"):
        if mode != "legacy":
            restart_daemon(user_env, "server-everything")  # a fresh process: it keeps its first roots
        expected, seen_direct = await direct_outcomes(user_env, mode, "ada", EVERYTHING_CALLS, argv=argv)
        assert all(not o.startswith("error") for o in expected), expected
        seen = {name: Seen(name) for name in ("ada", "alan")}
        with trio.fail_after(STEP_TIMEOUT_S):
            async with through_lazyd(user_env, mode, seen["ada"], argv=argv) as ada, \
                    through_lazyd(user_env, mode, seen["alan"], argv=argv) as alan:
                assert ada.protocol_version.startswith("2025")  # an auto client fell back: no stateless era
                assert await run_calls(ada, EVERYTHING_CALLS) == expected, mode
                # server-everything asks for roots once per connection, when it is initialized, and
                # keeps them: alan's roots differ from ada's, so alan gets a process of his own,
                # which is given his (docs/relay.md, "Roots are a session's").
                want = [o.replace("ada", "alan") for o in expected]
                assert await run_calls(alan, EVERYTHING_CALLS) == want, mode
                assert len(user_env.server_pids("server-everything")) == 2
        for name in ("ada", "alan"):  # the same call-backs; roots asked by lazyd as the session starts
            assert sorted(seen[name].asked) == sorted(a.replace("ada", name) for a in seen_direct.asked), mode


async def test_an_eager_start_of_a_dual_era_server_is_the_handshake_eras_process_that_clients_join(user_env: UserEnv) -> None:
    from tests.e2e.supervision_support import server_table, wait_for_row, write_config

    write_config(user_env, server_table("dual", command=DUAL, start="eager"))
    start_daemon(user_env)
    row = wait_for_row(user_env, "dual", lambda r: r["state"] == "running" and r["era"] == "handshake",
                       "the eager start to run in the handshake era")
    params = StdioServerParameters(command=shim_command(), args=["--server", "dual"], env=user_env.env)
    with trio.fail_after(STEP_TIMEOUT_S):
        async with Client(params, mode="legacy", **Seen("ada").kwargs()) as legacy:
            assert await outcome(legacy, "pid", {}) == str(row["pid"])  # joined the running process
            async with Client(params, mode="2026-07-28", **Seen("grace").kwargs()) as modern:
                assert await outcome(modern, "pid", {}) != str(row["pid"])  # the other era's own
                assert sorted(r["name"] for r in status_rows(user_env)) == ["dual", "dual@stateless"]
