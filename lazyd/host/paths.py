"""Where lazyd keeps its files: the one place that turns the process environment into paths.

Rules, so that the daemon, ``lazyctl`` and the shim agree on the socket without talking:

- The socket is ``LAZYD_SOCKET`` if set, else ``<runtime base>/lazyd/lazyd.sock``, the runtime
  base being ``lazyd.host.sockpath.runtime_dir``: ``platformdirs.user_runtime_dir()``'s rule, written
  out without platformdirs because the shim, which must start fast, resolves it too. One
  implementation for all three, and a test holds it to platformdirs' own answer.
- An explicit ``socket_override`` (the daemon's ``--socket``) beats ``LAZYD_SOCKET``.
- When the socket is overridden, the runtime dir is the socket's own directory and the lock is
  ``<socket>.lock``: single-instance means one daemon per socket, and two daemons on two sockets
  (tests, a second profile) must not fight over one lock.
- Config, cache and state are platformdirs' ``user_config_dir``, ``user_cache_dir`` and
  ``user_state_dir`` for "lazyd": the XDG base-dir variables when they are absolute paths, else
  ``$HOME/.config`` and friends, with a relative or missing ``HOME`` replaced by the password
  database entry. No home at all is a SetupError (platformdirs' RuntimeError, mapped here).

The process environment is the one consulted, as platformdirs consults it: a daemon and a lazyctl
resolve their own paths. The filesystem is only looked at (lstat, access), never changed.
Whatever is chosen must still be validated before use, see ``lazyd.host.privatefiles.ensure_private_dir``
(the temp fallback is a predictable name others can squat).

platformdirs is not the standard library: this module is for the daemon and lazyctl, never the
shim (docs/architecture.md, "The floors").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lazyd.host import sockpath
from lazyd.errors import SetupError

__all__ = ["APP_NAME", "SOCKET_ENV", "MAX_START_RECORD_BYTES", "Paths", "resolve_paths", "start_record_path"]

APP_NAME = "lazyd"
SOCKET_NAME = "lazyd.sock"
LOCK_NAME = "lazyd.lock"
CONFIG_NAME = "config.toml"
LOGS_NAME = "logs"
SOCKET_ENV = "LAZYD_SOCKET"
START_RECORD_SUFFIX = ".error"  # the start-up record a daemon that could not start leaves beside its socket
MAX_START_RECORD_BYTES = 16 * 1024  # one line and a few fields; lazyctl reads no more than this


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


def resolve_paths(socket_override: str | None = None) -> Paths:
    """Resolve all lazyd paths from the process environment (see the module docstring).

    Raises SetupError when no absolute home directory can be found for the XDG defaults.
    """
    env = os.environ
    override = socket_override or env.get(SOCKET_ENV) or None
    if override is not None:
        socket_path = Path(override)
        runtime_dir = socket_path.parent
        lock = socket_path.with_name(socket_path.name + ".lock")
    else:
        runtime_dir = Path(sockpath.runtime_dir(env)) / APP_NAME
        socket_path = runtime_dir / SOCKET_NAME
        lock = runtime_dir / LOCK_NAME
    config_dir, cache_dir, state_dir = _user_dirs()
    return Paths(
        runtime_dir=runtime_dir,
        socket=socket_path,
        lock=lock,
        config_file=config_dir / CONFIG_NAME,
        cache_dir=cache_dir,
        state_dir=state_dir,
        logs_dir=state_dir / LOGS_NAME,
        socket_overridden=override is not None,
    )


def _user_dirs() -> tuple[Path, Path, Path]:
    # Imported here, not at the top: lazyctl imports this module for a few commands only, and
    # platformdirs (with tempfile) costs milliseconds that the others need not pay.
    import platformdirs

    try:
        return (Path(platformdirs.user_config_dir(APP_NAME)), Path(platformdirs.user_cache_dir(APP_NAME)),
                Path(platformdirs.user_state_dir(APP_NAME)))
    except RuntimeError:  # platformdirs: "could not determine the home directory"
        raise SetupError(
            f"cannot find a home directory for uid {os.getuid()}: set HOME or the XDG_*_HOME variables"
        ) from None


def start_record_path(socket_path: str | os.PathLike[str]) -> Path:
    """Where the start-up record of the daemon of `socket_path` is kept: written by a daemon that
    could not start, removed by the next that does, shown by lazyctl when no daemon answers."""
    path = Path(socket_path)
    return path.with_name(path.name + START_RECORD_SUFFIX)
