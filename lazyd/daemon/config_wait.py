"""A socket-activated daemon whose config cannot be loaded: it stays up and tells every client why.

Started by a shim, a daemon with a bad config exits 2 and the shim shows why. Started by systemd's
socket, an exit would leave the waiting connection to start it again at once (a loop, and a client
that only hears a timeout). So a socket-activated daemon that cannot load its files tells systemd
it is ready with the reason as STATUS (and feeds the watchdog), answers every hello with a `refused`
frame of code `config` (the shim exits 2 with it, `lazyctl` exits 1), reads the files again before
each connection, when the config file changes (every ``CHECK_INTERVAL_S``) or on SIGHUP, and once
they load returns them: the daemon starts for real on the same socket and pid. SIGTERM stops it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

from lazyd.protocol import wire
from lazyd.daemon.notify import Notifier
from lazyd.daemon.runtime_dir import peer_credentials
from lazyd.errors import ConfigError, StateFileError, WireError
from lazyd.protocol.frames import Refusal

log = logging.getLogger("lazyd.config.load")

REFUSAL_CODE = "config"
CHECK_INTERVAL_S = 1.0  # a stat of one file; a fix is picked up within this without any client
ACCEPT_BACKOFF_S = 0.5
HELLO_READ_S = 2.0  # a shim sends its hello at once; the refusal is sent even without it
T = TypeVar("T")


def _signature(path: Path) -> tuple[int, int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


class _Wake:
    """What the signal handler tells the loop: stop, or read the files again now."""

    def __init__(self) -> None:
        self.stop = False
        self.recheck = False
        self.scope: trio.CancelScope | None = None

    def poke(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


async def wait_for_files(sock: socket.socket, load: Callable[[], T], error: str, config_path: Path,
                         notifier: Notifier, on_error: Callable[[str], None]) -> T | None:
    """Refuse every connection with `error` until `load()` succeeds (module docstring); its result,
    or None when the daemon was told to stop. `on_error` records each new reason."""
    log.error("%s; waiting for the file to be fixed (every client is told why)", error)
    wake = _Wake()
    loaded: T | None = None
    async with trio.open_nursery() as nursery:
        await nursery.start(_signals, wake)  # before READY=1: a stop right after it finds our handler
        notifier.ready(f"waiting for a valid config: {error}")
        nursery.start_soon(notifier.watchdog_loop)
        seen = _signature(config_path)
        while not wake.stop:
            readable = False
            with trio.move_on_after(CHECK_INTERVAL_S) as wake.scope:
                await trio.lowlevel.wait_readable(sock)
                readable = True
            wake.scope = None
            if wake.stop:
                break
            now = _signature(config_path)
            if readable or wake.recheck or now != seen:
                seen, wake.recheck = now, False
                try:
                    loaded = await trio.to_thread.run_sync(load)
                except (ConfigError, StateFileError, OSError) as exc:
                    problem = str(exc) if not isinstance(exc, OSError) else f"cannot read the files: {exc.strerror or exc}"
                    if problem != error:
                        error = problem
                        log.error("%s; still waiting for the file to be fixed", error)
                        notifier.status(f"waiting for a valid config: {error}")
                        on_error(error)
                else:
                    log.info("%s loads now: starting", config_path)
                    break  # what is waiting in the backlog is served by the daemon proper
            if readable and not _refuse_pending(sock, error, nursery):
                await trio.sleep(ACCEPT_BACKOFF_S)  # out of descriptors, say: not a busy loop
        nursery.cancel_scope.cancel()
    return loaded


def _refuse_pending(sock: socket.socket, error: str, nursery: trio.Nursery) -> bool:
    """Accept every connection waiting now and refuse each (in its own task); False if accepting
    failed (the socket stays readable)."""
    while True:
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, InterruptedError):
            return True
        except OSError as exc:
            log.warning("cannot accept a connection to refuse it: %s", exc.strerror or exc)
            return False
        nursery.start_soon(_refuse, conn, error)


async def _refuse(conn: socket.socket, error: str) -> None:
    conn.setblocking(False)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
    try:
        try:
            _pid, uid, _gid = peer_credentials(conn)
        except OSError:
            return
        if uid != os.getuid():
            return  # never a byte to another user, as when serving
        decoder = wire.FrameDecoder()
        with trio.move_on_after(HELLO_READ_S):
            # Read the hello first: a peer still writing it would see its connection reset
            # rather than the refusal if we closed with its bytes unread. Any first frame (or
            # none, or a bad one) gets the same answer.
            try:
                while (data := await stream.receive_some(65536)) and not decoder.feed(data):
                    pass
            except WireError:
                pass
        await stream.send_all(wire.encode(Refusal(REFUSAL_CODE, error)))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def _signals(wake: _Wake, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        task_status.started()
        async for signum in signals:
            if signum == signal.SIGHUP:
                wake.recheck = True
            else:
                log.info("%s received while waiting for a valid config: stopping", signal.Signals(signum).name)
                wake.stop = True
            wake.poke()
            if wake.stop:
                return
