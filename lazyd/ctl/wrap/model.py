"""The client-neutral view of one MCP registration that the planner reads and the editors write.

An editor (JSON, YAML or TOML) turns each registration it finds into an ``Entry``; the planner
decides a new ``RegState``; the editor then changes only what differs. Only the three fields lazyd
edits are modelled: everything else in a registration is invisible here and therefore untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from lazyd.errors import WrapError

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
    """One registration as found in a file; ``state`` None with ``problem`` saying why it cannot be
    edited (remote ones have neither). ``cwd`` and ``passed_env`` are for ``--check``."""

    name: str
    project: str | None
    transport: Transport
    state: RegState | None
    problem: str | None = None
    cwd: str | None = None
    # Names the client passes through from its own environment for this registration (Codex's
    # `env_vars`): what a check must pass too to land on the client's identity.
    passed_env: tuple[str, ...] = ()


def changed_fields(old: RegState, new: RegState, *, argv: bool = False, env_key: str = "env") -> list[str]:
    """The names of the fields ``new`` changes, for the report (never their values); ``argv``: the
    command and args are one field, `command`."""
    changed = []
    if argv and (old.command, old.args) != (new.command, new.args):
        changed.append("command")
    if not argv and new.command != old.command:
        changed.append("command")
    if not argv and new.args != old.args:
        changed.append("args")
    if new.env != old.env and (new.env is None or old.env is None):
        changed.append(env_key)
    if new.env != old.env and new.env is not None:
        before = old.env or {}
        changed += [f"{env_key}.{k}" for k in sorted({*before, *new.env}) if before.get(k, _ABSENT) != new.env.get(k, _ABSENT)]
    return changed


_ABSENT = object()


def decode(data: bytes, where: str) -> str:
    """A config file's text; WrapError when it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WrapError(f"{where} is not UTF-8 (byte {exc.start}); refusing to edit it") from None


def newline_of(text: str) -> str:
    """The line end a file uses, judged by its first line."""
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def transport_of(members: Mapping[str, object]) -> Transport:
    """Classify a registration by its members (values only looked at for ``type``)."""
    kind = members.get("type")
    if any(key in members for key in HTTP_KEYS) or (isinstance(kind, str) and kind.lower() in HTTP_TYPES):
        return "http"
    if "command" in members:
        return "stdio"
    return "unknown"


def entry_of(name: str, project: str | None, members: Mapping[str, object], problem: str | None = None, *,
             argv: bool = False, env_key: str = "env", env_vars: bool = False) -> Entry:
    """The ``Entry`` of a registration with these (plain) members; ``problem`` refuses it.
    ``argv``: `command` is the whole argv as an array (opencode's layout), and there is no `args`;
    ``env_vars``: the names in its `env_vars` are passed from the client's environment (Codex)."""
    transport = transport_of(members)
    cwd = members.get("cwd")
    cwd = cwd if isinstance(cwd, str) else None
    if transport == "stdio" and problem is None:
        problem = _field_problem(members, argv, env_key)
    if transport != "stdio" or problem is not None:
        return Entry(name, project, transport, None, problem, cwd)
    env = members.get(env_key)
    command = members["command"]
    args: tuple[str, ...] | None
    if argv:
        assert isinstance(command, list)
        command, args = command[0], tuple(command[1:])
    else:
        listed = members.get("args")
        args = tuple(listed) if isinstance(listed, list) else None
    assert isinstance(command, str)
    passed = members.get("env_vars") if env_vars else None
    passed_env = tuple(n for n in passed if isinstance(n, str)) if isinstance(passed, list) else ()
    state = RegState(command, args, dict(env) if isinstance(env, dict) else None)
    return Entry(name, project, transport, state, None, cwd, passed_env)


def _field_problem(members: Mapping[str, object], argv: bool, env_key: str) -> str | None:
    """Why a stdio registration's command/args/env cannot be edited, or None if they can."""
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
