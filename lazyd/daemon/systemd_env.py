"""systemd's per-service environment variables: the one list of them, and an environment without them.

They describe our relationship with the service manager (sd_notify(3), sd_watchdog_enabled(3),
sd_listen_fds(3)); a child that inherited them could notify or claim fds on our behalf, so the
daemon drops them once read (lazyd/daemon/notify.py, lazyd/daemon/main.py) and no server gets them.
"""

from __future__ import annotations

from collections.abc import Mapping

NOTIFY_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
ACTIVATION_VARS = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
SYSTEMD_VARS = frozenset(NOTIFY_VARS + ACTIVATION_VARS)


def scrubbed_environ(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` without the systemd notify, watchdog and activation variables."""
    return {key: value for key, value in env.items() if key not in SYSTEMD_VARS}
