"""GitHub Copilot CLI, Kilo CLI, Continue's cn and Amp, wrapped by `lazyctl wrap` at their default
files and run offline: each run's session reaches the daemon, three runs share one server process,
and unwrap gives the file's bytes back.

Each client runs in a private network namespace with only loopback (offline_support.py), the way
each can run without an account or a model:

- `copilot -p` with COPILOT_OFFLINE=true and COPILOT_PROVIDER_BASE_URL on a loopback endpoint that
  answers 400 (refused at once; a refused connection is retried for half a minute). Before it asks
  the model, Copilot starts its MCP servers and sends their tools along: the endpoint's log shows
  them.
- `kilo mcp list` starts every local server and prints "connected" per server.
- `cn -p` with a model at a loopback port where nothing listens: cn loads its MCP servers, lists
  their tools ("Tools prepared" in ~/.continue/logs/cn.log), then fails to reach the model.
- `amp mcp doctor` with a dummy AMP_API_KEY and a loopback AMP_URL connects each server and prints
  its tools. Amp is also given a registration through its own `amp mcp add NAME -- lazyd-shim
  CMD ARGS`, and the one it stores when given a second `--` (Amp keeps what follows the last `--`,
  so the shim is dropped): wrap-status says so.

The server is mcp-server-time, which lazyd shares: sequential runs reuse its lingering process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, UserEnv, start_daemon, time_server_command
from tests.e2e.offline_support import MODEL_URL, REFUSING_URL, offline
from tests.unit.fixtures_wrap.helpers import loads
from tests.e2e.real_clients_support import cli, lazyctl, run, status, time_pids

pytestmark = pytest.mark.e2e

RUNS = 3
TOOLS = ("get_current_time", "convert_time")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def handed_off(user: UserEnv) -> int:
    """Sessions the daemon took over from a shim (one line each in its log)."""
    return (user.state_dir / "lazyd.log").read_text(errors="replace").count("handed off the client's")


def time_registration(**extra: Any) -> dict[str, Any]:
    command = time_server_command()
    return {**extra, "command": command[0], "args": command[1:]}


def write_config(path: Path, text: str) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path.read_bytes()


def wrap(user: UserEnv, client: str) -> None:
    out = lazyctl(user, "wrap", "--client", client, "--all", "--env", "LAZYD_CHECK_LINGER=10m").stdout
    assert "wrapped" in out and "time" in out, out


def assert_one_process_under_the_daemon(user: UserEnv, daemon: Daemon, sessions: int) -> None:
    """Every run so far was a session of the daemon, and at most one server process lives, the
    daemon's child. (At most: when the daemon learns a client's per-run variable at its second run,
    it stops the process of the first run's identity and answers from that identity's cache.)"""
    assert handed_off(user) == sessions
    pids = time_pids(user)
    assert len(pids) <= 1 and all(parent(pid) == daemon.proc.pid for pid in pids), pids
    if sessions >= RUNS:
        assert len(status(user)) == 1  # one registration, one server


def test_copilot_cli_wrapped_at_its_default_file_runs_its_server_under_the_daemon(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    config = Path(user_env.env["HOME"]) / ".copilot" / "mcp-config.json"
    registration = {"mcpServers": {"time": time_registration(type="local", tools=["*"])}}
    original = write_config(config, json.dumps(registration, indent=2) + "\n")
    wrap(user_env, "copilot")
    model_log = user_env.root / "model.log"
    for number in range(1, RUNS + 1):
        done = run(user_env, offline([*cli("copilot"), "-p", "What time is it?", "--allow-all-tools",
                                      "--disable-client-telemetry", "--no-auto-update"], model_log),
                   COPILOT_OFFLINE="true", COPILOT_PROVIDER_BASE_URL=MODEL_URL, COPILOT_MODEL="gpt-4o")  # fmt: skip
        # It exits 1, having told the model's refusal; what it sent the model is the proof.
        assert "offline test endpoint" in done.stdout + done.stderr, done.stdout + done.stderr
        asked = [line for line in model_log.read_text().splitlines() if "chat/completions" in line]
        # Copilot asked its model with the server's tools, listed through the shim and the daemon.
        assert len(asked) == number and all(tool in asked[-1] for tool in TOOLS), asked[-1][:2000]
        assert_one_process_under_the_daemon(user_env, daemon, number)
    lazyctl(user_env, "unwrap", "--client", "copilot", "--all")
    assert config.read_bytes() == original


def test_kilo_wrapped_at_its_default_file_runs_its_server_under_the_daemon(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    config = Path(user_env.env["XDG_CONFIG_HOME"]) / "kilo" / "kilo.jsonc"
    registration = {"$schema": "https://app.kilo.ai/config.json", "mcp": {"time": {
        "type": "local", "command": time_server_command(), "environment": {"TZ_HINT": "kept"}}}}
    original = write_config(config, "// Kilo's global config\n" + json.dumps(registration, indent=2) + "\n")
    wrap(user_env, "kilo")
    for number in range(1, RUNS + 1):
        done = run(user_env, offline([*cli("kilo"), "mcp", "list"]))
        out = ANSI.sub("", done.stdout + done.stderr)
        assert done.returncode == 0 and re.search(r"time\s+connected", out), out
        assert_one_process_under_the_daemon(user_env, daemon, number)
    lazyctl(user_env, "unwrap", "--client", "kilo", "--all")
    # Kilo's first run adds `"permission": {"bash": "allow"}` to its config (once): the
    # registrations are back as they were, and on the file as Kilo left it, wrap then unwrap
    # changes no byte.
    assert loads(config.read_text(), "kilo")["mcp"] == loads(original.decode(), "kilo")["mcp"]  # type: ignore[index]
    as_kilo_left_it = config.read_bytes()
    wrap(user_env, "kilo")
    assert config.read_bytes() != as_kilo_left_it
    lazyctl(user_env, "unwrap", "--client", "kilo", "--all")
    assert config.read_bytes() == as_kilo_left_it


CONTINUE_CONFIG = """\
# cn's ~/.continue/config.yaml
name: Offline Assistant
version: 1.0.0
schema: v1
models:
  - name: nowhere
    provider: openai
    model: gpt-4o
    apiBase: {url}
    apiKey: dummy   # nothing listens there
mcpServers:
  - name: time
    command: {command}
    args:
      - --local-timezone
      - 'UTC'
"""


def test_continue_cn_wrapped_at_its_default_file_runs_its_server_under_the_daemon(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    home = Path(user_env.env["HOME"])
    config = home / ".continue" / "config.yaml"
    original = write_config(config, CONTINUE_CONFIG.format(url=REFUSING_URL, command=time_server_command()[0]))
    wrap(user_env, "continue")
    assert "lazyd-shim" in config.read_text().split("mcpServers:")[1]
    log = home / ".continue" / "logs" / "cn.log"
    for number in range(1, RUNS + 1):
        run(user_env, offline([*cli("cn"), "-p", "What time is it?", "--verbose"]))  # fails at the model: no model here
        prepared = [line for line in log.read_text().splitlines() if "Tools prepared" in line]
        assert len(prepared) == number and all(tool in prepared[-1] for tool in TOOLS), prepared
        assert_one_process_under_the_daemon(user_env, daemon, number)
    lazyctl(user_env, "unwrap", "--client", "continue", "--all")
    assert config.read_bytes() == original


def amp(user: UserEnv, *words: str) -> str:
    done = run(user, offline([*cli("amp"), *words]), AMP_API_KEY="dummy", AMP_URL=REFUSING_URL.rsplit("/", 1)[0])
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def status_rows(user: UserEnv, *words: str) -> dict[str, dict[str, Any]]:
    rows = json.loads(lazyctl(user, "wrap-status", "--client", "amp", "--json", *words).stdout)["servers"]
    return {row["server"]: row for row in rows}


def test_amp_wrapped_at_its_default_file_runs_its_server_under_the_daemon(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    settings = Path(user_env.env["XDG_CONFIG_HOME"]) / "amp" / "settings.json"
    text = json.dumps({"amp.mcpServers": {"time": time_registration()}}, indent=2)
    original = write_config(settings, "{\n  // Amp's settings\n  \"amp.dangerouslyAllowAll\": false," + text[1:] + "\n")
    wrap(user_env, "amp")
    for number in range(1, RUNS + 1):
        out = amp(user_env, "mcp", "doctor")
        assert "time (user settings): connected (2 tools" in out, out
        assert_one_process_under_the_daemon(user_env, daemon, number)

    # Registering through Amp's own `mcp add`, in a second settings file.
    other = user_env.root / "project" / "other-settings.json"
    amp(user_env, "--settings-file", str(other), "mcp", "add", "clock", "--", "lazyd-shim", *time_server_command())
    assert json.loads(other.read_text())["amp.mcpServers"]["clock"]["command"] == "lazyd-shim"
    out = amp(user_env, "--settings-file", str(other), "mcp", "doctor")
    assert "clock (user settings): connected" in out, out
    assert_one_process_under_the_daemon(user_env, daemon, RUNS + 1)  # the same server, the same process
    # With the shim's `--`, Amp keeps only what follows it: the server would run directly.
    amp(user_env, "--settings-file", str(other), "mcp", "add", "dropped", "--", "lazyd-shim", "--", *time_server_command())
    rows = status_rows(user_env, "--file", str(other))
    assert rows["clock"]["wrapped"] and not rows["clock"]["without_shim"]
    assert rows["dropped"]["without_shim"] and not rows["dropped"]["wrapped"]
    assert "registered without lazyd-shim, though Amp's time" in rows["dropped"]["note"]

    lazyctl(user_env, "unwrap", "--client", "amp", "--all")
    assert settings.read_bytes() == original
