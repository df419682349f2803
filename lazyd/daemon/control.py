"""Control operations on the daemon socket (lazyctl): the daemon side (docs/protocol.md).

Each op takes a map of arguments and returns `(ok, data, error)`; `error` is one readable line.
Ops that name a server accept its readable name (a named server's name, or the command basename +
short hash an unnamed registration gets). Ops:

    ping, status, wake, sleep, logs, stop, reload   the operator's view and control
    identity                                        a registration's identity, and why two share
    check                                           an isolated start that warms the cache

`check` never touches the shared instance: it starts its own process, drives a fresh relay core
as one client would (discover, initialize, initialized; the core's refresh fetches every listing
page), stops the process by the ladder and only then merges what it learned into the
registration's snapshot. A check that fails changes nothing. It never calls a tool.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from lazyd.config import ConfigError
from lazyd.core import relay as rl
from lazyd.core.cache import LISTINGS, HandshakeEntry, Snapshot
from lazyd.core.eras import CLIENT_CAPABILITIES_META, CLIENT_INFO_META
from lazyd.core.identity import Identity, explain_difference, identity_for
from lazyd.core.jsonrpc import METHOD_NOT_FOUND, notification_line, request_line
from lazyd.daemon.process import ChildProcess, LineTooLong, SpawnError, spawn
from lazyd.daemon.registry import Registry
from lazyd.daemon.supervisor import ServerRuntime

log = logging.getLogger("lazyd.control")

Result = tuple[bool, Any, str | None]
Reload = Callable[[], Awaitable[Mapping[str, list[str]]]]

WAKE_MARGIN_S = 5.0  # beyond start_timeout: the lifecycle's own timeout must answer first
SLEEP_WAIT_S = 10.0  # the stop ladder is 2 s + 2 s plus a 1 s stderr drain; this bounds the rest
TRANSITION_POLL_S = 0.01  # the runtime records an exit or a spawn within a turn or two of the loop
DISCOVER_PROBE_VERSION = "2026-07-28"  # the first protocol version with server/discover
CHECK_PROTOCOL_VERSION = "2025-11-25"  # the newest handshake-era version every SDK speaks
# Lines queued for a check's server: 4 listings x MAX_LISTING_PAGES requests plus the handshake.
CHECK_BACKLOG_LINES = 4 * rl.MAX_LISTING_PAGES + 16
CHECK_CID = 0  # the one client of a check's private relay core
_DISCOVER_ID, _INITIALIZE_ID = 1, 2
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def default_initialize_params() -> dict[str, Any]:
    return {"protocolVersion": CHECK_PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "lazyctl-check", "version": "0.1.0"}}


def status_summary(registry: Registry) -> str:
    """One line for systemd's STATUS=: server counts by state and attached clients."""
    states = [str(r.life.snapshot()["state"]) for r in registry.runtimes.values()]
    clients = sum(r.core.client_count() for r in registry.runtimes.values())
    counts = ", ".join(f"{states.count(s)} {s}" for s in ("running", "sleeping", "failed"))
    others = len(states) - sum(states.count(s) for s in ("running", "sleeping", "failed"))
    extra = f", {others} changing" if others else ""
    return f"{len(states)} servers: {counts}{extra}; {clients} clients"


class Control:
    def __init__(self, registry: Registry, stop_daemon: trio.Event, reload: Reload | None = None) -> None:
        self.registry = registry
        self.stop_daemon = stop_daemon
        self.reload = reload

    async def __call__(self, op: str, args: dict[str, Any]) -> Result:
        handler = getattr(self, f"op_{op.replace('-', '_')}", None)
        if handler is None:
            return False, None, f"unknown control operation {op!r}"
        try:
            result: Result = await handler(args)
        except Exception as exc:  # a bug in one op must not take the daemon's listener down
            log.exception("control operation %r failed", op)
            return False, None, f"internal error in {op}: {type(exc).__name__}: {exc}"
        return result

    def _runtime(self, args: dict[str, Any]) -> ServerRuntime | str:
        name = args.get("name")
        if not isinstance(name, str) or not name:
            return "a server name is required"
        runtime = self.registry.find(name)
        if runtime is None:
            known = ", ".join(sorted(r.name for r in self.registry.runtimes.values())) or "none"
            return f"no server named {name!r} (known: {known})"
        return runtime

    def _status(self, runtime: ServerRuntime, table: dict[int, tuple[int, int, int, int]] | None = None) -> dict[str, Any]:
        row: dict[str, Any] = dict(runtime.status())
        pid = row.get("pid")
        processes, rss = process_tree_usage(pid, table if table is not None else proc_table()) if isinstance(pid, int) else (0, 0)
        row["processes"] = processes
        row["memory_bytes"] = rss if processes else None
        row["cache_path"] = str(self.registry.store.path_for(runtime.config.digest))
        row["log_path"] = str(runtime.config.spec.log_path)
        return row

    async def op_ping(self, args: dict[str, Any]) -> Result:
        return True, {"pid": os.getpid()}, None

    async def op_status(self, args: dict[str, Any]) -> Result:
        names = args.get("names") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return False, None, "names must be a list of server names"
        runtimes = list(self.registry.runtimes.values())
        known = {r.name for r in runtimes}
        unknown = [n for n in names if n not in known]
        if unknown:
            return False, None, f"no server named {unknown[0]!r} (known: {', '.join(sorted(known)) or 'none'})"
        table = proc_table()
        rows = [self._status(r, table) for r in runtimes if not names or r.name in names]
        return True, {"daemon_pid": os.getpid(), "servers": sorted(rows, key=lambda r: str(r["name"]))}, None

    async def op_wake(self, args: dict[str, Any]) -> Result:
        runtime = self._runtime(args)
        if isinstance(runtime, str):
            return False, None, runtime
        if runtime.core.snapshot.last_params is None:
            # Nobody ever connected: without params to replay the start could never complete.
            runtime.core.snapshot.last_params = default_initialize_params()
        runtime.wake()
        with trio.move_on_after(runtime.config.policy.start_timeout_s + WAKE_MARGIN_S):
            # ready_event is replaced at each spawn: a wake during a stop starts only after it,
            # so the event of the previous start (already set) does not answer this wake.
            while str(runtime.life.snapshot()["state"]) in ("starting", "stopping"):
                event = runtime.ready_event
                if event.is_set():
                    await trio.sleep(TRANSITION_POLL_S)
                else:
                    await event.wait()
        status = self._status(runtime)
        if status["state"] == "running":
            return True, status, None
        reason = status.get("last_error") or runtime.last_exit or f"still {status['state']}"
        return False, status, f"{runtime.name} did not start: {reason}"

    async def op_sleep(self, args: dict[str, Any]) -> Result:
        runtime = self._runtime(args)
        if isinstance(runtime, str):
            return False, None, runtime
        proc = runtime.proc
        runtime.sleep()
        if proc is not None:
            with trio.move_on_after(SLEEP_WAIT_S):
                await proc.wait_exit()
                # The runtime's reader records the exit on its next turn; give it that turn.
                while runtime.proc is proc:
                    await trio.sleep(TRANSITION_POLL_S)
        return True, self._status(runtime), None

    async def op_logs(self, args: dict[str, Any]) -> Result:
        runtime = self._runtime(args)
        if isinstance(runtime, str):
            return False, None, runtime
        path = runtime.config.spec.log_path
        return True, {"name": runtime.name, "path": str(path), "rotated": str(path) + ".1"}, None

    async def op_stop(self, args: dict[str, Any]) -> Result:
        log.info("stop requested by lazyctl")
        self.stop_daemon.set()
        return True, {"pid": os.getpid()}, None

    async def op_reload(self, args: dict[str, Any]) -> Result:
        if self.reload is None:
            return False, None, "reload is not supported by this daemon yet: restart it (lazyctl stop) to apply config changes"
        try:
            report = await self.reload()
        except ConfigError as exc:
            return False, None, f"reload refused, the old config stays in force: {exc}"
        return True, {k: list(v) for k, v in report.items()}, None

    # ---- identity ------------------------------------------------------------------------------

    async def op_identity(self, args: dict[str, Any]) -> Result:
        """args: {"registrations": [one or two of {"name": N} or {"argv", "cwd", "env"}]}."""
        regs = args.get("registrations")
        if not isinstance(regs, list) or not 1 <= len(regs) <= 2 or not all(isinstance(r, dict) for r in regs):
            return False, None, "registrations must be a list of one or two registrations"
        described: list[tuple[Identity, dict[str, Any]]] = []
        for reg in regs:
            one = self._identity(reg)
            if isinstance(one, str):
                return False, None, one
            described.append(one)
        data: dict[str, Any] = {"registrations": [info for _, info in described]}
        if len(described) == 2:
            (a, _), (b, _) = described
            data["differences"] = explain_difference(a, b)
            data["same_identity"] = not data["differences"]
        else:
            data["candidates"] = self._candidates(described[0][0])
        return True, data, None

    def _identity(self, reg: dict[str, Any]) -> tuple[Identity, dict[str, Any]] | str:
        secret = self.registry.secret
        if "name" in reg:
            runtime = self._runtime(reg)
            if isinstance(runtime, str):
                return runtime
            digest = next(d for d, r in self.registry.runtimes.items() if r is runtime)
            identity = self.registry.identities[digest]
            return identity, _describe(identity, runtime.name, None, runtime.name)
        argv, cwd, env = reg.get("argv"), reg.get("cwd"), reg.get("env")
        if not (isinstance(argv, list) and argv and argv[0] and all(isinstance(a, str) for a in argv)):
            return "a registration needs a command (argv)"
        if not (isinstance(cwd, str) and os.path.isabs(cwd)):
            return f"the working directory must be absolute, got {cwd!r}"
        if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            return "env must be a map of str to str"
        ignore = tuple(self.registry.config.per_session_env)
        identity = identity_for(argv, cwd, env, ignore=ignore, which=_which)
        ignored = sorted(n for n in env if any(fnmatch.fnmatchcase(n, p) for p in ignore))
        attached = [r.name for d, r in self.registry.runtimes.items()
                    if dataclasses.replace(self.registry.identities[d], instance="") == identity]
        return identity, _describe(identity, identity.readable_name(secret), ignored, attached[0] if attached else None)

    def _candidates(self, identity: Identity) -> list[dict[str, Any]]:
        """Registered servers with the same command, and what keeps them apart from `identity`."""
        out = []
        for digest, other in self.registry.identities.items():
            if other.argv[:1] == identity.argv[:1]:
                out.append({"name": self.registry.runtimes[digest].name,
                            "differences": explain_difference(identity, other)})
        return sorted(out, key=lambda c: (len(c["differences"]), c["name"]))

    # ---- check ---------------------------------------------------------------------------------

    async def op_check(self, args: dict[str, Any]) -> Result:
        """args: {"name": N} or {"argv", "cwd", "env"}, and optional "initialize" params."""
        params = args.get("initialize") or default_initialize_params()
        if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str):
            return False, None, "initialize params must be an object with a string protocolVersion"
        if "name" in args:
            runtime = self._runtime(args)
        else:
            runtime = await self._registration(args)
        if isinstance(runtime, str):
            return False, None, runtime
        started = trio.current_time()
        outcome = await _Check(runtime, params).run()
        if isinstance(outcome, str):
            log.warning("[%s] check failed: %s", runtime.name, outcome)
            return False, None, f"check of {runtime.name} failed: {outcome}"
        report = self._merge(runtime, outcome, params)
        report["duration_s"] = round(trio.current_time() - started, 3)
        log.info("[%s] check done: cache written to %s", runtime.name, report["cache_path"])
        return True, report, None

    async def _registration(self, args: dict[str, Any]) -> ServerRuntime | str:
        argv, cwd, env = args.get("argv"), args.get("cwd"), args.get("env")
        if not (isinstance(argv, list) and argv and argv[0] and all(isinstance(a, str) for a in argv)):
            return "no server command given"
        if not (isinstance(cwd, str) and os.path.isabs(cwd)):
            return f"the working directory must be absolute, got {cwd!r}"
        if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            return "env must be a map of str to str"
        # Exactly what a shim's hello without options creates, so its first session finds this.
        return await self.registry._unnamed_runtime(list(argv), cwd, dict(env), self.registry.config.defaults)

    def _merge(self, runtime: ServerRuntime, check: _Check, params: dict[str, Any]) -> dict[str, Any]:
        learned = check.core.snapshot
        target = runtime.core.snapshot
        target.merge(learned)
        if target.last_params is None:
            target.last_params = params
        target.updated_at = time.time()
        # Saved at once, in the event loop: the reply promises the file is there.
        self.registry.store.save(runtime.config.digest, target)
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
            "cache_path": str(self.registry.store.path_for(runtime.config.digest)),
            "log_path": str(check.spec_log_path),
            "pid": check.pid,
            "requested_version": params.get("protocolVersion"),
            "protocol_version": entry.result.get("protocolVersion"),
            "server_info": entry.result.get("serverInfo"),
            "capabilities": sorted(entry.result.get("capabilities") or {}),
            "listings": listings,
            "discover": check.discover_kind(),
            "era": learned.era(),
            "mixed_connection": learned.mixed_connection,
        }


class _Check:
    """One isolated start of `runtime`'s command, driven through a fresh relay core."""

    def __init__(self, runtime: ServerRuntime, params: dict[str, Any]) -> None:
        spec = runtime.config.spec
        # Its own log: two LogRings rotating one file would lose lines.
        self.spec = dataclasses.replace(spec, log_path=spec.log_path.with_name(f"{runtime.name}.check.log"))
        self.spec_log_path = self.spec.log_path
        self.timeout_s = runtime.config.policy.start_timeout_s
        self.core = rl.RelayCore(runtime.name, Snapshot(), runtime.config.sampling_policy)
        self.params = params
        self.answers: dict[int, dict[str, Any]] = {}
        self.pages: dict[str, int] = {}
        self.ready = False
        self.failure: str | None = None
        self.pid: int | None = None
        self.done = trio.Event()
        self._send, self._receive = trio.open_memory_channel[bytes](CHECK_BACKLOG_LINES)

    async def run(self) -> _Check | str:
        """Self when the handshake and every listing came back, else the reason it did not."""
        async with trio.open_nursery() as nursery:
            try:
                proc = await spawn(self.spec, nursery)
            except SpawnError as exc:
                return exc.message
            self.pid = proc.pid
            try:
                with trio.move_on_after(self.timeout_s) as scope:
                    self._feed(self.core.attach(CHECK_CID))
                    # A whole envelope: stateless servers refuse a probe without the client's identity.
                    probe = {"_meta": {rl.PROTOCOL_VERSION_META: DISCOVER_PROBE_VERSION,
                                       CLIENT_INFO_META: self.params.get("clientInfo") or {},
                                       CLIENT_CAPABILITIES_META: self.params.get("capabilities") or {}}}
                    self._feed(self.core.client_line(CHECK_CID, request_line(_DISCOVER_ID, "server/discover", probe)))
                    self._feed(self.core.client_line(CHECK_CID, request_line(_INITIALIZE_ID, "initialize", self.params)))
                    self._feed(self.core.spawned())
                    nursery.start_soon(self._write, proc)
                    nursery.start_soon(self._read, proc)
                    await self.done.wait()
                if scope.cancelled_caught:
                    self._finish(f"no complete handshake and listings within start_timeout ({self.timeout_s:g} s)")
            finally:
                await proc.stop()
                nursery.cancel_scope.cancel()
        if self.failure is not None:
            return self.failure
        return self

    def _feed(self, actions: list[rl.Action]) -> None:
        for action in actions:
            if isinstance(action, rl.ToServer):
                method = json.loads(action.line).get("method")
                if method in LISTINGS:
                    self.pages[method] = self.pages.get(method, 0) + 1
                try:
                    self._send.send_nowait(action.line)
                except trio.WouldBlock:
                    self._finish(f"more than {CHECK_BACKLOG_LINES} lines waiting for the server's stdin")
            elif isinstance(action, rl.ToClient) and action.done is not None:
                answer = json.loads(action.line)
                self.answers[int(action.done)] = answer
                if action.done == _INITIALIZE_ID and "result" in answer:
                    self._feed(self.core.client_line(CHECK_CID, notification_line("notifications/initialized")))
            elif isinstance(action, rl.Ready):
                self.ready = True
            elif isinstance(action, rl.Abort):
                self._finish(action.reason)
        if self.ready and _INITIALIZE_ID in self.answers:
            self._finish(None)

    def _finish(self, failure: str | None) -> None:
        if not self.done.is_set():
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
                self._feed(self.core.server_line(line))
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


def _which(command: str, path: str | None) -> str | None:
    return shutil.which(command, path=path)


def _describe(identity: Identity, name: str, ignored: list[str] | None, runtime: str | None) -> dict[str, Any]:
    # Argument and environment values may be tokens: only counts and names leave the daemon.
    return {"name": name, "command": identity.argv[0], "args": len(identity.argv) - 1, "cwd": identity.cwd,
            "env_names": [k for k, _ in identity.env], "ignored_env_names": ignored,
            "instance": identity.instance or None, "registered_as": runtime}


# ---- process tree memory -------------------------------------------------------------------------


def proc_table() -> dict[int, tuple[int, int, int, int]]:
    """pid -> (ppid, pgrp, session, rss pages) for every live process, from /proc/<pid>/stat."""
    table: dict[int, tuple[int, int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue  # exited while we looked
        # proc(5): the command name may hold spaces and ")"; fields count from after its last ")".
        fields = data[data.rindex(b")") + 2:].split()
        table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]), int(fields[21]))
    return table


def process_tree_usage(root: int, table: Mapping[int, tuple[int, int, int, int]]) -> tuple[int, int]:
    """(processes, resident bytes) of `root`, its descendants and its process group and session.

    Descendants catch children that made their own group; group and session catch grandchildren
    whose parent died (they are reparented, but still killed with the group).
    """
    if root not in table:
        return 0, 0
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    members = {pid for pid, (_, pgrp, sid, _) in table.items() if pgrp == root or sid == root}
    seen: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    members |= seen
    return len(members), sum(table[pid][3] for pid in members) * _PAGE_BYTES
