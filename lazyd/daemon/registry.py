"""Which server a session belongs to: identities, named servers, and `share = false` instances.

A shim's hello names a registration (command, args, cwd, environment, options) or a named server
from the config file. The registry turns it into an identity (lazyd/core/identity.py), finds or
creates the one `ServerRuntime` for that identity, and attaches the session to it. Named servers
get their runtimes at boot, which is what lets eager starts and wake predicates run before any
client connects.
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
from lazyd.daemon import orphans
from lazyd.daemon.paths import Paths
from lazyd.daemon.process import SpawnSpec
from lazyd.daemon.store import SnapshotStore
from lazyd.daemon.supervisor import RuntimeConfig, ServerRuntime, Session

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
        that connect from now on; running unnamed servers keep the policy they started with."""
        old = self.config
        self.config = config
        report: dict[str, list[str]] = {"added": [], "changed": [], "removed": [], "unchanged": []}
        for name, server in old.servers.items():
            new = config.servers.get(name)
            if new == server:
                report["unchanged"].append(name)
                continue
            runtime = self.find(name)
            if runtime is not None:
                await runtime.close()
                digest = next(d for d, r in self.runtimes.items() if r is runtime)
                del self.runtimes[digest]
                del self.identities[digest]
                self.store.remove(runtime.config.digest)
            report["removed" if new is None else "changed"].append(name)
        for name, server in config.servers.items():
            if old.servers.get(name) != server:
                await self._named_runtime(server)
                if name not in report["changed"]:
                    report["added"].append(name)
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
        self.runtimes[digest] = runtime
        self.identities[digest] = identity
        await self.nursery.start(runtime.run)
        log.info("server %s registered (%s)", name, "shared" if policy.share else "share = false")
        return runtime

    async def open_session(self, hello: Mapping[str, Any], on_overflow: Any) -> tuple[ServerRuntime, Session]:
        """Attach a shim session; raises Refused for options or names the daemon cannot serve."""
        opts = {str(k): str(v) for k, v in hello["opts"].items()}
        named = hello.get("server")
        if named:
            server = self.config.servers.get(named)
            if server is None:
                known = ", ".join(sorted(self.config.servers)) or "none"
                raise Refused("unknown-server", f"no server named {named!r} in the config (known: {known})")
            try:
                policy_with_options(server.policy, opts)  # validated; a named server's policy is the file's
            except ConfigError as exc:
                raise Refused("options", str(exc)) from None
            runtime = await self._named_runtime(server)
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
        if policy.share:
            return await self._runtime(base, name, env, policy)
        # share = false: one process per session, but a free one (no session attached) with the
        # same identity is reused, so the server still survives a client restart.
        for digest, identity in self.identities.items():
            runtime = self.runtimes[digest]
            if dataclasses.replace(identity, instance="") == base and identity.instance and not runtime.sessions:
                return runtime
        self._share_counter += 1
        instance = dataclasses.replace(base, instance=f"private:{self._share_counter}")
        return await self._runtime(instance, f"{name}.{self._share_counter}", env, policy, cache_identity=base)

    def children_changed(self) -> None:
        """Record the live children for the orphan sweep of a successor daemon."""
        orphans.write_state(self.paths.state_dir, [
            orphans.ChildRecord(r.name, r.proc.pid, r.proc.start_time_ticks, r.proc.pgid)
            for r in self.runtimes.values() if r.proc is not None
        ])

    def log_path(self, runtime: ServerRuntime) -> Path:
        return runtime.config.spec.log_path
