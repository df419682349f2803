"""Helpers for end-to-end tests of wrapped client configs: a Claude Code config with a stdio
fixture and a remote server, lazyctl run as that client would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mcp.client.stdio import get_default_environment

from tests.conftest import FIXTURE_SERVER, UserEnv


SECRET = "SECRET-e2e-token"
REPO = Path(__file__).resolve().parent.parent.parent


def wrap_client_env(user: UserEnv) -> dict[str, str]:
    """The environment the SDK gives a server it starts (its few inherited variables, then ours):
    lazyctl runs in it too, as a user runs --check from the environment their client runs in."""
    return get_default_environment() | user.env


def wrap_lazyctl(user: UserEnv, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *words], env=wrap_client_env(user), cwd=REPO,
                          text=True, capture_output=True, timeout=120)  # fmt: skip


def claude_config(user: UserEnv) -> Path:
    path = Path(user.env["HOME"]) / ".claude.json"
    config = {
        "numStartups": 9007199254740993,
        "mcpServers": {
            "fixture": {"type": "stdio", "command": sys.executable, "args": [str(FIXTURE_SERVER)],
                        "env": {"FIXTURE_TOKEN": SECRET}},
            "remote": {"type": "http", "url": "https://mcp.example.com/mcp"},
        },
    }  # fmt: skip
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path
