"""The daemon's descriptor limit: the soft RLIMIT_NOFILE raised to the hard one at start, and the
original soft limit given back to every child.

Hundreds of sessions need thousands of descriptors, and the inherited soft limit is usually 1024
while the hard one allows far more; trio uses epoll, not select(2), so the daemon raises it first
thing, as systemd recommends (the unit sets `LimitNOFILE=` so the hard limit is there). Servers and
wake predicates get the original soft limit back between fork and exec (`restore_for_child`):
some programs still use select(2) or loop over every possible descriptor.
"""

from __future__ import annotations

import logging
import os
import resource

import trio
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("lazyd")

INHERITED_ENV = "LAZYD_INHERITED_NOFILE"
# Set by a daemon that raised its limit, so that a successor exec'd by an upgrade (which inherits
# the raised limit) still gives children the limit the first daemon inherited. Servers never see
# it: their environment is their session's, not the daemon's.
NR_OPEN_PATH = "/proc/sys/fs/nr_open"  # the kernel's ceiling when the hard limit is unlimited


@dataclass(frozen=True)
class FdLimit:
    """The soft limit inherited, and the one in force after raising it."""

    inherited: int
    soft: int
    hard: int


_inherited: int | None = None  # the soft limit to give children, once raised


def raise_soft_limit() -> FdLimit:
    """Raise the soft RLIMIT_NOFILE as far as the hard limit allows; return what is in force.
    Never raises: a limit that cannot be changed is logged and kept."""
    global _inherited
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    given = os.environ.get(INHERITED_ENV, "")
    inherited = min(int(given), soft) if given.isdigit() else soft
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, target, exc)
        else:
            soft = target
    if inherited < soft:
        _inherited = inherited
        os.environ[INHERITED_ENV] = str(inherited)
    return FdLimit(inherited, soft, hard)


def restore_for_child() -> None:
    """Between fork and exec: give the child the soft limit the daemon inherited."""
    if _inherited is not None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (_inherited, hard))


def child_preexec() -> Callable[[], None] | None:
    """The `preexec_fn` that gives a child the inherited limit; None when it was never raised, so
    that a spawn keeps the fast path that runs no Python between fork and exec."""
    return restore_for_child if _inherited is not None else None


def _nr_open() -> int:
    try:
        with open(NR_OPEN_PATH) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1024 * 1024  # Linux's default nr_open


class Spare:
    """One descriptor kept open for the moment the table is full: on EMFILE the accept loop gives it
    up to accept a waiting connection, tells that peer why it is refused, and takes it again
    (libuv's and nginx's answer to a full table; lazyd/daemon/connections/listener.py)."""

    def __init__(self) -> None:
        self.fd: int | None = self._open()

    @staticmethod
    def _open() -> int | None:
        try:
            return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    async def refuse_one(self, listener: trio.SocketListener,
                         refuse: Callable[[trio.socket.SocketType], None]) -> bool:
        """Free the spare, accept one waiting connection into it, `refuse` it, close it, and take the
        spare again; False when there is no spare or the accept still fails."""
        if self.fd is None:
            self.fd = self._open()  # descriptors may have freed up since
            return False
        os.close(self.fd)
        self.fd = None
        try:
            sock, _ = await listener.socket.accept()
        except OSError:
            self.fd = self._open()
            return False
        try:
            refuse(sock)
        finally:
            sock.close()
            self.fd = self._open()
        return True
