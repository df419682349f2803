"""A daemon that keeps failing to start lets go of the sessions systemd keeps for it.

Under systemd the hand-off sessions wait in the fd store while lazyd restarts after a crash
(lazyd/daemon/handoff/stored_sessions.py). That is wrong when no daemon will ever come up (it
cannot import its modules, or dies before it serves): `Restart=on-failure` loops and every session
would wait for ever. So each daemon started with kept sessions counts itself in `kept-starts`
beside its socket, first thing and with the standard library only (what fails to import must not
be needed here); one up for STEADY_S removes the count. A daemon that finds MAX_STARTS counted
removes the sessions' names from the store, closes their descriptors and takes them out of
`LISTEN_FDNAMES` before starting as usual: each shim sees its socket end and takes its session
back itself.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import MutableMapping

COUNT_FILE = "kept-starts"
MAX_STARTS = 3  # with RestartSec=2s: the sessions are let go after about 8 s of failed starts
STEADY_S = 30.0  # a daemon up this long is not in a crash loop
LISTEN_FDS_START = 3
SESSION_PREFIX = "hs-"  # lazyd/daemon/handoff/stored_sessions.py's names


def count_path(listener_fd: int = LISTEN_FDS_START) -> str | None:
    """The count's file, beside the socket systemd passed (None: no socket, or not a path)."""
    try:
        probe = socket.socket(fileno=os.dup(listener_fd))
    except OSError:
        return None
    try:
        name = probe.getsockname()
    except OSError:
        return None
    finally:
        probe.close()
    if not isinstance(name, str) or not name.startswith("/"):
        return None
    return os.path.join(os.path.dirname(name), COUNT_FILE)


def count_start(environ: MutableMapping[str, str]) -> None:
    """Count this start if systemd passed kept sessions; past MAX_STARTS, let them go (module
    docstring). Never raises: whatever fails here leaves the start as it was."""
    try:
        names = environ.get("LISTEN_FDNAMES", "").split(":")
        kept = [i for i, name in enumerate(names) if name.startswith(SESSION_PREFIX)]
        if not kept or environ.get("LISTEN_PID") != str(os.getpid()):
            return
        path = count_path()
        if path is None:
            return
        try:
            with open(path) as f:
                starts = int(f.read().strip() or 0)
        except (OSError, ValueError):
            starts = 0
        if starts < MAX_STARTS:
            with open(path, "w") as f:
                f.write(f"{starts + 1}\n")
            return
        sessions = sum(1 for i in kept if names[i].count("-") == 1)  # hs-<pid>: one per session
        _let_go(environ, names, kept)
        os.unlink(path)
        sys.stderr.write(f"lazyd: {starts} starts in a row ended before serving; letting go of the {sessions} "
                         "session(s) systemd kept, so that their shims take them back\n")
    except Exception:  # noqa: BLE001 - a guard must never be what stops the start
        pass


def _let_go(environ: MutableMapping[str, str], names: list[str], kept: list[int]) -> None:
    address = environ.get("NOTIFY_SOCKET", "")
    if address.startswith("@"):
        address = "\0" + address[1:]
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) if address else None
    try:
        for name in sorted({names[i] for i in kept}):
            if notify is not None:
                notify.sendto(f"FDSTOREREMOVE=1\nFDNAME={name}".encode(), address)
        for i in kept:
            with contextlib.suppress(OSError):
                os.close(LISTEN_FDS_START + i)
            names[i] = ""  # the daemon skips a descriptor without a name (fdstore.stored_fds)
    finally:
        if notify is not None:
            notify.close()
    environ["LISTEN_FDNAMES"] = ":".join(names)


def forget(listener_fd: int) -> None:
    """This daemon stayed up: the starts counted before it were no crash loop."""
    path = count_path(listener_fd)
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)
