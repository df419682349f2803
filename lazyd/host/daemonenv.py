"""The daemon's environment: a fixed allowlist, the same whoever started it.

A daemon a client's shim autostarts would otherwise inherit what the client gave that one
registration (API tokens among them): it would reach every named server and change how the daemon
behaves depending on who started it. `base` is what a login session gives every program
(docs/configuration.md, "The daemon's environment", says why each name is there and what is left
out); `own` adds the daemon's own variables and the names its config expands (the config author's
choice, never a client's). Standard library only: the shim uses it when it starts the daemon.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the shim imports this when it starts the daemon
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

BASE_NAMES = frozenset({
    "HOME", "USER", "LOGNAME", "SHELL", "PATH", "TMPDIR",
    "LANG", "LANGUAGE", "TZ",
    "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
    "XDG_CONFIG_DIRS", "XDG_DATA_DIRS",
    "DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
})
BASE_PREFIXES = ("LC_",)

DAEMON_NAMES = frozenset({
    "LAZYD_SOCKET",  # where it listens (docs/configuration.md); a shim passes --socket instead
    "LAZYD_FDSTORE", "LAZYD_INHERITED_NOFILE",  # set by the systemd unit (docs/systemd.md)
    "LAZYD_UPGRADE",  # a predecessor's hand-over (lazyd/daemon/upgrade/state.py), read at start
    # systemd's per-service variables (lazyd/daemon/systemd_env.py): read, then removed, at start
    "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
})


def is_base(name: str) -> bool:
    return name in BASE_NAMES or name.startswith(BASE_PREFIXES)


def base(env: Mapping[str, str], runtime_dir: str | None = None) -> dict[str, str]:
    """The allowlisted part of `env`: what the daemon gives named servers and wake predicates
    under their own ``env``. `runtime_dir`, the user's runtime directory when it was found without
    ``XDG_RUNTIME_DIR`` (``/run/user/<uid>``), is set as ``XDG_RUNTIME_DIR``."""
    kept = {name: value for name, value in env.items() if is_base(name)}
    if runtime_dir and not kept.get("XDG_RUNTIME_DIR"):
        kept["XDG_RUNTIME_DIR"] = runtime_dir
    return kept


def own(env: Mapping[str, str], runtime_dir: str | None = None, expanded: Iterable[str] = ()) -> dict[str, str]:
    """The daemon's whole environment: `base`, the daemon's own variables, and the variables its
    config expands (`expanded`: names of ``${VAR}``), each only when `env` has it."""
    kept = base(env, runtime_dir)
    for name in (*DAEMON_NAMES, *expanded):
        if name in env:
            kept[name] = env[name]
    return kept
