"""One supervised server: where trio meets the relay core and the lifecycle.

A `ServerRuntime` owns, for one registration identity, the `RelayCore`, the `Lifecycle`, the live
`ChildProcess` if any and the attached sessions; it feeds both pure objects the events it sees and
carries out their actions, deciding nothing beyond "how". Its tasks: the timer loop (sleeps until
the lifecycle's next deadline or a poke), per process a stdin writer (lazyd/daemon/process/stdin.py)
and a stdout reader that also handles the exit (every line written before dying is relayed before
in-flight requests fail), the cache saver and the wake predicate. Calls from other tasks are
synchronous: events are applied atomically and in order.

For a successor daemon it writes itself (`to_state`, `secrets`) and is rebuilt (`from_state`); it
then takes its process over instead of `boot()` (lazyd/daemon/upgrade/inherited.py). A stop ladder
under way begins again, a running wake predicate is killed and counted as timed out, and a process
gone by now is an exit like any other.
"""

from __future__ import annotations

import errno
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import trio

from lazyd.core import state_codec as sc
from lazyd.daemon.heap_trim import LARGE_BYTES
from lazyd.core.lifecycle import machine as lc
from lazyd.core.relay import core as rl
from lazyd.core.cache import Snapshot
from lazyd.core.relay.jsonrpc import Invalid, JsonObj, Message
from lazyd.core.relay.session_roots import SessionRoots
from lazyd.core.hub.catalog import cached_tools
from lazyd.core.memory import MemoryLimit, Park, Restart
from lazyd.core.policy import ToolPolicy
from lazyd.daemon.runtime.cache_saver import CacheSaver
from lazyd.daemon.runtime.outbox import Outbox
from lazyd.daemon.process.idle import wait_idle
from lazyd.daemon.process.predicate import kill_left_predicate, run_predicate
from lazyd.daemon.process.child import ChildProcess, spawn
from lazyd.daemon.upgrade.inherited import HandedRuntime, inherit_child
from lazyd.daemon.runtime.config import DaemonParts, RuntimeConfig
from lazyd.daemon.runtime.policy_gate import RuntimeGate
from lazyd.daemon.process.stdin import ServerInput
from lazyd.errors import InheritError, LineTooLong, SpawnError

log = logging.getLogger("lazyd.server")

# Spawn errors a retry cannot cure park the server at once (lifecycle rule 3); any other backs off.
FATAL_SPAWN_ERRNOS = frozenset({errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR})


class ServerRuntime:
    def __init__(self, config: RuntimeConfig, snapshot: Snapshot, parts: DaemonParts, *, label: str | None = None,
                 save_lock: trio.Lock | None = None) -> None:
        self.config = config
        self._reading, self._starting = parts.reading, parts.starting  # the daemon's gates (lazyd/daemon/gate.py)
        self._read_buffer = parts.read_buffer
        # Logs and status: `NAME@ERA` for another era's process (era_lanes.py); policy and hub use config.name.
        self.name = label or config.name
        self.core = rl.RelayCore(config.name, snapshot, config.sampling_policy, era=config.era,
                                 session_aware=config.share == "session-aware")
        self.life = lc.Lifecycle(config.policy, random.Random())
        self.store, self.heap = parts.store, parts.heap
        self.proc: ChildProcess | None = None
        self.sessions: dict[int, Outbox] = {}
        self.placers: dict[int, Callable[[int, str], None]] = {}  # who places a session (era_lanes.py)
        self.on_children_changed = parts.children_changed
        self.gate = RuntimeGate(self.name, config.name, parts.tool_policy, self.sessions, self.can_elicit)
        self._nursery: trio.Nursery | None = None
        self.started = trio.Event()  # set once `run` has its nursery: a line may reach it from then on
        self._scope = trio.CancelScope()
        self._poke = trio.Event()
        self._waiting_for: float | None = None
        # Lanes share the snapshot and its file: one save at a time, so no older copy lands last.
        self._save_lock = save_lock if save_lock is not None else trio.Lock()
        self._saver = CacheSaver(parts.store, config.digest, lambda: self.core.snapshot, self._save_lock)
        self._input = ServerInput(self.name, self._kill, lambda: len(self.core.queue), parts.heap.note)  # its stdin
        self._kill_reason: str | None = None
        # A stop of ours that clients must hear of as a failure (a memory limit).
        self._stop_reason: str | None = None
        self.memory = MemoryLimit(config.memory_max) if config.memory_max else None  # fed by memory_watch.py
        self.last_stop: tuple[float, str] | None = None  # (wall time, reason) of the last stop decided
        self.client_lines = 0  # lines its clients sent it (requests, notifications, answers): `lazyctl top`'s rate
        self._stop_requested = False
        self._closing = False  # set by shutdown(): no process or predicate is started after it
        self._finished = trio.Event()  # run() has returned: no task of this runtime is left
        # Set at the end of every lifecycle input, only while someone waits (`wait_changed`).
        self._changed: trio.Event | None = None
        self.on_change: Callable[[], None] = lambda: None  # the registry's status signal (status_signal.py)
        self.last_exit: str | None = None
        self.started_wall: float | None = None  # when the current process became ready (wall)
        self.spawned_wall: float | None = None  # when the current process was started (wall)
        # The running wake predicate's (pid, start ticks), for a successor's orphan sweep.
        self.predicate_child: tuple[int, int] | None = None
        # What a predecessor handed over (`from_state`), taken over instead of `boot()`.
        self._handed: tuple[HandedRuntime, bool] | None = None  # and whether its process is our child
        self.upgrades = 0  # how many upgrades the current process lived through

    # ---- task structure ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self._scope:
                await self._run(task_status)
        finally:
            self._finished.set()

    async def close(self) -> None:
        """Stop the process and end the runtime's tasks (a reload removed or changed the server),
        sessions dropped first (their shims find the new definition); returns once every task ended,
        so nothing touches the server's files afterwards."""
        self._closing = True
        for cid in list(self.sessions):
            self.detach(cid)
        await self.shutdown()
        self._scope.cancel()
        await self._finished.wait()

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.started.set()
            nursery.start_soon(self._saver.run)
            task_status.started()
            if self._handed is not None:
                self._take_over(*self._handed)
                self._handed = None
            else:
                self._life(self.life.boot(trio.current_time()))
            while True:
                deadline = self._waiting_for = self._next_deadline()
                with trio.move_on_at(deadline if deadline is not None else math.inf):
                    await self._poke.wait()
                self._poke = trio.Event()
                self._life(self.life.tick(trio.current_time()))
                self._relay(self.core.tick(now=time.time()))  # a client's overdue roots (session_roots.py)

    def _next_deadline(self) -> float | None:
        """The lifecycle's next deadline, or the relay's (wall-clock, session_roots.py) if sooner."""
        due = [d for d in (self.life.next_deadline(),) if d is not None]
        if (relay_due := self.core.next_deadline()) is not None:
            due.append(trio.current_time() + max(0.0, relay_due - time.time()))
        return min(due, default=None)

    async def shutdown(self) -> None:
        """Stop the process by the ladder (daemon exit); no process is started from here on, so none
        is left behind a daemon going away."""
        self._closing = True
        proc = self.proc
        if proc is not None:
            self._stop_requested = True
            await proc.stop()
        self._saver.save_now()

    @property
    def closing(self) -> bool:
        """Shut down or being replaced: no process is started any more."""
        return self._closing

    # ---- events from sessions and operators ----------------------------------------------------

    def attach(self, session: Outbox, resume: list[bytes]) -> None:
        self.sessions[session.cid] = session
        sid = f"sess_{random.getrandbits(32):08x}"  # for a session-aware server (core/session_meta.py)
        self._relay(self.core.attach(session.cid, now=time.time(), session_id=sid))
        if resume:
            self._relay(self.core.resume(session.cid, resume, now=time.time()))
        self._load()

    def client_line(self, cid: int, line: bytes, parsed: Message | Invalid | None = None) -> None:
        if cid in self.sessions:
            self.client_lines += 1
            gated = self.gate.client_line(cid, line)
            if gated is None:
                return
            if gated is not line:
                parsed = None  # the policy rewrote it: not the line that was parsed
            line = gated
            self._relay(self.core.client_line(cid, line, now=time.time(), parsed=parsed))
            self._load()

    # ---- placing a session once its key is known (lazyd/core/relay/session_roots.py) -------------

    def release(self, cid: int, key: str = "") -> None:
        """The session stays here (whatever its key): its held requests go on."""
        if cid in self.sessions:
            self._relay(self.core.release(cid, now=time.time()))
            self._load()

    def take(self, cid: int) -> tuple[SessionRoots, list[bytes]] | None:
        """The session moves away: what the other runtime's `move_in` takes (None: it is gone)."""
        self.placers.pop(cid, None)
        if self.sessions.pop(cid, None) is None:
            return None
        self.gate.detach(cid)
        known, held, actions = self.core.take(cid, now=time.time())
        self._relay(actions)
        self._load()
        return known, held

    def move_in(self, session: Outbox, params: JsonObj | None, known: SessionRoots, held: list[bytes]) -> None:
        """A session moved here from another runtime of its registration (`take`)."""
        self.attach(session, [])
        self._relay(self.core.move_in(session.cid, params, known, now=time.time()))
        for line in held:
            self.client_line(session.cid, line)

    def can_elicit(self, cid: int) -> bool:
        """Whether client `cid` declared it can be asked (elicitation), for the tool-policy gate."""
        client = self.core.clients.get(cid)
        return client is not None and client.declares("elicitation")

    def detach(self, cid: int) -> None:
        self.placers.pop(cid, None)
        session = self.sessions.pop(cid, None)
        if session is None:
            return
        session.close()
        self.gate.detach(cid)
        self._relay(self.core.detach(cid, now=time.time()))
        self._load()

    def policy_changed(self, old: ToolPolicy, new: ToolPolicy) -> None:
        """The tool policy was reloaded: when it now hides a different set of this server's tools,
        its clients are told their tools/list changed (per-server shims filter listings by it)."""
        if not self.sessions:
            return
        core = self.core
        tools = cached_tools(core.snapshot, core.instance if core.phase is rl.Phase.READY else None, None)
        if tools is None:
            return  # nothing listed yet, so nothing any client saw can be stale
        names = [tool["name"] for tool in tools]
        if old.denied(self.config.name, names) == new.denied(self.config.name, names):
            return
        log.info("[%s] the tool policy now hides a different set of tools: telling its clients", self.name)
        self._relay(core.announce_list_changed("notifications/tools/list_changed", now=time.time()))

    def wake(self) -> None:
        self._life(self.life.operator_wake(trio.current_time()))

    # ---- memory (lazyd/daemon/runtime/memory_watch.py; rule 11 of lazyd/core/lifecycle/machine.py) ---

    def memory_sample(self, pid: int, size: int) -> None:
        """The tree of process `pid` measured `size` bytes now: its PSS, or any figure at least its
        PSS that is under the limit (the watch's RSS screen)."""
        if self.memory is None or self.proc is None or self.proc.pid != pid:
            return  # it ended or was replaced since the watch looked
        verdict = self.memory.sample(trio.current_time(), size, pid)
        if verdict is None:
            return
        log.warning("[%s] %s", self.name, verdict.reason)
        park = isinstance(verdict, Park)
        breaches = verdict.breaches if isinstance(verdict, Restart) else 0
        actions = self.life.memory_stop(trio.current_time(), verdict.reason, park=park, breaches=breaches)
        if any(isinstance(a, lc.Stop) for a in actions):
            self._stop_reason = verdict.reason
        self._life(actions)

    def pressure_sleep(self, reason: str) -> bool:
        """Put the server to sleep for memory pressure, if it is running and idle; whether it was."""
        actions = self.life.pressure_sleep(trio.current_time(), reason)
        self._life(actions)
        return bool(actions)

    def sleep(self, reason: str = "lazyctl sleep") -> None:
        """Stop the process and sleep: `lazyctl sleep`, or the daemon for `reason`."""
        self._life(self.life.operator_sleep(trio.current_time(), reason))

    # ---- carrying out actions ------------------------------------------------------------------

    def _relay(self, actions: list[rl.Action]) -> None:
        for action in actions:
            if isinstance(action, rl.ToClient):
                session = self.sessions.get(action.cid)
                if session is not None:
                    line = action.line
                    if action.done is not None:
                        line = self.gate.to_client(action.cid, line, action.done)
                    session.deliver(line, action.done)
            elif isinstance(action, rl.ToServer):
                self._input.send(action.line)
            elif isinstance(action, (rl.Activity, rl.Used)):  # moves the idle or linger deadline later: no wake-up owed
                if lc_actions := self.life.activity(trio.current_time(), used=isinstance(action, rl.Used)):
                    self._life(lc_actions)
            elif isinstance(action, rl.WantServer):
                self._life(self.life.demand(trio.current_time()))
            elif isinstance(action, rl.Ready):
                self.started_wall = time.time()
                self._life(self.life.ready(trio.current_time()))
            elif isinstance(action, rl.SnapshotChanged):
                self._saver.want()
            elif isinstance(action, rl.Abort):
                self._kill(action.reason)
            elif isinstance(action, rl.WaitIdle) and (proc := self.proc) is not None and self._nursery is not None:
                self._nursery.start_soon(wait_idle, proc.pgid, proc.pid, lambda: proc is self.proc, self._idle)
            elif isinstance(action, rl.SessionKey):  # its route places it; a session nobody places stays
                self.placers.get(action.cid, self.release)(action.cid, action.key)
            elif isinstance(action, rl.Note):
                log.info("[%s] %s", self.name, action.text)

    def _life(self, actions: list[lc.Action]) -> None:
        for action in actions:
            if isinstance(action, lc.Spawn):
                if self._closing:
                    log.info("[%s] not starting: the server is being shut down", self.name)
                    self._relay(self.core.start_failed("lazyd is shutting this server down", now=time.time()))
                    continue
                self._stop_requested = False
                self._kill_reason = None
                self._stop_reason = None
                self.core.ensure_replay_params()
                assert self._nursery is not None
                self._nursery.start_soon(self._start_process)
            elif isinstance(action, lc.Stop):
                log.info("[%s] stopping: %s", self.name, action.reason)
                self.last_stop = (time.time(), action.reason)
                self._stop_requested = True
                if self.proc is not None:
                    assert self._nursery is not None
                    self._nursery.start_soon(self.proc.stop)
            elif isinstance(action, lc.KillAndFail):
                self._kill(action.reason)
            elif isinstance(action, lc.FailWaiting):
                self._relay(self.core.start_failed(action.error, now=time.time()))
            elif isinstance(action, lc.RunPredicate):
                if self._closing:
                    continue  # the runtime ends before a result could matter
                assert self._nursery is not None
                self._nursery.start_soon(self._run_predicate)
            elif isinstance(action, lc.Log):
                log.info("[%s] %s", self.name, action.message)
        # Wake the timer loop only for an earlier deadline (no task switch per message); a later
        # one is found when the loop wakes at the old one.
        deadline = self._next_deadline()
        if deadline is not None and (self._waiting_for is None or deadline < self._waiting_for):
            self._poke.set()
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()
        self.on_change()

    def _idle(self) -> None:
        """The server is done with its answers after a settling start (idle.py)."""
        self._relay(self.core.server_idle(now=time.time()))
        self._load()

    async def wait_changed(self) -> None:
        """Until the next lifecycle input has been carried out: its state, process, failure
        count or last error may have changed (callers look again; none is missed, since every
        change is made inside such an input and this wait starts before the next one)."""
        if self._changed is None:
            self._changed = trio.Event()
        await self._changed.wait()

    def _load(self) -> None:
        self._life(self.life.load(trio.current_time(), self.core.client_count(), self.core.inflight_count()))
        self._input.signal_room()

    # ---- backpressure (lazyd/daemon/process/stdin.py) -----------------------------------------------

    def has_room(self) -> bool:
        """Whether the sessions of this server may be read further (see MAX_SERVER_BACKLOG_BYTES)."""
        return self._input.has_room()

    async def wait_for_room(self) -> None:
        await self._input.wait_for_room()

    def _kill(self, reason: str) -> None:
        log.warning("[%s] killing the server: %s", self.name, reason)
        self._kill_reason = reason
        if self.proc is not None:
            self.proc.kill_group()

    # ---- the process ---------------------------------------------------------------------------

    async def _spawn_after_sweep(self) -> ChildProcess:
        assert self._nursery is not None
        await self._starting.passage()  # no start while a predecessor's leftovers are swept
        return await spawn(self.config.spec, self._nursery, self._read_buffer)

    async def _start_process(self) -> None:
        now = trio.current_time()
        assert self._nursery is not None
        try:
            # An upgrade waits for its pid, the wait at the sweep's gate included.
            proc = await self._reading.hold(self._spawn_after_sweep())
        except SpawnError as exc:
            fatal = exc.errno in FATAL_SPAWN_ERRNOS
            log.error("[%s] cannot start%s: %s", self.name, "" if fatal else " (will retry)", exc.message)
            self.last_exit = exc.message
            self._life(self.life.spawn_failed(trio.current_time(), exc.message, fatal=fatal))
            self._note_backoff()
            return
        self.proc = proc
        self.spawned_wall = time.time()
        self.upgrades = 0
        self.on_children_changed()
        # A stop or kill decided while the spawn was in progress found no process to act on.
        if self._kill_reason is not None:
            proc.kill_group()
        elif self._stop_requested or self._closing:
            self._stop_requested = True
            self._nursery.start_soon(proc.stop)
        log.info("[%s] spawned pid %d in %.0f ms", self.name, proc.pid, (trio.current_time() - now) * 1000)
        self._input.open(proc, self._nursery)
        self._nursery.start_soon(self._read_server, proc)
        self._life(self.life.spawned(trio.current_time(), proc.pid))
        self._relay(self.core.spawned(now=time.time()))

    async def _read_server(self, proc: ChildProcess) -> None:
        try:
            await self._reading.passage()  # an inherited process is read once its sessions are back
            async for line in proc.lines():
                if len(line) >= LARGE_BYTES:  # the read buffer's pages go back once large lines are over
                    self.heap.later(self._read_buffer.release)
                self._relay(self.core.server_line(line, now=time.time()))
                self._load()
                await self._reading.passage()  # an upgrade stops reading here (lazyd/daemon/gate.py)
        except LineTooLong:
            self._kill(f"wrote a stdout line over {proc.spec.max_line_bytes} bytes")
        info = await proc.wait_exit()
        description = self._kill_reason or self._stop_reason or info.describe()
        requested = self._stop_requested and self._kill_reason is None
        self.proc = None
        self._input.close()
        self._input.signal_room()
        self.last_exit = description
        self.on_children_changed()
        log.info("[%s] pid %d %s", self.name, proc.pid, description)
        self._relay(self.core.exited(description, now=time.time()))
        self._life(self.life.exited(trio.current_time(), description, requested=requested))
        self._note_backoff()
        self._load()

    def _note_backoff(self) -> None:
        """Log the restart a failure scheduled: the operator's record of the backoff schedule."""
        restart_at = self.life.next_restart_at
        if self.life.state is lc.State.BACKOFF and restart_at is not None:
            delay_ms = max(0.0, restart_at - trio.current_time()) * 1000
            log.info("[%s] failure %d in a row; restarting in %.0fms", self.name, self.life.burst, delay_ms)

    async def _run_predicate(self) -> None:
        # Reported whatever happens (but cancellation): the lifecycle waits for it to schedule another.
        wake = self.config.wake
        code: int | None = None
        try:
            if wake is not None:
                await self._starting.passage()
                code = await run_predicate(wake, self.config.spec.cwd, self.config.spec.env, self.name,
                                           on_child=self._predicate_child_changed)
        except Exception:
            log.exception("[%s] wake predicate failed", self.name)
            code = None
        self._life(self.life.predicate_done(trio.current_time(), code))

    def _predicate_child_changed(self, child: tuple[int, int] | None) -> None:
        self.predicate_child = child
        self.on_children_changed()

    # ---- handing over to a successor daemon (lazyd/daemon/upgrade/; the module docstring) -----

    @property
    def save_lock(self) -> trio.Lock:
        """The lock its snapshot is saved under: another era's lane of the registration shares it."""
        return self._save_lock

    @property
    def writing(self) -> bool:
        """Whether lines are still queued for its process's stdin (an upgrade waits for them)."""
        return self._input.busy

    def to_state(self, now: float, *, kill: str | None = None) -> dict[str, Any]:
        """Everything but its secrets, at monotonic `now`. With `kill`, the successor takes its
        process over and then kills it for that reason (its stdin could not be brought to a line
        boundary)."""
        facts = HandedRuntime(self.proc.to_state() if self.proc is not None else None, self.gate.to_state(),
                              self.predicate_child, kill, self.last_exit, self.started_wall, self.spawned_wall,
                              self._kill_reason, self._stop_requested, self._stop_reason, self.last_stop, self.upgrades)
        return {"name": self.name, "config": self.config.to_state(), "core": self.core.to_state(),
                "life": self.life.to_state(now),
                "memory": self.memory.to_state(now) if self.memory is not None else None, **sc.dump(facts)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], secrets: Mapping[str, Any], snapshot: Snapshot, parts: DaemonParts,
                   *, written_at: float, child: bool, save_lock: trio.Lock | None = None) -> ServerRuntime:
        """The runtime that wrote `state`, not started yet: `run` it and it takes its process over.
        `written_at` is the wall-clock time of the write; `child` whether its process is our child.
        Raises ValueError for a state this code did not write."""
        config = RuntimeConfig.from_state(state.get("config"), secrets)
        name = sc.text(state.get("name"), "runtime.name")
        runtime = cls(config, snapshot, parts, label=name if name != config.name else None, save_lock=save_lock)
        runtime.core = rl.RelayCore.from_state(state.get("core"), config.name, snapshot, config.sampling_policy,
                                               era=config.era)
        # The write's moment on this daemon's clock: a linger with a minute left keeps its minute,
        # less what the hand-over took.
        moment = trio.current_time() - max(0.0, time.time() - written_at)
        runtime.life = lc.Lifecycle.from_state(state.get("life"), config.policy, random.Random(), moment)
        handed: HandedRuntime = sc.load(HandedRuntime, state, "runtime")
        runtime._handed = handed, child
        runtime.last_exit, runtime.started_wall, runtime.spawned_wall = handed.last_exit, handed.started_wall, handed.spawned_wall
        runtime._kill_reason, runtime._stop_requested = handed.kill_reason, handed.stop_requested
        runtime._stop_reason, runtime.last_stop, runtime.upgrades = handed.stop_reason, handed.last_stop, handed.upgrades
        if runtime.memory is not None and state.get("memory") is not None:
            runtime.memory.restore(state.get("memory"), moment)
        return runtime

    def _take_over(self, handed: HandedRuntime, child: bool) -> None:
        assert self._nursery is not None
        if handed.gate is not None:
            self.gate.restore(handed.gate)
        process = handed.proc
        if process is not None:
            try:
                proc = inherit_child(process, self.config.spec, self._nursery, self._read_buffer, child=child)
            except InheritError as exc:
                log.warning("[%s] cannot take its process over: %s", self.name, exc)
                self.gone(f"its process was lost in the hand-over ({exc})")
            else:
                self.upgrades += 1
                self.proc = proc
                self._input.open(proc, self._nursery)
                self._nursery.start_soon(self._read_server, proc)
                if self.life.state is lc.State.STOPPING:
                    self._nursery.start_soon(proc.stop)  # its stop ladder begins again
                log.info("[%s] took over pid %d (%s)", self.name, process.pid, self.life.state)
        elif self.life.state in lc.PROCESS_STATES:
            self.gone("its process did not come back after the daemon's restart")
        if handed.predicate_child is not None:
            # A wake predicate the predecessor ran: its answer went with it. It is killed, and the
            # lifecycle told it timed out so the schedule goes on.
            kill_left_predicate(*handed.predicate_child)
            self._life(self.life.predicate_done(trio.current_time(), None))
        self.on_children_changed()
        if handed.kill is not None and self.proc is not None:
            self._kill(handed.kill)

    def gone(self, description: str) -> None:
        """Its process cannot be had: an exit, as the runtime would see one."""
        self.proc = None
        self.last_exit = description
        self._relay(self.core.exited(description, now=time.time()))
        if self.life.state in lc.PROCESS_STATES:
            self._life(self.life.exited(trio.current_time(), description, requested=False))
        self._load()

    def forget_clients(self, keep: set[int]) -> int:
        """Detach from the relay core every client not in `keep` (their connections were not
        handed over): their requests are cancelled upstream as for any client that leaves."""
        gone = [cid for cid in self.core.clients if cid not in keep]
        for cid in gone:
            self.gate.detach(cid)
            self._relay(self.core.detach(cid, now=time.time()))
        if gone:
            self._load()
        return len(gone)

