"""What the hub says about a server: the description its user wrote in config.toml comes first.

A real daemon with two named fixture servers, one described by its user and one not, their caches
warmed by `check`; a real SDK client on `lazyd-shim --hub`. Nothing is started to answer.
"""

from __future__ import annotations

import pytest
import trio

from tests.conftest import UserEnv, start_daemon
from tests.e2e.hub_support import hub_session, texts
from tests.e2e.supervision_support import control, server_table, status_rows, write_config

pytestmark = pytest.mark.e2e

STEP_S = 30.0
NOTES = "The team notebook: meeting minutes and decisions; use it before answering questions about past plans."
INSTRUCTIONS = {"FIXTURE_INSTRUCTIONS": "A fixture that explains itself."}


def config(description: str = NOTES) -> str:
    return (server_table("notes", env=INSTRUCTIONS, description=description)
            + server_table("plain", env=INSTRUCTIONS))


async def test_list_servers_and_search_tools_show_the_users_description_ahead_of_the_servers_instructions(
    user_env: UserEnv,
) -> None:
    write_config(user_env, config())
    start_daemon(user_env)
    for name in ("notes", "plain"):
        control(user_env, "check", name=name)
    with trio.fail_after(STEP_S):
        async with hub_session(user_env) as session:
            listing = texts(await session.call_tool("list_servers", {}))[0]
            # "minutes" is in no tool's name or description: only the user's words about "notes".
            found = texts(await session.call_tool("search_tools", {"query": "minutes"}))[0]
    assert f"- notes [sleeping] 10 tools: {NOTES}" in listing.splitlines()
    assert "- plain [sleeping] 10 tools: A fixture that explains itself." in listing.splitlines()
    assert "A fixture that explains itself." not in listing.splitlines()[1]  # notes has the same instructions
    lines = found.splitlines()
    assert lines[0].startswith("10 tools for 'minutes'") and all("server=notes" in l for l in lines[1:11])
    assert lines[11:13] == ["About these servers:", f"- notes: {NOTES}"]
    assert {row["state"] for row in status_rows(user_env).values()} == {"sleeping"}

    # A reload that only changes the words applies at once and restarts nothing.
    write_config(user_env, config("Meeting notes only."))
    report = control(user_env, "reload")
    assert report["changed"] == [] and sorted(report["unchanged"]) == ["notes", "plain"]
    with trio.fail_after(STEP_S):
        async with hub_session(user_env) as session:
            listing = texts(await session.call_tool("list_servers", {}))[0]
    assert "- notes [sleeping] 10 tools: Meeting notes only." in listing.splitlines()
