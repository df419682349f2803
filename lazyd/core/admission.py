"""Whether the daemon takes one more connection, judged by its descriptor budget.

The daemon's scarce resource at scale is file descriptors, not memory: every connection holds
at least one (a hand-off session a few more: docs/benchmarks.md), every running server a few
(its three pipes, a pidfd, its log). Running out is ugly: `accept(2)` fails with EMFILE, a server
cannot be started, a cache file cannot be written. So the daemon keeps a reserve for its servers
and its own files, and refuses connections *before* reaching the wall, with a reason the shim can
show, instead of leaving clients in the backlog until their own deadlines run out.

What is known cheaply, with no scan of anything:

- the soft `RLIMIT_NOFILE` the daemon runs under (raised to the hard one at start:
  lazyd/daemon/fdlimit.py);
- the number of the descriptor `accept(2)` just returned. The kernel always hands out the
  lowest free number, so descriptor N means 0 .. N-1 are all in use: N is a lower bound of the
  descriptors open, and a new descriptor's number near the limit means the table is nearly full;
- how many connections are open and how many servers are registered.

The rules, in order (the first that applies gives the reason):

1. the reserve is ``RESERVE_BASE_FDS`` plus ``FDS_PER_SERVER`` for each registered server (each
   may start while the sessions are open), at most a quarter of the limit (so a tiny limit still
   admits someone);
2. a connection whose descriptor number reaches ``limit - reserve`` is refused: the daemon is
   near its descriptor limit;
3. more than ``limit - reserve`` connections open is refused too: the cap, derived from the limit
   (each connection needs one descriptor at the least), never a fixed number.
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
