"""The real client CLIs through lazyd: one shared process, session starts answered from cache.

`claude mcp list` (Claude Code, @anthropic-ai/claude-code) and `gemini mcp list` (Gemini CLI,
@google/gemini-cli), both pinned in tests/servers/package.json, health-check every registered
server without a login: each starts every server, does the handshake and lists tools, and prints
"Connected" per server. Run with an isolated HOME (the fixture's), they are real clients with
their real environments: Claude Code adds a new CLAUDE_CODE_SESSION_ID per run, Gemini CLI strips
tokens and CA bundles. "Started no process" is read from /proc (the test marker every process
inherits), "a child of the daemon" from the server's parent pid.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    UserEnv,
    everything_command,
    shim_command,
    start_daemon,
    time_server_command,
    wait_until,
)
from tests.e2e.real_clients_support import (
    PLANTED,
    STEP_TIMEOUT_S,
    assert_no_planted_secret,
    cli,
    connected,
    everything_pids,
    lazyctl,
    project,
    run,
    status,
    time_pids,
)

pytestmark = pytest.mark.e2e


def claude_list(user: UserEnv) -> str:
    done = run(user, [*cli("claude"), "mcp", "list"])
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def gemini_list(user: UserEnv) -> str:
    done = run(user, [*cli("gemini"), "mcp", "list"])
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def trust_gemini_folder(user: UserEnv) -> None:
    gemini = Path(user.env["HOME"]) / ".gemini"
    gemini.mkdir(exist_ok=True)  # settings.json goes here too
    (gemini / "trustedFolders.json").write_text(json.dumps({str(project(user)): "TRUST_FOLDER"}))


def assert_handed_off(user: UserEnv, shim_log: Path, runs: int) -> None:
    """Every one of the client's `runs` sessions took the default path: the shim handed the
    client's stdio to the daemon (pipes or socketpairs, as the client made them). Read from the
    daemon's log, which says so for each shim pid: the shim's own "handed off" line can be missing,
    since the daemon answers the client itself and a quick client stops the shim (SIGTERM ends it
    at once) before the shim has logged its welcome."""
    text = shim_log.read_text()
    shims = re.findall(r"lazyd-shim\[(\d+)\] \S+ start:", text)
    assert len(shims) == runs and "no hand-off" not in text, text
    log = (user.state_dir / "lazyd.log").read_text(errors="replace")
    missing = [pid for pid in shims if f"shim pid {pid} handed off the client's " not in log]
    assert not missing, (missing, log)


# ---- Claude Code ---------------------------------------------------------------------------------


def test_three_claude_runs_share_one_server_process_and_a_run_after_sleep_starts_nothing(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    shim_log = user_env.root / "shim.log"
    add = run(user_env, [*cli("claude"), "mcp", "add", "everything", "--", shim_command(), "--log-file", str(shim_log),
                         *everything_command()])
    assert add.returncode == 0, add.stderr
    outputs = [claude_list(user_env) for _ in range(3)]
    assert all(connected(out, ["everything"]) for out in outputs), outputs
    assert_handed_off(user_env, shim_log, 3)
    (pid,) = everything_pids(user_env)  # one process in total, for three runs with three session ids
    assert parent(pid) == daemon.proc.pid
    (row,) = status(user_env)
    lazyctl(user_env, "sleep", row["name"])
    wait_until(lambda: not everything_pids(user_env), STEP_TIMEOUT_S, "the server to stop")
    after = claude_list(user_env)
    assert connected(after, ["everything"])
    user_env.assert_nothing_started("server-everything")
    explain = lazyctl(user_env, "explain", row["name"]).stdout
    # The daemon learned Claude Code's handshake from those sessions: a check as Claude uses it.
    check = json.loads(lazyctl(user_env, "check", "--client", "claude", "--json", row["name"]).stdout)
    assert check["handshake"] == "learned from a claude-code session" and check["requested_version"] == "2025-11-25"
    assert_no_planted_secret(user_env, *outputs, after, explain, json.dumps(check))


def wrap_check_and_list(user: UserEnv, client: str, config: Path, servers: dict[str, Any],
                        listing: Any) -> tuple[bytes, str]:
    """Direct registrations of server-everything (with a declared token) and mcp-server-time in
    the client's config; `lazyctl wrap --client X --all --check`; the client's `mcp list`. Returns
    the pre-wrap bytes and the listing output, after checking every output for the token."""
    config.write_text(json.dumps({"mcpServers": servers}, indent=2) + "\n")
    original = config.read_bytes()
    # The shell has GITHUB_TOKEN and SSL_CERT_FILE (client_env): Claude Code passes them on, Gemini
    # CLI does not; the check must land on the identity of the client's sessions either way.
    wrap = lazyctl(user, "wrap", "--client", client, "--all", "--check")
    assert wrap.stdout.count(": ok, cached") == 2, wrap.stdout
    wait_until(lambda: not everything_pids(user) and not time_pids(user), STEP_TIMEOUT_S,
               "the checks' processes to stop")
    out = listing(user)
    assert connected(out, list(servers)), out
    assert_no_planted_secret(user, wrap.stdout, wrap.stderr, out, lazyctl(user, "status").stdout)
    return original, out


def direct_registrations(gemini: bool = False) -> dict[str, Any]:
    kind = {} if gemini else {"type": "stdio"}
    return {"everything": {**kind, "command": everything_command()[0], "args": everything_command()[1:],
                           "env": {"API_TOKEN": PLANTED}},
            "time": {**kind, "command": time_server_command()[0], "args": time_server_command()[1:]}}


def test_claude_registrations_wrapped_and_checked_are_answered_from_cache_and_unwrap_restores_the_bytes(
        user_env: UserEnv) -> None:
    start_daemon(user_env)
    config = Path(user_env.env["HOME"]) / ".claude.json"
    original, _ = wrap_check_and_list(user_env, "claude", config, direct_registrations(), claude_list)
    user_env.assert_nothing_started("server-everything")  # answered from the check's cache
    lazyctl(user_env, "unwrap", "--client", "claude", "--all")
    # Claude Code rewrote the file for its own bookkeeping during `mcp list`: the registrations
    # are back as they were, and on the file as Claude left it, wrap then unwrap changes no byte.
    assert json.loads(config.read_bytes())["mcpServers"] == json.loads(original)["mcpServers"]
    as_claude_left_it = config.read_bytes()
    lazyctl(user_env, "wrap", "--client", "claude", "--all")
    assert config.read_bytes() != as_claude_left_it
    lazyctl(user_env, "unwrap", "--client", "claude", "--all")
    assert config.read_bytes() == as_claude_left_it


def test_a_checked_stateless_era_server_starts_nothing_for_a_claude_session(user_env: UserEnv) -> None:
    start_daemon(user_env)
    config = Path(user_env.env["HOME"]) / ".claude.json"
    wrap_check_and_list(user_env, "claude", config, direct_registrations(), claude_list)
    user_env.assert_nothing_started("mcp-server-time")


# ---- Gemini CLI ----------------------------------------------------------------------------------


def gemini_settings(user: UserEnv, servers: dict[str, Any]) -> Path:
    path = Path(user.env["HOME"]) / ".gemini" / "settings.json"
    path.write_text(json.dumps({"mcpServers": servers}, indent=2) + "\n")
    return path


def test_three_gemini_runs_share_one_server_process_and_a_run_after_sleep_starts_nothing(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    trust_gemini_folder(user_env)
    shim_log = user_env.root / "shim.log"
    gemini_settings(user_env, {"everything": {"command": shim_command(),
                                              "args": ["--log-file", str(shim_log), *everything_command()]}})
    outputs = [gemini_list(user_env) for _ in range(3)]
    assert all(connected(out, ["everything"]) for out in outputs), outputs
    assert_handed_off(user_env, shim_log, 3)
    (pid,) = everything_pids(user_env)
    assert parent(pid) == daemon.proc.pid
    (row,) = status(user_env)
    lazyctl(user_env, "sleep", row["name"])
    wait_until(lambda: not everything_pids(user_env), STEP_TIMEOUT_S, "the server to stop")
    after = gemini_list(user_env)
    assert connected(after, ["everything"])
    user_env.assert_nothing_started("server-everything")
    assert_no_planted_secret(user_env, *outputs, after)


def test_gemini_registrations_wrapped_and_checked_are_answered_from_cache_and_unwrap_restores_the_bytes(
        user_env: UserEnv) -> None:
    start_daemon(user_env)
    trust_gemini_folder(user_env)
    config = Path(user_env.env["HOME"]) / ".gemini" / "settings.json"
    original, _ = wrap_check_and_list(user_env, "gemini", config, direct_registrations(gemini=True), gemini_list)
    user_env.assert_nothing_started("server-everything")
    lazyctl(user_env, "unwrap", "--client", "gemini", "--all")
    assert config.read_bytes() == original


def test_a_checked_dual_era_server_starts_nothing_for_a_gemini_session(user_env: UserEnv) -> None:
    start_daemon(user_env)
    trust_gemini_folder(user_env)
    config = Path(user_env.env["HOME"]) / ".gemini" / "settings.json"
    wrap_check_and_list(user_env, "gemini", config, direct_registrations(gemini=True), gemini_list)
    user_env.assert_nothing_started("mcp-server-time")


# ---- a Codex-like environment ----------------------------------------------------------------------


def test_a_shim_without_xdg_runtime_dir_reaches_the_daemon_the_shell_started(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    tmp = user_env.root / "tmp"
    tmp.mkdir()
    # What Codex passes a stdio server: a handful of variables, no XDG_RUNTIME_DIR.
    codex_env: dict[str, str] = {k: user_env.env[k] for k in ("HOME", "PATH", "LANG") if k in user_env.env}
    codex_env.update(TMPDIR=str(tmp), USER="u", SHELL="/bin/sh", LZTEST_MARKER_ID=user_env.marker,
                     LAZYD_VERBOSE="1")
    hello = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",' \
            b'"capabilities":{},"clientInfo":{"name":"codex-mcp-client","version":"0"}}}\n'
    shim = subprocess.Popen([shim_command(), *everything_command()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=codex_env)
    assert shim.stdin is not None and shim.stdout is not None
    shim.stdin.write(hello)
    shim.stdin.flush()
    answer = shim.stdout.readline()  # the client keeps stdin open until it has its answer
    shim.stdin.close()
    shim.wait(timeout=STEP_TIMEOUT_S)
    assert shim.stderr is not None
    err = shim.stderr.read()
    assert b'"result"' in answer, err
    assert f"daemon pid {daemon.proc.pid}".encode() in err, err
    assert len(user_env.daemon_pids()) == 1  # no second daemon was started
    # lazyctl run in that environment computes the other path, and says where the daemon is.
    ctl = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "status"], env=codex_env, capture_output=True,
                         text=True, timeout=STEP_TIMEOUT_S)
    assert ctl.returncode == 3 and f"lazyd pid {daemon.proc.pid} listens on {user_env.socket}" in ctl.stderr, ctl.stderr


def test_status_names_the_users_other_daemon(user_env: UserEnv) -> None:
    first = start_daemon(user_env)
    other_run = user_env.root / "run2"
    other_run.mkdir(mode=0o700)
    second = start_daemon(UserEnv({**user_env.env, "XDG_RUNTIME_DIR": str(other_run)}, user_env.root, user_env.marker))
    done = lazyctl(user_env, "status")
    assert f"another lazyd of yours runs (pid {second.proc.pid}) on {other_run}/lazyd/lazyd.sock" in done.stdout
    assert f"(pid {first.proc.pid}, {user_env.socket})" in done.stdout


# ---- bad input -------------------------------------------------------------------------------------


class RawSession:
    """A shim driven with raw JSON lines, in an environment given as bytes."""

    def __init__(self, argv: list[str], env: dict[bytes, bytes]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)

    def ask(self, msg_id: int, method: str, params: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=STEP_TIMEOUT_S)


def test_a_registration_with_a_non_utf8_environment_runs_in_a_private_process_and_keeps_its_bytes(
        user_env: UserEnv) -> None:
    from tests.conftest import FIXTURE_SERVER

    start_daemon(user_env)
    env = {k.encode(): v.encode() for k, v in user_env.env.items()}
    env[b"ODD_BYTES"] = b"caf\xe9"  # Latin-1, not UTF-8
    argv = [shim_command(), sys.executable, str(FIXTURE_SERVER)]
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    sessions = [RawSession(argv, env) for _ in range(2)]
    pids = []
    for session in sessions:
        assert "result" in session.ask(1, "initialize", init)
        answer = session.ask(2, "tools/call", {"name": "pid", "arguments": {}})
        pids.append(int(answer["result"]["content"][0]["text"]))
    assert pids[0] != pids[1]  # the same registration, yet never one process by accident
    with open(f"/proc/{pids[0]}/environ", "rb") as f:
        assert b"ODD_BYTES=caf\xe9" in f.read().split(b"\0")
    for session in sessions:
        session.close()
    log = (user_env.root / "daemon.stderr").read_text(errors="replace")
    assert "gets a private identity: its environment is not UTF-8 (ODD_BYTES)" in log
