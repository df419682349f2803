"""The user's config file, `~/.config/lazyd/config.toml`, as frozen, validated dataclasses.

The layout is docs/configuration.md's; shim options (`--linger 30m`) become the same policies.
Every problem is a one-line `ConfigError` (lazyd/config/values.py); an unknown key is an error
listing the allowed ones, since a misspelled `lingr` that did nothing would be worse. Policies
layer built-in defaults, `[defaults]`, the server's table, shim options: the more specific wins,
which also settles `keep_alive` against an inherited `idle_timeout`. The file runs commands, so a
symlink, another uid's file or one writable by group or others is refused rather than read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Literal, TypeVar

from lazyd.config import values as cv
from lazyd.config.known import packaged, parse_table
from lazyd.config.toml_text import parse_toml
from lazyd.config.model import Config, Policy, ServerConfig, WakePredicate
from lazyd.config.durations import parse_share
from lazyd.config.envnames import checked_name
from lazyd.config.sizes import parse_limit
from lazyd.core.eras.choice import ERA_SETTINGS
from lazyd.core.policy import DECISIONS, ToolPolicy, compile_rule
from lazyd.core.pressure import PressureSettings
from lazyd.errors import ConfigError
from lazyd.host.privatefiles import read_private

__all__ = [
    "WakePredicate", "Policy", "ServerConfig", "Config", "load_config",
    "parse_config_text", "policy_with_options", "MAX_CONFIG_BYTES",
]

T = TypeVar("T")

# A real config is a few KiB; the bound keeps a mistaken path (a log, a device) from costing memory.
MAX_CONFIG_BYTES = 1024 * 1024

_POLICY_KEYS = ("start_timeout", "linger", "check_linger", "idle_timeout", "keep_alive", "start", "share", "wake", "era",
                "memory_max")
_TOP_KEYS = ("defaults", "servers", "policy", "known_servers", "pressure")
_PRESSURE_KEYS = ("enabled", "start", "stop", "pause", "files")
_TOOL_POLICY_KEYS = ("default", "rules")
_DEFAULTS_KEYS = (*_POLICY_KEYS, "per_session_env", "identity_env", "sampling_policy")
_SERVER_KEYS = ("command", "args", "env", "cwd", "description", *_POLICY_KEYS)
# A description is a sentence or two for a model reading the hub's list; a page is a mistake.
MAX_DESCRIPTION_CHARS = 1000
_WAKE_KEYS = ("command", "interval", "timeout")
_OPTION_KEYS = ("linger", "check_linger", "idle_timeout", "start_timeout", "share", "wake_command",
                "wake_interval", "wake_timeout", "era", "memory_max")
_SAMPLING_POLICIES: tuple[Literal["refuse", "most-recent"], ...] = ("refuse", "most-recent")
_STARTS: tuple[Literal["lazy", "eager"], ...] = ("lazy", "eager")
_SERVER_NAME = re.compile(r"[A-Za-z0-9_.-]+", re.ASCII)
# Used in messages when the text did not come from a file.
_NO_FILE_LABEL = "config.toml"


# What a refused config file's error says after the problem (lazyd/host/privatefiles.py reads it).
_CONFIG_FIXES = {
    "link": "; lazyd only reads a regular file you own (replace the link with a copy of the file)",
    "owner": "; lazyd runs the commands it names, so it must be yours",
    "mode": "; lazyd runs the commands it names, so fix it with: chmod go-w {path}",
    "size": "; is it the right file?",
}


def load_config(path: Path, environ: Mapping[str, str]) -> Config:
    """Read and validate the config file at `path` (missing: `Config()`); `environ` feeds
    `${VAR}` and `~`. The checks look at the opened descriptor: the file checked is the file read."""
    data = read_private(path, MAX_CONFIG_BYTES, error=ConfigError, fixes=_CONFIG_FIXES)
    if data is None:
        return Config()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: is not UTF-8 text (bad byte at offset {error.start})") from None
    return parse_config_text(text, environ, path)


def parse_config_text(text: str, environ: Mapping[str, str], source: Path | None) -> Config:
    """Validate config `text` (the pure part of `load_config`); `source` names it in errors."""
    at = cv.At(str(source) if source is not None else _NO_FILE_LABEL)
    document = parse_toml(text, at.label)
    cv.check_keys(at, document, _TOP_KEYS)
    defaults_at = at / "defaults"
    defaults_table = cv.table(defaults_at, document.get("defaults", {}))
    cv.check_keys(defaults_at, defaults_table, _DEFAULTS_KEYS)
    defaults = _merge_policy(defaults_at, Policy(), defaults_table)
    extra = _patterns(defaults_at / "per_session_env", defaults_table.get("per_session_env", []))
    forced = _patterns(defaults_at / "identity_env", defaults_table.get("identity_env", []))
    sampling_policy = cv.one_of(defaults_at / "sampling_policy", defaults_table.get("sampling_policy", "refuse"),
                                _SAMPLING_POLICIES)
    servers_at = at / "servers"
    servers: dict[str, ServerConfig] = {}
    for name, value in cv.table(servers_at, document.get("servers", {})).items():
        servers[name] = _server(servers_at / name, name, value, defaults, environ)
    tool_policy = _tool_policy(at / "policy", document.get("policy", {}))
    known = packaged().overlaid(parse_table(at / "known_servers", document.get("known_servers", {})))
    pressure = _pressure(at / "pressure", document.get("pressure", {}))
    return Config(defaults=defaults, servers=MappingProxyType(servers),
                  extra_per_session_env=extra, identity_env=forced, sampling_policy=sampling_policy, source=source,
                  tool_policy=tool_policy, known_servers=known, pressure=pressure)


def _pressure(at: cv.At, value: object) -> PressureSettings:
    """`[pressure]`: enabled, start and stop (percent of PSI's some avg10), pause, files."""
    table = cv.table(at, value)
    cv.check_keys(at, table, _PRESSURE_KEYS)
    base = PressureSettings()
    pcts: dict[str, float] = {}
    for key, default in (("start", base.start_pct), ("stop", base.stop_pct)):
        raw = table.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise (at / key).error(f"expected a percentage such as {default:g}, got {cv.type_name(raw)}")
        if not 0 < raw <= 100:
            raise (at / key).error(f"{raw!r} is not a percentage above 0 and at most 100")
        pcts[key] = float(raw)
    if pcts["stop"] > pcts["start"]:
        raise (at / "stop").error(f"{pcts['stop']:g} is above start ({pcts['start']:g}); it must be at most start")
    pause = cv.duration(at / "pause", table["pause"]) if "pause" in table else base.pause_s
    if pause <= 0:
        raise (at / "pause").error("must be longer than 0")
    files = tuple(cv.strings(at / "files", table.get("files", []), allow_empty=True))
    for path in files:
        if not path.startswith("/"):
            raise (at / "files").error(f"{path!r} is not an absolute path")
    enabled = cv.boolean(at / "enabled", table["enabled"]) if "enabled" in table else True
    return PressureSettings(enabled=enabled, start_pct=pcts["start"], stop_pct=pcts["stop"], pause_s=pause, files=files)


def _patterns(at: cv.At, value: object) -> frozenset[str]:
    """An array of variable names or fnmatch patterns (per_session_env, identity_env)."""
    try:
        return frozenset(checked_name(pattern) for pattern in cv.strings(at, value, allow_empty=True))
    except ValueError as error:
        raise at.error(str(error)) from None


def _tool_policy(at: cv.At, value: object) -> ToolPolicy:
    """`[policy]`: `default` and `rules = { "SERVER.TOOL" = "allow" | "ask" | "deny" }`."""
    table = cv.table(at, value)
    cv.check_keys(at, table, _TOOL_POLICY_KEYS)
    default = cv.one_of(at / "default", table.get("default", "allow"), DECISIONS)
    rules = []
    for pattern, decision in cv.table(at / "rules", table.get("rules", {})).items():
        if isinstance(decision, dict):
            # An unquoted `github.create_issue = "ask"` is a TOML dotted key: a nested table.
            raise (at / "rules" / pattern).error(
                'is a table: quote patterns, as in "github.create_issue" = "ask"')
        checked = cv.one_of(at / "rules" / pattern, decision, DECISIONS)
        try:
            rules.append(compile_rule(pattern, checked))
        except ValueError as error:
            raise (at / "rules" / pattern).error(str(error)) from None
    return ToolPolicy(tuple(rules), default)


def policy_with_options(base: Policy, opts: Mapping[str, str]) -> Policy:
    """`base` with a shim's options (name -> text, wake_command a JSON argv) applied, validated as
    the same keys of config.toml; wake_interval and wake_timeout need a wake command."""
    at = cv.At("option", option=True)
    table: dict[str, object] = {}
    wake: dict[str, object] = {}
    for key, value in opts.items():
        if key not in _OPTION_KEYS:
            raise (at / key).error(f"unknown option; allowed: {', '.join(_OPTION_KEYS)}")
        if not isinstance(value, str):
            raise (at / key).error(f"expected text, got {cv.type_name(value)}")
        if key == "share":
            try:
                table["share"] = parse_share(value)
            except ValueError as error:
                raise (at / key).error(str(error)) from None
        elif key == "wake_command":
            try:
                wake["command"] = json.loads(value)
            except ValueError:
                raise (at / key).error(
                    'is not a JSON array of strings, such as ["/usr/local/bin/needs-work"]'
                ) from None
        elif key.startswith("wake_"):
            wake[key.removeprefix("wake_")] = value
        else:
            table[key] = value
    if wake:
        if base.wake is not None:
            wake.setdefault("command", list(base.wake.argv))
            wake.setdefault("interval", base.wake.interval_s)
            wake.setdefault("timeout", base.wake.timeout_s)
        elif "command" not in wake:
            raise (at / f"wake_{next(iter(wake))}").error(
                "needs --wake-command (or a wake predicate in config.toml)")
        table["wake"] = wake
    return _merge_policy(at, base, table)


def _server(at: cv.At, name: str, value: object, defaults: Policy,
            environ: Mapping[str, str]) -> ServerConfig:
    if not _SERVER_NAME.fullmatch(name) or name in (".", ".."):
        raise at.error("is not a valid server name (use letters, digits, '_', '.' and '-')")
    table = cv.table(at, value)
    cv.check_keys(at, table, _SERVER_KEYS)
    if "command" not in table:
        raise (at / "command").error("is missing; every server needs a command")
    command = cv.string(at / "command", table["command"])
    if not command.strip():
        raise (at / "command").error("is empty; every server needs a command")
    args = tuple(cv.strings(at / "args", table.get("args", []), allow_empty=True))
    env: dict[str, str] = {}
    env_at = at / "env"
    for variable, raw in cv.table(env_at, table.get("env", {})).items():
        where = env_at / variable
        if not variable or "=" in variable or "\0" in variable:
            raise where.error("is not a valid environment variable name")
        try:
            env[variable] = cv.expand(cv.string(where, raw), environ)
        except ValueError as error:
            raise where.error(str(error)) from None
    cwd = None
    if "cwd" in table:
        cwd = cv.directory(at / "cwd", cv.string(at / "cwd", table["cwd"]), environ)
    description = None
    if "description" in table:
        description = " ".join(cv.string(at / "description", table["description"]).split()) or None
        if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
            raise (at / "description").error(
                f"is {len(description)} characters long; keep it under {MAX_DESCRIPTION_CHARS} "
                "(a sentence or two on what the server is for and when to use it)")
    return ServerConfig(name=name, command=command, args=args, env=MappingProxyType(env),
                        cwd=cwd, policy=_merge_policy(at, defaults, table), description=description)


def _merge_policy(at: cv.At, base: Policy, table: Mapping[str, object]) -> Policy:
    def read(key: str, reader: Callable[[cv.At, object], T], default: T) -> T:
        return reader(at / key, table[key]) if key in table else default

    start_timeout = read("start_timeout", cv.duration, base.start_timeout_s)
    if start_timeout <= 0:
        raise (at / "start_timeout").error("must be longer than 0 (it bounds how long a start may take)")
    linger = read("linger", cv.duration, base.linger_s)
    check_linger = read("check_linger", cv.duration, base.check_linger_s)
    idle = base.idle_timeout_s
    if "idle_timeout" in table:
        idle = cv.duration(at / "idle_timeout", table["idle_timeout"]) or None
    keep_alive = read("keep_alive", cv.boolean, base.keep_alive)
    if keep_alive and idle is not None:
        if "keep_alive" in table and "idle_timeout" in table:
            raise (at / "keep_alive").error(
                "cannot be combined with idle_timeout (a kept-alive server is never stopped for "
                "idleness); remove one of them")
        # One of the two came from [defaults]: the one set in this table wins.
        if "keep_alive" in table:
            idle = None
        else:
            keep_alive = False
    start = read("start", lambda where, value: cv.one_of(where, value, _STARTS), base.start)
    share = read("share", _share, base.share)
    wake = read("wake", _wake, base.wake)
    era = read("era", lambda where, value: cv.one_of(where, value, ERA_SETTINGS), base.era)
    memory_max = read("memory_max", _memory_max, base.memory_max)
    return Policy(start_timeout_s=start_timeout, linger_s=linger, check_linger_s=check_linger, idle_timeout_s=idle,
                  keep_alive=keep_alive, start=start, share=share, wake=wake, era=era, memory_max=memory_max)


def _memory_max(at: cv.At, value: object) -> int | None:
    """A size ("1GiB", a number of bytes), or false / "off" / 0 for no limit."""
    if value is False or value == 0:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if not isinstance(value, str):
        raise at.error(f'expected a size such as "1GiB" or false, got {cv.type_name(value)}')
    try:
        return parse_limit(value)
    except ValueError as error:
        raise at.error(str(error)) from None


def _share(at: cv.At, value: object) -> bool | Literal["auto", "session-aware"]:
    if value == "auto" or value == "session-aware" or isinstance(value, bool):
        return value
    raise at.error(f"expected true, false, \"auto\" or \"session-aware\", got {cv.type_name(value) if not isinstance(value, str) else repr(value)}")


def _wake(at: cv.At, value: object) -> WakePredicate | None:
    if value is False:
        return None  # lets one server opt out of a wake predicate set in [defaults]
    if not isinstance(value, dict):
        raise at.error(f"expected a table such as {{ command = [...] }} or false, "
                       f"got {cv.type_name(value)}")
    cv.check_keys(at, value, _WAKE_KEYS)
    if "command" not in value:
        raise (at / "command").error("is missing; a wake predicate needs a command")
    argv = tuple(cv.strings(at / "command", value["command"], allow_empty=False))
    if not argv[0]:
        raise (at / "command").error("starts with an empty string")
    interval = cv.duration(at / "interval", value.get("interval", 5.0))
    timeout = cv.duration(at / "timeout", value.get("timeout", 1.0))
    for key, seconds in (("interval", interval), ("timeout", timeout)):
        if seconds <= 0:
            raise (at / key).error("must be longer than 0")
    return WakePredicate(argv=argv, interval_s=interval, timeout_s=timeout)
