"""A session's client is the name its `initialize` gives (`clientInfo.name`), not the name of its
process: what the daemon learns is filed under it, and `lazyctl explain` names the client by it
(docs/configuration.md, "Per-run variables, learned"). Copilot CLI's native binary names its
process `MainThread`, as any program may.

A real client here: the official python SDK, sending `clientInfo.name` "copilot-cli" from this
test's process, whose name is something else; a real daemon, shim and fixture server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from mcp.types import Implementation

from lazyd.host import procfs
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_session, start_daemon

pytestmark = pytest.mark.e2e

FIXTURE = [sys.executable, str(FIXTURE_SERVER)]
NAME = "copilot-cli"
VARIABLE = "LZTEST_RUN_ID"  # a new uuid at each run, as a client's per-run variable is


async def test_what_a_client_teaches_is_filed_under_its_client_info_name_and_explained_by_it(user_env: UserEnv) -> None:
    process = procfs.read_comm(os.getpid())
    assert process and process != NAME
    daemon = start_daemon(user_env)
    try:
        for _ in range(2):
            async with shim_session(user_env, FIXTURE, env={VARIABLE: str(uuid.uuid4())},
                                    client_info=Implementation(name=NAME, version="1.0.102")) as session:
                await session.list_tools()
        data = json.loads((user_env.state_dir / "learned_env.json").read_text())
        assert set(data["per_run"]["clients"]) == {NAME}, data["per_run"]
        assert VARIABLE in data["per_run"]["clients"][NAME]
        assert data["clients"][NAME]["process"] == process and process not in data["clients"]
        explain = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "explain", "--", *FIXTURE],
                                 env={**user_env.env, VARIABLE: str(uuid.uuid4())}, capture_output=True, text=True,
                                 timeout=60)
        assert f"per-run  {VARIABLE}: learned from 2 values in 2 sessions of {NAME}" in explain.stdout, explain.stdout
    finally:
        daemon.stop()
