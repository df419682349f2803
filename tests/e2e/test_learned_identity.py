"""Identities learned from what real clients do: opencode, Codex and Claude Code through lazyd.

What each client gives a stdio server (seen in /proc/PID/environ of a probe server):

- opencode 1.18.33 (`opencode mcp list` connects every server, lists its tools and exits, with no
  login): `OPENCODE_PID` (its own pid: new at every run), `OPENCODE=1`, `AGENT=1`, your PATH.
- Codex CLI 0.171.0 (`codex exec` starts every server before it asks the model; here the model is a
  loopback HTTP server that answers 400, so it never leaves the machine): its allow-list, the six CA
  bundle variables, the registration's `env_vars`, and its vendor directory first on PATH.
- Claude Code 2.1.332 (`claude mcp list`): a user-scope registration runs in the directory Claude
  was started in, with a new CLAUDE_CODE_SESSION_ID per run.

"Started nothing" is read from lazyd's lifecycle states and /proc (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    EVERYTHING_JS,
    MARKER_VAR,
    SERVERS,
    UserEnv,
    everything_command,
    shim_command,
    start_daemon,
    time_server_command,
    wait_until,
)
from tests.e2e.offline_run import Refuse
from tests.e2e.real_clients_support import (
    CLI_TIMEOUT_S,
    STEP_TIMEOUT_S,
    assert_no_planted_secret,
    cli,
    client_env,
    connected,
    everything_pids,
    lazyctl,
    project,
    status,
    time_pids,
)

pytestmark = pytest.mark.e2e

OPENCODE = SERVERS / "node_modules" / "opencode-linux-x64" / "bin" / "opencode"
# opencode must not update itself, fetch model lists or plugins: a health check needs none of it.
OPENCODE_OFFLINE = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                    "OPENCODE_DISABLE_SHARE": "1"}


def rows_of(user: UserEnv, needle: str) -> list[dict[str, Any]]:
    return [row for row in status(user) if needle in " ".join(row["command"])]


def run_in(user: UserEnv, argv: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=client_env(user, **extra), cwd=cwd, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    return done


# ---- opencode ------------------------------------------------------------------------------------


def opencode_config(user: UserEnv) -> Path:
    # opencode reads $XDG_CONFIG_HOME/opencode/opencode.json: servers under `mcp`, command as an array.
    path = Path(user.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"$schema": "https://opencode.ai/config.json", "mcp": {
        "everything": {"type": "local", "command": [shim_command(), *everything_command()], "enabled": True},
        "time": {"type": "local", "command": [shim_command(), *time_server_command()], "enabled": True},
    }}, indent=2))
    return path


def opencode_list(user: UserEnv) -> str:
    done = run_in(user, [str(OPENCODE), "mcp", "list"], project(user), **OPENCODE_OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("connected") == 2, done.stdout
    return done.stdout


def test_three_opencode_runs_leave_one_process_per_registration_and_the_learned_pid_is_persisted_and_explained(
        user_env: UserEnv) -> None:
    assert OPENCODE.exists(), "opencode is missing: run `npm ci --prefix tests/servers`"
    daemon = start_daemon(user_env)
    opencode_config(user_env)
    outputs = [opencode_list(user_env) for _ in range(3)]
    # Each run gave every server a new OPENCODE_PID. The second taught lazyd it is per-run: one
    # registration per server remains, and the first run's process stopped instead of lingering.
    for needle, pids in (("server-everything", everything_pids), ("mcp-server-time", time_pids)):
        wait_until(lambda: len(rows_of(user_env, needle)) == 1, STEP_TIMEOUT_S, f"one registration of {needle}")
        assert len(pids(user_env)) <= 1
    learned = user_env.state_dir / "learned_env.json"
    assert stat.S_IMODE(learned.stat().st_mode) == 0o600
    data = json.loads(learned.read_text())
    entry = data["per_run"]["clients"]["opencode"]["OPENCODE_PID"]  # names and counts, never a value
    assert set(entry) == {"values", "sessions", "learned_at"} and entry["values"] == entry["sessions"] == 2
    (record,) = [r for r in data["clients"].values() if r["process"] == "opencode"]
    assert set(record) == {"process", "env_names", "dropped", "added", "seen_at"}
    assert "OPENCODE_PID" in record["env_names"] and "OPENCODE_PID" in record["added"]  # it sets it itself
    (row,) = rows_of(user_env, "server-everything")
    explain = lazyctl(user_env, "explain", row["name"]).stdout
    assert "per-run  OPENCODE_PID: learned from 2 values in 2 sessions of opencode" in explain, explain
    # A new daemon knows it from the file (no fourth run: opencode takes seconds to start).
    daemon.stop()
    start_daemon(user_env)
    after = run_in(user_env, [sys.executable, "-m", "lazyd.ctl.main", "explain", "--", *everything_command()],
                   project(user_env), OPENCODE_PID="31337")
    assert "per-run  OPENCODE_PID: learned from 2 values in 2 sessions of opencode" in after.stdout, after.stdout
    assert_no_planted_secret(user_env, *outputs, explain, after.stdout)


# ---- Codex ---------------------------------------------------------------------------------------


@pytest.fixture
def model_endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def codex_config(user: UserEnv, endpoint: str) -> Path:
    everything, time = everything_command(), time_server_command()
    path = Path(user.env["HOME"]) / ".codex" / "config.toml"
    path.parent.mkdir(exist_ok=True)
    # Codex passes servers only its allow-list: the test marker goes through `env_vars`, which a
    # check must honour to land on the identity of Codex's sessions.
    path.write_text(f"""model = "offline"
model_provider = "loopback"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.loopback]
name = "loopback"
base_url = "{endpoint}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.everything]
command = {json.dumps(everything[0])}
args = {json.dumps(everything[1:])}
env_vars = ["{MARKER_VAR}"]

[mcp_servers.time]
command = {json.dumps(time[0])}
args = {json.dumps(time[1:])}
env_vars = ["{MARKER_VAR}"]
""")
    return path


def test_after_wrap_check_for_codex_a_codex_exec_starts_nothing_and_lands_on_the_checked_identity(
        user_env: UserEnv, model_endpoint: str) -> None:
    start_daemon(user_env)
    codex_config(user_env, model_endpoint)
    wrap = lazyctl(user_env, "wrap", "--client", "codex", "--all", "--check")
    assert wrap.stdout.count(": ok, cached") == 2, wrap.stdout
    wait_until(lambda: not everything_pids(user_env) and not time_pids(user_env), STEP_TIMEOUT_S,
               "the checks' processes to stop")
    done = run_in(user_env, [*cli("codex"), "exec", "--skip-git-repo-check", "say hi"], project(user_env))
    assert "offline test" in done.stdout + done.stderr, done.stdout + done.stderr  # it reached the model step
    for needle in ("server-everything", "mcp-server-time"):
        user_env.assert_nothing_started(needle)
        # Codex's own PATH prefix, CA variables and env_vars: the check warmed the identity it uses.
        (row,) = rows_of(user_env, needle)
        assert row["clients"] == 0
    assert_no_planted_secret(user_env, wrap.stdout, done.stdout, done.stderr)


# ---- Claude Code in three directories ------------------------------------------------------------


def test_a_user_scope_claude_registration_starts_nothing_in_three_directories_after_one_check(
        user_env: UserEnv) -> None:
    start_daemon(user_env)
    add = run_in(user_env, [*cli("claude"), "mcp", "add", "-s", "user", "everything", "--", shim_command(),
                            *everything_command()], project(user_env))
    assert add.returncode == 0, add.stderr
    lazyctl(user_env, "check", "--client", "claude", "--", *everything_command())
    wait_until(lambda: not everything_pids(user_env), STEP_TIMEOUT_S, "the check's process to stop")
    for name in ("alpha", "beta", "gamma"):
        directory = user_env.root / name
        directory.mkdir()
        done = run_in(user_env, [*cli("claude"), "mcp", "list"], directory)
        assert done.returncode == 0 and connected(done.stdout, ["everything"]), done.stdout + done.stderr
    user_env.assert_nothing_started("server-everything")
    # Processes stay per identity: each directory is a registration of its own, all asleep.
    assert {row["cwd"] for row in rows_of(user_env, "server-everything")} >= {
        str(user_env.root / n) for n in ("alpha", "beta", "gamma")}
    assert os.path.exists(EVERYTHING_JS)
