"""A server started only for listings stops `check_linger` after its last session; a used one
lingers its full `linger` (docs/supervision.md). The rule itself, with every case and exact
times, is tests/unit/test_lifecycle_check_linger.py; here the daemon's shell obeys it with a real
daemon, real shims and the fixture server, with `--check-linger 1s` to keep the test short.
"""

from __future__ import annotations

import sys

import pytest
import trio

from tests.conftest import FIXTURE_SERVER, UserEnv, shim_session, start_daemon
from tests.e2e.supervision_support import DEADLINE_S, alive, await_for, daemon_log, status_rows, tool_text

pytestmark = pytest.mark.e2e

SERVER = [sys.executable, str(FIXTURE_SERVER)]
# One process for both sessions, whatever `share = "auto"` thinks of the fixture's tools.
OPTS = ("--check-linger", "1s", "--share", "true")
USED_FOR_S = 3.0  # a used server must still be up this long after its session, 3x the check linger


def the_row(user: UserEnv) -> dict[str, object]:
    (row,) = status_rows(user).values()
    return row


async def test_a_listing_only_start_is_gone_check_linger_after_its_session_and_a_used_one_lingers(
    user_env: UserEnv,
) -> None:
    start_daemon(user_env)
    with trio.fail_after(DEADLINE_S * 2):
        # A health check: handshake and tools/list with nothing cached, and gone.
        async with shim_session(user_env, SERVER, shim_args=OPTS) as session:
            assert {tool.name for tool in (await session.list_tools()).tools} >= {"echo", "pid"}
            (listed,) = user_env.server_pids(str(FIXTURE_SERVER))
            row = the_row(user_env)
            assert (row["state"], row["linger_rule"], row["linger_applies_s"]) == ("running", "check_linger", 1.0)
        await await_for(lambda: not alive(listed), "the listing-only server to stop after its check linger")
        await await_for(lambda: the_row(user_env)["state"] == "sleeping", "the sleeping state")
        assert "stopping: no client for 1s (started for listings only)" in daemon_log(user_env)

        # A session that calls a tool: the full linger (10 minutes), not the check linger.
        async with shim_session(user_env, SERVER, shim_args=OPTS) as session:
            used = int(tool_text(await session.call_tool("pid", {})))
            assert the_row(user_env)["linger_rule"] == "linger"
        await trio.sleep(USED_FOR_S)  # the subject: still up well past the check linger
        assert alive(used)
        row = the_row(user_env)
        assert (row["state"], row["pid"], row["linger_rule"], row["linger_applies_s"]) == ("running", used, "linger", 600.0)
