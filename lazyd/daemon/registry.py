"""Which server a session belongs to: identities, named servers, and private instances.

A shim's hello names a registration (command, args, cwd, environment, options) or a named server
from the config file. The registry turns it into an identity (lazyd/core/identity.py), finds or
creates the one `ServerRuntime` for that identity, and attaches the session to it. Named servers
get their runtimes at boot, which is what lets eager starts and wake predicates run before any
client connects. A reload replaces exactly the named servers whose definition changed (their
processes stopped, their caches dropped) and leaves the others running; sessions asking for a named
server while a reload is under way wait for it, so none attaches to a definition being replaced.
It also records every live child (servers and running wake predicates) for the orphan sweep.

Sharing (lazyd/core/sharing.py) is decided when a session attaches, from the registration's
`share` setting and its snapshot (the freshest in memory, else the cache file): a registration
that shares gets the one runtime of its identity; one that does not (share = false, or "auto"
finding a server that must not be shared) gets a private instance, `NAME.N`, reusing one whose
sessions have all left (so the server still survives a client restart), else a new one. The base
runtime of a named server counts as such an instance too while no session holds it. Private
instances use their registration's cache and are stopped and dropped with it on reload.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from lazyd.config import Config, ConfigError, Policy, ServerConfig, policy_with_options
from lazyd.core import lifecycle as lc
from lazyd.core.identity import Identity, identity_for
from lazyd.core.sharing import SharingDecision, ShareSetting, decide_sharing
from lazyd.daemon import orphans
from lazyd.daemon.hub import HubOptionError, HubSession, RuntimeGate, open_hub
from lazyd.daemon.paths import Paths
from lazyd.daemon.process import SpawnSpec
from lazyd.daemon.store import SnapshotStore
from lazyd.daemon.session import Session
from lazyd.daemon.supervisor import RuntimeConfig, ServerRuntime

log = logging.getLogger("lazyd.registry")

# Shim options travel in the environment too (LAZYD_*); they configure lazyd, not the server, so
# they are neither part of the identity nor passed to the server process.
SHIM_ENV_PREFIX = "LAZYD_"


class Refused(Exception):
    """A hello the daemon will not serve; `code` goes into the `refused` frame."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def lifecycle_policy(policy: Policy) -> lc.LifecyclePolicy:
    return lc.LifecyclePolicy(
        start_timeout_s=policy.start_timeout_s,
        linger_s=policy.linger_s,
        idle_timeout_s=policy.idle_timeout_s or None,
        keep_alive=policy.keep_alive,
        eager=policy.start == "eager",
        wake_interval_s=policy.wake.interval_s if policy.wake else None,
        wake_timeout_s=policy.wake.timeout_s if policy.wake else 1.0,
    )


def _which(command: str, path: str | None) -> str | None:
    return shutil.which(command, path=path)


class Registry:
    def __init__(self, config: Config, paths: Paths, secret: bytes, store: SnapshotStore,
                 nursery: trio.Nursery, daemon_env: Mapping[str, str]) -> None:
        self.config = config
        self.paths = paths
        self.secret = secret
        self.store = store
        self.nursery = nursery
        self.daemon_env = dict(daemon_env)
        self.runtimes: dict[str, ServerRuntime] = {}  # by digest
        self.identities: dict[str, Identity] = {}  # by digest, for `lazyctl explain`
        self._next_cid = 1
        self._share_counter = 0
        # SIGHUP and `lazyctl reload` may arrive together: one reload at a time, in order.
        self._reload_lock = trio.Lock()
        self._reloading: trio.Event | None = None  # set when the reload under way is done
        # Runtimes a reload is stopping: no longer findable, but their children still count.
        self._closing: list[ServerRuntime] = []
        # Private instance digest -> the digest of the registration's own (base) identity.
        self._private_base: dict[str, str] = {}

    # ---- lookup --------------------------------------------------------------------------------

    def find(self, name: str) -> ServerRuntime | None:
        for runtime in self.runtimes.values():
            if runtime.name == name:
                return runtime
        return None

    # ---- creation ------------------------------------------------------------------------------

    async def boot(self) -> None:
        """Create the runtimes of every named server (eager starts and predicates begin now)."""
        for server in self.config.servers.values():
            await self._named_runtime(server)

    async def reload(self, config: Config) -> dict[str, list[str]]:
        """Adopt a new config: only named servers whose definition changed are restarted (and their
        cache dropped); new ones are created, removed ones stopped. Defaults apply to registrations
        that connect from now on; running unnamed servers keep the policy they started with.

        The replaced runtimes are stopped in parallel (each by the ladder) and forgotten before
        their successors exist, so a successor never loads the cache being dropped."""
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
        stale: list[ServerRuntime] = []
        for name, server in old.servers.items():
            new = config.servers.get(name)
            if new == server:
                report["unchanged"].append(name)
                continue
            report["removed" if new is None else "changed"].append(name)
            bases = {digest for digest, runtime in self.runtimes.items() if runtime.name == name}
            for digest, runtime in list(self.runtimes.items()):
                if digest in bases or self._private_base.get(digest) in bases:
                    del self.runtimes[digest]
                    del self.identities[digest]
                    self._private_base.pop(digest, None)
                    stale.append(runtime)
        self._closing.extend(stale)
        try:
            async with trio.open_nursery() as stopping:
                for runtime in stale:
                    stopping.start_soon(runtime.close)
        finally:
            self._closing = [r for r in self._closing if r not in stale]
        for runtime in stale:
            self.store.remove(runtime.config.digest)
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
        return report

    async def _named_runtime(self, server: ServerConfig) -> ServerRuntime:
        env = {**self.daemon_env, **server.env}
        cwd = server.cwd or self.daemon_env.get("HOME") or "/"
        identity = identity_for((server.command, *server.args), cwd, env,
                                ignore=self.config.per_session_env, which=_which,
                                instance=f"named:{server.name}")
        return await self._runtime(identity, server.name, env, server.policy)

    async def _runtime(self, identity: Identity, name: str, env: Mapping[str, str], policy: Policy,
                       cache_identity: Identity | None = None) -> ServerRuntime:
        digest = identity.digest(self.secret)
        # Private (share = false) instances of one registration share its cache: same server.
        cache_digest = (cache_identity or identity).digest(self.secret)
        existing = self.runtimes.get(digest)
        if existing is not None:
            return existing
        spec = SpawnSpec(
            argv=identity.argv,
            cwd=identity.cwd,
            env={k: v for k, v in env.items() if not k.startswith(SHIM_ENV_PREFIX)},
            log_path=self.paths.logs_dir / f"{name}.log",
        )
        config = RuntimeConfig(
            name=name, digest=cache_digest, spec=spec, policy=lifecycle_policy(policy), wake=policy.wake,
            sampling_policy=self.config.sampling_policy, share=policy.share,
        )
        runtime = ServerRuntime(config, self.store.load(cache_digest), self.store, self.children_changed)
        runtime.gate = RuntimeGate(runtime, lambda: self.config.tool_policy)  # read at each call: reloads apply
        self.runtimes[digest] = runtime
        self.identities[digest] = identity
        await self.nursery.start(runtime.run)
        log.info("server %s registered (share = %s)", name, str(policy.share).lower())
        return runtime

    async def open_session(self, hello: Mapping[str, Any],
                           on_overflow: Any) -> tuple[ServerRuntime | HubSession, Session]:
        """Attach a shim session; raises Refused for options or names the daemon cannot serve."""
        opts = {str(k): str(v) for k, v in hello["opts"].items()}
        if "hub" in opts:  # lazyd-shim --hub: the daemon's own MCP server (lazyd/daemon/hub.py)
            session = Session(self._next_cid, int(hello["pid"]), on_overflow)
            self._next_cid += 1
            try:
                return await open_hub(self, hello, opts, session), session
            except HubOptionError as exc:
                raise Refused("options", str(exc)) from None
        named = hello.get("server")
        if named:
            while self._reloading is not None:
                await self._reloading.wait()
            server = self.config.servers.get(named)
            if server is None:
                known = ", ".join(sorted(self.config.servers)) or "none"
                raise Refused("unknown-server", f"no server named {named!r} in the config (known: {known})")
            try:
                policy_with_options(server.policy, opts)  # validated; a named server's policy is the file's
            except ConfigError as exc:
                raise Refused("options", str(exc)) from None
            runtime = await self._named_runtime(server)
            if not self.sharing(runtime).shared:
                runtime = await self._private(runtime, self.identities[self._digest_of(runtime)],
                                              runtime.config.spec.env, server.policy)
        else:
            try:
                policy = policy_with_options(self.config.defaults, opts)
            except ConfigError as exc:
                raise Refused("options", str(exc)) from None
            argv, cwd, env = list(hello["argv"]), str(hello["cwd"]), dict(hello["env"])
            if not argv:
                raise Refused("options", "no server command given")
            if not os.path.isabs(cwd):
                raise Refused("options", f"the working directory must be absolute, got {cwd!r}")
            runtime = await self._unnamed_runtime(argv, cwd, env, policy)
        cid = self._next_cid
        self._next_cid += 1
        session = Session(cid, int(hello["pid"]), on_overflow)
        runtime.attach(session, [bytes(line) for line in hello.get("resume", [])])
        return runtime, session

    async def _unnamed_runtime(self, argv: list[str], cwd: str, env: dict[str, str], policy: Policy) -> ServerRuntime:
        base = identity_for(argv, cwd, env, ignore=self.config.per_session_env, which=_which)
        name = base.readable_name(self.secret)
        digest = base.digest(self.secret)
        if self.decide(digest, policy.share).shared:
            return await self._runtime(base, name, env, policy)
        return await self._private_instance(base, name, env, policy)

    # ---- sharing -------------------------------------------------------------------------------

    def decide(self, cache_digest: str, setting: ShareSetting) -> SharingDecision:
        """The sharing decision for the registration cached under `cache_digest`, from the freshest
        snapshot: a live runtime's (base or private instance) in memory, else the cache file."""
        live = [r.core.snapshot for r in self.runtimes.values() if r.config.digest == cache_digest]
        known = [snap for snap in live if snap.entries or snap.discover or snap.stateless]
        snapshot = known[0] if known else live[0] if live else self.store.load(cache_digest)
        return decide_sharing(setting, snapshot)

    def sharing(self, runtime: ServerRuntime) -> SharingDecision:
        """The decision for the next session of `runtime`'s registration (status and explain)."""
        return self.decide(runtime.config.digest, runtime.config.share)

    def is_private(self, runtime: ServerRuntime) -> bool:
        return self._digest_of(runtime) in self._private_base

    def _digest_of(self, runtime: ServerRuntime) -> str:
        return next(digest for digest, r in self.runtimes.items() if r is runtime)

    async def _private(self, base_runtime: ServerRuntime, base: Identity, env: Mapping[str, str],
                       policy: Policy) -> ServerRuntime:
        """A named server's runtime for a session that must not share: its base runtime while no
        session holds it (an eager start is not wasted), else a private instance."""
        if not base_runtime.sessions:
            return base_runtime
        return await self._private_instance(base, base_runtime.name, env, policy)

    async def _private_instance(self, base: Identity, name: str, env: Mapping[str, str],
                                policy: Policy) -> ServerRuntime:
        # One process per session, but a free one (no session attached) of the same registration
        # is reused, so the server still survives a client restart.
        base_digest = base.digest(self.secret)
        for digest, of in self._private_base.items():
            runtime = self.runtimes.get(digest)
            if of == base_digest and runtime is not None and not runtime.sessions:
                return runtime
        self._share_counter += 1
        instance = dataclasses.replace(base, instance=f"private:{self._share_counter}")
        runtime = await self._runtime(instance, f"{name}.{self._share_counter}", env, policy, cache_identity=base)
        self._private_base[instance.digest(self.secret)] = base_digest
        return runtime

    def children_changed(self) -> None:
        """Record the live children (servers and wake predicates, each the leader of its own
        session) for the orphan sweep of a successor daemon."""
        records: list[orphans.ChildRecord] = []
        for r in [*self.runtimes.values(), *self._closing]:
            if r.proc is not None:
                records.append(orphans.ChildRecord(r.name, r.proc.pid, r.proc.start_time_ticks, r.proc.pgid))
            if r.predicate_child is not None:
                pid, ticks = r.predicate_child
                records.append(orphans.ChildRecord(f"{r.name} (wake predicate)", pid, ticks, pid))
        orphans.write_state(self.paths.state_dir, records)

    def log_path(self, runtime: ServerRuntime) -> Path:
        return runtime.config.spec.log_path
