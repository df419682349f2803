"""Dialling the daemon's socket: one connect, retried while its backlog is full, and the peer check.

Only ECONNREFUSED and ENOENT mean "no daemon" (`NoDaemon`); EAGAIN is a live daemon with a full
backlog: waited out, never answered with a second daemon. Before anything is sent the peer's uid
must be ours: the hello carries this shim's whole environment, secrets included.
"""

from __future__ import annotations

import _socket
import os
import struct
import time

from lazyd.errors import NoDaemon as NoDaemon  # what connect_once raises
from lazyd.errors import Unavailable

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    import socket

# The C socket type itself (socket.socket's base): importing `socket` builds enums from every
# constant, and every method the shim calls is the C one's.
_AF_UNIX, _SOCK_STREAM, _SOCK_CLOEXEC = _socket.AF_UNIX, _socket.SOCK_STREAM, _socket.SOCK_CLOEXEC

BUSY_WAIT_S = 5.0  # retrying a daemon whose listen backlog is full (EAGAIN)
POLL_S = 0.01  # between connect attempts while a daemon starts
RECONNECT_WAIT_S = 20.0
# How long a shim tries to get a daemon back before running the server itself: a stopping daemon
# holds its instance lock for up to its shutdown bound, and a new one then needs its start.
RECONNECT_POLL_S = 0.05  # between reconnect attempts when no daemon answers

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def budget(budget_s: float, deadline: float | None) -> float:
    if deadline is None:
        return budget_s
    return max(0.0, min(budget_s, deadline - time.monotonic()))


def check_peer(sock: socket.socket, path: str) -> None:
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _PEERCRED.size))
    if uid != os.geteuid():
        raise Unavailable(f"{path} is served by uid {uid}, not by this user", final=True)


def connect_once(path: str, deadline: float) -> socket.socket:
    """One connect, retried while the daemon is busy (EAGAIN). Raises NoDaemon or Unavailable."""
    while True:
        sock: socket.socket = _socket.socket(_AF_UNIX, _SOCK_STREAM | _SOCK_CLOEXEC)  # type: ignore[assignment]
        try:
            # A timeout makes connect non-blocking: a full backlog gives EAGAIN, not a kernel sleep.
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise NoDaemon(exc.strerror or str(exc)) from None
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
