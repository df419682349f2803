"""`lazyd`: the per-user daemon's entry point.

Start-up order matters: make and check the private runtime dir, read the config and the identity
key (lazyd.daemon.startup), take the single-instance lock, then take the systemd socket or bind our
own (a live socket is never replaced), and only then reduce the environment to the daemon's own
(lazyd/daemon/environment.py) and enter trio. A socket-activated daemon with a bad file stays up
and tells clients why (lazyd.daemon.config_wait). On a stop it drops every connection first (shims
reconnect to the next daemon), then stops the servers by the ladder in parallel. A daemon that
bound its own socket also stops once the name no longer leads to it (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import NoReturn

import trio

from lazyd.host import daemonenv, sockpath
from lazyd.config.load import Config, load_config
from lazyd.core.admission import Admission
from lazyd.daemon import environment, fdlimit, orphans, startup
from lazyd.daemon.config_wait import wait_for_files
from lazyd.daemon.upgrade.inherit import inherit, inherit_stored, take_envelope
from lazyd.daemon import crash_loop
from lazyd.daemon.handoff import stored_sessions
from lazyd.daemon.upgrade.stored_servers import FdStore, keep_standby, standby_path, stored_fds
from lazyd.daemon.heap_trim import HeapTrimmer
from lazyd.daemon.connections.listener import ConnectionHandler
from lazyd.daemon.connections.refusals import Refusals
from lazyd.daemon.control.ops import Control, status_summary
from lazyd.daemon.log import PrivateRotatingFileHandler
from lazyd.daemon.notify import Notifier
from lazyd.daemon.sessions.registry import Registry
from lazyd.daemon.runtime.memory_watch import MemoryWatch
from lazyd.daemon.runtime.cache_store import CacheStore, load_or_create_secret
from lazyd.daemon.runtime_dir import (acquire_instance_lock, bind_unix_socket, release_instance_lock, socket_identity,
                                      take_activated_socket)
from lazyd.daemon.systemd_env import ACTIVATION_VARS, NOTIFY_VARS
from lazyd.daemon.upgrade.handover import Lineage, Upgrader
from lazyd.daemon.upgrade.state import Envelope
from lazyd.errors import InheritError, AlreadyRunning, ConfigError, SetupError, StateFileError
from lazyd.host.paths import Paths, resolve_paths
from lazyd.host.privatefiles import ensure_private_dir

log = logging.getLogger("lazyd")

DAEMON_LOG_BYTES = 4 * 1024 * 1024  # the daemon's own log rotates at this size, one backup kept
SHUTDOWN_BOUND_S = 15.0  # every ladder is 2 s + 2 s; this bounds a shutdown stuck on anything else
LOW_NOFILE = 4096  # a descriptor limit below this one, not raisable, is worth a warning at start
OWNERSHIP_CHECK_INTERVAL_S = 5.0  # an lstat costs microseconds; 5 s keeps exit well inside a minute


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One readable line and exit 2, not argparse's usage block: bad input is not a traceback
        # or a wall of text.
        self.exit(2, f"lazyd: {message} (see lazyd --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lazyd",
        description="Per-user daemon that runs MCP servers lazily and shares them across clients. "
        "Usually started by lazyd-shim or by systemd (lazyd.socket); runs in the foreground.",
    )
    parser.add_argument("--socket", help="socket path (default: $XDG_RUNTIME_DIR/lazyd/lazyd.sock, or LAZYD_SOCKET)")
    parser.add_argument("--config", help="config file (default: ~/.config/lazyd/config.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every relay decision")
    parser.add_argument("--ownership-check-interval", type=_positive_seconds, default=OWNERSHIP_CHECK_INTERVAL_S,
                        metavar="SECONDS", help="how often to check that the socket is still ours; the daemon "
                        f"exits once it was removed or replaced (default: {OWNERSHIP_CHECK_INTERVAL_S:g})")
    parser.add_argument("--stderr-until-ready", action="store_true",
                        help="write to stderr only until the daemon listens (so a start-up error reaches "
                        "whoever started it), then only to its log file: how lazyd-shim and lazyctl "
                        "start it")
    parser.add_argument("--version", action="version", version="lazyd 0.1.0")
    return parser


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _setup_logging(paths: Paths, verbose: bool, stderr_detached: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    fmt = logging.Formatter(startup.LOG_FORMAT)
    root = logging.getLogger()
    root.setLevel(level)
    if not stderr_detached:  # detached, stderr is /dev/null: formatting each record for it was waste
        stderr = logging.StreamHandler()
        stderr.setFormatter(startup.OneLineFormatter(startup.LOG_FORMAT))
        root.addHandler(stderr)
    try:
        paths.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        handler = PrivateRotatingFileHandler(paths.state_dir / "lazyd.log", DAEMON_LOG_BYTES, 1)
        handler.setFormatter(fmt)
        root.addHandler(handler)
    except OSError as exc:
        log.warning("cannot write the daemon log in %s: %s", paths.state_dir, exc)


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    # First: everything after (the lock, the socket, the servers, every session) counts against it.
    limit = fdlimit.raise_soft_limit()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        raise SystemExit(2 if exc.code not in (0, None) else 0) from None
    try:
        paths = resolve_paths(args.socket)
    except SetupError as exc:
        startup.fail(None, str(exc), startup.EXIT_SETUP)
    try:
        # A predecessor's hand-over (lazyd/daemon/upgrade/handover.py): its listener and lock are ours.
        envelope = take_envelope(os.environ)
    except InheritError as exc:
        startup.fail(paths, str(exc), startup.EXIT_SETUP, record=False)
    try:
        activated = take_activated_socket(os.environ, os.getpid()) if envelope is None else None
        # Descriptors systemd kept for us across a crash (lazyd/daemon/upgrade/stored_servers.py), after the socket.
        stored = stored_fds(os.environ, int(os.environ.get("LISTEN_FDS") or 0)) if activated is not None else {}
        # The lock and the start-up record live in the runtime dir, so it is made private whoever
        # made the socket; only a socket systemd handed over at a path named for the daemon
        # (LAZYD_SOCKET, --socket) keeps its directory as the unit made it (the peer-uid check stands).
        is_activated = activated is not None or (envelope is not None and envelope.activated)
        private_runtime = not is_activated or not paths.socket_overridden
        if private_runtime:
            ensure_private_dir(paths.runtime_dir)
    except SetupError as exc:
        startup.fail(paths, str(exc), startup.EXIT_SETUP, record=False)
    config_path = Path(args.config) if args.config else paths.config_file
    started_with = environment.StartEnvironment(os.environ)  # ${VAR} expands from it (environment.py)

    def load_files() -> tuple[Config, bytes]:
        loaded = load_config(config_path, started_with)
        if args.config and loaded.source is None:
            # The default file may be missing; a file named on the command line must exist.
            raise ConfigError(f"{config_path}: no such file (--config names a file that must exist)")
        return loaded, load_or_create_secret(paths.state_dir)

    bad_file: str | None = None  # a socket-activated daemon waits for the fix (lazyd/daemon/config_wait.py)
    try:
        config, secret = load_files()
    except (ConfigError, StateFileError) as exc:
        if activated is None:
            startup.fail(paths, str(exc), startup.EXIT_BAD_FILE, record=private_runtime)
        bad_file = str(exc)
    except OSError as exc:
        startup.fail(paths, f"cannot prepare the state dir {paths.state_dir}: {exc.strerror or exc}",
                     startup.EXIT_SETUP, record=private_runtime)
    try:
        if envelope is None:
            lock_fd = acquire_instance_lock(paths.lock)
            sock = activated or bind_unix_socket(paths.socket)
        else:
            lock_fd, sock = envelope.lock, socket.socket(fileno=envelope.listener)
    except AlreadyRunning as exc:
        print(f"lazyd: already running ({exc})", file=sys.stderr)
        raise SystemExit(0) from None
    except SetupError as exc:
        startup.fail(paths, str(exc), startup.EXIT_SETUP, record=private_runtime)
    for name in ACTIVATION_VARS:
        os.environ.pop(name, None)  # never inherited by anything we start
    bound = None if is_activated else socket_identity(paths.socket)
    startup.clear_record(paths)
    if args.stderr_until_ready:
        startup.detach_stderr()
    _setup_logging(paths, args.verbose, args.stderr_until_ready)
    where = paths.socket if activated is None else startup.socket_name(activated, paths.socket)
    log.info("lazyd %d listening on %s%s%s", os.getpid(), where, " (socket activation)" if is_activated else "",
             f" (upgraded from lazyd {envelope.from_pid})" if envelope is not None else "")
    if limit.soft != limit.inherited:
        log.info("descriptor limit %d (raised from %d; hard %d); servers get %d", limit.soft, limit.inherited,
                 limit.hard, limit.inherited)
    elif limit.soft < LOW_NOFILE:
        log.warning("descriptor limit %d, and the hard limit is no higher: connections are refused near it "
                    "(a session takes 1 to 5); raise LimitNOFILE= or `ulimit -Hn`", limit.soft)
    # Where shims that compute another socket path (a client without XDG_RUNTIME_DIR) find us.
    record = sockpath.record_daemon(os.environ, os.getpid(), str(where))
    notify_env = {k: os.environ[k] for k in NOTIFY_VARS if k in os.environ}  # a successor needs them
    notifier = Notifier.from_environ()  # takes NOTIFY_SOCKET/WATCHDOG_* out of os.environ
    try:
        if bad_file is not None:
            startup.report(paths, bad_file, startup.EXIT_BAD_FILE, record=private_runtime)
            files = trio.run(partial(wait_for_files, sock, load_files, bad_file, config_path, notifier,
                                     partial(startup.report, paths, status=startup.EXIT_BAD_FILE,
                                             record=private_runtime, stderr=False)))
            startup.clear_record(paths)
            if files is None:
                raise SystemExit(0)
            config, secret = files
        # Before anything is started: servers, predicates and a successor inherit only this.
        environment.keep_own(started_with.expanded)
        started_with = environment.StartEnvironment({})  # from now on ${VAR} reads os.environ (reloads)
        trio.run(partial(serve, sock, paths, config, config_path, is_activated,
                         args.ownership_check_interval, secret, lock_fd=lock_fd, envelope=envelope, stored=stored,
                         notifier=notifier, notify_env=notify_env, nofile=limit.soft))
    except Exception as exc:
        # A bug, not a user's mistake: the traceback goes to the log file, one line to stderr.
        log.critical("lazyd stopped by an internal error: %r", exc, exc_info=True)
        if bound is not None and socket_identity(paths.socket) == bound:
            os.unlink(paths.socket)  # nobody answers on it any more: the next shim starts a daemon
        raise SystemExit(startup.EXIT_INTERNAL) from None
    finally:
        if record is not None:
            with contextlib.suppress(OSError):
                os.unlink(record)
        release_instance_lock(paths.lock, lock_fd)
    raise SystemExit(0)


async def serve(sock: socket.socket, paths: Paths, config: Config, config_path: Path, activated: bool,
                ownership_check_interval_s: float, secret: bytes, *, lock_fd: int, envelope: Envelope | None,
                stored: dict[str, int], notifier: Notifier, notify_env: dict[str, str], nofile: int) -> None:
    fdstore = FdStore.from_environ(notify_env, os.environ)
    # Hand-off sessions systemd kept across a crash (lazyd/daemon/handoff/stored_sessions.py): out of what the
    # servers' inheritance reads, taken back once the registry is up.
    if fdstore is not None:
        fdstore.given(stored)
    kept_sessions = stored_sessions.take_kept(stored)
    store = CacheStore(paths.cache_dir)
    stop = trio.Event()
    bound_identity = None if activated else socket_identity(paths.socket)
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    async with trio.open_nursery() as nursery:
        # Named servers and wake predicates: the allowlist under their own `env` (lazyd/host/daemonenv.py).
        heap = HeapTrimmer()  # gives the heap back after large messages
        registry = Registry(config, paths, secret, store, nursery, daemonenv.base(os.environ), heap)
        if envelope is None and not stored:  # after an upgrade the servers state.json names are ours to take over
            # Beside serving, not before it: only starts wait for it (docs/benchmarks.md).
            records = orphans.begin_sweep(paths.state_dir, registry.starting)
            nursery.start_soon(orphans.sweep_then_open, paths.state_dir, records, registry.starting)
        lineage = Lineage()
        keeper = stored_sessions.Keeper(fdstore) if fdstore is not None else None
        refusals = Refusals()
        memory = MemoryWatch(registry)  # memory_max and memory pressure (docs/supervision.md)
        control = Control(registry, stop, partial(reload_config, registry, config_path), lineage, refusals, memory,
                          keeper)
        handler = ConnectionHandler(registry, control, Admission(nofile), refusals, keeper)
        upgrader = Upgrader(registry, handler, paths, listener=sock.fileno(), lock=lock_fd, activated=activated,
                            notifier=notifier, notify_env=notify_env, lineage=lineage, config_path=config_path)
        handler.upgrade = upgrader
        if envelope is not None:
            await inherit(envelope, registry, handler, lineage, fdstore)
        else:
            if stored:
                await inherit_stored(dict(stored), registry, paths.lock, paths.state_dir, lineage)
            await registry.boot()
        if kept_sessions and keeper is not None:
            # What became of them, in the crash's line of `lazyctl status` (counted as they go).
            if lineage.last is None:
                lineage.last = {"at": time.time(), "from_pid": None, "inherited": False, "crash": True,
                                "servers": [], "lost": [], "reason": None}
            keeper.tally["kept"] = len(kept_sessions)
            lineage.last["sessions"] = keeper.tally
        if fdstore is not None:
            # What the store gave back is in it still: names no process owns now are removed.
            nursery.start_soon(keep_standby, registry, fdstore, paths.lock, registry.changes.wait, dict(stored))
        connections = trio.CancelScope()  # the accept loop and every connection, until shutdown
        await nursery.start(_in_scope, connections, partial(handler.serve, listener, kept_sessions))
        # The signal receiver before READY=1: systemd may send SIGTERM the moment it hears READY
        # (`systemctl --user stop` right after a start), and it must find our handler, not the default.
        await nursery.start(_signals, stop, partial(_reload, registry, config_path), partial(upgrader, None))
        notifier.ready(status_summary(registry))  # only now: the listener is accepting
        nursery.start_soon(notifier.run, partial(status_summary, registry), registry.changes.wait)
        nursery.start_soon(heap.run)
        nursery.start_soon(memory.run)
        if activated:
            nursery.start_soon(_steady, sock.fileno())
        if bound_identity is not None:
            nursery.start_soon(watch_ownership, paths, bound_identity, stop, ownership_check_interval_s)
        await stop.wait()
        notifier.stopping()
        if activated:
            crash_loop.forget(sock.fileno())  # a clean stop ends any count of failed starts
        # Drop every session before the ladders: its shim answers what was in flight and hands
        # what comes next to the next daemon, rather than this one failing it later.
        connections.cancel()
        log.info("stopping: %d servers", len(registry.runtimes))
        with trio.move_on_after(SHUTDOWN_BOUND_S) as bound:
            async with trio.open_nursery() as stopper:
                for runtime in list(registry.runtimes.values()):
                    stopper.start_soon(runtime.shutdown)
        if bound.cancelled_caught:
            log.error("shutdown took longer than %.0f s; exiting anyway", SHUTDOWN_BOUND_S)
        # Only our own socket file is removed: a newer daemon may have replaced it.
        if bound_identity is not None and socket_identity(paths.socket) == bound_identity:
            os.unlink(paths.socket)
        nursery.cancel_scope.cancel()
    # The standby state describes servers gone now (a crash never gets here: its successor needs it).
    with contextlib.suppress(FileNotFoundError):
        os.unlink(standby_path(paths.lock))
    log.info("stopped")


async def _steady(listener_fd: int) -> None:
    """Up and serving for a while: not a crash loop (lazyd/daemon/crash_loop.py)."""
    await trio.sleep(crash_loop.STEADY_S)
    crash_loop.forget(listener_fd)


async def _in_scope(scope: trio.CancelScope, run: Callable[..., Awaitable[None]], *,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    with scope:
        await run(task_status=task_status)


def ownership_lost(paths: Paths, bound_identity: tuple[int, int]) -> str | None:
    """Why the socket name no longer leads to the socket we bound, or None while it still does."""
    if not os.path.lexists(paths.runtime_dir):
        return f"the runtime dir {paths.runtime_dir} was removed (logout?)"
    current = socket_identity(paths.socket)
    if current is None:
        return f"the socket {paths.socket} was removed"
    if current != bound_identity:
        return f"the socket {paths.socket} was replaced by another one"
    return None


async def watch_ownership(paths: Paths, bound_identity: tuple[int, int], stop: trio.Event, interval_s: float) -> None:
    """Set ``stop`` once the socket is no longer ours (a logout removed the runtime dir, another
    daemon took the name): nobody can reach this daemon any more."""
    while not stop.is_set():
        await trio.sleep(interval_s)
        reason = ownership_lost(paths, bound_identity)
        if reason is not None:
            log.warning("%s: nobody can reach this daemon any more; stopping", reason)
            stop.set()
            return


async def reload_config(registry: Registry, config_path: Path) -> dict[str, list[str]]:
    """Re-read the config; on any error the old config stays in force (ConfigError propagates)."""
    config = await trio.to_thread.run_sync(load_config, config_path, dict(os.environ))
    report = await registry.reload(config)
    log.info("config reloaded: %s", ", ".join(f"{k} {v}" for k, v in report.items() if v) or "no changes")
    return report


async def _reload(registry: Registry, config_path: Path) -> None:
    try:
        await reload_config(registry, config_path)
    except ConfigError as exc:
        log.error("reload refused, keeping the old config: %s", exc)


async def _signals(stop: trio.Event, reload: Callable[[], Awaitable[None]], upgrade: Callable[[], Awaitable[object]], *,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """SIGTERM/SIGINT stop, SIGHUP reloads, SIGUSR2 upgrades; started (``nursery.start``) once the
    receiver is installed, so that a signal sent from then on is never the default action."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2) as signals:
        task_status.started()
        async for signum in signals:
            if signum == signal.SIGHUP:
                await reload()
                continue
            if signum == signal.SIGUSR2:
                await upgrade()  # returns only when the exec failed; it logged why
                continue
            log.info("%s received", signal.Signals(signum).name)
            stop.set()
            return
