"""The daemon side of sharing: which process a new session joins, waiting while it is undecided.

The decisions are pure (lazyd/core/sharing/modes.py, lazyd/core/sharing/join.py); this module
carries them out for the registry. What a registration runs is looked up in the known-servers
table (its command's real path too, so a `node_modules/.bin` link names its package), and so is
its process tree once it answered (lazyd/daemon/sessions/running.py). A session that must wait
(undecided, the process taken by the session whose start will decide) waits for the change signal,
at most `UNDECIDED_WAIT_S` (never past the start timeout; `START_GRACE_S` with no start under way),
well within the shim's 10 s for its welcome. A process serving one session is never handed to
another: when its session leaves it stops at once, and a private instance (`NAME.N`) is dropped.
"""

from __future__ import annotations

import functools
import logging
import os
import weakref
from collections.abc import Mapping
from typing import Protocol

import trio

from lazyd.config.load import Config, Policy
from lazyd.core.sharing.identity import Identity
from lazyd.core.sharing.known_servers import KnownServer, KnownServers, what_runs
from lazyd.core.lifecycle.machine import PROCESS_STATES, State
from lazyd.core.sharing.join import Join, JoinChoice, join
from lazyd.core.sharing.modes import SharingDecision, ShareSetting
from lazyd.daemon.status_signal import Changes
from lazyd.daemon.runtime.era_lanes import EraLanes
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.daemon.sessions.learned_env import LearnedEnv

log = logging.getLogger("lazyd.registry")

# The reason a process of a session's own stops (its log line: "stopping: its session left, ...").
SESSION_LEFT = "its session left (a process of a session's own is never handed to another session)"

# How long a second session waits for an undecided server's first start to list its tools. The
# shim waits HELLO_WAIT_S (10 s) for the daemon's welcome, which comes after this wait.
UNDECIDED_WAIT_S = 5.0
# How long a session waits for the first session to cause a start at all (a client sends its
# initialize within milliseconds of connecting; some send nothing until they call a tool).
START_GRACE_S = 1.0


class RegistryView(Protocol):
    """The registry (lazyd/daemon/sessions/registry.py) as the parts it imports see it: this gate,
    per_run.py, and the hub (lazyd/daemon/hub/), which import this instead of the registry."""

    config: Config
    secret: bytes
    nursery: trio.Nursery
    runtimes: dict[str, ServerRuntime]  # by digest
    identities: dict[str, Identity]  # by digest
    learned: LearnedEnv
    retiring: set[str]
    changes: Changes
    gate: SharingGate

    def identity_of(self, argv: list[str], cwd: str, env: Mapping[str, str], *, force: tuple[str, ...] = (),
                    ignore: tuple[str, ...] = (), undecodable: list[str] | None = None,
                    client: str = "") -> tuple[Identity, str | None]: ...
    def digest_of(self, runtime: ServerRuntime) -> str: ...
    def decide(self, cache_digest: str, setting: ShareSetting, argv: tuple[str, ...]) -> SharingDecision: ...
    def sharing(self, runtime: ServerRuntime) -> SharingDecision: ...
    def lanes_for(self, runtime: ServerRuntime) -> EraLanes | None: ...
    def is_second_lane(self, digest: str) -> bool: ...
    def in_use(self, runtime: ServerRuntime) -> bool: ...
    def is_private(self, runtime: ServerRuntime) -> bool: ...
    async def private_instance(self, base: Identity, name: str, env: Mapping[str, str],
                               policy: Policy) -> ServerRuntime: ...
    def drop_private(self, runtime: ServerRuntime) -> None: ...
    def forget(self, bases: set[str]) -> list[ServerRuntime]: ...
    async def close_all(self, stale: list[ServerRuntime]) -> None: ...
    def children_changed(self) -> None: ...


@functools.lru_cache(maxsize=256)
def known_server(table: KnownServers, argv: tuple[str, ...]) -> KnownServer | None:
    """The known-servers entry of what `argv` runs (its command's real path followed)."""
    resolved = [os.path.realpath(argv[0])] if os.path.isabs(argv[0]) else []
    return table.lookup(what_runs(argv, resolved))


class SharingGate:
    def __init__(self, registry: RegistryView) -> None:
        self.registry = registry
        self._served: weakref.WeakSet[ServerRuntime] = weakref.WeakSet()  # a session used their process
        # What a runtime's latest session joined it under (status: the rule that put it there).
        self.joined: weakref.WeakKeyDictionary[ServerRuntime, JoinChoice] = weakref.WeakKeyDictionary()
        # How a session that joined a runtime joins again once its key is known (`place`).
        self._rejoin: weakref.WeakKeyDictionary[ServerRuntime, tuple[ServerRuntime, Identity, Mapping[str, str], Policy]] = (
            weakref.WeakKeyDictionary())

    def fresh(self, runtime: ServerRuntime) -> bool:
        """Free, and holding no session's state: no process, or one no session has used."""
        if self.registry.in_use(runtime):
            return False
        down = runtime.proc is None and runtime.life.state not in PROCESS_STATES
        return down or runtime not in self._served

    async def place(self, runtime: ServerRuntime, key: str) -> EraLanes:
        """Where a session on `runtime` (the primary of its lanes) goes once its compatibility key
        is known (lazyd/core/sharing/roots.py): the lanes of `runtime` itself when every other
        session placed there has that key, else those of the process the join gives a session of
        that key."""
        lanes = self.registry.lanes_for(runtime)
        assert lanes is not None
        keys = {k for r in lanes.runtimes for k in r.core.session_keys()}
        joined = self._rejoin.get(runtime)
        if not keys - {key} or joined is None:
            return lanes
        base_runtime, base, env, policy = joined
        log.info("[%s] a session's roots differ from those of the sessions on it: placing it elsewhere", runtime.name)
        target = self.registry.lanes_for(await self.join(base_runtime, base, env, policy, key=key))
        assert target is not None
        return target

    async def join(self, base_runtime: ServerRuntime, base: Identity, env: Mapping[str, str],
                   policy: Policy, key: str | None = None) -> ServerRuntime:
        """The runtime a new session of this registration attaches to (see the module docstring);
        `key`: the session's compatibility key, where it is known."""
        registry = self.registry
        started = trio.current_time()
        bound = min(UNDECIDED_WAIT_S, policy.start_timeout_s)
        waited: float | None = None  # None: it did not have to wait
        while True:
            decision = registry.decide(base_runtime.config.digest, policy.share, base.argv)
            elapsed = trio.current_time() - started
            lanes = registry.lanes_for(base_runtime)
            processes = lanes.runtimes if lanes is not None else [base_runtime]  # every era lane
            base_keys = {k for r in processes for k in r.core.session_keys()}
            # A process that exists will tell (its answer, its tree) once it has answered.
            starting = any(r.life.state in (State.STARTING, State.RUNNING) for r in processes)
            choice = join(decision, base_taken=registry.in_use(base_runtime), waited_s=elapsed, bound_s=bound,
                          starting=starting, grace_s=START_GRACE_S,
                          key_conflict=key is not None and bool(base_keys - {key}))
            if choice.join is not Join.WAIT:
                break
            waited = elapsed
            # Until something changes, the bound, or (no start under way) the end of the grace.
            with trio.move_on_at(started + (bound if starting or elapsed >= START_GRACE_S
                                            else min(bound, START_GRACE_S))):
                await registry.changes.wait()
        if waited is not None:
            waited = trio.current_time() - started
            log.info("[%s] a session waited %.1fs for the sharing decision: %s", base_runtime.name, waited, choice.rule)
        if choice.join is Join.OWN and not self.fresh(base_runtime):
            runtime = await registry.private_instance(base, base_runtime.name, env, policy)
        else:
            runtime = base_runtime
        if choice.join is Join.OWN or decision.mode is None:
            lanes = registry.lanes_for(runtime)
            if lanes is not None:
                lanes.reserved = True  # taken until the session's route counts (era_lanes.py)
        self.joined[runtime] = choice
        self._rejoin[runtime] = (base_runtime, base, env, policy)
        self._served.add(runtime)
        return runtime

    def join_args(self, runtime: ServerRuntime) -> tuple[ServerRuntime, Identity, Mapping[str, str], Policy] | None:
        """How a session of `runtime`'s registration joined it (the base runtime, its identity,
        environment and policy), for another session of the same registration that did not come
        through a hello (a hub session: lazyd/daemon/hub/seats.py); None if none ever did."""
        return self._rejoin.get(runtime)

    def mode_of(self, runtime: ServerRuntime) -> str | None:
        """How `runtime` serves its sessions now: "isolated" (one session each), "shared",
        "session-aware", or None while the registration is undecided."""
        if self.registry.is_private(runtime):
            return "isolated"
        lanes = self.registry.lanes_for(runtime)
        primary = lanes.primary if lanes is not None else runtime
        decision = self.registry.decide(primary.config.digest, runtime.config.share,
                                        tuple(runtime.config.spec.argv))
        return decision.mode

    def detached(self, runtime: ServerRuntime) -> None:
        """A session left `runtime`: a process that served one session stops with it, and a
        private instance no session uses goes (no row lingers for a process nobody has)."""
        if self.registry.in_use(runtime):
            return
        if self.registry.is_private(runtime):
            self.registry.drop_private(runtime)
            return
        state = runtime.life.state
        if state not in PROCESS_STATES or state is State.STOPPING:
            return  # no process (a start under way counts: it is stopped too)
        if self.mode_of(runtime) != "isolated":
            return
        runtime.sleep(SESSION_LEFT)
