"""Where lazyd keeps its files: the one place that turns the process environment into paths.

- The socket is ``--socket``, else ``LAZYD_SOCKET``, else ``<runtime dir>/lazyd/lazyd.sock``, the
  runtime dir by ``lazyd.host.sockpath.runtime_dir`` (platformdirs' rule without platformdirs,
  for the shim). An overridden socket's runtime dir is its own directory and its lock
  ``<socket>.lock``: two daemons on two sockets must not fight over one lock.
- Config, cache and state are platformdirs' user dirs for "lazyd"; no home at all is a SetupError.

Nothing here is created or validated: see ``lazyd.host.privatefiles.ensure_private_dir``.
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
