"""The `check` control op's driver: an isolated start of a registration that warms its cache.

A check never touches the shared instance: it starts its own process, drives a fresh relay core
as one client would (discover, initialize, initialized; the core's refresh fetches every listing
page), stops the process by the ladder and only then merges what it learned into the
registration's snapshot. A check that fails changes nothing. It never calls a tool.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import trio

from lazyd.protocol import jsonline
from lazyd.core.relay import core as rl
from lazyd.core.cache import LISTINGS, HandshakeEntry, Snapshot
from lazyd.config.durations import format_duration
from lazyd.core.eras.choice import Era, Kind, facts_of
from lazyd.core.eras.versions import CLIENT_CAPABILITIES_META, CLIENT_INFO_META, FIRST_STATELESS_VERSION
from lazyd.core.relay.jsonrpc import METHOD_NOT_FOUND, error_line, notification_line, request_line
from lazyd.daemon.control import progress
from lazyd.daemon.process.child import ChildProcess, spawn
from lazyd.daemon.process.read_buffer import ReadBuffer
from lazyd.daemon.sessions import running
from lazyd.daemon.sessions.registry import Registry
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.errors import LineTooLong, SpawnError

log = logging.getLogger("lazyd.control")

DISCOVER_PROBE_VERSION = FIRST_STATELESS_VERSION  # the first protocol version with server/discover
# Lines queued for a check's server: 4 listings x MAX_LISTING_PAGES requests plus the handshake.
CHECK_BACKLOG_LINES = 4 * rl.MAX_LISTING_PAGES + 16
CHECK_CID = 0  # the one client of a check's private relay core
_DISCOVER_ID, _INITIALIZE_ID = 1, 2


async def check_runtime(registry: Registry, runtime: ServerRuntime, params: dict[str, Any],
                        timeout_s: float | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """Check `runtime` with initialize `params`: (the report, None), or (None, one readable line).
    `timeout_s` bounds the check instead of the server's start_timeout."""
    started = trio.current_time()
    await registry.starting.passage()  # no start while a predecessor's leftovers are swept
    outcome = await IsolatedCheck(runtime, params, registry.read_buffer, timeout_s).run()
    if isinstance(outcome, str):
        log.warning("[%s] check failed: %s", runtime.name, outcome)
        return None, f"check of {runtime.name} failed: {outcome}"
    handshake: IsolatedCheck | None = None
    if facts_of(outcome.core.snapshot).kind is Kind.PER_CONNECTION:
        # A server that locks each connection to the era of its first request serves handshake-era
        # clients from a process of their own (lazyd/core/eras/choice.py): a second isolated start,
        # initialize first, is what warms their cache.
        known = Snapshot.from_json(outcome.core.snapshot.to_json())  # what the first start learned
        second = await IsolatedCheck(runtime, params, registry.read_buffer, timeout_s, lane="handshake",
                                    snapshot=known).run()
        if isinstance(second, str):
            log.warning("[%s] check failed: %s", runtime.name, second)
            return None, f"check of {runtime.name} failed on a handshake-era connection: {second}"
        handshake = second
    if outcome.runs is not None:
        registry.running.record(runtime.config.digest, outcome.runs)  # what it runs decides sharing too
    report = _merge(registry, runtime, outcome, params, handshake)
    report["duration_s"] = round(trio.current_time() - started, 3)
    log.info("[%s] check done: cache written to %s", runtime.name, report["cache_path"])
    return report, None


def _merge(registry: Registry, runtime: ServerRuntime, check: IsolatedCheck, params: dict[str, Any],
           handshake: IsolatedCheck | None = None) -> dict[str, Any]:
    learned = check.core.snapshot
    target = runtime.core.snapshot
    target.merge(learned)
    first = check
    if handshake is not None:
        # It started from what the first one learned: whatever it adds (its handshake, listings,
        # whether initialize may come first) is the handshake era's side of the same server.
        target.merge(handshake.core.snapshot)
        learned = target
        check = handshake
    if target.last_params is None:
        target.last_params = params
    target.updated_at = time.time()
    # Saved at once, in the event loop: the reply promises the file is there.
    registry.store.save(runtime.config.digest, target)
    # A stateless-only server has no handshake entry: the view is what the bridge serves.
    entry = check.core.handshake_view(params)
    if entry is None:
        entry = HandshakeEntry(params, {})
    listings: dict[str, Any] = {}
    for method, listing in entry.listings.items():
        key = LISTINGS[method]
        if listing.error is not None:
            listings[key] = {"error": str(listing.error.get("message", listing.error))}
        else:
            listings[key] = {"count": len(listing.items or []), "pages": check.pages.get(method, 0)}
    return {
        "name": runtime.name,
        "cache_path": str(registry.store.path_for(runtime.config.digest)),
        "log_path": str(check.spec_log_path),
        "pid": check.pid,
        "requested_version": params.get("protocolVersion"),
        "protocol_version": entry.result.get("protocolVersion"),
        "server_info": entry.result.get("serverInfo"),
        "capabilities": sorted(entry.result.get("capabilities") or {}),
        "listings": listings,
        "discover": first.discover_kind(),
        "era": learned.era(),
        "mixed_connection": learned.mixed_connection,
    }


class IsolatedCheck:
    """One isolated start of `runtime`'s command, driven through a fresh relay core."""

    def __init__(self, runtime: ServerRuntime, params: dict[str, Any], read_buffer: ReadBuffer,
                 timeout_s: float | None = None, lane: Era = "stateless", snapshot: Snapshot | None = None) -> None:
        spec = runtime.config.spec
        # Its own log: two LogRings rotating one file would lose lines.
        self.spec = dataclasses.replace(spec, log_path=spec.log_path.with_name(f"{runtime.name}.check.log"))
        self.spec_log_path = self.spec.log_path
        self.timeout_s = timeout_s or runtime.config.policy.start_timeout_s
        self.core = rl.RelayCore(runtime.name, snapshot if snapshot is not None else Snapshot(),
                                 runtime.config.sampling_policy, era=runtime.config.era)
        # The stateless lane's plan probes the era first (then pipelines the handshake); the
        # handshake lane's replays initialize first, as a handshake-era client's process does.
        self.core.lane = lane
        self.lane = lane
        self.params = params
        self.read_buffer = read_buffer
        self.answers: dict[int, dict[str, Any]] = {}
        self.pages: dict[str, int] = {}
        self.ready = False
        self.failure: str | None = None
        self.pid: int | None = None
        self.runs: list[str] | None = None  # what its process tree ran, looked at once it answered
        # Lines of the server's the relay core dropped as unreadable, and why the last one was:
        # said with a failure, since an answer the core cannot read is an answer the check waits for.
        self.unreadable = 0
        self.unreadable_reason: str | None = None
        self.done = trio.Event()
        self._send, self._receive = trio.open_memory_channel[bytes](CHECK_BACKLOG_LINES)

    async def run(self) -> IsolatedCheck | str:
        """Self when the handshake and every listing came back, else the reason it did not."""
        async with trio.open_nursery() as nursery:
            progress.report("starting the server")
            try:
                proc = await spawn(self.spec, nursery, self.read_buffer)
            except SpawnError as exc:
                return exc.message
            self.pid = proc.pid
            progress.report(f"handshake (pid {proc.pid})")
            try:
                with trio.move_on_after(self.timeout_s) as scope:
                    self._feed(self.core.attach(CHECK_CID, now=time.time()))
                    # A whole envelope: stateless servers refuse a probe without the client's identity.
                    probe = {"_meta": {rl.PROTOCOL_VERSION_META: DISCOVER_PROBE_VERSION,
                                       CLIENT_INFO_META: self.params.get("clientInfo") or {},
                                       CLIENT_CAPABILITIES_META: self.params.get("capabilities") or {}}}
                    if self.lane == "stateless":
                        self._feed(self.core.client_line(CHECK_CID, request_line(_DISCOVER_ID, "server/discover", probe), now=time.time()))
                    self._feed(self.core.client_line(CHECK_CID, request_line(_INITIALIZE_ID, "initialize", self.params), now=time.time()))
                    self._feed(self.core.spawned(now=time.time()))
                    nursery.start_soon(self._write, proc)
                    nursery.start_soon(self._read, proc)
                    await self.done.wait()
                    if self.failure is None:
                        self.runs = running.look(proc.pid)
                if scope.cancelled_caught:
                    self._finish(f"no complete handshake and listings within start_timeout ({format_duration(self.timeout_s)})")
            finally:
                progress.report("stopping the server")
                await proc.stop()
                nursery.cancel_scope.cancel()
        if self.failure is not None:
            return self.failure
        return self

    def _feed(self, actions: list[rl.Action]) -> None:
        for action in actions:
            if isinstance(action, rl.ToServer):
                request = self._readable(action.line, "a line for the server")
                if request is None:
                    return
                method = request.get("method")
                if method in LISTINGS:
                    self.pages[method] = self.pages.get(method, 0) + 1
                    progress.report(f"listings: {method} page {self.pages[method]}")
                try:
                    self._send.send_nowait(action.line)
                except trio.WouldBlock:
                    self._finish(f"more than {CHECK_BACKLOG_LINES} lines waiting for the server's stdin")
            elif isinstance(action, rl.ToClient) and action.done is not None:
                answer = self._readable(action.line, "the server's answer")
                if answer is None:
                    return
                self.answers[int(action.done)] = answer
                if action.done == _INITIALIZE_ID and "result" in answer:
                    self._feed(self.core.client_line(CHECK_CID, notification_line("notifications/initialized"), now=time.time()))
            elif isinstance(action, rl.ToClient) and b'"roots/list"' in action.line:
                # The relay asks the check's session for its roots (session_roots.py): a check has
                # none to give, and says so; the server is then given no roots.
                asked, _ = jsonline.read(action.line)  # a line the relay core wrote itself
                if isinstance(asked, dict) and asked.get("method") == "roots/list" and "id" in asked:
                    refusal = error_line(asked["id"], METHOD_NOT_FOUND, "lazyctl check has no roots")
                    self._feed(self.core.client_line(CHECK_CID, refusal, now=time.time()))
            elif isinstance(action, rl.SessionKey):
                self._feed(self.core.release(CHECK_CID, now=time.time()))  # one session: it stays
            elif isinstance(action, rl.WaitIdle):
                self._feed(self.core.server_idle(now=time.time()))  # a check reads listings only: no need to wait
            elif isinstance(action, rl.Ready):
                self.ready = True
            elif isinstance(action, rl.Abort):
                self._finish(action.reason)
        if self.ready and _INITIALIZE_ID in self.answers:
            self._finish(None)

    def _readable(self, line: bytes, what: str) -> dict[str, Any] | None:
        """`line` as every reader in lazyd reads one (lazyd/protocol/jsonline.py), or None with the check
        failed. The core builds or has read each line it hands the check; should that ever change,
        the check stops with one readable sentence rather than an exception."""
        value, refused = jsonline.read(line)
        if refused is not None or not isinstance(value, dict):
            self._finish(f"{what} is not a JSON object ({refused or 'not an object'}, {len(line)} bytes)")
            return None
        return value

    def _finish(self, failure: str | None) -> None:
        if not self.done.is_set():
            if failure is not None and self.unreadable:
                lines = "a line" if self.unreadable == 1 else f"{self.unreadable} lines"
                failure += f"; the server wrote {lines} lazyd could not read ({self.unreadable_reason})"
            self.failure = failure
            self.done.set()

    async def _write(self, proc: ChildProcess) -> None:
        async for line in self._receive:
            try:
                await proc.send_line(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the reader sees the exit

    async def _read(self, proc: ChildProcess) -> None:
        try:
            async for line in proc.lines():
                actions = self.core.server_line(line, now=time.time())
                if all(isinstance(action, rl.Note) for action in actions):
                    # Nothing came of it: say why, if the line could not be read at all.
                    refused = jsonline.read(line)[1]
                    if refused is not None:
                        self.unreadable += 1
                        self.unreadable_reason = refused
                self._feed(actions)
        except LineTooLong:
            self._finish(f"the server wrote a stdout line over {proc.spec.max_line_bytes} bytes")
        info = await proc.wait_exit()
        self._finish(f"the server {info.describe()} before the handshake and listings were done")

    def discover_kind(self) -> dict[str, Any]:
        answer = self.answers.get(_DISCOVER_ID)
        if answer is None:
            return {"kind": "no-answer"}
        if "result" in answer:
            return {"kind": "result"}
        raw = answer.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if error.get("code") == METHOD_NOT_FOUND:
            return {"kind": "method-not-found"}
        return {"kind": "error", "code": error.get("code"), "message": str(error.get("message", ""))[:200]}
