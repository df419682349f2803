"""The AI clients whose MCP registrations lazyctl can wrap: file format, layout and default file.

One table: adding a client is one entry. Default files are each client's user (VS Code: workspace)
registrations on Linux; ``--file`` selects any other file of the same layout. Layouts: most split
``command`` from ``args`` with an ``env``; opencode and Kilo keep the whole argv in ``command`` with
an ``environment`` (under ``mcp``, or 2.x's ``mcp.servers``); Continue keeps a YAML list of
registrations with their own ``name``. Each JSON dialect is what that client itself accepts, so we
preserve what it allows and refuse what it would refuse.
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
    format: Literal["json", "toml", "yaml"]
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


def _absolute(env: Mapping[str, str], name: str) -> Path | None:
    """The directory the variable ``name`` names, when it is an absolute path (else it is not used)."""
    value = env.get(name, "")
    return Path(value) if value.startswith("/") else None


def _config_home(env: Mapping[str, str]) -> Path:
    return _absolute(env, "XDG_CONFIG_HOME") or _home(env) / ".config"


def _first_existing(directory: Path, names: tuple[str, ...]) -> Path:
    candidates = [directory / name for name in names]
    return next((path for path in candidates if path.exists()), candidates[0])


def _opencode(env: Mapping[str, str], cwd: Path) -> Path:
    # opencode's own rule for its global config (where `opencode mcp add` writes): the first of
    # these that exists in $XDG_CONFIG_HOME/opencode (~/.config/opencode), else the first.
    return _first_existing(_config_home(env) / "opencode", ("opencode.jsonc", "opencode.json", "config.json"))


def _kilo(env: Mapping[str, str], cwd: Path) -> Path:
    # Kilo CLI (7.7) writes `kilo mcp add` to the first of kilo.jsonc, kilo.json, opencode.jsonc,
    # opencode.json that exists in $XDG_CONFIG_HOME/kilo, else kilo.jsonc; it reads config.json
    # there too (but never writes it), so a config.json alone is the file that holds servers.
    return _first_existing(_config_home(env) / "kilo",
                           ("kilo.jsonc", "kilo.json", "opencode.jsonc", "opencode.json", "config.json"))


def _continue(env: Mapping[str, str], cwd: Path) -> Path:
    # cn's continueHome: CONTINUE_GLOBAL_DIR (a relative one against the current directory), else ~/.continue.
    global_dir = env.get("CONTINUE_GLOBAL_DIR", "")
    base = Path(os.path.normpath(cwd / global_dir)) if global_dir else _home(env) / ".continue"
    return base / "config.yaml"


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client("claude", "Claude Code", "json", "mcpServers",
               lambda env, cwd: (_absolute(env, "CLAUDE_CONFIG_DIR") or _home(env)) / ".claude.json",
               "~/.claude.json ($CLAUDE_CONFIG_DIR/.claude.json)", projects=True),
        Client("cursor", "Cursor", "json", "mcpServers", lambda env, cwd: _home(env) / ".cursor" / "mcp.json",
               "~/.cursor/mcp.json"),
        Client("codex", "Codex CLI", "toml", "mcp_servers",
               lambda env, cwd: (_absolute(env, "CODEX_HOME") or _home(env) / ".codex") / "config.toml",
               "~/.codex/config.toml ($CODEX_HOME/config.toml)"),
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
        # `copilot help environment`: COPILOT_HOME replaces ~/.copilot for configuration and state.
        Client("copilot", "GitHub Copilot CLI", "json", "mcpServers",
               lambda env, cwd: (_absolute(env, "COPILOT_HOME") or _home(env) / ".copilot") / "mcp-config.json",
               "~/.copilot/mcp-config.json ($COPILOT_HOME/mcp-config.json)",
               dialect=Dialect(comments=True, trailing_commas=True)),
        # Kilo CLI is an opencode fork: opencode's layout and dialect at its own path.
        Client("kilo", "Kilo CLI", "json", "mcp", _kilo,
               "~/.config/kilo/kilo.jsonc, kilo.json, opencode.jsonc, opencode.json or config.json "
               "(the first that exists)",
               dialect=Dialect(comments=True, trailing_commas=True), argv=True, env_key="environment",
               nested="servers"),
        # Continue's cn: a YAML list of servers, each with its own `name` (yamledit.py).
        Client("continue", "Continue (cn)", "yaml", "mcpServers", _continue,
               "~/.continue/config.yaml ($CONTINUE_GLOBAL_DIR/config.yaml)"),
        # Amp's settings are VS Code-style flat dotted keys: the container is the one member
        # named "amp.mcpServers" (Amp ignores a nested {"amp": {"mcpServers": ...}}); it reads
        # them with comments and trailing commas.
        Client("amp", "Amp", "json", "amp.mcpServers",
               lambda env, cwd: _config_home(env) / "amp" / "settings.json", "~/.config/amp/settings.json",
               dialect=Dialect(comments=True, trailing_commas=True)),
        Client("crush", "Crush", "json", "mcp",
               lambda env, cwd: (_absolute(env, "CRUSH_GLOBAL_CONFIG") or _config_home(env) / "crush") / "crush.json",
               "~/.config/crush/crush.json ($CRUSH_GLOBAL_CONFIG/crush.json)"),
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
