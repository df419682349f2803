"""`lazyctl upgrade` and SIGUSR2: the daemon hands itself over to a (possibly new) lazyd by exec.

The steps (quiesce, write the state, exec) are docs/upgrade.md "How it works". A session whose
outbox did not drain, or whose lane is being opened, is not handed over; a server whose stdin did
not drain is, and the successor kills it (nobody can finish a half line). If the exec fails, the
gate opens again and this daemon goes on; the caller hears why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from lazyd.config.load import load_config
from lazyd.core import state_codec as sc

from lazyd.daemon.upgrade.connection_state import ConnectionState, Live, SessionState, inbound_bytes
from lazyd.daemon.connections.listener import ConnectionHandler
from lazyd.daemon.runtime.era_lanes import EraRoute
from lazyd.daemon.handoff.outbox import HandoffOutbox
from lazyd.daemon.runtime.outbox import ConnectionOutbox
from lazyd.daemon.notify import Notifier
from lazyd.daemon.sessions.registry import Registry
from lazyd.daemon.upgrade.state import ENVELOPE_ENV, Envelope, state_path, write_secrets, write_state
from lazyd.errors import ConfigError
from lazyd.host.paths import Paths

log = logging.getLogger("lazyd.upgrade")

# Readers stop at once; this bounds waiting for the writers (a client that does not read).
SETTLE_BOUND_S = 2.0
SETTLE_POLL_S = 0.002


@dataclass
class Lineage:
    """This daemon's place in a chain of upgrades: shown by `lazyctl status`."""

    started_at: float = field(default_factory=time.time)  # when the first daemon of the chain started
    upgrades: int = 0
    last: dict[str, Any] | None = None  # the last hand-over: when, inherited or not, and why not


class Upgrader:
    """Carries an upgrade out; `handler.upgrade` and the SIGUSR2 handler call it."""

    def __init__(self, registry: Registry, handler: ConnectionHandler, paths: Paths, *, listener: int, lock: int,
                 activated: bool, notifier: Notifier, notify_env: Mapping[str, str], lineage: Lineage,
                 config_path: Path | None = None) -> None:
        self.registry, self.handler, self.paths = registry, handler, paths
        self.config_path = config_path
        self.listener_fd, self.lock_fd, self.activated = listener, lock, activated
        self.notifier, self.notify_env, self.lineage = notifier, dict(notify_env), lineage
        self._busy = False

    async def __call__(self, reply: trio.SocketStream | None) -> tuple[bool, Any, str | None]:
        """Hand over to a new lazyd; returns only when that failed (the successor answers `reply`)."""
        if self._busy:
            return False, None, "an upgrade is already under way"
        if self.config_path is not None:
            # The successor reads the config first thing; one it cannot load would make it exit
            # with every server it was handed. Refused here instead, with the reason.
            try:
                await trio.to_thread.run_sync(load_config, self.config_path, dict(os.environ))
            except ConfigError as exc:
                log.error("upgrade refused: %s", exc)
                return False, None, f"upgrade refused, going on as before: {exc}"
        self._busy = True
        began = time.time()
        log.info("upgrade: quiescing %d servers and %d connections", len(self.registry.runtimes),
                 len(self.handler.live))
        self.notifier.notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}",
                             "STATUS=upgrading")
        gate = self.registry.reading
        gate.close()
        try:
            await self._settle()
            # A process being spawned has no pid to hand over yet: it would be left behind.
            error = self._exec(reply, began) if not gate.holds else "a server was still being started; try again"
        finally:
            gate.open()
            self._busy = False
        log.error("upgrade failed, going on as before: %s", error)
        self.notifier.ready("upgrade failed")
        return False, None, error

    async def _settle(self) -> None:
        # Every await of a reader leaves what it read recorded (in its decoder, its pending frames,
        # its stdout buffer), so only the writers and a spawn under way are waited for here.
        with trio.move_on_after(SETTLE_BOUND_S):
            while True:
                await trio.sleep(0)  # readers that have data run to their gate first
                registry = self.registry
                if not registry.reading.holds and not any(r.writing for r in registry.runtimes.values()) and all(
                        _drained(live) for live in self.handler.live.values()):
                    return
                await trio.sleep(SETTLE_POLL_S)

    def _exec(self, reply: trio.SocketStream | None, began: float) -> str:
        registry = self.registry
        stuck = {r: "its stdin could not be drained for the upgrade" for r in registry.runtimes.values() if r.writing}
        state, secrets, fds = registry.to_state(trio.current_time(), stuck)
        keys = {id(r): k for k, r in registry.runtimes.items()}
        reply_fd = reply.socket.fileno() if reply is not None else None
        connections = []
        for live in self.handler.live.values():
            fd = live.stream.socket.fileno()
            if fd == reply_fd or fd < 0:
                continue
            if live.kind == "fresh":
                connections.append(ConnectionState("fresh", fd, inbound_bytes(live.decoder, list(live.pending))))
                continue
            handed = live.handoff
            session: ConnectionOutbox | HandoffOutbox | None
            if live.kind == "handoff" and handed is not None:
                route, session = handed.route, handed.outbox
                if session is None or session.closed or not handed.carried():
                    continue  # its shim answers from the region and resumes with the successor
            elif live.kind == "session":
                route, session = live.route, live.session
            else:
                continue  # control and hub connections end; their peers reconnect
            if not isinstance(route, EraRoute) or session is None:
                continue
            held = route.handover()
            if session.dropped or session.backlog.frames or held is None:
                continue
            runtime, resume, lines = held
            if runtime is not None and session.cid not in runtime.sessions:
                continue
            carried = SessionState(session.cid, session.pid, keys[id(route.lanes.primary)],
                                   keys[id(runtime)] if runtime is not None else None, resume, lines)
            if handed is not None:
                region = handed.region_fd()
                if region is None:
                    continue  # its shim is gone or holds no region: it answers from what it has
                connections.append(ConnectionState("handoff", fd, b"", b"", carried,
                                                   [handed.ends.in_fd, handed.ends.out_fd, region]))
            else:
                connections.append(ConnectionState("session", fd, inbound_bytes(live.decoder, list(live.pending)),
                                                   b"", carried))
        state["connections"] = sc.dump(connections)
        keeper = self.handler.keeper  # what the store holds stays there: the successor's budget counts it
        state["fdstore"] = sorted(keeper.store.names) if keeper is not None else []
        secrets_fd = write_secrets(secrets)
        inherit = [self.listener_fd, self.lock_fd, secrets_fd, *fds, *(c.fd for c in connections),
                   *(fd for c in connections for fd in c.fds)]
        if reply_fd is not None:
            inherit.append(reply_fd)
        servers = [[r.proc.pid, r.proc.start_time_ticks] for r in registry.runtimes.values() if r.proc is not None]
        envelope = Envelope(str(state_path(self.paths)), self.listener_fd, self.lock_fd, self.activated,
                            inherit, secrets_fd, reply_fd, os.getpid(), self.lineage.upgrades, self.lineage.started_at,
                            servers=servers, began=began)
        env = {**os.environ, **self.notify_env, ENVELOPE_ENV: envelope.encode()}
        argv = [sys.executable, *sys.orig_argv[1:]]
        try:
            write_state(state_path(self.paths), state)
            for fd in inherit:
                os.set_inheritable(fd, True)
            log.info("upgrade: handing %d servers and %d connections to %s", len(registry.runtimes),
                     len(connections), " ".join(argv))
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.execve(argv[0], argv, env)
        except OSError as exc:
            for fd in inherit:
                if fd not in (self.listener_fd, self.lock_fd):
                    with contextlib.suppress(OSError):
                        os.set_inheritable(fd, False)
            os.close(secrets_fd)
            with contextlib.suppress(OSError):
                os.unlink(state_path(self.paths))
            return f"cannot run {argv[0]}: {exc.strerror or exc}"
        raise AssertionError("execve returned")  # pragma: no cover


def _drained(live: Live) -> bool:
    """Whether nothing is queued for the connection's peer (a shim's socket, or a hand-off
    session's client)."""
    if live.handoff is not None:
        return live.handoff.outbox is None or live.handoff.outbox.backlog.frames == 0
    return live.session is None or live.session.backlog.frames == 0
