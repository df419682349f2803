"""Starting the daemon when none listens: under a spawn lock, in its own session, waited for.

- Under an exclusive ``flock`` on ``<socket dir>/spawn.lock``, with the connect retried under the
  lock first, so of many shims starting at once exactly one spawns the daemon. The socket dir
  must be private: every hello carries its shim's whole environment, secrets included.
- The daemon is `python -m lazyd.daemon` of this shim's interpreter, with the allowlisted
  environment of lazyd/host/daemonenv.py, never this shim's (docs/configuration.md, "The daemon's
  environment"), started detached (shim/detach.py) so that it outlives the client's kill of the
  shim's group or tree.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from lazyd.errors import SetupError, Unavailable

from .dial import BUSY_WAIT_S, POLL_S, NoDaemon, budget, connect_once

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from .detach import Detached

AUTOSTART_WAIT_S = 5.0  # a freshly spawned daemon may take this long to accept connections
SPAWN_LOCK_WAIT_S = AUTOSTART_WAIT_S + 2.0  # the lock holder keeps it for one autostart wait and the spawn
ALREADY_RUNNING_POLL_S = 0.5
# How long to keep polling after the spawned daemon said "already running" before spawning again:
# a stopping daemon holds the lock for seconds, and each spawn costs a Python start-up.
DAEMON_BAD_FILE_STATUS = 2  # the daemon's exit status for a file the user must fix (lazyd/daemon/startup.py)


def _lock(fd: int, wait_s: float) -> None:
    import fcntl

    give_up = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= give_up:
                raise Unavailable("timed out waiting for another shim that is starting the daemon") from None
            time.sleep(POLL_S)


def daemon_argv(path: str, explicit: bool) -> list[str]:
    """The command that starts the daemon (``--socket`` only when the path was chosen explicitly).

    --stderr-until-ready: a start-up failure comes on the pipe, which is closed once the daemon
    listens. The daemon runs in /, so a relative --socket is made absolute here."""
    return [sys.executable, "-m", "lazyd.daemon", "--stderr-until-ready"] + (
        ["--socket", os.path.abspath(path)] if explicit else [])


def autostart(path: str, explicit: bool, log: Callable[[str], None], deadline: float | None) -> socket.socket:
    from lazyd.host.privatefiles import ensure_private_dir

    directory = os.path.dirname(path) or "."
    try:
        ensure_private_dir(Path(directory), what="socket dir")
    except SetupError as exc:
        raise Unavailable(str(exc), final=True) from None
    lock_path = os.path.join(directory, "spawn.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise Unavailable(f"cannot open {lock_path}: {exc.strerror}", final=True) from None
    try:
        _lock(fd, budget(SPAWN_LOCK_WAIT_S, deadline))
        try:
            # Another shim may have started the daemon while we waited for the lock.
            return connect_once(path, time.monotonic() + budget(BUSY_WAIT_S, deadline))
        except NoDaemon:
            pass
        argv = daemon_argv(path, explicit)
        from lazyd.host import daemonenv, sockpath

        from .detach import launch

        started = time.monotonic()
        # The allowlisted part of this shim's environment, with the runtime dir found without
        # XDG_RUNTIME_DIR: the daemon listens where a terminal's lazyctl looks.
        environ = daemonenv.base(os.environ, sockpath.login_runtime_dir())
        try:
            proc = launch(argv, environ)
        except OSError as exc:
            raise Unavailable(f"cannot start the daemon (setsid(1)): {exc.strerror or exc}", final=True) from None
        log(f"spawned the daemon: {argv}")
        try:
            return _await_daemon(proc, path, started, log, deadline)
        finally:
            proc.close()
    finally:
        os.close(fd)  # releases the flock


def _await_daemon(proc: Detached, path: str, started: float, log: Callable[[str], None],
                  deadline: float | None) -> socket.socket:
    """Poll until the spawned daemon accepts a connection; Unavailable (with its reason) if it exits."""
    give_up = time.monotonic() + budget(AUTOSTART_WAIT_S, deadline)
    already_running_since: float | None = None
    while True:
        exited = proc.poll()
        try:
            sock = connect_once(path, give_up)
            log(f"daemon accepted a connection after {(time.monotonic() - started) * 1000:.1f}ms")
            return sock
        except NoDaemon:
            pass
        if exited is not None:
            # 0: another daemon holds the instance lock yet does not accept (it is stopping): poll
            # a while, then let the caller retry. Anything else: this daemon cannot start.
            if exited != 0:
                reason = proc.reason()
                if exited == DAEMON_BAD_FILE_STATUS and reason:
                    raise Unavailable(f"lazyd cannot start: {reason}", user_error=True)
                detail = f": {reason}" if reason else ""
                status = f" with status {exited}" if exited > 0 else ""
                raise Unavailable(f"the daemon exited{status}{detail}", final=True)
            if already_running_since is None:
                already_running_since = time.monotonic()
            elif time.monotonic() - already_running_since >= ALREADY_RUNNING_POLL_S:
                raise Unavailable("the daemon exited with status 0: another one is still stopping")
        if time.monotonic() >= give_up:
            raise Unavailable(f"the daemon did not accept connections within {AUTOSTART_WAIT_S:g}s")
        time.sleep(POLL_S)

