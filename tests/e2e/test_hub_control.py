"""The hub's control tools (list_servers, server_status, wake_server, sleep_server,
restart_server) under the tool policy, end to end: the official SDK client on `lazyd-shim --hub`,
a real daemon, the fixture server.

They are tools of the server `lazyd` to the policy. With no rule, the ones that start or stop a
server ask the user (an elicitation from the hub itself) and the ones that only read run; a
rule decides otherwise, and `deny` hides the tool and refuses a call by name.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from mcp import types

from tests.conftest import FIXTURE_SERVER, UserEnv, start_daemon
from tests.e2e.hub_support import hub_session, texts
from tests.e2e.supervision_support import status_rows, wait_for_row, write_config

pytestmark = pytest.mark.e2e


def config(rules: str = "") -> str:
    text = (f"[servers.fixture]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(FIXTURE_SERVER))}]\n"
            'memory_max = "1GiB"\n')
    return text + (f"\n[policy]\nrules = {{ {rules} }}\n" if rules else "")


def answering(answers: list[str], questions: list[str]) -> Any:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action=answers.pop(0))  # type: ignore[arg-type]
    return elicit


async def test_restart_asks_by_default_and_runs_only_when_the_user_accepts(user_env: UserEnv) -> None:
    write_config(user_env, config())
    start_daemon(user_env)
    questions: list[str] = []
    async with hub_session(user_env, elicitation_callback=answering(["accept", "accept", "decline"], questions)) as hub:
        woken = await hub.call_tool("wake_server", {"server": "fixture"})
        assert not woken.is_error, texts(woken)
        first = status_rows(user_env)["fixture"]["pid"]
        restarted = await hub.call_tool("restart_server", {"server": "fixture"})
        second = status_rows(user_env)["fixture"]["pid"]
        assert not restarted.is_error and f"running, pid {second}" in texts(restarted)[0] and second != first
        declined = await hub.call_tool("restart_server", {"server": "fixture"})
        assert declined.is_error and "declined" in texts(declined)[0]
        assert status_rows(user_env)["fixture"]["pid"] == second
        status = texts(await hub.call_tool("server_status", {"server": "fixture"}))[0]
    assert len(questions) == 3  # server_status asked nothing
    assert 'Allow the model to restart the MCP server "fixture" through lazyd (restart_server)?' in questions[1]
    assert '"lazyd.restart_server" = "allow"' in questions[1]
    assert status.startswith(f"fixture: running, pid {second} (1 processes)")
    assert "PSS of memory_max 1 GiB" in status and "last error: none" in status
    log = (user_env.state_dir / "lazyd.log").read_text()
    assert "policy: lazyd.restart_server (fixture): asked by rule" in log and "answer decline" in log


async def test_a_client_that_cannot_be_asked_is_refused_the_asking_tools(user_env: UserEnv) -> None:
    write_config(user_env, config())
    start_daemon(user_env)
    async with hub_session(user_env) as hub:
        refused = await hub.call_tool("wake_server", {"server": "fixture"})
        listing = await hub.call_tool("list_servers", {})
    assert refused.is_error and "does not support MCP elicitation" in texts(refused)[0]
    assert not listing.is_error
    assert status_rows(user_env)["fixture"]["state"] == "sleeping"


async def test_an_allow_rule_runs_control_tools_without_asking(user_env: UserEnv) -> None:
    write_config(user_env, config('"lazyd.*" = "allow"'))
    start_daemon(user_env)
    async with hub_session(user_env) as hub:
        assert not (await hub.call_tool("wake_server", {"server": "fixture"})).is_error
        restarted = await hub.call_tool("restart_server", {"server": "fixture"})
        assert not restarted.is_error, texts(restarted)
    wait_for_row(user_env, "fixture", lambda r: r["state"] == "running", "the fixture to run")


async def test_deny_hides_the_control_tool_and_refuses_a_call_by_name(user_env: UserEnv) -> None:
    write_config(user_env, config('"lazyd.restart_server" = "deny", "lazyd.server_status" = "deny"'))
    start_daemon(user_env)
    questions: list[str] = []
    async with hub_session(user_env, elicitation_callback=answering(["accept"], questions)) as hub:
        names = [tool.name for tool in (await hub.list_tools()).tools]
        refused = await hub.call_tool("restart_server", {"server": "fixture"})
        status = await hub.call_tool("server_status", {"server": "fixture"})
    assert "restart_server" not in names and "server_status" not in names and "wake_server" in names
    assert refused.is_error and texts(refused)[0] == (
        'lazyd policy: the tool "restart_server" of server "lazyd" is denied by rule "lazyd.restart_server" = "deny".')
    assert status.is_error and "denied" in texts(status)[0]
    assert questions == [] and status_rows(user_env)["fixture"]["state"] == "sleeping"


async def test_a_deny_all_policy_leaves_the_hub_only_its_tool_finding_tools(user_env: UserEnv) -> None:
    write_config(user_env, config('"lazyd.*" = "deny"'))
    start_daemon(user_env)
    async with hub_session(user_env) as hub:
        names = sorted(tool.name for tool in (await hub.list_tools()).tools)
        listing = await hub.call_tool("list_servers", {})
    assert names == ["call_tool", "get_tool_schema", "search_tools"]
    assert listing.is_error and 'rule "lazyd.*" = "deny"' in texts(listing)[0]
