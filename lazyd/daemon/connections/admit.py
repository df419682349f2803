"""Who gets in: each accepted connection judged before anything is read from it, and told why
when it is refused.

A peer whose credentials cannot be read, or of another uid, is closed without a word (the log has
its pid). Near the descriptor limit or past the connection cap (lazyd/core/admission.py), or
accepted into the spare descriptor (lazyd/daemon/fdlimit.py), it gets a ``refused`` frame of code
``busy`` saying why, with one non-blocking send: its shim shows the reason and runs its server
directly. Refusals are counted (lazyd/daemon/connections/refusals.py) and logged once per episode.
"""

from __future__ import annotations

import contextlib
import logging
import os

import trio

from lazyd.protocol import wire
from lazyd.core.admission import Admission
from lazyd.daemon.connections.refusals import Refusals
from lazyd.daemon.runtime_dir import peer_credentials
from lazyd.protocol.frames import Refusal

log = logging.getLogger("lazyd.conn")


class Admitter:
    """The shell of lazyd/core/admission.py: judges each accepted connection and tells a refused one why."""

    def __init__(self, admission: Admission, send_deadline_s: float, refusals: Refusals) -> None:
        self.admission = admission
        self.send_deadline_s = send_deadline_s
        self.refusals = refusals

    def judge(self, stream: trio.SocketStream, active: int, servers: int) -> tuple[int, str | None] | None:
        """Judge a connection, `active` open (itself included) and `servers` registered: None to close
        it without a word (the reason logged); else the peer's pid and why it is refused (None: it
        is served)."""
        try:
            pid, uid, _ = peer_credentials(stream.socket)  # type: ignore[arg-type]
        except OSError as exc:
            log.warning("closing a connection whose peer cannot be identified: %s", exc.strerror)
            self.refusals.note("unidentified", "a peer that could not be identified")
            return None
        if uid != os.getuid():
            log.warning("refused a connection from uid %d (pid %d): not our user", uid, pid)
            self.refusals.note("uid", f"a peer of uid {uid}, not this user")
            return None
        reason = self.admission.refusal(stream.socket.fileno(), active, servers)
        if reason is not None:
            if self.refusals.note("busy", reason):
                log.warning("refusing connections: %s (pid %d is the first; shims run their servers "
                            "directly until there is room)", reason, pid)
            return pid, reason
        ended = self.refusals.admitted("busy")
        if ended:
            log.info("admitting connections again after %d refused", ended)
        return pid, None

    async def refuse(self, stream: trio.SocketStream, reason: str) -> None:
        """Tell a peer that was not admitted why, before anything is read from it (a shim reads the
        refusal even when its hello could no longer be sent)."""
        with trio.move_on_after(self.send_deadline_s):
            await stream.send_all(wire.encode(Refusal("busy", reason)))

    def refuse_now(self, active: int, sock: trio.socket.SocketType) -> None:
        """Refuse a connection accepted into the spare descriptor (EMFILE): one non-blocking send."""
        reason = (f"the daemon is out of descriptors ({active} connections open, descriptor limit "
                  f"{self.admission.limit}); raise LimitNOFILE= or the hard `ulimit -n` of the daemon")
        if self.refusals.note("busy", reason):
            log.warning("refusing connections: %s", reason)
        with contextlib.suppress(OSError):
            os.write(sock.fileno(), wire.encode(Refusal("busy", reason)))  # the socket is non-blocking
