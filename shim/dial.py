"""Dialling the daemon's socket: one connect, retried while its backlog is full, and the peer check.

Only ECONNREFUSED and ENOENT mean "no daemon" (`NoDaemon`): a socket file nobody listens on, or
none at all. EAGAIN means a live daemon whose backlog is full: wait and retry, never start a
second one. Before anything is sent, the peer's uid (SO_PEERCRED) must be ours: the daemon will
receive this shim's whole environment, secrets included. Every wait is bounded (`budget`).
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

# The daemon is dialled with the C socket type itself (_socket.socket, the base class of
# socket.socket): importing `socket` builds its enums from every constant of _socket, the largest
# single cost of a shim start, and the shim needs nothing socket.socket adds (every method it and
# the relay call, connect, sendmsg, sendall, recv, settimeout, shutdown, close, is the C one's).
_AF_UNIX, _SOCK_STREAM, _SOCK_CLOEXEC = _socket.AF_UNIX, _socket.SOCK_STREAM, _socket.SOCK_CLOEXEC

BUSY_WAIT_S = 5.0
# How long to keep retrying a daemon whose listen backlog is full (EAGAIN) before giving up.


POLL_S = 0.01
# Between connect attempts while a daemon starts: short, since a connect attempt costs microseconds.


RECONNECT_WAIT_S = 20.0
# How long a shim tries to get a daemon back (autostart included) before running the server itself:
# a daemon that is stopping holds its instance lock, so no new one can start, for up to its 15 s
# shutdown bound; a new daemon may then take 5 s to accept.

RECONNECT_POLL_S = 0.05
# Between reconnect attempts when no daemon answers and none could be started.

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
            # A timeout makes connect non-blocking underneath, so a full backlog gives EAGAIN
            # instead of sleeping in the kernel.
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
