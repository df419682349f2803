"""Control operations on the daemon socket (lazyctl): the daemon side (docs/protocol.md).

Each op takes a map of arguments and returns `(ok, data, error)`, `error` one readable line (an
op refuses its arguments by raising UsageError with that line); a server is named by its readable
name. Ops: ping, status, wake, sleep, restart, logs, stop, reload,
identity (why two registrations share) and check (an isolated start that warms the cache:
lazyd.daemon.control.check). The waits of wake and sleep are lazyd.daemon.control.wake_sleep's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from lazyd.core.sharing.client_profiles import PROFILES, ClientProfile
from lazyd.core.relay.handshake_defaults import check_params
from lazyd.config.durations import parse_duration
from lazyd.config.envnames import parse_names
from lazyd.core.sharing.identity import Identity, differing_env_names, explain_difference, variable_class
from lazyd.core.sharing.modes import NOT_KNOWN_PREFIX
from lazyd.daemon.control.check import check_runtime
from lazyd.daemon.control.client_env import client_environment, learned_profile
from lazyd.host import procfs
from lazyd.daemon.process.tree import ProcTable, tree_cpu_ticks, tree_members, tree_pss
from lazyd.daemon.runtime.memory_watch import MemoryWatch
from lazyd.daemon.sessions.registry import Registry
from lazyd.host import fallback_journal
from lazyd.daemon.connections.refusals import Refusals
from lazyd.daemon.handoff.stored_sessions import Keeper
from lazyd.daemon.runtime.status import runtime_status
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.daemon.control.wake_sleep import sleep_and_wait, wake_and_wait
from lazyd.daemon.upgrade.handover import Lineage
from lazyd.errors import ConfigError, UsageError

log = logging.getLogger("lazyd.control")

Result = tuple[bool, Any, str | None]
Reload = Callable[[], Awaitable[Mapping[str, list[str]]]]


def status_summary(registry: Registry) -> str:
    """One line for systemd's STATUS=: server counts by state and attached clients."""
    states = [str(r.life.status_fields()["state"]) for r in registry.runtimes.values()]
    clients = sum(r.core.client_count() for r in registry.runtimes.values())
    clients += sum(lanes.pending for lanes in registry.lanes.values())  # connected, no request yet
    counts = ", ".join(f"{states.count(s)} {s}" for s in ("running", "sleeping", "failed"))
    others = len(states) - sum(states.count(s) for s in ("running", "sleeping", "failed"))
    extra = f", {others} changing" if others else ""
    return f"{len(states)} servers: {counts}{extra}; {clients} clients"


class Control:
    def __init__(self, registry: Registry, stop_daemon: trio.Event, reload: Reload, lineage: Lineage,
                 refusals: Refusals, memory: MemoryWatch, keeper: Keeper | None) -> None:
        self.registry = registry
        self.stop_daemon = stop_daemon
        self.reload = reload
        self.lineage = lineage
        self.refusals = refusals
        self.memory = memory
        self.keeper = keeper

    async def __call__(self, op: str, args: dict[str, Any]) -> Result:
        handler = getattr(self, f"op_{op.replace('-', '_')}", None)
        if handler is None:
            return False, None, f"unknown control operation {op!r}"
        try:
            result: Result = await handler(args)
        except UsageError as exc:
            return False, None, str(exc)
        except Exception as exc:  # a bug in one op must not take the daemon's listener down
            log.exception("control operation %r failed", op)
            return False, None, f"internal error in {op}: {type(exc).__name__}: {exc}"
        return result

    def _runtime(self, args: dict[str, Any]) -> ServerRuntime:
        name = args.get("name")
        if not isinstance(name, str) or not name:
            raise UsageError("a server name is required")
        runtime = self.registry.find(name)
        if runtime is None:
            known = ", ".join(sorted(r.name for r in self.registry.runtimes.values())) or "none"
            raise UsageError(f"no server named {name!r} (known: {known})")
        return runtime

    def _status(self, runtime: ServerRuntime, table: ProcTable | None = None) -> dict[str, Any]:
        row: dict[str, Any] = dict(runtime_status(runtime))
        lanes = self.registry.lanes_for(runtime)
        if lanes is not None and lanes.primary is runtime:
            # Sessions that sent no request yet have no process chosen: they count as its clients.
            row["clients"] = int(row.get("clients") or 0) + lanes.pending
        pid = row.get("pid")
        table = table if table is not None else procfs.stats()
        members = tree_members(pid, table) if isinstance(pid, int) else set()
        row["processes"] = len(members)
        row["memory_bytes"] = tree_pss(members, table) if members else None  # PSS (lazyd/daemon/process/tree.py)
        row["cpu_ticks"] = tree_cpu_ticks(members, table) if members else None
        row["client_lines"] = runtime.client_lines
        row["memory_max"] = runtime.config.memory_max
        stop = runtime.last_stop
        row["last_stop_at"], row["last_stop_reason"] = stop if stop is not None else (None, None)
        row["cache_path"] = str(self.registry.store.path_for(runtime.config.digest))
        row["log_path"] = str(runtime.config.spec.log_path)
        row.update(self._distinction(runtime))
        row.update(self._sharing(runtime))
        return row

    def _own_cost(self, table: ProcTable) -> dict[str, Any]:
        """lazyd's own memory (PSS): the daemon's process, and the shims of the sessions attached
        to its servers (each with whatever it runs below it, never its client's session)."""
        daemon = tree_pss([os.getpid()], table)
        shims = {outbox.pid for runtime in self.registry.runtimes.values() for outbox in runtime.sessions.values()
                 if outbox.pid > 0 and outbox.pid != os.getpid()}
        members: set[int] = set()
        for pid in shims:
            members |= tree_members(pid, table, group_and_session=False)
        sessions = tree_pss(members, table) if members else 0
        own = table.get(os.getpid())
        return {"daemon_bytes": daemon, "sessions": len(shims), "session_processes": len(members),
                "sessions_bytes": sessions, "memory_bytes": daemon + sessions,
                "cpu_ticks": own.cpu_ticks if own is not None else None}

    def _distinction(self, runtime: ServerRuntime) -> dict[str, Any]:
        """What tells this server apart from the others of the same command (status output):
        its cwd, and the names of the variables whose values differ (never the values)."""
        identities = self.registry.identities
        mine = next((identities[d] for d, r in self.registry.runtimes.items() if r is runtime), None)
        if mine is None:
            return {"cwd": runtime.config.spec.cwd, "differs_by": []}
        names: set[str] = set()
        cwd_differs = False
        for digest, other in identities.items():
            if other is mine or other.argv != mine.argv:
                continue
            names.update(differing_env_names(mine, other))
            cwd_differs = cwd_differs or other.cwd != mine.cwd
        return {"cwd": mine.cwd, "differs_by": (["cwd"] if cwd_differs else []) + sorted(names)}

    def _sharing(self, runtime: ServerRuntime) -> dict[str, Any]:
        """`sharing`: how this runtime serves its sessions ("shared", "isolated", "session-aware",
        "undecided"), `share` (whether it serves every session of its registration), `share_setting`,
        `share_rule` (which rule decided: for a private instance the one it was opened under, else
        the one for the registration's next session), `instance_of` (the registration's row, for a
        private instance or another era's process of it)."""
        registry = self.registry
        decision = registry.sharing(runtime)
        mode = registry.gate.mode_of(runtime)
        joined = registry.gate.joined.get(runtime)
        private = registry.is_private(runtime)
        rule = joined.rule if private and joined is not None else decision.rule
        owner = registry.registration_of(runtime)
        registration = owner.name if owner is not None else runtime.name
        return {"share": mode != "isolated", "sharing": mode or "undecided", "share_setting": runtime.config.share,
                "share_rule": rule, "instance_of": owner.name if owner is not None and owner is not runtime else None,
                "share_opt_in": _opt_in(registry, registration, rule), "runs": registry.running.name_of(runtime)}

    async def op_ping(self, args: dict[str, Any]) -> Result:
        return True, {"pid": os.getpid()}, None

    async def op_status(self, args: dict[str, Any]) -> Result:
        names = args.get("names") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UsageError("names must be a list of server names")
        runtimes = list(self.registry.runtimes.values())
        known = {r.name for r in runtimes} | {r.config.name for r in runtimes}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError(f"no server named {unknown[0]!r} (known: {', '.join(sorted(known)) or 'none'})")
        table = procfs.stats()
        # A server's name shows every process of it (its other-era lane, NAME@ERA, too).
        rows = [self._status(r, table) for r in runtimes if not names or r.name in names or r.config.name in names]
        started = self.lineage.started_at  # of the first daemon of the upgrade chain
        data = {"daemon_pid": os.getpid(), "servers": sorted(rows, key=lambda r: str(r["name"])),
                "clock_ticks": procfs.CLOCK_TICKS, "lazyd": self._own_cost(table), "pressure": self.memory.status(),
                "refused": self.refusals.status(),
                "fallbacks": fallback_journal.since(str(self.registry.paths.socket), started)}
        # Uptime across upgrades, and the last hand-over.
        daemon: dict[str, Any] = {"started_at": started, "upgrades": self.lineage.upgrades,
                                  "last_upgrade": self.lineage.last}
        if self.keeper is not None:  # systemd's fd store (lazyd/daemon/handoff/stored_sessions.py)
            daemon["fdstore"] = self.keeper.status()
        data["daemon"] = daemon
        return True, data, None

    async def op_wake(self, args: dict[str, Any]) -> Result:
        return await self._cycle(args, sleep=False, wake=True)

    async def op_sleep(self, args: dict[str, Any]) -> Result:
        return await self._cycle(args, sleep=True, wake=False)

    async def op_restart(self, args: dict[str, Any]) -> Result:
        """Stop the server by the ladder and start it again at once, waiting for both."""
        return await self._cycle(args, sleep=True, wake=True)

    async def _cycle(self, args: dict[str, Any], *, sleep: bool, wake: bool) -> Result:
        runtime = self._runtime(args)
        if sleep:
            await sleep_and_wait(runtime)
        error = await wake_and_wait(runtime) if wake else None
        return error is None, self._status(runtime), error

    async def op_logs(self, args: dict[str, Any]) -> Result:
        runtime = self._runtime(args)
        path = runtime.config.spec.log_path
        return True, {"name": runtime.name, "path": str(path), "rotated": str(path) + ".1"}, None

    async def op_stop(self, args: dict[str, Any]) -> Result:
        log.info("stop requested by lazyctl")
        self.stop_daemon.set()
        return True, {"pid": os.getpid()}, None

    async def op_reload(self, args: dict[str, Any]) -> Result:
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
            raise UsageError("registrations must be a list of one or two registrations")
        described = [self._identity(reg) for reg in regs]
        data: dict[str, Any] = {"registrations": [info for _, info in described]}
        if len(described) == 1 and "eras" in described[0][1]:
            data["eras"] = described[0][1]["eras"]
        if len(described) == 2:
            (a, info_a), (b, info_b) = described
            data["differences"] = explain_difference(a, b)
            data["same_identity"] = not data["differences"]
            apart = _era_lanes_apart(info_a, info_b)
            if apart is not None:
                data["era_lanes"] = apart
        else:
            data["candidates"] = self._candidates(described[0][0])
        return True, data, None

    def _identity(self, reg: dict[str, Any]) -> tuple[Identity, dict[str, Any]]:
        secret = self.registry.secret
        if "name" in reg:
            runtime = self._runtime(reg)
            digest = next(d for d, r in self.registry.runtimes.items() if r is runtime)
            identity = self.registry.identities[digest]
            info = _describe(identity, runtime.name, None, runtime.name)
            info["per_run_env"] = self._per_run(runtime.config.spec.env)
            lanes = self.registry.lanes_for(runtime)
            if lanes is not None:
                info["eras"] = lanes.describe()  # every process of this registration, by era
            info.update(self._sharing(runtime))
            return identity, info
        argv, cwd, env = _command_registration(reg, "a registration needs a command (argv)")
        force, ignore = _identity_opts(env)
        identity, _problem = self.registry.identity_of(argv, cwd, env, force=force, ignore=ignore)
        counted = {n for n, _ in identity.env}
        ignored = sorted(n for n in env if n not in counted)
        attached = [r.name for d, r in self.registry.runtimes.items()
                    if dataclasses.replace(self.registry.identities[d], instance="") == identity]
        info = _describe(identity, identity.readable_name(secret), ignored, attached[0] if attached else None)
        info["per_run_env"] = self._per_run(env)
        setting = self.registry.config.defaults.share
        decision = self.registry.decide(identity.digest(secret), setting, identity.argv)
        info.update({"share": decision.shared, "sharing": decision.mode or "undecided", "share_setting": setting,
                     "share_rule": decision.rule,
                     "share_opt_in": _opt_in(self.registry, attached[0] if attached else None, decision.rule)})
        return identity, info

    def _per_run(self, env: Mapping[str, str]) -> list[dict[str, Any]]:
        """The learned per-run variables among `env`'s names, with their evidence (lazyd/core/sharing/noise.py)."""
        return [{"name": name, "client": ev.client, "values": ev.values, "sessions": ev.sessions,
                 "evidence": ev.describe()} for name, ev in self.registry.learned.learned() if name in env]

    def _candidates(self, identity: Identity) -> list[dict[str, Any]]:
        """Registered servers with the same command, and what keeps them apart from `identity`."""
        out = []
        for digest, other in self.registry.identities.items():
            if other.argv[:1] == identity.argv[:1] and not self.registry.is_second_lane(digest):
                out.append({"name": self.registry.runtimes[digest].name,
                            "differences": explain_difference(identity, other)})
        return sorted(out, key=lambda c: (len(c["differences"]), c["name"]))

    # ---- check ---------------------------------------------------------------------------------

    async def op_check(self, args: dict[str, Any]) -> Result:
        """args: {"name": N} or {"argv", "cwd", "env", "declared_env"}; optional "client" (whose
        handshake and environment rule to use), "initialize" params (which win) and
        "start_timeout" (a duration, as the shim option takes it: the check's bound instead of
        the server's start_timeout)."""
        profile = None
        client = args.get("client")
        if client is not None:
            profile = PROFILES.get(client) if isinstance(client, str) else None
            if profile is None and isinstance(client, str):
                profile = learned_profile(self.registry.learned, client)  # a client lazyd has no profile for
            if profile is None:
                seen = sorted(self.registry.learned.clients)
                extra = f"; seen: {', '.join(seen)}" if seen else ""
                raise UsageError(f"unknown client {client!r} (known: {', '.join(PROFILES)}{extra})")
        given = args.get("initialize")
        learned = self.registry.handshakes.for_profile(profile) if profile is not None and given is None else None
        params, source = check_params(given, learned)
        if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str):
            raise UsageError("initialize params must be an object with a string protocolVersion")
        timeout_s: float | None = None
        if args.get("start_timeout") is not None:
            try:
                timeout_s = parse_duration(str(args["start_timeout"]))
            except ValueError as exc:
                raise UsageError(f"start_timeout: {exc}") from None
            if timeout_s <= 0:
                raise UsageError("start_timeout: must be longer than 0")
        runtime = self._runtime(args) if "name" in args else await self._registration(args, profile)
        report, error = await check_runtime(self.registry, runtime, params, timeout_s)
        if report is not None:
            report["handshake"] = source
            report["client"] = profile.name if profile is not None else None
        return report is not None, report, error

    async def _registration(self, args: dict[str, Any], profile: ClientProfile | None) -> ServerRuntime:
        argv, cwd, inherited = _command_registration(args, "no server command given")
        declared = args.get("declared_env") or {}
        if not (isinstance(declared, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in declared.items())):
            raise UsageError("declared_env must be a map of str to str")
        passed_env = args.get("passed_env") or []
        if not (isinstance(passed_env, list) and all(isinstance(n, str) for n in passed_env)):
            raise UsageError("passed_env must be a list of variable names")
        # The environment the client would give the server: what decides the identity, so the
        # client's next session finds the cache this check writes. What its sessions carried, if
        # the daemon has seen one (names only), else the profile's rule.
        env, client = client_environment(self.registry.learned, profile, inherited, declared, tuple(passed_env))
        force, ignore = _identity_opts(env)
        # Exactly what a shim's hello from that client creates, so its first session finds this.
        return await self.registry.unnamed_runtime(argv, cwd, env, self.registry.config.defaults,
                                                    force=force, ignore=ignore, client=client)


def _era_lanes_apart(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """Two processes of one registration, in two protocol eras: which and why, else None."""
    lanes = a.get("eras")
    if not lanes or lanes != b.get("eras") or a["name"] == b["name"]:
        return None
    by_name = {lane["name"]: lane for lane in lanes}
    first, second = by_name.get(a["name"]), by_name.get(b["name"])
    if first is None or second is None:
        return None
    # The later lane was opened because the earlier one could not serve that era's clients.
    later = second if lanes.index(second) > lanes.index(first) else first
    return {"eras": [first["era"], second["era"]], "reason": later["reason"], "server": later["server"]}


def _command_registration(reg: Mapping[str, Any], no_command: str) -> tuple[list[str], str, dict[str, str]]:
    """A registration by command, (argv, cwd, env), from op args; UsageError saying why they are not one."""
    argv, cwd, env = reg.get("argv"), reg.get("cwd"), reg.get("env")
    if not (isinstance(argv, list) and argv and argv[0] and all(isinstance(a, str) for a in argv)):
        raise UsageError(no_command)
    if not (isinstance(cwd, str) and os.path.isabs(cwd)):
        raise UsageError(f"the working directory must be absolute, got {cwd!r}")
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise UsageError("env must be a map of str to str")
    return list(argv), cwd, dict(env)


def _identity_opts(env: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The shim's --identity-env and --per-session-env as a registration's env sets them
    (LAZYD_IDENTITY_ENV is what `lazyctl wrap` records); a bad value counts as unset here,
    where the shim itself refuses it."""
    def names(var: str) -> tuple[str, ...]:
        try:
            return parse_names(env[var]) if env.get(var) else ()
        except ValueError:
            return ()
    return names("LAZYD_IDENTITY_ENV"), names("LAZYD_PER_SESSION_ENV")


def _describe(identity: Identity, name: str, ignored: list[str] | None, runtime: str | None) -> dict[str, Any]:
    # Argument and environment values may be tokens: only counts and names leave the daemon.
    return {"name": name, "command": identity.argv[0], "args": len(identity.argv) - 1, "cwd": identity.cwd,
            "env_names": [k for k, _ in identity.env], "ignored_env_names": ignored,
            "env_classes": {k: variable_class(identity, k) for k, _ in identity.env},
            "instance": identity.instance or None, "registered_as": runtime}


def _opt_in(registry: Registry, name: str | None, rule: str) -> str | None:
    """How a user opts a server in that is isolated only because it is not known to be shareable
    (lazyd/core/sharing/modes.py, rule 4), in the words status and explain show; None otherwise."""
    if not rule.startswith(NOT_KNOWN_PREFIX):
        return None
    if name is not None and name in registry.config.servers:
        return f"`share = true` in [servers.{name}]"
    return f"`lazyctl share {name}`" if name is not None else "`lazyctl share NAME` (once it has run)"
