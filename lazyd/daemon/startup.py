"""How a daemon that cannot start says why: one line, in three places, and an exit status.

A daemon is often started by someone not looking (a shim, systemd, `lazyctl check`), so the line
goes to stderr, to the daemon log and to the start-up record beside the socket (`<socket>.error`),
as docs/configuration.md "When the daemon is started for you" shows. The shim acts on the exit
status: 1 an unsafe environment (it fails open), 2 a file the user must fix (it refuses too, so the
mistake is not hidden), 70 a bug (the traceback is in the log file only).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import NoReturn

from lazyd.host.paths import MAX_START_RECORD_BYTES, Paths, start_record_path
from lazyd.host.privatefiles import write_private

EXIT_SETUP = 1
EXIT_BAD_FILE = 2
EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class OneLineFormatter(logging.Formatter):
    """The stderr format: one line per record, tracebacks left to the log file."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return super().format(record)


def fail(paths: Paths | None, message: str, status: int, *, record: bool = True) -> NoReturn:
    """Report a start-up failure (the module docstring) and exit with `status`. `record` is False
    when the runtime dir itself is the problem; the log and the record are best effort, the stderr
    line and the exit status always happen."""
    if paths is None:
        print(f"lazyd: {message}", file=sys.stderr, flush=True)
    else:
        report(paths, message, status, record=record)
        _append_to_log(paths, message)
    raise SystemExit(status)


def report(paths: Paths, message: str, status: int, *, record: bool = True, stderr: bool = True) -> None:
    """What `fail` writes, without exiting: a daemon that stays up to say why (a socket-activated
    daemon with a bad config, lazyd/daemon/config_wait.py) records the reason the same way."""
    if stderr:
        print(f"lazyd: {message}", file=sys.stderr, flush=True)
    if record:
        _write_record(paths, message, status)


def clear_record(paths: Paths) -> None:
    """This daemon started: an older failure no longer describes anything."""
    # lazyctl shows a stale record only while no daemon answers, so one left behind is harmless.
    with contextlib.suppress(OSError):
        os.unlink(start_record_path(paths.socket))


def detach_stderr() -> None:
    """Point fd 2 at /dev/null once listening (``--stderr-until-ready``): the shim may then close its
    pipe without a later log line meeting a broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(devnull, 2)
    finally:
        os.close(devnull)


def socket_name(sock: socket.socket, fallback: Path) -> str:
    """The path an activated socket is bound to (systemd chose it), for the log."""
    try:
        name = sock.getsockname()
    except OSError:
        return str(fallback)
    return name if isinstance(name, str) and name else str(fallback)


def _append_to_log(paths: Paths, message: str) -> None:
    # The log's own format, written directly: logging is not set up this early, and setting it
    # up would create a rotating handler for a daemon that is about to exit.
    formatter = logging.Formatter(LOG_FORMAT)
    record = logging.makeLogRecord({"name": "lazyd", "levelname": "ERROR", "levelno": logging.ERROR,
                                    "msg": "start-up failed: %s", "args": (message,)})
    line = formatter.format(record) + "\n"
    try:
        paths.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(paths.state_dir / "lazyd.log",
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_record(paths: Paths, message: str, status: int) -> None:
    data = json.dumps({"error": message[:4000], "status": status, "at": time.time(), "pid": os.getpid()})
    try:
        write_private(start_record_path(paths.socket), data.encode("utf-8", "replace")[:MAX_START_RECORD_BYTES],
                      durable=False)  # read by a lazyctl soon after, or replaced by the next start
    except OSError:
        pass
