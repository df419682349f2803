"""The AI clients whose MCP registrations lazyctl can wrap: file format, layout and default file.

One table, so adding a client is one entry. Default files are where each client keeps its user (or,
for VS Code, workspace) registrations on Linux; ``--file`` selects any other file of the same
layout (Claude Code's project ``.mcp.json``, Cursor's ``.cursor/mcp.json``, VS Code's user profile
``~/.config/Code/User/mcp.json``, opencode's project ``opencode.json``).

Two registration layouts: most clients split ``command`` (a string) from ``args`` (an array) and
call the environment ``env``; opencode keeps the whole argv in ``command`` (an array) and calls it
``environment`` (``argv=True``, ``env_key``), under ``mcp`` (1.x) or ``mcp.servers`` (2.x's
layout, which 1.18 reads too: ``nested``).

JSON dialects follow what each client itself accepts, so that we preserve what it allows and refuse
what it would refuse: VS Code reads JSONC (comments, trailing commas), Gemini CLI strips comments
from settings.json before parsing it, the others use strict JSON.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lazyd.errors import UsageError
from lazyd.ctl.wrap.jsonspan import STRICT, Dialect


@dataclass(frozen=True)
class Client:
    name: str
    title: str
    format: Literal["json", "toml"]
    container: str  # the key (JSON) or table (TOML) that maps server names to registrations
    default_file: Callable[[Mapping[str, str], Path], Path]  # (environment, cwd) -> path
    default_file_text: str  # for --help and docs
    projects: bool = False  # Claude Code's ~/.claude.json also has projects.<path>.<container>
    dialect: Dialect = STRICT
    argv: bool = False  # `command` is the whole argv, an array (opencode); else a string beside `args`
    env_key: str = "env"  # the member that holds the server's environment
    nested: str | None = None  # a container member that may be a map of registrations (opencode 2's `servers`)


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME", "")
    if not home.startswith("/"):
        raise UsageError("HOME is not set to an absolute path; pass --file")
    return Path(home)


def _claude(env: Mapping[str, str], cwd: Path) -> Path:
    # Claude Code keeps .claude.json inside CLAUDE_CONFIG_DIR when that is set.
    config_dir = env.get("CLAUDE_CONFIG_DIR", "")
    return Path(config_dir) / ".claude.json" if config_dir.startswith("/") else _home(env) / ".claude.json"


def _codex(env: Mapping[str, str], cwd: Path) -> Path:
    codex_home = env.get("CODEX_HOME", "")
    return Path(codex_home) / "config.toml" if codex_home.startswith("/") else _home(env) / ".codex" / "config.toml"


def _opencode(env: Mapping[str, str], cwd: Path) -> Path:
    # opencode's own rule for its global config (where `opencode mcp add` writes): the first of
    # these that exists in $XDG_CONFIG_HOME/opencode (~/.config/opencode), else the first.
    config_home = env.get("XDG_CONFIG_HOME", "")
    base = Path(config_home) if config_home.startswith("/") else _home(env) / ".config"
    candidates = [base / "opencode" / name for name in ("opencode.jsonc", "opencode.json", "config.json")]
    return next((path for path in candidates if path.exists()), candidates[0])


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client("claude", "Claude Code", "json", "mcpServers", _claude,
               "~/.claude.json ($CLAUDE_CONFIG_DIR/.claude.json)", projects=True),
        Client("cursor", "Cursor", "json", "mcpServers", lambda env, cwd: _home(env) / ".cursor" / "mcp.json",
               "~/.cursor/mcp.json"),
        Client("codex", "Codex CLI", "toml", "mcp_servers", _codex, "~/.codex/config.toml ($CODEX_HOME/config.toml)"),
        Client("gemini", "Gemini CLI", "json", "mcpServers",
               lambda env, cwd: _home(env) / ".gemini" / "settings.json", "~/.gemini/settings.json",
               dialect=Dialect(comments=True)),
        Client("vscode", "VS Code", "json", "servers", lambda env, cwd: cwd / ".vscode" / "mcp.json",
               ".vscode/mcp.json (in the current directory)", dialect=Dialect(comments=True, trailing_commas=True)),
        Client("windsurf", "Windsurf", "json", "mcpServers",
               lambda env, cwd: _home(env) / ".codeium" / "windsurf" / "mcp_config.json",
               "~/.codeium/windsurf/mcp_config.json"),
        # opencode reads every config file with jsonc-parser and allowTrailingComma, .json too.
        Client("opencode", "opencode", "json", "mcp", _opencode,
               "~/.config/opencode/opencode.jsonc, opencode.json or config.json (the first that exists)",
               dialect=Dialect(comments=True, trailing_commas=True), argv=True, env_key="environment",
               nested="servers"),
    )
}  # fmt: skip


def client_named(name: str) -> Client:
    try:
        return CLIENTS[name]
    except KeyError:
        raise UsageError(f"unknown client {name!r} (known: {', '.join(CLIENTS)})") from None


def config_path(client: Client, file: str | None, env: Mapping[str, str], cwd: Path) -> Path:
    """The file to edit: ``file`` made absolute against ``cwd``, else the client's default."""
    if file is not None:
        if not file:
            raise UsageError("--file: empty path")
        return Path(os.path.normpath(cwd / file))
    return client.default_file(env, cwd)
