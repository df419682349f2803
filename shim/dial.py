"""Dialling the daemon: one connect to its socket, and the daemon started first when none listens.

Only ECONNREFUSED and ENOENT mean "no daemon" (`NoDaemon`); EAGAIN is a live daemon with a full
backlog: waited out, never answered with a second daemon. Before anything is sent the peer's uid
must be ours: the hello carries this shim's whole environment, secrets included.

Starting the daemon (`start_daemon`):

- Under an exclusive ``flock`` on ``<socket dir>/spawn.lock``, with the connect retried under the
  lock first, so of many shims starting at once exactly one spawns the daemon. The socket dir
  must be private, for the same reason.
- The daemon is `python -m lazyd.daemon` of this shim's interpreter, with the allowlisted
  environment of lazyd/host/daemonenv.py (docs/configuration.md, "The daemon's environment"),
  started by util-linux's ``setsid --fork``: reparented to init, in none of the shim's session,
  group or ancestry, it outlives a client that kills the shim's group or (opencode) every
  descendant of it. Its cwd is /, its stdin and stdout /dev/null, it has no other descriptor.
- Only a parent reads an exit status, and the shim is not the daemon's: the daemon's stderr is a
  pipe of the shim's, which it closes once it listens (``--stderr-until-ready``); if it exits
  first, its last line is ``exit N`` (lazyd/daemon/__main__.py). So the shim reads that pipe to
  its end, then connects.
"""

from __future__ import annotations

import _socket
import os
import struct
import sys
import time

from lazyd.errors import NoDaemon, SetupError, Unavailable

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

# The C socket type itself (socket.socket's base): importing `socket` builds enums from every
# constant, and every method the shim calls is the C one's.
_AF_UNIX, _SOCK_STREAM, _SOCK_CLOEXEC = _socket.AF_UNIX, _socket.SOCK_STREAM, _socket.SOCK_CLOEXEC

BUSY_WAIT_S = 5.0  # retrying a daemon whose listen backlog is full (EAGAIN)
POLL_S = 0.01  # between tries of a connect or of the spawn lock
AUTOSTART_WAIT_S = 5.0  # a freshly spawned daemon may take this long to accept connections
SPAWN_LOCK_WAIT_S = AUTOSTART_WAIT_S + 2.0  # the lock holder keeps it for one autostart wait and the spawn
# How long to keep polling after the spawned daemon said "already running" before spawning again:
# a stopping daemon holds the lock for seconds, and each spawn costs a Python start-up.
ALREADY_RUNNING_POLL_S = 0.5
DAEMON_BAD_FILE_STATUS = 2  # the daemon's exit status for a file the user must fix (lazyd/daemon/startup.py)
MAX_STDERR_BYTES = 64 * 1024  # what is kept of a daemon's stderr while it starts (the end of it)
SETSIDS = ("/usr/bin/setsid", "/bin/setsid")  # util-linux's, as flock(1) is (shim/slots.py)

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def budget(budget_s: float, deadline: float | None) -> float:
    if deadline is None:
        return budget_s
    return max(0.0, min(budget_s, deadline - time.monotonic()))


def connect_once(path: str, deadline: float) -> socket.socket:
    """One connect, retried while the daemon is busy (EAGAIN), to a daemon of this user. Raises
    NoDaemon or Unavailable."""
    while True:
        sock: socket.socket = _socket.socket(_AF_UNIX, _SOCK_STREAM | _SOCK_CLOEXEC)  # type: ignore[assignment]
        try:
            # A timeout makes connect non-blocking: a full backlog gives EAGAIN, not a kernel sleep.
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise NoDaemon(exc.strerror or str(exc)) from None
        except (BlockingIOError, TimeoutError):
            sock.close()  # EAGAIN: alive but its backlog is full
        except OSError as exc:
            sock.close()
            raise Unavailable(f"cannot connect to {path}: {exc.strerror or exc}", final=True) from None
        else:
            _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _PEERCRED.size))
            if uid == os.geteuid():
                return sock
            sock.close()
            raise Unavailable(f"{path} is served by uid {uid}, not by this user", final=True)
        if time.monotonic() >= deadline:
            raise Unavailable(f"the daemon at {path} is too busy to accept a connection")
        time.sleep(POLL_S)


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
    The daemon runs in /, so a relative --socket is made absolute here."""
    return [sys.executable, "-m", "lazyd.daemon", "--stderr-until-ready"] + (
        ["--socket", os.path.abspath(path)] if explicit else [])


def start_daemon(path: str, explicit: bool, log: Callable[[str], None], deadline: float | None) -> socket.socket:
    """Start the daemon at `path` (see the module docstring) and return a connected socket."""
    from pathlib import Path

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

        started = time.monotonic()
        # The allowlisted part of this shim's environment, with the runtime dir found without
        # XDG_RUNTIME_DIR: the daemon listens where a terminal's lazyctl looks.
        environ = daemonenv.base(os.environ, sockpath.login_runtime_dir())
        try:
            stderr = launch(argv, environ)
        except OSError as exc:
            raise Unavailable(f"cannot start the daemon (setsid(1)): {exc.strerror or exc}", final=True) from None
        log(f"spawned the daemon: {argv}")
        give_up = time.monotonic() + budget(AUTOSTART_WAIT_S, deadline)
        try:
            lines = stderr_until_ready(stderr, give_up)
        finally:
            os.close(stderr)
        sock = _connected(path, *outcome(lines), give_up)
        log(f"daemon accepted a connection after {(time.monotonic() - started) * 1000:.1f}ms")
        return sock
    finally:
        os.close(fd)  # releases the flock


def launch(argv: list[str], env: dict[str, str]) -> int:
    """Start `argv` as the daemon, detached (see the module docstring), with exactly `env` for its
    environment; returns the read end of its stderr. Raises OSError when setsid(1) cannot be run;
    the daemon's own failure to start comes on its stderr."""
    import subprocess

    setsid = next((path for path in SETSIDS if os.access(path, os.X_OK)), SETSIDS[0])
    err_r, err_w = os.pipe()
    try:
        # setsid exits as soon as it has forked the daemon: waited for here, never a zombie.
        subprocess.run([setsid, "--fork", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=err_w, close_fds=True, cwd="/", env=env, check=False)
    except OSError:
        os.close(err_r)
        raise
    finally:
        os.close(err_w)
    return err_r


def stderr_until_ready(fd: int, give_up: float) -> list[str]:
    """The non-blank lines a launched daemon wrote on its stderr `fd` until it closed it (it listens,
    or it exited); Unavailable if it still holds it at `give_up` (time.monotonic())."""
    import select

    said = b""
    while True:
        if not select.select([fd], [], [], max(0.0, give_up - time.monotonic()))[0]:
            raise Unavailable(f"the daemon did not accept connections within {AUTOSTART_WAIT_S:g}s")
        chunk = os.read(fd, MAX_STDERR_BYTES)
        if not chunk:
            return [line.strip() for line in said.decode("utf-8", "replace").splitlines() if line.strip()]
        said = (said + chunk)[-MAX_STDERR_BYTES:]


def outcome(lines: list[str]) -> tuple[int | None, str]:
    """The status of a daemon whose stderr said ``exit N`` last (None if it did not: it listens, or
    it died without saying: a signal, a crash, or setsid's own error), and the line before, its
    reason (without "lazyd: ")."""
    status = None
    if lines and lines[-1].startswith("exit ") and lines[-1][5:].lstrip("-").isdigit():
        status = int(lines.pop()[5:])
    return status, lines[-1].removeprefix("lazyd: ")[:1000] if lines else ""


def _connected(path: str, status: int | None, reason: str, give_up: float) -> socket.socket:
    """The socket of a daemon whose stderr ended with `status` and `reason`; Unavailable saying why
    there is none."""
    if status == DAEMON_BAD_FILE_STATUS and reason:
        raise Unavailable(f"lazyd cannot start: {reason}", user_error=True)
    detail = f": {reason}" if reason else ""
    if status:
        raise Unavailable(f"the daemon exited with status {status}{detail}", final=True)
    # None: it listens, or it died without saying. 0: another daemon holds the instance lock; it
    # may be starting and about to accept, or stopping: poll a while, then let the caller retry.
    polled = time.monotonic() + ALREADY_RUNNING_POLL_S
    while True:
        try:
            return connect_once(path, give_up)
        except NoDaemon:
            pass
        if status is None:
            raise Unavailable(f"the daemon exited{detail}", final=True)
        if time.monotonic() >= min(polled, give_up):
            raise Unavailable("the daemon exited with status 0: another one is still stopping")
        time.sleep(POLL_S)
