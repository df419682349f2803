"""What wrap, unwrap, reapply and status decide for one registration.

Pure: no files, no I/O. The rules: docs/wrapping.md, "What each command does".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from lazyd.ctl.wrap import shimargs
from lazyd.ctl.wrap.model import Entry, RegState
from lazyd.ctl.wrap.records import Record, RegKey

Action = Literal["wrapped", "reapplied", "updated", "unchanged", "skipped", "refused", "unwrapped",
                 "recovered", "forgotten"]  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """What the user asked for: the shim to run (explicit when given as --shim) and --env settings."""

    shim: str
    shim_explicit: bool = False
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """``state`` is the registration's new fields (None: the file is not touched for it);
    ``record`` the record to keep (None: delete it) and is only acted on when ``record_changes``."""

    action: Action
    reason: str = ""
    state: RegState | None = None
    record: Record | None = None
    record_changes: bool = False


def _skip(reason: str) -> Decision:
    return Decision("skipped", reason)


def _refuse(reason: str) -> Decision:
    return Decision("refused", reason)


def plan_wrap(key: RegKey, entry: Entry, record: Record | None, settings: Settings, *, reapply: bool) -> Decision:
    """Decide wrap (``reapply=False``) or reapply for one registration (module docstring rules)."""
    if entry.transport == "http":
        return _skip("HTTP/SSE registration: nothing to wrap")
    if entry.transport == "unknown":
        return _skip("neither a command nor a url: not a server lazyd can run")
    if entry.problem is not None or entry.state is None:
        return _refuse(entry.problem or "cannot be edited")
    state = entry.state
    relay = shimargs.foreign_relay(state.command)
    if relay is not None:
        return _refuse(f"it already runs through {relay}; unwrap it with {relay} first")
    known = {settings.shim} | ({record.shim} if record else set())
    wrapped = shimargs.is_shim(state.command, known)
    if record is None:
        if wrapped:
            return _skip("already runs through lazyd-shim, but lazyd has no record of wrapping it "
                         "(unwrap --recover restores it)")  # fmt: skip
        if reapply:
            return _skip("not wrapped by lazyd; use wrap")
    managed = {**(record.managed_env if record else {}), **declared_setting(state.env), **settings.env}
    try:
        env, original = _managed_env(state.env, managed, record, settings.env)
    except ValueError as exc:
        return _refuse(str(exc))
    if wrapped:
        assert record is not None
        command = settings.shim if settings.shim_explicit else state.command
        args = state.args
        args_present, env_present = record.args_present, record.env_present
    else:
        command = settings.shim if settings.shim_explicit or record is None else record.shim
        args = shimargs.wrapped_args(state.command, state.args or ())
        args_present = state.args is not None
        env_present = state.env is not None and not _is_our_env_object(state.env, record)
    new_state = RegState(command, args, env)
    new_record = Record(key, command, args_present, env_present, managed, original)
    if new_state == state and new_record == record:
        return Decision("unchanged", "already wrapped")
    if not wrapped:
        action: Action = "wrapped" if record is None else "reapplied"
        reason = "" if record is None else "the client had rewritten it; adopted its command and wrapped it again"
    else:
        action, reason = "updated", "managed settings updated"
    return Decision(action, reason, None if new_state == state else new_state, new_record, new_record != record)


def declared_setting(env: Mapping[str, object] | None) -> dict[str, str]:
    """``LAZYD_IDENTITY_ENV`` naming the variables a registration declares, so they always count
    in its identity (docs/configuration.md); {} when it declares none."""
    names = sorted(k for k in (env or {}) if not k.startswith(shimargs.SETTING_PREFIX))
    return {shimargs.IDENTITY_ENV: ",".join(names)} if names else {}


def _managed_env(current: Mapping[str, object] | None, managed: Mapping[str, str], record: Record | None,
                 explicit: Mapping[str, str]) -> tuple[dict[str, object] | None, dict[str, str | None]]:  # fmt: skip
    """The env with managed settings applied, and each managed variable's pre-lazyd value."""
    env = dict(current) if current is not None else {}
    original: dict[str, str | None] = {}
    for name, value in managed.items():
        present = name in env
        ours = record.managed_env.get(name) if record else None
        if record is not None and ours is not None and present and (env[name] == ours or name not in explicit):
            # Set by us before (perhaps kept by the client's setup): the user's original is on record.
            # Our value still there takes the new one; one the user changed stays unless --env sets it.
            original[name] = record.original_env.get(name)
            if env[name] == ours:
                env[name] = value
            continue
        previous = env.get(name)
        if present and not isinstance(previous, str):
            raise ValueError(f"env.{name} is not a string")
        original[name] = previous if isinstance(previous, str) else None
        env[name] = value
    if current is None and not env:
        return None, original
    return env, original


def _is_our_env_object(env: Mapping[str, object], record: Record | None) -> bool:
    # An env object that holds nothing but our settings at our values, where the record says
    # lazyd created it, is still ours even though the client's setup rewrote the registration.
    if record is None or record.env_present:
        return False
    return all(record.managed_env.get(name) == value for name, value in env.items())


def plan_unwrap(key: RegKey, entry: Entry | None, record: Record | None, shim: str, *, recover: bool) -> Decision:
    """Decide unwrap for one registration (``entry`` None: no longer in the file)."""
    if entry is None:
        if record is not None:
            return Decision("forgotten", "no longer in the file; its record is removed", None, None, True)
        return _refuse(f"no server named {key.server!r} in the file, and no record of one")
    if entry.transport != "stdio":
        if record is not None:
            return Decision("forgotten", "no longer a stdio registration; its record is removed", None, None, True)
        return _skip("HTTP/SSE registration: not wrapped" if entry.transport == "http" else "not a stdio registration")
    if entry.problem is not None or entry.state is None:
        return _refuse(entry.problem or "cannot be edited")
    state = entry.state
    known = {shim} | ({record.shim} if record else set())
    wrapped = shimargs.is_shim(state.command, known)
    if not wrapped and record is None:
        return _skip("not wrapped")
    command, args = state.command, state.args
    if wrapped:
        if record is None and not recover:
            return _refuse("runs through lazyd-shim but lazyd has no record of wrapping it; "
                           "unwrap --recover restores its command and args and leaves env as it is")  # fmt: skip
        all_args = state.args or ()
        try:
            start = shimargs.command_index(all_args)
        except ValueError as exc:
            return _refuse(f"cannot find the server's command in its args: {exc}")
        command, rest = all_args[start], all_args[start + 1 :]
        if shimargs.is_shim(command, known):
            return _refuse("its args run lazyd-shim again (nested wrappers); fix it by hand")
        keep_args = record is None or record.args_present or bool(rest)
        args = rest if keep_args else None
    env = _restored_env(state.env, record)
    new_state = RegState(command, args, env)
    if record is None:
        return Decision("recovered", "env left as it is: its original values are unknown", new_state)
    changed = None if new_state == state else new_state
    if not wrapped:
        reason = "the client had already rewritten it; managed settings removed"
        return Decision("unwrapped" if changed else "forgotten", reason, changed, None, True)
    return Decision("unwrapped", "", changed, None, True)


def _restored_env(current: Mapping[str, object] | None, record: Record | None) -> Mapping[str, object] | None:
    if current is None or record is None:
        return current
    env = dict(current)
    for name, value in record.managed_env.items():
        if name in env and env[name] == value:
            previous = record.original_env.get(name)
            if previous is None:
                del env[name]
            else:
                env[name] = previous
    if not env and not record.env_present:
        return None
    return env


@dataclass(frozen=True)
class Status:
    """One row of wrap-status. ``recoverable``: unwrap --recover could restore it without a record;
    ``without_shim``: it runs a server directly that lazyd wrapped for it (or, in another
    registration, runs through lazyd-shim), so the shim was lost on the way into the file."""

    server: str
    project: str | None
    transport: str
    wrapped: bool
    managed: bool
    recoverable: bool
    note: str
    without_shim: bool = False


WITHOUT_SHIM = "registered without lazyd-shim"


def server_argv(state: RegState, shims: Iterable[str]) -> tuple[str, ...] | None:
    """The server a wrapped registration runs (its args after the shim's options), or None when it
    is not wrapped (by one of ``shims``) or its args name no command."""
    if not shimargs.is_shim(state.command, shims):
        return None
    args = state.args or ()
    try:
        return tuple(args[shimargs.command_index(args):])
    except ValueError:
        return None


def same_server(state: RegState, argv: tuple[str, ...]) -> bool:
    """Whether a direct registration runs ``argv``: the same arguments, and a command that is the
    same program (one client may name it by path, another by name on its PATH)."""
    if not argv or tuple(state.args or ()) != argv[1:]:
        return False
    return state.command == argv[0] or os.path.basename(state.command) == os.path.basename(argv[0])


def describe(entry: Entry | None, record: Record | None, shim: str, name: str, project: str | None,
             twin: str | None = None) -> Status:  # fmt: skip
    """The status row of one registration (``entry`` None: only a record remains). ``twin`` names
    another registration that runs this one's server through lazyd-shim, when this one runs it
    directly and lazyd has no record of it (``amp mcp add NAME -- lazyd-shim -- CMD`` keeps only
    what follows the last ``--``: the shim is dropped and nothing says so)."""
    if entry is None:
        return Status(name, project, "missing", False, record is not None, False,
                      "recorded as wrapped but no longer in the file (unwrap forgets it)")  # fmt: skip
    managed = record is not None
    if entry.transport != "stdio" or entry.state is None:
        note = entry.problem or ("HTTP/SSE: nothing to wrap" if entry.transport == "http" else "not a stdio registration")
        return Status(name, project, entry.transport, False, managed, False, note)
    state = entry.state
    known = {shim} | ({record.shim} if record else set())
    wrapped = shimargs.is_shim(state.command, known)
    argv = server_argv(state, known)
    recoverable = argv is not None and not shimargs.is_shim(argv[0], known)
    note = entry.problem or ""
    without_shim = False
    if managed and not wrapped:
        without_shim = True
        note = f"{WITHOUT_SHIM}: the client rewrote it to run directly; reapply wraps it again"
    elif not wrapped and twin is not None:
        without_shim = True
        note = f"{WITHOUT_SHIM}, though {twin} runs the same server through it: wrap it"
    elif wrapped and not managed:
        note = "no record: unwrap --recover restores it" if recoverable else "no record, and its args name no command"
    elif managed and wrapped:
        assert record is not None
        changed = sorted(k for k, v in record.managed_env.items() if (state.env or {}).get(k) != v)
        if changed:
            note = "managed settings changed by hand: " + ", ".join(changed)
    elif shimargs.foreign_relay(state.command):
        note = f"runs through {shimargs.foreign_relay(state.command)}"
    return Status(name, project, "stdio", wrapped, managed, recoverable, note, without_shim)
