"""A lifecycle's state as plain data, and a lifecycle rebuilt from it (lazyd/core/lifecycle/machine.py).

A successor daemon adopts a server in the middle of its life: starting, running with its linger
and idle clocks, backing off, parked with its failure count. What it needs is everything the
machine keeps, including its private bookkeeping; this module is the one place that reads and
writes those fields, so the machine itself stays free of it.

Times: the lifecycle's clock is the daemon's monotonic one, which starts afresh in every process
(trio's clock has a random origin), so times are written relative to the `now` of the writer and
read back relative to the `now` of the reader. The reader passes the moment of the write on its
own clock (its `now` minus the wall-clock seconds that passed in between), so a linger that had
a minute left still has a minute left, less the time the hand-over took.

The policy and the random generator are not state: the reader passes them (its config decides
the policy, and jitter needs no continuity).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazyd.core import state_codec as sc
from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.core.lifecycle.machine import Lifecycle, LifecyclePolicy, State

if TYPE_CHECKING:
    import random  # the caller's generator, for its type only

__all__ = ["lifecycle_state", "lifecycle_from_state"]


def lifecycle_state(life: Lifecycle, now: float) -> JsonObj:
    """Everything `life` keeps, its times as seconds from `now`."""
    def rel(t: float | None) -> float | None:
        return None if t is None else t - now

    usage, predicate = life._usage, life._predicate
    return {
        "state": str(life.state), "pid": life.pid, "started_at": rel(life.started_at), "restarts": life.restarts,
        "last_error": life.last_error, "burst": life.burst, "next_restart_at": rel(life.next_restart_at),
        "now": rel(life._now), "spawn_at": rel(life._spawn_at),
        "unrequested": [t - now for t in life._unrequested._failures],
        "start_requested": life._start_requested, "single_try": life._single_try,
        "operator_start": life._operator_start, "pending_demand": life._pending_demand,
        "pending_client": life._usage.pending_client,
        "stop_outcome": str(life._stop_outcome), "booted": life._booted,
        "usage": {"clients": usage.clients, "inflight": usage.inflight, "linger_from": rel(usage.linger_from),
                  "last_activity": rel(usage.last_activity), "client_start": usage.client_start,
                  "real_use": usage.real_use},
        "predicate": {"running": predicate.running, "next_at": rel(predicate.next_at)},
    }


def lifecycle_from_state(state: object, policy: LifecyclePolicy, rng: random.Random, now: float) -> Lifecycle:
    """The lifecycle that wrote `state`, its times moved to `now` (the write's moment on this
    clock); raises ValueError naming a field that is not what `lifecycle_state` wrote."""
    s = sc.obj(state, "lifecycle")

    def at(value: object, what: str) -> float | None:
        offset = sc.opt_number(value, f"lifecycle.{what}")
        return None if offset is None else now + offset

    life = Lifecycle(policy, rng)
    life.state = sc.enum_value(State, s.get("state"), "lifecycle.state")
    life.pid = sc.opt_integer(s.get("pid"), "lifecycle.pid")
    life.started_at = at(s.get("started_at"), "started_at")
    life.restarts = sc.integer(s.get("restarts"), "lifecycle.restarts")
    life.last_error = sc.opt_text(s.get("last_error"), "lifecycle.last_error")
    life.burst = sc.integer(s.get("burst"), "lifecycle.burst")
    life.next_restart_at = at(s.get("next_restart_at"), "next_restart_at")
    life._now = at(s.get("now"), "now")
    life._spawn_at = at(s.get("spawn_at"), "spawn_at")
    for offset in sc.items(s.get("unrequested"), "lifecycle.unrequested"):
        life._unrequested.record(now + sc.number(offset, "lifecycle.unrequested"))
    life._start_requested = sc.flag(s.get("start_requested"), "lifecycle.start_requested")
    life._single_try = sc.flag(s.get("single_try"), "lifecycle.single_try")
    life._operator_start = sc.flag(s.get("operator_start"), "lifecycle.operator_start")
    life._pending_demand = sc.flag(s.get("pending_demand"), "lifecycle.pending_demand")
    # Absent in a predecessor that had no check linger: its starts all keep `linger_s`.
    life._usage.pending_client = sc.flag(s.get("pending_client", False), "lifecycle.pending_client")
    life._stop_outcome = sc.enum_value(State, s.get("stop_outcome"), "lifecycle.stop_outcome")
    life._booted = sc.flag(s.get("booted"), "lifecycle.booted")
    usage = sc.obj(s.get("usage"), "lifecycle.usage")
    life._usage.clients = sc.integer(usage.get("clients"), "lifecycle.usage.clients")
    life._usage.inflight = sc.integer(usage.get("inflight"), "lifecycle.usage.inflight")
    life._usage.linger_from = at(usage.get("linger_from"), "usage.linger_from")
    life._usage.last_activity = at(usage.get("last_activity"), "usage.last_activity")
    life._usage.client_start = sc.flag(usage.get("client_start", False), "lifecycle.usage.client_start")
    life._usage.real_use = sc.flag(usage.get("real_use", False), "lifecycle.usage.real_use")
    predicate = sc.obj(s.get("predicate"), "lifecycle.predicate")
    life._predicate.running = sc.flag(predicate.get("running"), "lifecycle.predicate.running")
    life._predicate.next_at = at(predicate.get("next_at"), "predicate.next_at")
    return life
