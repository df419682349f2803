"""Starting the daemon when none listens: under a spawn lock, in its own session, waited for.

- Autostart happens under an exclusive ``flock`` on ``<socket dir>/spawn.lock``, and the connect is
  retried under the lock first, so of many shims starting at once exactly one spawns the daemon.
  The socket dir is created 0700 when missing and must be ours and private when present (it is
  never chmod-ed): every session's hello carries its shim's whole environment, secrets included.
- The daemon is `python -m lazyd.daemon` of the interpreter this shim runs in: the lazyd
  installed with it, nothing the environment names. Its environment is the allowlist of
  lazyd/host/daemonenv.py, never this shim's: the variables a client gave one registration stay out
  of the daemon every client shares (docs/configuration.md, "The daemon's environment").
- The daemon is started detached (shim/detach.py): in no session, process group or ancestry of
  the shim's, since clients kill the shim's group or its whole process tree when they are done
  and the daemon, its servers and its cache must outlive that; with cwd /, stdin and stdout on
  /dev/null, a stderr pipe that carries its reason if it cannot start, and no inherited fds.
- Every wait is bounded by a named budget, and by the caller's overall deadline when one is given.
"""

from __future__ import annotations

import os
import stat
import sys
import time

from lazyd.errors import Unavailable

from .dial import BUSY_WAIT_S, POLL_S, NoDaemon, budget, connect_once

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable
    from typing import Any

AUTOSTART_WAIT_S = 5.0
# How long a freshly spawned daemon may take to accept connections (python + trio import ~0.5 s).


SPAWN_LOCK_WAIT_S = AUTOSTART_WAIT_S + 2.0
# The lock holder keeps it for at most one autostart wait plus the spawn itself.


ALREADY_RUNNING_POLL_S = 0.5
# How long to keep polling after the spawned daemon said "already running" before spawning again:
# a stopping daemon holds the lock for seconds, and each spawn costs a Python start-up (~0.3 s CPU).


DAEMON_BAD_FILE_STATUS = 2
# The daemon's exit status for a file the user must fix (config, state file): see
# lazyd/daemon/startup.py. Running the server directly would hide that mistake.

MAX_DAEMON_STDERR_BYTES = 64 * 1024
# What is read of a daemon's stderr when it failed to start: its reason is its last line.


def _ensure_private_dir(directory: str) -> None:
    """Create ``directory`` (and missing parents) 0700, or check an existing one is ours and private."""
    missing: list[str] = []
    probe = directory
    while probe and not os.path.lexists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # another shim created it in between; checked below like any existing dir
        except OSError as exc:
            raise Unavailable(f"cannot create {path}: {exc.strerror}", final=True) from None
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise Unavailable(f"cannot check {directory}: {exc.strerror}", final=True) from None
    if not stat.S_ISDIR(st.st_mode):
        raise Unavailable(f"{directory} is not a directory (or is a symlink)", final=True)
    if st.st_uid != os.geteuid():
        raise Unavailable(f"{directory} is owned by uid {st.st_uid}, not by this user", final=True)
    if st.st_mode & 0o077:
        raise Unavailable(f"{directory} has mode {st.st_mode & 0o777:04o}; it must be private (0700)", final=True)


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
    """The command that starts the daemon (``--socket`` only when the path was chosen explicitly)."""
    # --stderr-until-ready: a start-up failure is written to the pipe read below, then the daemon
    # stops writing to it, so the pipe can be closed once the daemon listens.
    # The daemon runs in /, so a relative --socket is made absolute here, where it was meant.
    return [sys.executable, "-m", "lazyd.daemon", "--stderr-until-ready"] + (
        ["--socket", os.path.abspath(path)] if explicit else [])


def daemon_environ() -> dict[str, str]:
    """The daemon's environment: the allowlisted part of this shim's (lazyd/host/daemonenv.py), with the
    runtime dir this shim found without ``XDG_RUNTIME_DIR`` (so the daemon listens where a
    terminal's lazyctl looks, and its servers see the session's runtime dir)."""
    from lazyd.host import daemonenv, sockpath

    return daemonenv.base(os.environ, sockpath.login_runtime_dir(os.environ))


def autostart(path: str, explicit: bool, log: Callable[[str], None], deadline: float | None) -> socket.socket:
    directory = os.path.dirname(path) or "."
    _ensure_private_dir(directory)
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
        from .detach import launch

        started = time.monotonic()
        try:
            proc = launch(argv, budget(AUTOSTART_WAIT_S, deadline), daemon_environ())
        except OSError as exc:
            raise Unavailable(f"cannot start the daemon ({argv[0]}): {exc.strerror or exc}", final=True) from None
        log(f"spawned daemon pid {proc.pid}: {argv}")
        try:
            return _await_daemon(proc, path, started, log, deadline)
        finally:
            proc.close()  # the watcher exits: from here on the daemon is nobody's child
            if proc.stderr is not None:
                proc.stderr.close()  # a live daemon no longer writes to it (--stderr-until-ready)
    finally:
        os.close(fd)  # releases the flock


def _await_daemon(proc: Any, path: str, started: float, log: Callable[[str], None],
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
            # Any status but 0 is a daemon that cannot start. Exiting 0 means another daemon
            # holds the instance lock ("already running") yet does not accept: it is stopping,
            # and retrying will help once it is gone. Poll a while first, so that shims waiting
            # for it spawn a few short-lived daemons per second, not one per poll.
            if exited != 0:
                reason = _last_line(proc.stderr)
                if exited == DAEMON_BAD_FILE_STATUS and reason:
                    raise Unavailable(f"lazyd cannot start: {reason}", user_error=True)
                detail = f": {reason}" if reason else ""
                raise Unavailable(f"the daemon exited with status {exited}{detail}", final=True)
            if already_running_since is None:
                already_running_since = time.monotonic()
            elif time.monotonic() - already_running_since >= ALREADY_RUNNING_POLL_S:
                raise Unavailable("the daemon exited with status 0: another one is still stopping")
        if time.monotonic() >= give_up:
            raise Unavailable(f"the daemon did not accept connections within {AUTOSTART_WAIT_S:g}s")
        time.sleep(POLL_S)


def _last_line(pipe: Any) -> str:
    """The last line a dead daemon wrote to its stderr pipe, without its "lazyd: " prefix.

    Read without blocking: the daemon has exited, so what it wrote is in the pipe already, and a
    process that inherited the pipe must not make the shim wait."""
    if pipe is None:
        return ""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    data = b""
    try:
        while len(data) < MAX_DAEMON_STDERR_BYTES:
            chunk = os.read(fd, MAX_DAEMON_STDERR_BYTES - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last.removeprefix("lazyd: ")[:1000]
