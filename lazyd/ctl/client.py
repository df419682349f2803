"""lazyctl's control connection: a blocking socket, one `ctl` frame out, one `reply` back.

Every way talking to the daemon can fail becomes a `CtlError` (exit 1) or `DaemonNotRunning`
(exit 3, nothing listens: like `systemctl status`). No trio and nothing of the daemon: lazyctl
imports only the standard library, msgpack and lazyd's stdlib floor, to start quickly.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import time
from typing import Any

from lazyd.host import sockpath
from lazyd.protocol import wire
from lazyd.ctl.progress import TICK_S, StatusLine
from lazyd.config.durations import format_duration
from lazyd.errors import CtlError, DaemonNotRunning, StateFileError, Unavailable, WireError
from lazyd.protocol.frames import AnyFrame, Ctl, Frame, Hello, Progress, Refusal, Reply, Welcome
from lazyd.host.paths import MAX_START_RECORD_BYTES, start_record_path
from lazyd.host.privatefiles import read_private

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

CONNECT_TIMEOUT_S = 5.0  # a live daemon accepts at once; a full backlog for this long is a hung one
REPLY_TIMEOUT_S = 30.0  # status, logs, sleep (the daemon bounds its stop ladder at 10 s); wake, check: None


def socket_path(explicit: str | None) -> str:
    """`--socket`, else what the shim would use (LAZYD_SOCKET, else the runtime dir's socket)."""
    return explicit or sockpath.default_socket_path(os.environ)


class Connection:
    """One control connection; use as a context manager."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            self._sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            self._sock.close()
            raise not_running(path) from None
        except OSError as exc:
            self._sock.close()
            raise CtlError(f"cannot connect to lazyd at {path}: {exc.strerror or exc}") from None
        self._reader = wire.BlockingFrameReader(self._sock)
        hello = Hello("ctl", os.getpid(), [], os.getcwd(), {}, {}, None, [])
        frame = self._exchange(hello, CONNECT_TIMEOUT_S)
        if isinstance(frame, Refusal):
            self.close()
            if frame.code == "config":  # up under systemd, waiting for the file to be fixed
                raise CtlError(f"lazyd is waiting for a valid config (it loads it once fixed): {frame.message}",
                               {"config_error": frame.message})
            raise CtlError(f"lazyd refused the connection: {frame.message}")
        if frame.t != "welcome":
            self.close()
            raise CtlError(f"lazyd answered the hello with a {frame.t!r} frame")
        # A welcome of another wire version is taken as it comes: its ops may still answer.
        pid = frame.daemon_pid if isinstance(frame, Welcome) else frame.extra.get("daemon_pid", 0)
        self.daemon_pid: int = pid if isinstance(pid, int) else 0

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def call(self, op: str, args: dict[str, Any] | None = None,
             timeout_s: float | None = REPLY_TIMEOUT_S, progress: StatusLine | None = None) -> Any:
        """Run one control op; its data, or CtlError with the daemon's error. With an active
        `progress` line, the daemon's steps (`progress` frames) are shown on it."""
        live = progress if progress is not None and progress.active else None
        frame = self._exchange(Ctl(op, {**(args or {}), "progress": True} if live else args or {}), timeout_s, live)
        if not isinstance(frame, Reply):
            raise CtlError(f"lazyd answered {op!r} with a {frame.t!r} frame")
        if not frame.ok:
            raise CtlError(frame.error or f"{op} failed", frame.data)
        return frame.data

    def _exchange(self, frame: Frame, timeout_s: float | None, progress: StatusLine | None = None) -> AnyFrame:
        give_up = None if timeout_s is None else time.monotonic() + timeout_s
        if progress is not None:
            progress.draw()
        try:
            self._sock.settimeout(timeout_s)
            self._sock.sendall(wire.encode(frame))
            if progress is not None:
                # A short timeout only to redraw the elapsed time: the reader keeps a half-read frame.
                self._sock.settimeout(TICK_S)
            while True:
                if give_up is not None and time.monotonic() >= give_up:
                    raise TimeoutError
                try:
                    reply = self._reader.read()
                except TimeoutError:
                    if progress is None:
                        raise
                    progress.draw()
                    continue
                if reply is None:
                    raise CtlError("lazyd closed the connection without answering")
                if progress is None or not isinstance(reply, Progress):
                    return reply
                progress.update(reply.step)
        except TimeoutError:
            raise CtlError(f"lazyd did not answer within {format_duration(timeout_s or 0.0)}") from None
        except WireError as exc:
            raise CtlError(f"lazyd sent a bad frame: {exc}") from None
        except OSError as exc:
            raise CtlError(f"lost the connection to lazyd: {exc.strerror or exc}") from None
        finally:
            if progress is not None:
                progress.clear()


def other_daemons(path: str) -> list[tuple[int, str]]:
    """The user's daemons recorded as listening elsewhere than `path` (sockpath's discovery)."""
    return [(pid, sock) for pid, sock in sockpath.discovered_daemons(os.environ) if sock != path]


def not_running(path: str) -> DaemonNotRunning:
    """The error for "nothing listens on `path`", with where the user's other daemons listen and
    the last daemon's start-up failure on record."""
    message = f"lazyd is not running (no daemon listens on {path})"
    found = other_daemons(path)
    if found:
        where = "; ".join(f"lazyd pid {pid} listens on {sock}" for pid, sock in found)
        message += f"; but {where} (lazyctl --socket PATH talks to it)"
    record = last_start_failure(path)
    if record is None:
        return DaemonNotRunning(message)
    return DaemonNotRunning(f"{message}; its last start failed: {record['error']}", {"last_start_failure": record})


def last_start_failure(path: str) -> dict[str, Any] | None:
    """The start-up record beside the socket `path`, if it is ours and well formed."""
    try:
        data = read_private(start_record_path(path), MAX_START_RECORD_BYTES)
        record = json.loads(data) if data is not None else None
    except (StateFileError, ValueError):
        return None  # not written by our daemon: say nothing rather than something false
    if not isinstance(record, dict) or not isinstance(record.get("error"), str):
        return None
    return record


AUTOSTART_TIMEOUT_S = 10.0  # the shim's own bounds (5 s to accept, plus the spawn lock) fit in this
_AUTOSTART_OFF = frozenset({"1", "true", "yes", "on"})


def connect_starting(explicit_socket: str | None, progress: StatusLine | None = None) -> Connection:
    """A control connection to the daemon at `--socket`'s path, started first if none answers exactly as a
    shim starts it (its own code, loaded dynamically), unless LAZYD_NO_AUTOSTART is set.
    DaemonNotRunning with the daemon's own reason when it cannot start, CtlError otherwise."""
    path = socket_path(explicit_socket)
    try:
        return Connection(path)
    except DaemonNotRunning as exc:
        if os.environ.get("LAZYD_NO_AUTOSTART", "").strip().lower() in _AUTOSTART_OFF:
            raise exc from None
    if progress is not None:
        progress.update("starting lazyd")
    connect = importlib.import_module("lazyd_shim.connect")
    explicit = bool(explicit_socket or os.environ.get("LAZYD_SOCKET"))
    try:
        sock = connect.connect_or_start(path, explicit, True, lambda _: None,
                                        time.monotonic() + AUTOSTART_TIMEOUT_S)
    except Unavailable as exc:
        raise DaemonNotRunning(f"lazyd is not running and could not be started: {exc}") from None
    sock.close()  # it accepts connections now; the daemon drops one that sends no hello
    return Connection(path)


def connect(explicit_socket: str | None) -> Connection:
    return Connection(socket_path(explicit_socket))
