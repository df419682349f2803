"""Lifecycle helpers shared by the lifecycle tests: a `Lifecycle` from a policy, the policies and
inputs the random walks draw from, a crash reason.
"""

from __future__ import annotations

import random
from typing import Any

from lazyd.core.lifecycle.machine import Lifecycle, LifecyclePolicy


CRASH = "exit status 1; stderr: boom"


def make(seed: int = 0, /, **policy: Any) -> Lifecycle:
    return Lifecycle(LifecyclePolicy(**policy), random.Random(seed))


POLICIES = [
    LifecyclePolicy(),
    LifecyclePolicy(linger_s=0.0),
    LifecyclePolicy(idle_timeout_s=60.0, linger_s=30.0),
    LifecyclePolicy(keep_alive=True, start_timeout_s=5.0),
    LifecyclePolicy(eager=True, wake_interval_s=30.0, start_timeout_s=5.0),
    LifecyclePolicy(wake_interval_s=10.0, linger_s=0.0, idle_timeout_s=5.0),
    LifecyclePolicy(check_linger_s=5.0, linger_s=60.0),
]
INPUTS = ["demand", "spawned", "spawn_failed", "ready", "exited", "load", "activity", "used", "tick",
          "tick", "tick", "operator_wake", "operator_sleep", "predicate_done", "boot"]
