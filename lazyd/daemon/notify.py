"""sd_notify for the daemon: READY, STATUS, STOPPING and the watchdog, when systemd asks for them.

- `Notifier.from_environ()` reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` once and
  removes them from `os.environ`, so no child can notify on our behalf. Without a socket every
  method is a no-op.
- It wraps `sdnotify`, which swallows errors unless `debug=True`: built so, with its socket
  non-blocking (a notification never stalls the event loop; a full queue means systemd is gone or
  wedged), each failure is a log line, the first a warning and the rest debug (a gone socket fails
  every watchdog ping).
- The watchdog is honoured only when `WATCHDOG_PID` is unset or ours, and pinged every
  `WATCHDOG_USEC / 2` (sd_watchdog_enabled(3)).

The caller passes a function that spells the current STATUS.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import sdnotify
import trio

from lazyd.daemon.systemd_env import NOTIFY_VARS

log = logging.getLogger("lazyd.notify")
# The systemd variables this module consumes are NOTIFY_VARS; LISTEN_* belong to socket activation.

WATCHDOG_FRACTION = 0.5
# sd_watchdog_enabled(3): ping at half the timeout, so one late ping never trips it.

STATUS_MIN_INTERVAL_S = 0.5
# STATUS= is recomputed when something it shows changed (lazyd/daemon/status_signal.py), at most this
# often: a burst of sessions starting makes one update, not hundreds. Sent only when the text changed.

MAX_STATUS_CHARS = 200
# `systemctl status` shows one line; a longer STATUS= is cut rather than wrapped.


class Notifier:
    """The daemon's notification channel to systemd; every method is a no-op when disabled."""

    def __init__(self, notifier: sdnotify.SystemdNotifier | None, address: str | None,
                 watchdog_interval_s: float | None) -> None:
        self._notifier = notifier
        self.address = address
        self.watchdog_interval_s = watchdog_interval_s
        self._failed_once = False
        self._last_status: str | None = None
        self.unsent = False  # the last STATUS= computed could not be sent

    @classmethod
    def from_environ(cls) -> Notifier:
        """Read and remove the notify and watchdog variables of `os.environ`. Never raises: an
        unreachable socket disables notifications with a warning (systemd then times the start out)."""
        address = os.environ.get("NOTIFY_SOCKET") or None
        usec = os.environ.get("WATCHDOG_USEC")
        watchdog_pid = os.environ.get("WATCHDOG_PID")
        notifier: sdnotify.SystemdNotifier | None = None
        if address is not None:
            try:
                # sdnotify reads NOTIFY_SOCKET itself, so it is built before the variable goes.
                notifier = sdnotify.SystemdNotifier(debug=True)
                notifier.socket.setblocking(False)
            except (OSError, TypeError, IndexError) as exc:
                log.warning("cannot reach the notify socket %s: %s; systemd will not hear from us",
                            address, exc)
                notifier = None
        for key in NOTIFY_VARS:
            os.environ.pop(key, None)
        interval = _watchdog_interval_s(usec, watchdog_pid, os.getpid()) if notifier else None
        return cls(notifier, address, interval)

    def notify(self, *assignments: str) -> bool:
        """Send `KEY=value` assignments in one datagram; True if it was sent."""
        if self._notifier is None:
            return False
        try:
            self._notifier.notify("\n".join(assignments))
        except (OSError, UnicodeError) as exc:
            level = logging.DEBUG if self._failed_once else logging.WARNING
            self._failed_once = True
            log.log(level, "sd_notify %s to %s failed: %s", assignments[0].split("=")[0],
                    self.address, exc)
            return False
        return True

    def ready(self, status: str) -> bool:
        """READY=1 (call only once the listener accepts connections), with a first STATUS=."""
        self._last_status = clean_status(status)
        return self.notify("READY=1", f"STATUS={self._last_status}")

    def status(self, text: str) -> bool:
        """STATUS=text, sent only when it differs from the last one sent. One that could not be
        sent (the manager's queue full) is not taken for sent: `unsent` says so, and the status
        loop tries again."""
        text = clean_status(text)
        if text == self._last_status:
            return False
        sent = self.notify(f"STATUS={text}")
        if sent:
            self._last_status = text
        self.unsent = not sent and self._notifier is not None
        return sent

    def stopping(self) -> bool:
        return self.notify("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    async def watchdog_loop(self) -> None:
        """Ping the watchdog every `watchdog_interval_s` (returns at once if unset), from the event
        loop itself: a loop blocked past the timeout is exactly what should make systemd restart us."""
        if self._notifier is None or self.watchdog_interval_s is None:
            return
        while True:
            self.watchdog()
            await trio.sleep(self.watchdog_interval_s)

    async def status_loop(self, summary: Callable[[], str], changed: Callable[[], Awaitable[None]],
                          min_interval_s: float = STATUS_MIN_INTERVAL_S) -> None:
        """Send `summary()` as STATUS= now and after each `changed()` returns (at most once per
        `min_interval_s`), when its text changed. Nothing runs between changes: no timer."""
        if self._notifier is None:
            return
        while True:
            self.status(summary())
            if not self.unsent:  # else again after the interval, or `systemctl status` stays stale
                await changed()
            await trio.sleep(min_interval_s)  # coalesces a burst; the summary read next has it all

    async def run(self, summary: Callable[[], str], changed: Callable[[], Awaitable[None]]) -> None:
        """The watchdog and status loops together, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watchdog_loop)
            nursery.start_soon(self.status_loop, summary, changed)


def clean_status(text: str) -> str:
    """One line of at most MAX_STATUS_CHARS: a newline would start another assignment."""
    return " ".join(text.split())[:MAX_STATUS_CHARS]


def _watchdog_interval_s(usec: str | None, watchdog_pid: str | None, pid: int) -> float | None:
    if not usec:
        return None
    if watchdog_pid and watchdog_pid != str(pid):
        log.info("WATCHDOG_PID=%s is not our pid %d; not pinging the watchdog", watchdog_pid, pid)
        return None
    try:
        value = int(usec)
    except ValueError:
        value = 0
    if value <= 0:
        log.warning("ignoring WATCHDOG_USEC=%r: not a positive number of microseconds", usec)
        return None
    return value / 1_000_000 * WATCHDOG_FRACTION
