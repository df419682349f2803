"""opencode through `lazyctl wrap --client opencode`: the wrapped config runs, and the autostarted
daemon outlives opencode's kill of its servers' process tree.

`opencode mcp list` (opencode 1.18.33, tests/servers/node_modules/opencode-linux-x64) starts every
local server of its config, lists its tools, prints "connected" per server and then kills each
server's process group and every process below it (seen with strace: `kill(-pid)`, then
`kill(pid)` for each descendant). It needs no login and runs offline. Before the daemon was
detached from the shim's tree, every run killed the autostarted daemon (`SIGTERM received` in
lazyd.log) and a new one was started by the next run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_SERVER, SERVERS, UserEnv

pytestmark = pytest.mark.e2e

OPENCODE = SERVERS / "node_modules" / "opencode-linux-x64" / "bin" / "opencode"
CLI_TIMEOUT_S = 120.0  # one `mcp list` takes seconds; the bound is reached only when broken
RUNS = 3


def opencode_env(user: UserEnv) -> dict[str, str]:
    # No update check, no model list from the network: `mcp list` needs neither.
    return {**user.env, "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}


def config_file(user: UserEnv) -> Path:
    return Path(user.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"


def lazyctl(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=opencode_env(user), cwd=user.root,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def mcp_list(user: UserEnv) -> str:
    project = user.root / "project"
    project.mkdir(exist_ok=True)
    done = subprocess.run([str(OPENCODE), "mcp", "list"], env=opencode_env(user), cwd=project, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_three_opencode_runs_through_the_wrapped_config_keep_one_daemon_and_its_servers(user_env: UserEnv) -> None:
    assert OPENCODE.exists(), "opencode is missing: run `npm ci --prefix tests/servers`"
    path = config_file(user_env)
    path.parent.mkdir(parents=True)
    original = json.dumps({"$schema": "https://opencode.ai/config.json", "mcp": {
        "fixture": {"type": "local", "command": [sys.executable, str(FIXTURE_SERVER)],
                    "environment": {"FIXTURE_INSTRUCTIONS": "through lazyd"}}}}, indent=2) + "\n"
    path.write_text(original)
    # A long check linger: on a loaded machine three runs can take longer than the default 30 s
    # a listing-only server lingers, and whether the servers survive is the question here.
    lazyctl(user_env, "wrap", "--client", "opencode", "--all", "--env", "LAZYD_CHECK_LINGER=10m")
    wrapped = json.loads(path.read_text())["mcp"]["fixture"]
    assert wrapped["command"][1:] == [sys.executable, str(FIXTURE_SERVER)]
    assert wrapped["environment"]["LAZYD_CHECK_LINGER"] == "10m"

    daemons: list[list[int]] = []
    for run in range(RUNS):
        output = mcp_list(user_env)
        assert "fixture" in output and "connected" in output, output
        daemons.append(user_env.daemon_pids())
        if run == 0:
            # opencode killed the shim's group and tree as it finished: the server is still up, and
            # `mcp list` only lists, so it is one only listings came for.
            assert user_env.server_pids(str(FIXTURE_SERVER))
            rows = json.loads(lazyctl(user_env, "status", "--json").stdout)["servers"]
            assert [(row["linger_rule"], row["linger_applies_s"]) for row in rows] == [("check_linger", 600.0)]
    # One daemon all along. Later runs may be served from the cache, or lazyd may stop a process it
    # no longer needs (by its ladder: stdin closed); none of its servers was killed by opencode.
    assert len(daemons[0]) == 1 and daemons == [daemons[0]] * RUNS
    log = (user_env.state_dir / "lazyd.log").read_text()
    assert "SIGTERM received" not in log and log.count("listening on") == 1
    assert "killed by SIGTERM" not in log

    lazyctl(user_env, "unwrap", "--client", "opencode", "--all")
    assert path.read_text() == original
