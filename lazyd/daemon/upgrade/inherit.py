"""The successor's side of an upgrade: take over what the predecessor handed over, or fall back.

`take_envelope` runs first in `main` (the envelope names the listener and the lock: the successor
neither binds nor locks); `inherit` once the registry exists, before the accept loop. Inheriting
and falling back are docs/upgrade.md "How it works" and "When the new daemon cannot inherit".
Servers' stdout is read only once the sessions are back (the reading gate), so no answer goes to
a client not there yet.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from collections import deque
from collections.abc import MutableMapping
from functools import partial
from pathlib import Path
from typing import Any

import trio

from lazyd.host import procfs
from lazyd.protocol import wire
from lazyd.core import state_codec as sc
from lazyd.daemon.upgrade.connection_state import ConnectionState, Live
from lazyd.daemon.connections.listener import FRAME_DEADLINE_S, ConnectionHandler, Frames
from lazyd.daemon import orphans
from lazyd.daemon.runtime.era_lanes import EraRoute
from lazyd.daemon.handoff.session import HandoffSession
from lazyd.daemon.handoff.stored_sessions import Keeper
from lazyd.daemon.handoff.outbox import ClientEnds
from lazyd.handoff.region import region_problem
from lazyd.daemon.upgrade.stored_servers import SECRETS_NAME, FdStore, rewire, standby_path
from lazyd.daemon.runtime.outbox import ConnectionOutbox, Outbox
from lazyd.daemon.process.child import STDIN_EOF_GRACE_S, TERM_GRACE_S
from lazyd.daemon.sessions.registry import Registry
from lazyd.daemon.upgrade.handover import Lineage
from lazyd.daemon.upgrade.inherited import close_fds, state_fds
from lazyd.daemon.upgrade.state import ENVELOPE_ENV, Envelope, read_secrets, read_state
from lazyd.errors import InheritError
from lazyd.protocol.frames import Reply

log = logging.getLogger("lazyd.inherit")

REAP_WAIT_S = 5.0  # after SIGKILL, as the ladder of lazyd/daemon/process/child.py


def take_envelope(environ: MutableMapping[str, str]) -> Envelope | None:
    """The envelope a predecessor left in the environment (removed from it), or None.
    Every inherited descriptor is made close-on-exec again at once: no server inherits them."""
    text = environ.pop(ENVELOPE_ENV, None)
    if text is None:
        return None
    envelope = Envelope.decode(text)
    for fd in envelope.fds:
        with contextlib.suppress(OSError):  # missing: inherit() finds out and says so
            os.set_inheritable(fd, False)
    return envelope


async def inherit(envelope: Envelope, registry: Registry, handler: ConnectionHandler, lineage: Lineage,
                fdstore: FdStore | None = None) -> None:
    """Take over, or fall back (module docstring); never raises for what was handed over. What the
    predecessor had in systemd's fd store is counted in `fdstore`'s budget."""
    lineage.started_at = envelope.started_at or lineage.started_at
    lineage.upgrades = envelope.upgrades + 1
    registry.reading.close()
    try:
        try:
            summary = await _take_over(envelope, registry, handler, fdstore)
        except InheritError as exc:
            reason = str(exc)
            log.error("upgrade from lazyd %d: cannot take its servers over: %s; stopping them, and sessions "
                      "reconnect", envelope.from_pid, reason)
            lineage.last = {"at": time.time(), "from_pid": envelope.from_pid, "inherited": False, "reason": reason}
            await _fall_back(envelope)
            await _answer(envelope.reply, False, None, f"the new lazyd could not take the servers over: {reason}; "
                          "they were stopped, and sessions reconnect")
            return
    finally:
        registry.reading.open()
    took = max(0.0, time.time() - envelope.began) if envelope.began else None
    lineage.last = {"at": time.time(), "from_pid": envelope.from_pid, "inherited": True, "reason": None, "took_s": took}
    log.info("upgrade from lazyd %d: took over %d servers and %d sessions%s", envelope.from_pid,
             len(summary["servers"]), summary["sessions"], f" in {took * 1000:.0f} ms" if took is not None else "")
    await _answer(envelope.reply, True, {**summary, "pid": os.getpid(), "took_s": took, "upgrades": lineage.upgrades},
                  None)


async def _take_over(envelope: Envelope, registry: Registry, handler: ConnectionHandler,
                     fdstore: FdStore | None) -> dict[str, Any]:
    for fd in envelope.fds:
        if fd != envelope.reply:
            try:
                os.fstat(fd)
            except OSError:
                raise InheritError(f"descriptor {fd} was not inherited") from None
    body, written_at = read_state(Path(envelope.state))
    if fdstore is not None:
        fdstore.given(name for name in body.get("fdstore") or [] if isinstance(name, str))
    if envelope.secrets is None:
        raise InheritError("no secrets were handed over")
    secrets = read_secrets(envelope.secrets)
    try:
        connections: list[ConnectionState] = sc.load(list[ConnectionState], body.get("connections"), "connections")
    except ValueError as exc:
        raise InheritError(f"the state's connections cannot be read ({exc})") from None
    names = await registry.inherit(body, secrets, written_at=written_at, child=True)
    await registry.boot()
    keep: dict[int, set[int]] = {}
    sessions = 0
    for state in connections:
        try:
            sock = socket.socket(fileno=state.fd)
        except OSError:
            continue
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        cancel = trio.CancelScope()
        if state.kind == "fresh":
            registry.nursery.start_soon(_serve_inherited, handler, stream, state, None, None, cancel)
            continue
        s = state.session
        lanes = registry.lanes.get(s.primary) if s is not None else None
        runtime = registry.runtimes.get(s.runtime) if s is not None and s.runtime is not None else None
        if s is None or lanes is None or (s.runtime is not None and runtime is None) or lanes.primary.closing:
            await stream.aclose()  # its server went with the config: the shim reconnects
            continue
        if state.kind == "handoff":
            handed = _handed_off(registry, stream, state, handler.keeper)
            if handed is None:
                await stream.aclose()  # the shim answers from its region and resumes
                continue
            outbox: Outbox = handed.make_outbox(s.cid, s.pid, handed.cancel.cancel)
        else:
            handed, outbox = None, ConnectionOutbox(s.cid, s.pid, cancel.cancel)
        route = EraRoute(lanes, outbox, s.resume, registry.nursery, attached=runtime, held=s.held)
        if runtime is not None:
            keep.setdefault(id(runtime), set()).add(s.cid)
        sessions += 1
        if handed is not None:
            registry.nursery.start_soon(_serve_handed_off, handler, stream, handed, route)
        else:
            assert isinstance(outbox, ConnectionOutbox)
            registry.nursery.start_soon(_serve_inherited, handler, stream, state, outbox, route, cancel)
    for runtime in list(registry.runtimes.values()):
        runtime.forget_clients(keep.get(id(runtime), set()))
    return {"servers": names, "sessions": sessions}


def _handed_off(registry: Registry, stream: trio.SocketStream, state: ConnectionState,
                keeper: Keeper | None) -> HandoffSession | None:
    """The hand-off session `state` describes, continued from its region; None (its descriptors
    closed) if they cannot be served any more."""
    in_fd, out_fd, region_fd = state.fds
    pid = state.session.pid if state.session else -1
    try:
        # A predecessor of another region layout wrote it: its shim reads it by that layout.
        if (problem := region_problem(region_fd)) is not None:
            raise ValueError(f"its region: {problem}")
        ends = ClientEnds(in_fd, out_fd)
    except ValueError as exc:
        log.warning("upgrade: cannot go on serving the pipes of shim pid %d: %s", pid, exc)
        close_fds([in_fd, out_fd, region_fd])
        return None
    try:
        return HandoffSession(registry, stream, pid, ends, region_fd, keeper)
    except (OSError, ValueError) as exc:  # the session closed what it was given
        log.warning("upgrade: cannot go on with a hand-off session's region: %s", exc)
        return None


async def _serve_inherited(handler: ConnectionHandler, stream: trio.SocketStream, state: ConnectionState,
                          session: ConnectionOutbox | None, route: EraRoute | None, cancel: trio.CancelScope) -> None:
    """Serve one handed-over connection until it ends (errors as ConnectionHandler.__call__): what
    was owed to the peer is written first, what was read and not handled is decoded before anything
    more is read; a session goes on with its client id and route, no welcome, no handshake."""
    handler.active += 1
    pid = state.session.pid if state.session is not None else -1
    frames = Frames(stream, FRAME_DEADLINE_S, handler.registry.reading)

    async def serve() -> None:
        if state.inbound:
            frames.feed(state.inbound)  # what the predecessor read comes first, batch by batch
        if state.outbound:
            await stream.send_all(state.outbound)
        if state.kind == "fresh":
            await handler.serve_from_hello(stream, pid, frames)
        elif session is not None and route is not None:
            # As a session after its welcome: the same read loop, the same steps in the same order.
            handler.live[id(stream)] = Live(stream, frames.decoder, frames.pending, "session", route, session)
            try:
                await handler.relay_session(stream, frames, session, route, cancel)
            finally:
                route.detach(session.cid)

    # Judged, counted out and closed as every connection is; a bad frame among the bytes carried
    # over costs this connection only.
    await handler.guarded(stream, pid, serve)


async def _serve_handed_off(handler: ConnectionHandler, stream: trio.SocketStream, session: HandoffSession,
                            route: EraRoute) -> None:
    """Serve a hand-off session handed over (the client's pipes and its region came along)."""
    handler.active += 1
    handler.live[id(stream)] = Live(stream, wire.FrameDecoder(), deque(), "handoff", route, None, session)
    await handler.guarded(stream, session.pid, partial(session.carry_on, route))


async def _answer(fd: int | None, ok: bool, data: Any, error: str | None) -> None:
    """Answer the `lazyctl upgrade` that asked the predecessor, and close its connection."""
    if fd is None:
        return
    try:
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
    except OSError:
        return
    with trio.move_on_after(5.0):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await stream.send_all(wire.encode(Reply(ok, data, error)))
    await stream.aclose()


async def _fall_back(envelope: Envelope) -> None:
    close_fds(fd for fd in envelope.fds if fd not in (envelope.listener, envelope.lock, envelope.reply))
    async with trio.open_nursery() as nursery:
        for pid, ticks in envelope.servers:
            nursery.start_soon(_ladder, pid, ticks)


async def _ladder(pid: int, ticks: int) -> None:
    """Stop one server the predecessor left (its stdin is closed already) and reap it."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if procfs.start_time_ticks(pid) != ticks:
            return  # not that process any more: nothing of ours to stop
        for sig, wait_s in ((None, STDIN_EOF_GRACE_S), (signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, REAP_WAIT_S)):
            if sig is not None:
                with contextlib.suppress(OSError):
                    os.killpg(pid, sig)
            with trio.move_on_after(wait_s):
                await trio.lowlevel.wait_readable(pidfd)
                break
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)  # what is left of its group; the leader is a zombie: no reuse
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass
    finally:
        os.close(pidfd)


async def inherit_stored(stored: dict[str, int], registry: Registry, lock: Path, state_dir: Path,
                       lineage: Lineage) -> None:
    """After a crash under systemd: take over the servers whose pipes the fd store gave back
    (lazyd/daemon/upgrade/stored_servers.py), then sweep the rest as after any crash; never raises
    for what was stored."""
    secrets_fd = stored.pop(SECRETS_NAME, None)
    procs: list[list[int]] = []
    try:
        if secrets_fd is None:
            raise InheritError("the fd store holds no secrets")
        body, written_at = read_state(standby_path(lock))
        lost_keys = rewire(body, stored)
        for runtime in body.get("runtimes", {}).values():
            proc = runtime.get("proc") if isinstance(runtime, dict) else None
            if isinstance(proc, dict):
                procs.append([int(proc["pid"]), int(proc["start_ticks"])])
        await trio.to_thread.run_sync(orphans.sweep, state_dir, frozenset(p for p, _ in procs))
        secrets = read_secrets(secrets_fd)
        secrets_fd = None
        registry.reading.close()
        try:
            await registry.inherit(body, secrets, written_at=written_at, child=False)
            for runtime in list(registry.runtimes.values()):
                runtime.forget_clients(set())  # their connections died with the old daemon
        finally:
            registry.reading.open()
    except (InheritError, ValueError, KeyError, TypeError) as exc:
        reason = str(exc)
        log.error("restart after a crash: cannot take the stored servers over: %s; stopping them", reason)
        lineage.last = {"at": time.time(), "from_pid": None, "inherited": False, "reason": reason, "crash": True}
        close_fds([*stored.values(), secrets_fd])
        await trio.to_thread.run_sync(orphans.sweep, state_dir)
        async with trio.open_nursery() as nursery:
            for pid, ticks in procs:
                nursery.start_soon(_ladder, pid, ticks)
        return
    used = {fd for r in body["runtimes"].values() for fd in state_fds(r.get("proc"))}
    close_fds(fd for fd in stored.values() if fd not in used)
    registry.children_changed()
    # What was really taken over: a process whose pipes did not come back (systemd drops a pipe
    # whose other end closed: the server died with the daemon) is not, whatever the state said.
    took = [r.name for r in registry.runtimes.values() if r.proc is not None]
    lost = [registry.runtimes[k].name if k in registry.runtimes else k[:12] for k in lost_keys]
    missing = (f"{len(lost)} servers' pipes did not come back from the fd store (their processes ended with "
              f"the daemon): {', '.join(lost)}") if lost else None
    lineage.last = {"at": time.time(), "from_pid": None, "inherited": bool(took), "crash": True,
                    "servers": took, "lost": lost, "reason": missing}
    log.info("restart after a crash: took over %d servers from the fd store%s%s", len(took),
             f": {', '.join(took)}" if took else "", f"; {missing}" if missing else "")
