"""Hand-off sessions that outlive a crash under systemd: their descriptors in the fd store.

Without a store, a `kill -9` makes every waiter see its socket end and run the Python shim to take
its session back: a thousand sessions, a thousand interpreters on the CPUs the new daemon needs.
Under systemd the daemon stores a copy of each hand-off session's socket (its daemon end) and of
the client's stdin and stdout (`FDNAME=hs-<shim pid>`, `-in`, `-out`; `-io` for one socket both
ways). The manager holds them while the daemon is down, so the waiter's read never ends, and
passes them to the restarted daemon, which takes the session back in place
(lazyd/handoff/recovery.py) with the region and the session's hello reopened through the
waiter's /proc/PID/fd, found by their memfd names (the client's ends are stored instead: a socket
cannot be reopened).

A waiter must never wait on a socket nobody serves, so: a session's names leave the store before
the daemon closes its socket (that close is how the waiter learns its session ended); a restarted
daemon that cannot take a kept session back removes its names and closes what it got; a unit that
stops drops its whole store. Names are stored with `FDPOLL=0`: the manager would otherwise drop a
client end that hangs up while its last request is still in the pipe.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from dataclasses import dataclass, field

from lazyd.protocol import wire
from lazyd.daemon.handoff.outbox import ClientEnds
from lazyd.daemon.upgrade.inherited import close_fds
from lazyd.daemon.upgrade.stored_servers import FdStore
from lazyd.errors import WireError
from lazyd.handoff.region import HELLO_MEMFD, MEMFD_NAME
from lazyd.protocol.frames import Hello

PREFIX = "hs-"
PARTS = ("", "-in", "-out", "-io")  # after `hs-<pid>`: the waiter's socket; the client's stdin, stdout, or both
MAX_HELLO_BYTES = 1 << 20


def socket_name(pid: int) -> str:
    return f"{PREFIX}{pid}"


class Keeper:
    """The daemon's part that stores and removes each hand-off session's names (made at start when
    the daemon has a store, lazyd/daemon/upgrade/stored_servers.py; never raises)."""

    def __init__(self, store: FdStore) -> None:
        self.store = store
        # What became of the sessions the store gave back at start (`lazyctl status`, live).
        self.tally = {"kept": 0, "taken_back": 0, "let_go": 0}

    def keep(self, pid: int, shim: int, ends: ClientEnds) -> bool:
        """Store the session of shim `pid`: its socket's daemon end and the client's two ends.
        False when the store has no room for them (then after a crash its shim takes it back)."""
        stored = [(socket_name(pid), shim)]
        st = os.fstat(ends.in_fd)
        # One socket both ways is one description, which the store keeps once. (A pipe's two ends
        # share an inode too, but the shim reopened each: two descriptions.)
        if stat.S_ISSOCK(st.st_mode) and os.path.samestat(st, os.fstat(ends.out_fd)):
            stored.append((f"{PREFIX}{pid}-io", ends.in_fd))
        else:
            stored += [(f"{PREFIX}{pid}-in", ends.in_fd), (f"{PREFIX}{pid}-out", ends.out_fd)]
        if not self.store.room(len(stored)):
            return False
        for name, fd in stored:
            self.store.store(name, fd, poll=False)
        return True

    def drop(self, pid: int) -> None:
        """Remove the names of shim `pid`'s session that the store holds (stored by this daemon or
        a predecessor, or given back at start)."""
        for name in [f"{PREFIX}{pid}{part}" for part in PARTS]:
            if name in self.store.names:
                self.store.remove(name)

    def status(self) -> dict[str, int]:
        """What the store holds of this daemon's and the most it may (`lazyctl status`)."""
        return {"held": len(self.store.names), "budget": self.store.budget}


@dataclass
class Kept:
    """One session's descriptors as the store gave them back."""

    pid: int
    fds: dict[str, int] = field(default_factory=dict)  # name -> fd, those not taken yet

    def close(self) -> None:
        close_fds(self.fds.values())
        self.fds.clear()


def take_kept(stored: dict[str, int]) -> list[Kept]:
    """Take every session's descriptors out of `stored` (name -> fd, what the store gave back),
    grouped by shim pid."""
    sessions: dict[int, Kept] = {}
    for name in [n for n in stored if n.startswith(PREFIX)]:
        fd = stored.pop(name)
        base, _, part = name[len(PREFIX):].partition("-")
        if not base.isdigit() or (part and f"-{part}" not in PARTS):
            close_fds([fd])
            continue
        sessions.setdefault(int(base), Kept(int(base))).fds[name] = fd
    return list(sessions.values())


def let_go(kept: Kept, keeper: Keeper | None) -> None:
    """A kept session this daemon does not take back: its names out of the store, then what is
    left of its descriptors closed (its socket's close, after this, tells the waiter)."""
    if keeper is not None:
        keeper.drop(kept.pid)
        keeper.tally["let_go"] += 1
    kept.close()


def open_memfds(pid: int, name: str, flags: int) -> list[int]:
    """Process `pid`'s memfds named `name`, each opened again (close-on-exec) through /proc/PID/fd:
    no other descriptor of it is opened."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    opened = []
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if os.readlink(path).startswith(f"/memfd:{name} "):
                opened.append(os.open(path, flags | os.O_CLOEXEC))
        except OSError:
            continue
    return opened


def reopen(kept: Kept, shim: int) -> tuple[Hello, list[int]] | str:
    """The hello, made a reclaiming one, and [stdin, stdout, region] of `kept`'s session, whose socket's daemon
    end is `shim`: the client's ends that came back, the rest reopened through its waiter's
    /proc/PID/fd. Or why the session cannot be taken back (then nothing was opened)."""
    pid = kept.pid
    try:
        with socket.socket(fileno=os.dup(shim)) as sock:
            peer, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            try:
                waiting: bytes | None = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                waiting = None
    except OSError as exc:
        return f"its socket cannot be read ({exc.strerror or exc})"
    if peer != pid or uid != os.getuid():
        return f"its socket's peer is pid {peer} of uid {uid}"
    if waiting is not None:
        return "its waiter is gone" if not waiting else "its waiter sent bytes"
    hellos, regions = open_memfds(pid, HELLO_MEMFD, os.O_RDONLY), open_memfds(pid, MEMFD_NAME, os.O_RDWR)
    if len(hellos) != 1 or len(regions) != 1:
        close_fds(hellos + regions)
        return "its waiter holds no single region and hello"
    opened: list[int] = []
    try:
        try:
            data = os.pread(hellos[0], MAX_HELLO_BYTES, 0)
        finally:
            os.close(hellos[0])
        frames = wire.FrameDecoder().feed(data)
        hello = frames[0] if len(frames) == 1 else None
        if not isinstance(hello, Hello) or not hello.handoff:
            close_fds(regions)
            return "its waiter's hello is not a hand-off's"
        hello.reclaim = True  # the region comes as the lost daemon left it
        both = kept.fds.pop(f"{PREFIX}{pid}-io", None)
        if both is not None:
            ends: list[int | None] = [both, os.dup(both)]
        else:
            ends = [kept.fds.pop(f"{PREFIX}{pid}{part}", None) for part in ("-in", "-out")]
        opened += [fd for fd in ends if fd is not None]
        if None in ends:
            raise ValueError("the client's ends did not come back from the store")
    except (OSError, ValueError, WireError) as exc:
        close_fds(opened + regions)
        where = f" {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
        return f"its waiter's descriptors cannot be reopened ({getattr(exc, 'strerror', None) or exc}{where})"
    return hello, opened + regions
