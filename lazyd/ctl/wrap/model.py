"""The client-neutral view of one MCP registration that the planner reads and the editors write.

A config backend (JSON or TOML) turns each registration it finds into an ``Entry``; the planner
decides a new ``RegState``; the backend then changes only what differs between the two. Only the
three fields lazyd ever edits are modelled: everything else in a registration (type, cwd, timeouts,
permissions, headers) is invisible here and therefore untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Transport = Literal["stdio", "http", "unknown"]

HTTP_KEYS = ("url", "serverUrl", "httpUrl")
# Members that make a registration remote: Claude/Cursor/VS Code/Codex use url, Windsurf serverUrl,
# Gemini CLI httpUrl (and url for SSE).
HTTP_TYPES = frozenset({"http", "sse", "streamable-http", "streamable_http", "streamablehttp", "remote"})
# Compared lower-cased; `type` spellings clients accept for remote servers (opencode's is "remote").


@dataclass(frozen=True)
class RegState:
    """The edited fields: ``args``/``env`` None means the member is absent (not empty)."""

    command: str
    args: tuple[str, ...] | None
    env: Mapping[str, object] | None


@dataclass(frozen=True)
class Entry:
    """One registration as found in a file.

    ``state`` is None when the registration is remote or unusable; ``problem`` then says why it
    cannot be edited (a duplicate key on its path, a non-string command...). ``cwd`` is the
    registration's own working directory setting, if it has one (used by ``--check``), like
    ``passed_env``.
    """

    name: str
    project: str | None
    transport: Transport
    state: RegState | None
    problem: str | None = None
    cwd: str | None = None
    # Names the client passes through from its own environment for this registration (Codex's
    # `env_vars`): what a check must pass too to land on the client's identity.
    passed_env: tuple[str, ...] = ()

    def label(self) -> str:
        return self.name if self.project is None else f"{self.name} (project {self.project})"


def transport_of(members: Mapping[str, object]) -> Transport:
    """Classify a registration by its members (values only looked at for ``type``)."""
    kind = members.get("type")
    if any(key in members for key in HTTP_KEYS) or (isinstance(kind, str) and kind.lower() in HTTP_TYPES):
        return "http"
    if "command" in members:
        return "stdio"
    return "unknown"


def check_state_fields(members: Mapping[str, object], *, argv: bool = False, env_key: str = "env") -> str | None:
    """Why a stdio registration's command/args/env cannot be edited, or None if they can.
    `argv`: `command` is the whole argv as an array (opencode's layout), and there is no `args`."""
    command = members.get("command")
    if argv:
        if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command) and command[0]):
            return "its command is not a non-empty array of strings"
    elif not isinstance(command, str) or not command:
        return "its command is not a non-empty string"
    args = members.get("args")
    if not argv and "args" in members and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        return "its args are not a list of strings"
    if env_key in members and not isinstance(members.get(env_key), dict):
        return f"its {env_key} is not an object"
    return None
