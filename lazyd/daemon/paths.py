"""Where lazyd keeps its files: the one place that turns an environment into paths.

Rules, so that the daemon, `lazyctl` and the shim agree on the socket without talking:

- The socket is ``LAZYD_SOCKET`` if set, else ``<runtime base>/lazyd/lazyd.sock``. The runtime
  base is chosen the way ``platformdirs.user_runtime_dir()`` (>= 4.14) chooses it on Linux:
  ``$XDG_RUNTIME_DIR`` when it is absolute and private (missing, or a real directory of ours with
  mode 0700, under a chain of parents nobody else can replace), else ``/run/user/<euid>`` when it
  exists and passes the same check, else ``runtime-<euid>`` in the first usable temporary
  directory (``$TMPDIR``, ``$TEMP``, ``$TMP``, ``/tmp``, ``/var/tmp``, ``/usr/tmp``). This is the
  rule of ``lazyd.sockpath.runtime_dir``, which the shim uses too: one implementation for both.
- An explicit ``socket_override`` (the daemon's command line) beats ``LAZYD_SOCKET``.
- When the socket is overridden, the runtime dir is the socket's own directory and the lock is
  ``<socket>.lock``: single-instance means one daemon per socket, and two daemons on two sockets
  (tests, a second profile) must not fight over one lock.
- Config, cache and state follow the XDG base-dir spec the way platformdirs reads it: a variable
  counts only when it is set to an absolute path; otherwise ``$HOME/.config`` and friends, with a
  relative or missing ``HOME`` replaced by the password database entry.

The mapping passed in is the only environment consulted (platformdirs reads ``os.environ`` itself,
which tests cannot vary per call). The filesystem is only looked at (lstat, access), never
changed: the runtime base choice depends on it, exactly as the shim's does. Whatever is chosen
must still be validated before use, see ``lazyd.daemon.runtime_dir.ensure_private_dir`` (the temp
fallback is a predictable name others can squat).
"""

from __future__ import annotations

import os
import posixpath
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lazyd import sockpath
from lazyd.daemon.runtime_dir import SetupError

APP_NAME = "lazyd"
SOCKET_NAME = "lazyd.sock"
LOCK_NAME = "lazyd.lock"
CONFIG_NAME = "config.toml"
LOGS_NAME = "logs"
SOCKET_ENV = "LAZYD_SOCKET"


@dataclass(frozen=True)
class Paths:
    """Every file location the daemon uses, resolved once at start."""

    runtime_dir: Path
    socket: Path
    lock: Path
    config_file: Path
    cache_dir: Path
    state_dir: Path
    logs_dir: Path
    socket_overridden: bool = False  # LAZYD_SOCKET or --socket named it (runtime dir = its dir)


def resolve_paths(env: Mapping[str, str], socket_override: str | None = None) -> Paths:
    """Resolve all lazyd paths from ``env`` (see the module docstring for the rules).

    Raises SetupError when no absolute home directory can be found for the XDG defaults.
    """
    override = socket_override or env.get(SOCKET_ENV) or None
    if override is not None:
        socket_path = Path(override)
        runtime_dir = socket_path.parent
        lock = socket_path.with_name(socket_path.name + ".lock")
    else:
        runtime_dir = runtime_base(env) / APP_NAME
        socket_path = runtime_dir / SOCKET_NAME
        lock = runtime_dir / LOCK_NAME
    state_dir = _xdg_home(env, "XDG_STATE_HOME", ".local/state") / APP_NAME
    return Paths(
        runtime_dir=runtime_dir,
        socket=socket_path,
        lock=lock,
        config_file=_xdg_home(env, "XDG_CONFIG_HOME", ".config") / APP_NAME / CONFIG_NAME,
        cache_dir=_xdg_home(env, "XDG_CACHE_HOME", ".cache") / APP_NAME,
        state_dir=state_dir,
        logs_dir=state_dir / LOGS_NAME,
        socket_overridden=override is not None,
    )


def runtime_base(env: Mapping[str, str]) -> Path:
    """The per-user runtime directory that ``lazyd/`` lives in: the rule of `lazyd.sockpath`, which the
    shim uses to find the socket (one implementation, so the two can never disagree)."""
    return Path(sockpath.runtime_dir(env))


def _xdg_home(env: Mapping[str, str], variable: str, default_under_home: str) -> Path:
    # The spec says relative values are invalid and must be ignored, and platformdirs does so.
    value = env.get(variable, "")
    if posixpath.isabs(value):
        return Path(value)
    return _home(env) / default_under_home


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME", "")
    if posixpath.isabs(home):
        return Path(home)
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = ""
    if not posixpath.isabs(home):
        raise SetupError(
            f"cannot find a home directory for uid {os.getuid()}: set HOME or the XDG_*_HOME variables"
        )
    return Path(home)
