"""The lifecycle's state under its former names, for the callers not yet moved to its methods.

A lifecycle writes and reads its own state: `Lifecycle.to_state(now)` and
`Lifecycle.from_state(state, policy, rng, now)` (lazyd/core/lifecycle/machine.py). These two
names only forward to them, touching nothing of the lifecycle's own; they go once nothing calls
them (the daemon's runtime, lazyd/daemon/runtime/supervisor.py, is the last caller).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.core.lifecycle.machine import Lifecycle, LifecyclePolicy

if TYPE_CHECKING:
    import random  # the caller's generator, for its type only

__all__ = ["lifecycle_state", "lifecycle_from_state"]


def lifecycle_state(life: Lifecycle, now: float) -> JsonObj:
    return life.to_state(now)


def lifecycle_from_state(state: object, policy: LifecyclePolicy, rng: random.Random, now: float) -> Lifecycle:
    return Lifecycle.from_state(state, policy, rng, now)
