"""The client's stdout as the shim writes it: raw bytes, each write whole under a lock."""

from __future__ import annotations

import _thread  # not threading, slow to import: a recovering hand-off shim starts no thread
import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import NoReturn

    from .options import Log


class Stdout:
    """fd 1 as raw bytes, written whole under a lock. A client that stopped reading ends the shim."""

    def __init__(self, log: Log, fd: int = 1) -> None:
        self._fd = fd
        self._lock = _thread.allocate_lock()
        self._log = log

    def write(self, data: bytes) -> None:
        with self._lock:
            self._write_all(data)

    def write_line(self, line: bytes) -> None:
        with self._lock:
            if len(line) < 65536:
                self._write_all(line + b"\n")
            else:  # no 16 MiB concatenation just to add a newline
                self._write_all(line)
                self._write_all(b"\n")

    def exit_between_lines(self, status: int) -> NoReturn:
        """End the process, but never in the middle of a line another thread is writing."""
        self._lock.acquire()
        os._exit(status)

    def wait_closed(self, ready: int, wait_s: float) -> None:
        """Wait until `ready` is readable (nothing is owed to the client any more), the client
        closes its end of our stdout (nobody would read an answer), or `wait_s` pass."""
        import select

        poller = select.poll()
        poller.register(ready, select.POLLIN)
        poller.register(self._fd, 0)  # only POLLERR (a pipe's reader gone) or POLLHUP (a socket's peer)
        poller.poll(wait_s * 1000)  # a signal's interruption resumes with the time left (PEP 475)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:  # the client gave us a non-blocking pipe
                import select

                select.select([], [self._fd], [])
            except OSError as exc:  # EPIPE: the client closed its end of stdout and is gone
                self._log(f"stdout closed ({exc.strerror}); exiting")
                os._exit(0)
