"""Where lazyd keeps its files: the one place that turns the process environment into paths.

- The socket is ``--socket``, else where ``lazyd.host.sockpath`` finds it (the shim's rule). Its
  directory is the runtime dir; the lock beside it is ``lazyd.lock``, or ``<socket>.lock`` for a
  socket named by ``--socket`` or ``LAZYD_SOCKET``: two daemons on two sockets must not fight
  over one lock.
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
    """All lazyd paths from the process environment, by the module docstring's rules; SetupError
    when no absolute home directory can be found for the XDG defaults."""
    overridden = bool(socket_override or os.environ.get("LAZYD_SOCKET"))
    socket_path = Path(socket_override or sockpath.default_socket_path(os.environ))
    lock_name = f"{socket_path.name}.lock" if overridden else "lazyd.lock"
    config_dir, cache_dir, state_dir = _user_dirs()
    return Paths(runtime_dir=socket_path.parent, socket=socket_path, lock=socket_path.with_name(lock_name),
                 config_file=config_dir / "config.toml", cache_dir=cache_dir, state_dir=state_dir,
                 logs_dir=state_dir / "logs", socket_overridden=overridden)


def _user_dirs() -> tuple[Path, Path, Path]:
    # Imported here, not at the top: lazyctl imports this module for a few commands only, and
    # platformdirs (with tempfile) costs milliseconds that the others need not pay.
    import platformdirs

    try:
        return (Path(platformdirs.user_config_dir("lazyd")), Path(platformdirs.user_cache_dir("lazyd")),
                Path(platformdirs.user_state_dir("lazyd")))
    except RuntimeError:  # platformdirs: "could not determine the home directory"
        raise SetupError(
            f"cannot find a home directory for uid {os.getuid()}: set HOME or the XDG_*_HOME variables"
        ) from None


def start_record_path(socket_path: str | os.PathLike[str]) -> Path:
    """Where the start-up record of the daemon of `socket_path` is kept: written by a daemon that
    could not start, removed by the next that does, shown by lazyctl when no daemon answers."""
    path = Path(socket_path)
    return path.with_name(path.name + ".error")
