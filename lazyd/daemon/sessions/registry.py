"""Which server a session belongs to: identities, named servers, and private instances.

The registry turns a shim's hello (a registration, or a named server of the config) into an
identity (lazyd/core/sharing/identity.py), finds or creates the one `ServerRuntime` for it and
attaches the session. Named servers get their runtimes at boot, so eager starts and wake
predicates run before any client. A reload replaces exactly the named servers whose definition
changed (processes stopped, caches dropped); sessions asking for a named server meanwhile wait
for it. It records every live child for the orphan sweep.

Sharing (lazyd/core/sharing/modes.py) is decided when a session attaches and carried out by
lazyd/daemon/sessions/sharing_gate.py: a session that must not share gets the registration's
runtime while no session holds it, else a private instance `NAME.N` (numbered from 1) that holds
no session's state, uses its registration's cache and goes with it on reload.

For a successor daemon it writes its plain tables (`to_state`: runtimes by digest, each
registration's era lanes with their one snapshot, private bases, counters; identities go to the
secrets) and is rebuilt (`inherit`): each identity must still give its digest, every runtime takes
its process over, then `boot` meets the new config as `lazyctl reload` would.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from lazyd.config.load import Config, Policy, ServerConfig, policy_with_options
from lazyd.core import state_codec as sc
from lazyd.core.cache import Snapshot
from lazyd.core.eras.choice import Era
from lazyd.core.sharing.identity import Identity, identity_for
from lazyd.core.sharing.modes import SharingDecision, ShareSetting, decide_sharing
from lazyd.daemon.sessions.sharing_gate import SharingGate, known_server
from lazyd.daemon import orphans
from lazyd.daemon.control import handshakes
from lazyd.daemon.sessions import per_run
from lazyd.daemon.sessions.command_cache import CommandCaches
from lazyd.daemon.sessions.learned_env import LearnedEnv
from lazyd.daemon.sessions.running import RunsRecord
from lazyd.daemon.sessions.shebang import interpreter_of
from lazyd.daemon.sessions.unnamed_identity import unnamed_identity, which as _which
from lazyd.daemon.runtime.era_lanes import EraLanes, EraRoute
from lazyd.daemon.runtime.cache_store import CacheStore
from lazyd.daemon.status_signal import Changes
from lazyd.daemon.heap_trim import HeapTrimmer
from lazyd.daemon.process.command import SpawnSpec
from lazyd.daemon.runtime.outbox import Outbox
from lazyd.daemon.runtime.config import DaemonParts, RuntimeConfig, lifecycle_policy
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.daemon.upgrade.inherited import state_fds
from lazyd.daemon.gate import Gate
from lazyd.daemon.process.read_buffer import ReadBuffer
from lazyd.config.envnames import parse_names
from lazyd.errors import InheritError, ConfigError, Refused
from lazyd.protocol.frames import Hello
from lazyd.host.paths import Paths

if TYPE_CHECKING:  # only a type here: the hub is loaded by its first session, not kept by every daemon
    from lazyd.daemon.hub.server import HubSession

log = logging.getLogger("lazyd.registry")

O = TypeVar("O", bound=Outbox)

# Shim options travel in the environment too (LAZYD_*); they configure lazyd, not the server, so
# they are neither part of the identity nor passed to the server process.
SHIM_ENV_PREFIX = "LAZYD_"
# The instance token of a share = false process (identity.Identity.instance): one per session.
PRIVATE_INSTANCE = "private:"
# The instance token of a named server's identity.
NAMED_INSTANCE = "named:"
# Shim options about the identity rather than the lifecycle policy (lazyd/core/sharing/envrules.py).
IDENTITY_OPTS = ("identity_env", "per_session_env")


class Registry:
    def __init__(self, config: Config, paths: Paths, secret: bytes, store: CacheStore,
                 nursery: trio.Nursery, daemon_env: Mapping[str, str], heap: HeapTrimmer) -> None:
        self.config = config
        self.heap = heap  # noted by every line a server or a hand-off session passes on
        self.paths = paths
        self.secret = secret
        self.store = store
        self.nursery = nursery
        self.daemon_env = dict(daemon_env)
        self.runtimes: dict[str, ServerRuntime] = {}  # by digest (a second-era lane: by its own)
        self.identities: dict[str, Identity] = {}  # by digest, for `lazyctl explain`
        # A registration's processes by protocol era (lazyd/daemon/runtime/era_lanes.py), by the digest of
        # its primary runtime; `lane_of` maps every runtime's digest to its registration's.
        self.lanes: dict[str, EraLanes] = {}
        self.lane_of: dict[str, str] = {}
        self._next_cid = 1
        self._share_counter = 0
        # SIGHUP and `lazyctl reload` may arrive together: one reload at a time, in order.
        self._reload_lock = trio.Lock()
        self._reloading: trio.Event | None = None  # set when the reload under way is done
        # Runtimes a reload is stopping: no longer findable, but their children still count.
        self._closing: list[ServerRuntime] = []
        # Each client's latest initialize, learned from sessions, for `check --client`.
        self.handshakes = handshakes.LearnedHandshakes(paths.state_dir)
        self.learned = LearnedEnv(paths.state_dir)  # per-run variables, clients' environments
        self.commands = CommandCaches(paths.state_dir, store, secret)  # cache starts everywhere
        self.running = RunsRecord(paths.state_dir)  # what each registration's process tree ran
        self.retiring: set[str] = set()  # duplicates being stopped (per_run.py)
        # Private instance digest -> the digest of the registration's own (base) identity.
        self._private_base: dict[str, str] = {}
        self.changes = Changes()  # anything a status summary shows may have changed (status_signal.py)
        self.reading = Gate()  # closed while the daemon hands itself over (lazyd/daemon/gate.py)
        self.starting = Gate()  # closed while the orphan sweep runs (the same)
        self.read_buffer = ReadBuffer()  # every server's stdout is read into it (read_buffer.py)
        self.parts = DaemonParts(store, heap, self.reading, self.starting, self.read_buffer, self.children_changed,
                                 lambda: self.config.tool_policy)
        self.gate = SharingGate(self)  # which process a new session joins (sharing_gate.py)

    def note_client_line(self, line: bytes, peek: int, cid: int) -> int:
        """Learn the handshake of session `cid` (and its client's variable names) from its first
        lines; how many more to look at."""
        params = handshakes.initialize_params(line)
        self.learned.note_line(cid, params, last=peek <= 1)
        if params is not None:
            self.handshakes.learn(params)
            return 0
        return peek - 1

    # ---- lookup --------------------------------------------------------------------------------

    def find(self, name: str) -> ServerRuntime | None:
        for runtime in self.runtimes.values():
            if runtime.name == name:
                return runtime
        return None

    def lanes_for(self, runtime: ServerRuntime) -> EraLanes | None:
        for digest, other in self.runtimes.items():
            if other is runtime:
                return self.lanes.get(self.lane_of.get(digest, digest))
        return None

    def is_second_lane(self, digest: str) -> bool:
        """A runtime opened for the other protocol era of a registration (not its primary)."""
        return self.lane_of.get(digest, digest) != digest

    # ---- creation ------------------------------------------------------------------------------

    async def boot(self) -> None:
        """Create the runtimes of every named server (eager starts and predicates begin now). After
        `inherit`, the config is met as `lazyctl reload` would: the inherited named servers whose
        definition changed or went stop, with their lanes and private instances."""
        inherited = set(self.runtimes)
        for server in self.config.servers.values():
            await self._named_runtime(server)

        def named_primary(key: str) -> bool:
            return self.lane_of.get(key) == key and self.identities[key].instance.startswith(NAMED_INSTANCE)

        current = {r.config.name for k, r in self.runtimes.items() if k not in inherited and named_primary(k)}
        named = {k: self.runtimes[k].config.name for k in inherited if named_primary(k)}
        primaries = {k for k, name in named.items() if name in current or name not in self.config.servers}
        stale = await self._drop({k for k in self.runtimes if self.lane_of.get(k, k) in primaries})
        if stale:
            log.info("inherited servers %s: their definition changed or went from the config; stopped",
                     ", ".join(sorted({r.name for r in stale})))
            self.children_changed()
            self.changes.note()

    async def reload(self, config: Config) -> dict[str, list[str]]:
        """Take a new config: named servers whose definition changed are restarted (caches dropped),
        new ones created, removed ones stopped; defaults apply to registrations that connect from now on
        (running unnamed servers keep the policy they started with). The replaced runtimes are stopped
        in parallel and forgotten before their successors exist: none loads the cache being dropped."""
        async with self._reload_lock:
            self._reloading = trio.Event()
            try:
                return await self._reload(config)
            finally:
                self._reloading.set()
                self._reloading = None

    async def _reload(self, config: Config) -> dict[str, list[str]]:
        old = self.config
        self.config = config
        report: dict[str, list[str]] = {"added": [], "changed": [], "removed": [], "unchanged": []}
        bases: set[str] = set()
        for name, server in old.servers.items():
            new = config.servers.get(name)
            if new == server:
                report["unchanged"].append(name)
                continue
            report["removed" if new is None else "changed"].append(name)
            # The server's runtimes (every era lane of it): its private instances go with them.
            bases |= {digest for digest, runtime in self.runtimes.items() if runtime.config.name == name}
        for runtime in await self._drop(bases):
            log.info("server %s stopped and its cache dropped (definition changed or removed)", runtime.name)
        for name, server in config.servers.items():
            if old.servers.get(name) != server:
                await self._named_runtime(server)
                if name not in report["changed"]:
                    report["added"].append(name)
        if old.tool_policy != config.tool_policy:
            for runtime in self.runtimes.values():
                runtime.policy_changed(old.tool_policy, config.tool_policy)
        self.children_changed()
        self.changes.note()  # rows went and came
        return report

    async def _named_runtime(self, server: ServerConfig) -> ServerRuntime:
        env = {**self.daemon_env, **server.env}
        cwd = server.cwd or self.daemon_env.get("HOME") or "/"
        identity = identity_for((server.command, *server.args), cwd, env,
                                ignore=self.config.per_session_env, which=_which,
                                instance=f"{NAMED_INSTANCE}{server.name}", force=self.config.identity_env,
                                declared=server.env, interpreter=interpreter_of)
        return await self._runtime(identity, server.name, env, server.policy)

    async def _runtime(self, identity: Identity, name: str, env: Mapping[str, str], policy: Policy,
                       cache_identity: Identity | None = None) -> ServerRuntime:
        digest = identity.digest(self.secret)
        # Private (share = false) instances of one registration share its cache: same server.
        cache_digest = (cache_identity or identity).digest(self.secret)
        existing = self.runtimes.get(digest)
        if existing is not None:
            # Registered before its `run` began (another session is creating it now): a line sent
            # to it before then would find no nursery to start the server in.
            await existing.started.wait()
            return existing
        spec = SpawnSpec(
            argv=identity.argv,
            cwd=identity.cwd,
            env={k: v for k, v in env.items() if not k.startswith(SHIM_ENV_PREFIX)},
            log_path=self.paths.logs_dir / f"{name}.log",
        )
        config = RuntimeConfig(
            name=name, digest=cache_digest, spec=spec, policy=lifecycle_policy(policy), wake=policy.wake,
            sampling_policy=self.config.sampling_policy, share=policy.share, era=policy.era,
            memory_max=policy.memory_max,
        )
        snapshot = self.commands.start_snapshot(self.runtimes, self.identities, identity, cache_digest)  # own, else the command's
        runtime = ServerRuntime(config, snapshot, self.parts)
        await self._install(digest, runtime, identity, digest, identity.instance.startswith(PRIVATE_INSTANCE))
        self.changes.note()  # a new row
        log.info("server %s registered (share = %s)", name, str(policy.share).lower())
        return runtime

    async def _install(self, key: str, runtime: ServerRuntime, identity: Identity, primary: str,
                       reserved: bool = False) -> None:
        """Register `runtime` under `key` as a lane of the registration `primary` (its first when
        `key == primary`), and run it."""
        runtime.on_change = self.changes.note
        self.runtimes[key] = runtime
        self.identities[key] = identity
        self.lane_of[key] = primary
        if key == primary:
            self.lanes[key] = EraLanes(runtime, partial(self._open_lane, key), reserved=reserved, place=self.gate.place,
                                       on_detach=self.gate.detached, on_change=self.changes.note)
        else:
            self.lanes[primary].runtimes.append(runtime)
        await self.nursery.start(runtime.run)

    async def _open_lane(self, digest: str, era: Era) -> ServerRuntime:
        """A second process slot of a registration, for clients of the other protocol era: the
        same command, environment, policy, snapshot (the object itself) and cache file; its own
        log file and status row, `NAME@ERA`."""
        primary = self.runtimes[digest]
        lanes = self.lanes[digest]
        label = f"{primary.name}@{era}"
        spec = dataclasses.replace(primary.config.spec, log_path=self.paths.logs_dir / f"{label}.log")
        runtime = ServerRuntime(dataclasses.replace(primary.config, spec=spec), primary.core.snapshot, self.parts,
                                label=label, save_lock=primary.save_lock)
        identity = self.identities[digest]
        lane_digest = dataclasses.replace(identity, instance=f"{identity.instance}#{len(lanes.runtimes)}").digest(self.secret)
        await self._install(lane_digest, runtime, identity, digest)
        self.changes.note()
        log.info("server %s: a second process slot for %s-era clients (%s)", primary.name, era, label)
        return runtime

    async def open_session(self, hello: Hello, on_overflow: Any,
                           make_outbox: Callable[[int, int, Callable[[], None]], O]) -> tuple[EraRoute | HubSession, O]:
        """Attach a shim session; raises Refused for options or names the daemon cannot serve.
        `make_outbox(cid, pid, on_overflow)` makes its outbox: a ConnectionOutbox of frames, or the
        client's own stdout on a hand-off session (lazyd/daemon/handoff/session.py)."""
        opts = dict(hello.opts)
        if "hub" in opts:  # lazyd-shim --hub: the daemon's own MCP server (lazyd/daemon/hub/server.py)
            session = make_outbox(self._next_cid, hello.pid, on_overflow)
            self._next_cid += 1
            from lazyd.daemon.hub.server import open_hub  # the hub's modules: loaded by its first session

            return await open_hub(self, hello, opts, session), session
        named = hello.server
        if named:
            while self._reloading is not None:
                await self._reloading.wait()
            server = self.config.servers.get(named)
            if server is None:
                known = ", ".join(sorted(self.config.servers)) or "none"
                raise Refused("unknown-server", f"no server named {named!r} in the config (known: {known})")
            for key in IDENTITY_OPTS:
                opts.pop(key, None)  # a named server's identity is its name: these change nothing
            try:
                policy_with_options(server.policy, opts)  # validated; a named server's policy is the file's
            except ConfigError as exc:
                raise Refused("options", str(exc)) from None
            runtime = await self._named_runtime(server)
            runtime = await self.gate.join(runtime, self.identities[self.digest_of(runtime)],
                                           runtime.config.spec.env, server.policy)
        else:
            rules = {k: opts.pop(k) for k in IDENTITY_OPTS if k in opts}
            try:
                policy = policy_with_options(self.config.defaults, opts)
                force, ignore = (parse_names(rules[k]) if k in rules else () for k in IDENTITY_OPTS)
            except ConfigError as exc:
                raise Refused("options", str(exc)) from None
            except ValueError as exc:
                raise Refused("options", f"option --identity-env/--per-session-env: {exc}") from None
            argv, cwd, env = list(hello.argv), hello.cwd, dict(hello.env)
            # Variables that are not UTF-8 reach the server byte for byte (surrogateescape is how
            # the process layer spells bytes), but lazyd cannot judge them: a private identity.
            undecodable = [(n.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
                           for n, v in hello.env_raw]
            env.update(undecodable)
            if not argv:
                raise Refused("options", "no server command given")
            if not os.path.isabs(cwd):
                raise Refused("options", f"the working directory must be absolute, got {cwd!r}")
            names = [n for n, _ in undecodable]
            client, decided = per_run.learn(self, hello.pid, argv, cwd, env, force=force, ignore=ignore,
                                            undecodable=names)
            runtime = await self.unnamed_runtime(argv, cwd, env, policy, force=force, ignore=ignore, undecodable=names,
                                                  client=client.process, join=True, decided=decided)
            self.learned.note_session(self._next_cid, client, (n for n in env if not n.startswith(SHIM_ENV_PREFIX)))
        cid = self._next_cid
        self._next_cid += 1
        session = make_outbox(cid, hello.pid, on_overflow)
        lanes = self.lanes_for(runtime)
        assert lanes is not None
        # The session's first request decides which of the registration's processes serves it.
        route = EraRoute(lanes, session, list(hello.resume), self.nursery)
        return route, session

    def identity_of(self, argv: list[str], cwd: str, env: Mapping[str, str], *,
                    force: tuple[str, ...] = (), ignore: tuple[str, ...] = (),
                    undecodable: list[str] | None = None, client: str = "") -> tuple[Identity, str | None]:
        """The identity of an unnamed registration, and why it must stay private (None: it may
        share); `client` (the shim's parent's name) adds its learned per-run variables."""
        return unnamed_identity(self.config, argv, cwd, env, force=force, ignore=(*ignore, *sorted(self.learned.noise(client))),
                                undecodable=undecodable)

    async def unnamed_runtime(self, argv: list[str], cwd: str, env: dict[str, str], policy: Policy, *,
                               force: tuple[str, ...] = (), ignore: tuple[str, ...] = (),
                               undecodable: list[str] | None = None, client: str = "", join: bool = False,
                               decided: tuple[Identity, str | None] | None = None) -> ServerRuntime:
        """The registration's own runtime; with `join`, the one a new session of it attaches to.
        `decided`: its identity and problem, where the caller has just decided them for the same
        arguments and learned noise."""
        base, problem = decided or self.identity_of(argv, cwd, env, force=force, ignore=ignore,
                                                    undecodable=undecodable, client=client)
        per_run.retire_duplicates(self, base, self.learned.noise(client))
        name = base.readable_name(self.secret)
        if problem is not None:
            log.warning("registration %s gets a private identity: %s", name, problem)
            policy = dataclasses.replace(policy, share=False)
        runtime = await self._runtime(base, name, env, policy)
        return await self.gate.join(runtime, base, env, policy) if join else runtime

    # ---- sharing -------------------------------------------------------------------------------

    def decide(self, cache_digest: str, setting: ShareSetting, argv: tuple[str, ...]) -> SharingDecision:
        """The sharing decision for the registration cached under `cache_digest` that runs
        `argv`, from the freshest snapshot (a live runtime's in memory, else the cache file), a
        start's handshake as it arrives, and the known-servers entry of what it runs."""
        mine = [r.core for r in self.runtimes.values() if r.config.digest == cache_digest]
        cached = [core.snapshot for core in mine if core.snapshot.entries or core.snapshot.discover or core.snapshot.stateless]
        snapshot = cached[0] if cached else mine[0].snapshot if mine else self.store.load(cache_digest)
        live = next((core.instance for core in mine if core.instance is not None), None)  # a start under way
        if setting != "auto":
            return decide_sharing(setting, snapshot)
        runs = self.running.current(cache_digest, self.runtimes.values())
        table = self.config.known_servers
        known = (table.lookup(runs) if runs else None) or known_server(table, argv)
        return decide_sharing(setting, snapshot, known, live, looked=runs is not None)

    def sharing(self, runtime: ServerRuntime) -> SharingDecision:
        """The decision for the next session of `runtime`'s registration (status and explain)."""
        return self.decide(runtime.config.digest, runtime.config.share, tuple(runtime.config.spec.argv))

    def is_private(self, runtime: ServerRuntime) -> bool:
        return self.lane_of.get(self.digest_of(runtime), "") in self._private_base

    def digest_of(self, runtime: ServerRuntime) -> str:
        """The key `runtime` is registered under in `runtimes`."""
        return next(digest for digest, r in self.runtimes.items() if r is runtime)

    def registration_of(self, runtime: ServerRuntime) -> ServerRuntime | None:
        """The runtime of the registration `runtime` serves: itself for a registration's own, the
        primary for another era's process of it, the base registration's for a private instance."""
        digest = self.lane_of.get(self.digest_of(runtime), "")
        return self.runtimes.get(self._private_base.get(digest, digest))

    def forget(self, bases: set[str]) -> list[ServerRuntime]:
        """Unregister the runtimes of `bases` (digests), every era lane and private instance of them."""
        stale = []
        for digest, runtime in list(self.runtimes.items()):
            if digest in bases or self._private_base.get(self.lane_of.get(digest, digest)) in bases:
                del self.runtimes[digest], self.identities[digest]
                self.lanes.pop(digest, None), self.lane_of.pop(digest, None)
                stale.append(runtime)
        for digest in [d for d, of in self._private_base.items() if d in bases or of in bases]:
            del self._private_base[digest]
        return stale

    async def _drop(self, bases: set[str]) -> list[ServerRuntime]:
        """Forget the runtimes of `bases` (`forget`), stop them by the ladder and drop their cache."""
        stale = self.forget(bases)
        await self.close_all(stale)
        for runtime in stale:
            self.store.remove(runtime.config.digest)  # lanes share one file: removing it twice is harmless
        return stale

    async def close_all(self, stale: list[ServerRuntime]) -> None:
        self._closing.extend(stale)  # no longer findable, but their children still count
        try:
            async with trio.open_nursery() as stopping:
                for runtime in stale:
                    stopping.start_soon(runtime.close)
        finally:
            self._closing = [r for r in self._closing if r not in stale]

    def in_use(self, runtime: ServerRuntime) -> bool:
        lanes = self.lanes_for(runtime)
        return lanes.in_use() if lanes is not None else bool(runtime.sessions)

    async def private_instance(self, base: Identity, name: str, env: Mapping[str, str],
                               policy: Policy) -> ServerRuntime:
        """A process of a session's own: a free instance of the registration that holds no
        session's state (sharing_gate.py), else a new one, `NAME.N` with the lowest N free."""
        base_digest = base.digest(self.secret)
        mine = [self.runtimes[d] for d, of in self._private_base.items() if of == base_digest and d in self.runtimes]
        for runtime in mine:
            if self.gate.fresh(runtime):
                return runtime
        taken = {r.name for r in mine}
        number = next(n for n in range(1, len(mine) + 2) if f"{name}.{n}" not in taken)
        self._share_counter += 1  # the identity's token: unique for the daemon's life
        instance = dataclasses.replace(base, instance=f"{PRIVATE_INSTANCE}{self._share_counter}")
        self._private_base[instance.digest(self.secret)] = base_digest
        return await self._runtime(instance, f"{name}.{number}", env, policy, cache_identity=base)

    def drop_private(self, runtime: ServerRuntime) -> None:
        """Forget a private instance no session uses and stop its process, if any (its session
        left, or never sent a thing): the next session that needs one gets a fresh instance."""
        primary = self.lane_of.get(self.digest_of(runtime), "")
        stale = self.forget({digest for digest, of in self.lane_of.items() if of == primary})
        log.info("[%s] its session left: dropped (a process of a session's own is never handed to "
                 "another session)", runtime.name)
        self.nursery.start_soon(self.close_all, stale)
        self.changes.note()  # its row went

    def children_changed(self) -> None:
        """Record the live children (servers and wake predicates, each the leader of its own
        session) for the orphan sweep of a successor daemon."""
        records = []
        for runtime in [*self.runtimes.values(), *self._closing]:
            if (proc := runtime.proc) is not None:
                records.append(orphans.ChildRecord(runtime.name, proc.pid, proc.start_time_ticks, proc.pgid))
            if runtime.predicate_child is not None:
                pid, ticks = runtime.predicate_child
                records.append(orphans.ChildRecord(f"{runtime.name} (wake predicate)", pid, ticks, pid))
        orphans.write_state(self.paths.state_dir, records)

    # ---- handing over to a successor daemon (the module docstring) -------------------------------

    def to_state(self, now: float, stuck: Mapping[ServerRuntime, str] | None = None
                 ) -> tuple[dict[str, Any], dict[str, Any], list[int]]:
        """(state, secrets, descriptors) of every runtime at monotonic `now`. A runtime in `stuck`
        is taken over and then killed by the successor, with that reason (its stdin could not be
        brought to a line boundary)."""
        stuck = stuck or {}
        runtimes: dict[str, Any] = {}
        fds: list[int] = []
        for key, runtime in self.runtimes.items():
            runtimes[key] = runtime.to_state(now, kill=stuck.get(runtime))
            fds.extend(state_fds(runtimes[key]["proc"]))
        groups = [{"primary": key, "lanes": [self.digest_of(r) for r in lanes.runtimes], "reserved": lanes.reserved,
                   "snapshot": lanes.primary.core.snapshot.to_json()} for key, lanes in self.lanes.items()]
        state = {"next_cid": self._next_cid, "share_counter": self._share_counter,
                 "private_base": dict(self._private_base), "lane_of": dict(self.lane_of),
                 "groups": groups, "runtimes": runtimes}
        secrets = {"runtimes": {key: r.config.secrets() for key, r in self.runtimes.items()},
                   "identities": {key: _identity_state(i) for key, i in self.identities.items()}}
        return state, secrets, fds

    async def inherit(self, state: Mapping[str, Any], secrets: Mapping[str, Any], *, written_at: float,
                    child: bool) -> list[str]:
        """Rebuild and start every runtime `to_state` wrote; returns the names inherited. Raises
        InheritError before anything starts when the state or the secrets do not fit."""
        try:
            plan = self._plan(state, secrets, written_at=written_at, child=child)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise InheritError(f"the state does not describe servers this lazyd can take over ({str(exc)[:160]})") from None
        self._next_cid = sc.integer(state.get("next_cid"), "next_cid")
        self._share_counter = sc.integer(state.get("share_counter"), "share_counter")
        self._private_base.update({str(k): sc.text(v, "private_base") for k, v in
                                   sc.obj(state.get("private_base"), "private_base").items()})
        names: list[str] = []
        for primary, reserved, lanes_of in plan:
            for key, runtime, identity in lanes_of:
                await self._install(key, runtime, identity, primary, reserved)
                names.append(runtime.name)
        self.children_changed()
        self.changes.note()
        return names

    def _plan(self, state: Mapping[str, Any], secrets: Mapping[str, Any], *, written_at: float,
              child: bool) -> list[tuple[str, bool, list[tuple[str, ServerRuntime, Identity]]]]:
        """Each registration's primary key, reserved flag and lanes (key, runtime not started yet,
        identity), all read and checked before anything starts."""
        runtimes = sc.obj(state.get("runtimes"), "runtimes")
        secret_runtimes = sc.obj(secrets.get("runtimes"), "secrets.runtimes")
        identities = sc.obj(secrets.get("identities"), "secrets.identities")
        lane_of = sc.obj(state.get("lane_of"), "lane_of")
        plan = []
        seen: set[str] = set()
        for row in sc.items(state.get("groups"), "groups"):
            group = sc.obj(row, "group")
            primary = sc.text(group.get("primary"), "group.primary")
            keys = [sc.text(k, "group.lanes") for k in sc.items(group.get("lanes"), "group.lanes")]
            if not keys or keys[0] != primary:
                raise ValueError(f"group {primary[:12]}: its first lane is not its primary")
            for key in keys:
                if key not in runtimes or key not in secret_runtimes or key not in identities or lane_of.get(key) != primary:
                    raise ValueError(f"runtime {key[:12]} is not fully described")
                seen.add(key)
            identity = _identity_from(identities[primary])
            if identity.digest(self.secret) != primary:
                raise InheritError("the identities handed over do not match their digests: the identity key "
                                    "changed since the servers were started")
            snapshot = Snapshot.from_json(group.get("snapshot"))
            lock = trio.Lock()  # the lanes of one registration save their one snapshot in turn
            lanes_of = [(key, ServerRuntime.from_state(runtimes[key], secret_runtimes[key], snapshot, self.parts,
                                                       written_at=written_at, child=child, save_lock=lock),
                         _identity_from(identities[key])) for key in keys]
            plan.append((primary, sc.flag(group.get("reserved"), "group.reserved"), lanes_of))
        if seen != set(runtimes):
            raise ValueError("a runtime belongs to no registration")
        return plan


def _identity_state(identity: Identity) -> dict[str, Any]:
    return {"argv": list(identity.argv), "cwd": identity.cwd, "env": [list(p) for p in identity.env],
            "instance": identity.instance, "declared": sorted(identity.declared), "forced": list(identity.forced)}


def _identity_from(value: object) -> Identity:
    s = sc.obj(value, "identity")
    return Identity(sc.load(tuple[str, ...], s.get("argv"), "identity.argv"), sc.text(s.get("cwd"), "identity.cwd"),
                    sc.load(tuple[tuple[str, str], ...], s.get("env"), "identity.env"),
                    sc.text(s.get("instance"), "identity.instance"),
                    frozenset(sc.load(list[str], s.get("declared"), "identity.declared")),
                    sc.load(tuple[str, ...], s.get("forced"), "identity.forced"))
