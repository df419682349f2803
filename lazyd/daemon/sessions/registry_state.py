"""The registry written for a successor daemon, and rebuilt by it (lazyd/daemon/sessions/registry.py).

The registry's tables are plain: runtimes by digest, their identities, each registration's era
lanes (with the one snapshot object they share), which runtime is which registration's lane,
which private instance belongs to which base, and its counters. They are written as they are,
the snapshot once per registration, every runtime by lazyd/daemon/runtime/state.py; identities
go to the secrets (their argv and environment are what the digest hides).

Rebuilding checks that each identity still gives its digest (the key file and the secrets
belong to this state), starts every runtime (each takes its process over), then meets the
config the new daemon read: named servers new to it are created as at boot, and an adopted
named server whose definition changed or went is stopped by the ladder and its cache dropped,
exactly as `lazyctl reload` would.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import trio

from lazyd.core import state_codec as sc
from lazyd.core.cache import Snapshot
from lazyd.core.sharing.identity import Identity
from lazyd.daemon.runtime.era_lanes import EraLanes
from lazyd.daemon.runtime.policy_gate import RuntimeGate
from lazyd.daemon.sessions.registry import Registry
from lazyd.daemon.runtime.state import restore_runtime, runtime_secrets, runtime_state, state_fds
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.errors import AdoptionError

__all__ = ["registry_state", "adopt_registry", "forget_clients"]

log = logging.getLogger("lazyd.adopt")

NAMED_INSTANCE = "named:"


def _identity_state(identity: Identity) -> dict[str, Any]:
    return {"argv": list(identity.argv), "cwd": identity.cwd, "env": [list(p) for p in identity.env],
            "instance": identity.instance, "declared": sorted(identity.declared), "forced": list(identity.forced)}


def _identity_from(value: object) -> Identity:
    s = sc.obj(value, "identity")
    env = tuple((sc.text(p[0], "identity.env"), sc.text(p[1], "identity.env"))
                for p in (sc.items(row, "identity.env") for row in sc.items(s.get("env"), "identity.env")))
    return Identity(tuple(sc.text(a, "identity.argv") for a in sc.items(s.get("argv"), "identity.argv")),
                    sc.text(s.get("cwd"), "identity.cwd"), env, sc.text(s.get("instance"), "identity.instance"),
                    frozenset(sc.text(n, "identity.declared") for n in sc.items(s.get("declared"), "identity.declared")),
                    tuple(sc.text(n, "identity.forced") for n in sc.items(s.get("forced"), "identity.forced")))


def registry_state(registry: Registry, now: float,
                   stuck: Mapping[ServerRuntime, str] | None = None) -> tuple[dict[str, Any], dict[str, Any], list[int]]:
    """(state, secrets, descriptors) of every runtime of `registry` at monotonic `now`. A runtime
    in `stuck` is taken over and then killed by the successor, with that reason (its stdin could
    not be brought to a line boundary)."""
    stuck = stuck or {}
    runtimes: dict[str, Any] = {}
    fds: list[int] = []
    for key, runtime in registry.runtimes.items():
        runtimes[key] = runtime_state(runtime, now)
        if runtime in stuck:
            runtimes[key]["kill"] = stuck[runtime]
        fds.extend(state_fds(runtimes[key]))
    groups = [{"primary": key, "lanes": [_key_of(registry, r) for r in lanes.runtimes], "reserved": lanes.reserved,
               "snapshot": lanes.primary.core.snapshot.to_json()} for key, lanes in registry.lanes.items()]
    state = {"next_cid": registry._next_cid, "share_counter": registry._share_counter,
             "private_base": dict(registry._private_base), "lane_of": dict(registry.lane_of),
             "groups": groups, "runtimes": runtimes}
    secrets = {"runtimes": {key: runtime_secrets(r) for key, r in registry.runtimes.items()},
               "identities": {key: _identity_state(i) for key, i in registry.identities.items()}}
    return state, secrets, fds


def _key_of(registry: Registry, runtime: ServerRuntime) -> str:
    return next(key for key, r in registry.runtimes.items() if r is runtime)


async def adopt_registry(registry: Registry, state: Mapping[str, Any], secrets: Mapping[str, Any], *,
                         written_at: float, child: bool) -> list[str]:
    """Rebuild and start every runtime of `state` in `registry`; returns the names adopted.
    Raises AdoptionError before anything starts when the state or the secrets do not fit."""
    try:
        plan = _plan(registry, state, secrets)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise AdoptionError(f"the state does not describe servers this lazyd can take over ({str(exc)[:160]})") from None
    registry._next_cid = sc.integer(state.get("next_cid"), "next_cid")
    registry._share_counter = sc.integer(state.get("share_counter"), "share_counter")
    registry._private_base.update({str(k): sc.text(v, "private_base") for k, v in
                                   sc.obj(state.get("private_base"), "private_base").items()})
    names: list[str] = []
    for primary, keys, reserved, snapshot in plan:
        lock = trio.Lock()
        for key in keys:
            runtime = restore_runtime(state["runtimes"][key], secrets["runtimes"][key], snapshot, registry.store,
                                      written_at=written_at, child=child, save_lock=lock,
                                      on_children_changed=registry.children_changed)
            runtime.gate = RuntimeGate(runtime, lambda: registry.config.tool_policy)
            runtime.on_change = registry.changes.note
            registry.runtimes[key] = runtime
            registry.identities[key] = _identity_from(secrets["identities"][key])
            registry.lane_of[key] = primary
            if key == primary:
                lanes = registry.lanes[key] = EraLanes(runtime, partial(registry._open_lane, key))
                lanes.reserved = reserved
                lanes.on_detach = registry.gate.detached
                lanes.on_change = registry.changes.note
            else:
                registry.lanes[primary].runtimes.append(runtime)
            await registry.nursery.start(runtime.run)
            kill = state["runtimes"][key].get("kill")
            if isinstance(kill, str) and runtime.proc is not None:
                runtime._kill(kill)
            names.append(runtime.name)
    registry.children_changed()
    registry.changes.note()
    return names


def _plan(registry: Registry, state: Mapping[str, Any],
          secrets: Mapping[str, Any]) -> list[tuple[str, list[str], bool, Snapshot]]:
    """Each registration's primary key, lane keys, reserved flag and snapshot, checked."""
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
        if identity.digest(registry.secret) != primary:
            raise AdoptionError("the identities handed over do not match their digests: the identity key "
                                "changed since the servers were started")
        snapshot = Snapshot.from_json(group.get("snapshot"))
        plan.append((primary, keys, sc.flag(group.get("reserved"), "group.reserved"), snapshot))
    if seen != set(runtimes):
        raise ValueError("a runtime belongs to no registration")
    return plan


async def drop_stale_named(registry: Registry, adopted: set[str]) -> list[str]:
    """After `registry.boot()` met the new config: stop and forget the adopted named servers whose
    definition changed or went (and their lanes and private instances); returns their names."""
    current = {r.config.name for k, r in registry.runtimes.items() if k not in adopted and registry.lane_of.get(k) == k
               and registry.identities[k].instance.startswith(NAMED_INSTANCE)}
    bases = {k for k in adopted if registry.lane_of.get(k) == k and registry.identities[k].instance.startswith(NAMED_INSTANCE)
             and (registry.runtimes[k].config.name in current or registry.runtimes[k].config.name not in registry.config.servers)}
    stale = [(k, r) for k, r in registry.runtimes.items()
             if registry.lane_of.get(k, k) in bases or registry._private_base.get(registry.lane_of.get(k, k)) in bases]
    for key, _ in stale:
        for table in (registry.runtimes, registry.identities, registry.lanes, registry.lane_of, registry._private_base):
            table.pop(key, None)
    async with trio.open_nursery() as stopping:
        for _, runtime in stale:
            stopping.start_soon(runtime.close)
    names = sorted({r.name for _, r in stale})
    for _, runtime in stale:
        registry.store.remove(runtime.config.digest)
    if names:
        log.info("adopted servers %s: their definition changed or went from the config; stopped", ", ".join(names))
        registry.children_changed()
        registry.changes.note()
    return names


def forget_clients(runtime: ServerRuntime, keep: set[int]) -> int:
    """Detach from `runtime`'s core every client not in `keep` (their connections were not
    handed over): their requests are cancelled upstream as for any client that leaves."""
    gone = [cid for cid in runtime.core.clients if cid not in keep]
    for cid in gone:
        if runtime.gate is not None:
            runtime.gate.detach(cid)
        runtime._relay(runtime.core.detach(cid, now=trio.current_time()))
    if gone:
        runtime._load()
    return len(gone)
