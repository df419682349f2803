"""Whether the daemon takes one more connection, judged by its descriptor budget.

At scale descriptors run out before memory, and running out is ugly (EMFILE on `accept`, a server
that cannot start), so the daemon keeps a reserve for its servers and files and refuses a
connection *before* the wall, with a reason the shim shows. Known without a scan: the soft
`RLIMIT_NOFILE` (raised at start: lazyd/daemon/fdlimit.py), the number `accept(2)` returned (the
kernel hands out the lowest free one, so N means 0 .. N-1 are in use), the connections open and
the servers registered. The reserve is ``RESERVE_BASE_FDS`` plus ``FDS_PER_SERVER`` a server, at
most a quarter of the limit; a descriptor number reaching ``limit - reserve``, or more connections
than that, is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

RESERVE_BASE_FDS = 64  # the daemon's own: listener, epoll, log files, cache writes, a hello in progress
FDS_PER_SERVER = 6  # a server's stdin, stdout and stderr pipes, its pidfd and log file, and one spare


@dataclass(frozen=True)
class Admission:
    """The descriptor budget of one daemon (see the module docstring)."""

    limit: int  # the soft RLIMIT_NOFILE in force

    def reserve(self, servers: int) -> int:
        """Descriptors kept free for `servers` registered servers and the daemon's own files."""
        return min(RESERVE_BASE_FDS + FDS_PER_SERVER * servers, self.limit // 4)

    def cap(self, servers: int) -> int:
        """The most connections open at once."""
        return max(1, self.limit - self.reserve(servers))

    def refusal(self, fd: int, open_connections: int, servers: int) -> str | None:
        """Why a connection that got descriptor `fd` must be refused, when `open_connections` are
        open (itself included) and `servers` registered; None if it may be served."""
        reserve = self.reserve(servers)
        if fd >= self.limit - reserve:
            return (f"the daemon is near its descriptor limit (descriptor {fd} of {self.limit}, "
                    f"{reserve} kept for {servers} servers and its own files); raise LimitNOFILE= "
                    f"or the hard `ulimit -n` of the daemon")
        cap = self.cap(servers)
        if open_connections > cap:
            return (f"{open_connections - 1} connections open (limit {cap}, from the descriptor "
                    f"limit {self.limit})")
        return None
