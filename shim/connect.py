"""Getting a session with the daemon: socket path, connect, autostart under a spawn lock, hello.

``open_session`` is the one entry point; it either returns a connected, welcomed ``Connection`` or
raises ``Unavailable`` with a short reason (shown to the user as ``daemon unavailable (<reason>)``).

Rules, in the order they apply:

- Only ECONNREFUSED and ENOENT mean "no daemon": a socket file nobody listens on, or none at all.
  EAGAIN means a live daemon whose backlog is full: wait and retry, never start a second one.
- Autostart happens under an exclusive ``flock`` on ``<socket dir>/spawn.lock``, and the connect is
  retried under the lock first, so of many shims starting at once exactly one spawns the daemon.
  The socket dir is created 0700 when missing and must be ours and private when present (it is
  never chmod-ed): the daemon will receive this shim's whole environment, secrets included.
- The daemon is started in its own session (the client kills the shim's process group when it
  exits; the daemon must outlive that), with stdio on /dev/null and no inherited fds.
- Before the hello is sent, the peer's uid (SO_PEERCRED) must be ours, for the same reason.
- Every wait is bounded by a named budget, and by the caller's overall deadline when one is given.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import sys
import time

from lazyd import sockpath, wire
from lazyd.errors import LazydError, Unavailable, WireError
from lazyd.frames import ForeignWelcome, Hello, Refusal, Welcome

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .options import Log, Options

AUTOSTART_WAIT_S = 5.0
# How long a freshly spawned daemon may take to accept connections (python + trio import ~0.5 s).

HELLO_WAIT_S = 10.0
# How long the daemon may take to answer a hello (it may be busy loading its cache from disk).

BUSY_WAIT_S = 5.0
# How long to keep retrying a daemon whose listen backlog is full (EAGAIN) before giving up.

SPAWN_LOCK_WAIT_S = AUTOSTART_WAIT_S + 2.0
# The lock holder keeps it for at most one autostart wait plus the spawn itself.

POLL_S = 0.01
# Between connect attempts while a daemon starts: short, since a connect attempt costs microseconds.

ALREADY_RUNNING_POLL_S = 0.5
# How long to keep polling after the spawned daemon said "already running" before spawning again:
# a stopping daemon holds the lock for seconds, and each spawn costs a Python start-up (~0.3 s CPU).

DAEMON_ARGV_ENV = "LAZYD_DAEMON_ARGV"
# Undocumented test seam: a JSON argv that replaces `python -m lazyd.daemon` for autostart.

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

# Kept so the Popen object (and its pid) is not collected while the daemon runs.
_spawned: list[Any] = []


DAEMON_BAD_FILE_STATUS = 2
# The daemon's exit status for a file the user must fix (config, state file): see
# lazyd/daemon/startup.py. Running the server directly would hide that mistake.

MAX_DAEMON_STDERR_BYTES = 64 * 1024
# What is read of a daemon's stderr when it failed to start: its reason is its last line.


class _NoDaemon(LazydError):
    """ECONNREFUSED or ENOENT: nobody listens on the socket path."""


class Connection:
    """A welcomed session: the socket, its frame reader (which may hold frames already), the welcome."""

    def __init__(self, sock: socket.socket, reader: wire.BlockingFrameReader, welcome: Welcome) -> None:
        self.sock = sock
        self.reader = reader
        self.welcome = welcome


def socket_path(opts: Options) -> str:
    """The socket to use: --socket / LAZYD_SOCKET, else the default for this environment."""
    return opts.socket if opts.socket is not None else sockpath.default_socket_path(os.environ)


def build_hello(opts: Options, resume: list[bytes]) -> Hello:
    """The hello frame for this shim (see docs/protocol.md)."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = os.environ.get("PWD", "/")  # the cwd was removed under us; the client's view is next best
    env: dict[str, str] = {}
    raw: list[tuple[bytes, bytes]] = []
    for name, value in os.environb.items():
        try:
            env[name.decode("utf-8")] = value.decode("utf-8")
        except UnicodeDecodeError:
            raw.append((name, value))  # passed as bytes: the server still gets it exactly
    return Hello("shim", os.getpid(), list(opts.command), cwd, env, dict(opts.daemon_opts), opts.server,
                 list(resume), raw)


def open_session(opts: Options, resume: list[bytes], log: Log, deadline: float | None = None) -> Connection:
    """Connect (autostarting the daemon if allowed), say hello, and return the welcomed connection.

    ``deadline`` (time.monotonic()) caps every wait. Raises Unavailable; closes the socket on failure.
    """
    try:
        frame = wire.encode(build_hello(opts, resume))
    except (UnicodeError, ValueError, TypeError) as exc:
        # Surrogate-escaped (non UTF-8) argv or environment, or a hello over the frame limit.
        raise Unavailable(f"cannot describe this command to the daemon: {exc}", final=True) from None
    path = socket_path(opts)
    started = time.monotonic()
    sock = _connect_or_autostart(path, opts, log, deadline)
    try:
        _check_peer(sock, path)
        sock.settimeout(_budget(HELLO_WAIT_S, deadline))
        sock.sendall(frame)
        reader = wire.BlockingFrameReader(sock)
        reply = reader.read()
        sock.settimeout(None)
    except Unavailable:
        sock.close()
        raise
    except TimeoutError:
        sock.close()
        raise Unavailable("the daemon did not answer the hello in time") from None
    except (OSError, WireError) as exc:
        sock.close()
        raise Unavailable(f"the daemon broke the connection during the hello: {exc}") from None
    if reply is None:
        sock.close()
        raise Unavailable("the daemon closed the connection during the hello")
    if isinstance(reply, Refusal):
        sock.close()
        if reply.code == "options":
            # A bad shim option is the user's mistake, like every other bad option: exit 2.
            raise Unavailable(reply.message, user_error=True)
        raise Unavailable(f"refused by the daemon: {reply.message} [{reply.code}]", final=True)
    if isinstance(reply, ForeignWelcome):
        sock.close()
        raise Unavailable(
            f"the daemon speaks wire version {reply.v}, this shim {wire.WIRE_VERSION}; "
            "restart the daemon (lazyctl stop)",
            final=True,
        )
    if not isinstance(reply, Welcome):
        sock.close()
        raise Unavailable(f"the daemon answered the hello with a {reply.t!r} frame", final=True)
    log(f"session {reply.session} ({reply.name}) with daemon pid {reply.daemon_pid} "
        f"in {(time.monotonic() - started) * 1000:.1f}ms")  # fmt: skip
    return Connection(sock, reader, reply)


def _budget(budget_s: float, deadline: float | None) -> float:
    if deadline is None:
        return budget_s
    return max(0.0, min(budget_s, deadline - time.monotonic()))


def _check_peer(sock: socket.socket, path: str) -> None:
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    if uid != os.geteuid():
        raise Unavailable(f"{path} is served by uid {uid}, not by this user", final=True)


def _connect_once(path: str, deadline: float) -> socket.socket:
    """One connect, retried while the daemon is busy (EAGAIN). Raises _NoDaemon or Unavailable."""
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            # A timeout makes connect non-blocking underneath, so a full backlog gives EAGAIN
            # instead of sleeping in the kernel.
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise _NoDaemon(exc.strerror or str(exc)) from None
        except BlockingIOError:
            sock.close()  # EAGAIN: alive but its backlog is full
        except TimeoutError:
            sock.close()
        except OSError as exc:
            sock.close()
            raise Unavailable(f"cannot connect to {path}: {exc.strerror or exc}", final=True) from None
        if time.monotonic() >= deadline:
            raise Unavailable(f"the daemon at {path} is too busy to accept a connection")
        time.sleep(POLL_S)


def _connect_or_autostart(path: str, opts: Options, log: Log, deadline: float | None) -> socket.socket:
    return connect_or_start(path, opts.socket is not None, opts.autostart, log, deadline)


def connect_or_start(path: str, explicit: bool, autostart: bool, log: Callable[[str], None],
                     deadline: float | None) -> socket.socket:
    """A connected socket to the daemon at `path`, started first (as a shim starts it) when none
    listens and `autostart` allows; `explicit`: the path was chosen (--socket, LAZYD_SOCKET), so the
    daemon is told it. Raises Unavailable. Also what `lazyctl check` uses to start the daemon."""
    try:
        return _connect_once(path, time.monotonic() + _budget(BUSY_WAIT_S, deadline))
    except _NoDaemon as exc:
        reason = str(exc)
    if not explicit:
        # No daemon where this environment points: the client may have dropped XDG_RUNTIME_DIR
        # (Codex does). The user's daemon, wherever it listens, is recorded under HOME.
        found = _discovered(path, log, deadline)
        if found is not None:
            return found
    if not autostart:
        raise Unavailable(f"no daemon at {path}: {reason}; autostart is off")
    log(f"no daemon at {path} ({reason}); autostarting")
    return _autostart(path, explicit, log, deadline)


def _discovered(path: str, log: Callable[[str], None], deadline: float | None) -> socket.socket | None:
    for pid, other in sockpath.discovered_daemons(os.environ):
        if other == path:
            continue
        try:
            sock = _connect_once(other, time.monotonic() + _budget(BUSY_WAIT_S, deadline))
        except (_NoDaemon, Unavailable):
            continue
        log(f"found daemon pid {pid} at {other} through its record under HOME")
        return sock
    return None


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
    override = os.environ.get(DAEMON_ARGV_ENV, "")
    if override:
        import json

        try:
            argv = json.loads(override)
        except ValueError:
            argv = None
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise Unavailable(f"{DAEMON_ARGV_ENV} is not a JSON list of strings", final=True)
    else:
        argv = [sys.executable, "-m", "lazyd.daemon"]
    # --stderr-until-ready: a start-up failure is written to the pipe read below, then the daemon
    # stops writing to it, so the pipe can be closed once the daemon listens.
    return argv + ["--stderr-until-ready"] + (["--socket", path] if explicit else [])


def _autostart(path: str, explicit: bool, log: Callable[[str], None], deadline: float | None) -> socket.socket:
    directory = os.path.dirname(path) or "."
    _ensure_private_dir(directory)
    lock_path = os.path.join(directory, "spawn.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise Unavailable(f"cannot open {lock_path}: {exc.strerror}", final=True) from None
    try:
        _lock(fd, _budget(SPAWN_LOCK_WAIT_S, deadline))
        try:
            # Another shim may have started the daemon while we waited for the lock.
            return _connect_once(path, time.monotonic() + _budget(BUSY_WAIT_S, deadline))
        except _NoDaemon:
            pass
        argv = daemon_argv(path, explicit)
        import subprocess

        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise Unavailable(f"cannot start the daemon ({argv[0]}): {exc.strerror or exc}", final=True) from None
        _spawned.append(proc)
        log(f"spawned daemon pid {proc.pid}: {argv}")
        try:
            return _await_daemon(proc, path, started, log, deadline)
        finally:
            if proc.stderr is not None:
                proc.stderr.close()  # a live daemon no longer writes to it (--stderr-until-ready)
    finally:
        os.close(fd)  # releases the flock


def _await_daemon(proc: Any, path: str, started: float, log: Callable[[str], None],
                  deadline: float | None) -> socket.socket:
    """Poll until the spawned daemon accepts a connection; Unavailable (with its reason) if it exits."""
    give_up = time.monotonic() + _budget(AUTOSTART_WAIT_S, deadline)
    already_running_since: float | None = None
    while True:
        exited = proc.poll()
        try:
            sock = _connect_once(path, give_up)
            log(f"daemon accepted a connection after {(time.monotonic() - started) * 1000:.1f}ms")
            return sock
        except _NoDaemon:
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
