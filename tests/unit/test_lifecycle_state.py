"""A lifecycle rebuilt from its state decides exactly as the one that wrote it, on another clock.

Random input sequences (every input of lazyd/core/lifecycle/machine.py, valid or not) bring a lifecycle
to a random state; it is written, sent through JSON and read back on a clock whose origin is
elsewhere (as a successor daemon's monotonic clock is), and both are fed the same further inputs,
each at the same distance from the hand-over: their actions, status fields and deadlines (moved
by the clock's offset) must stay equal. Input times are multiples of 1/8 s; backoff jitter makes
times that are not, so those are compared to the microsecond (moving a time to another clock
costs a rounding of its last bit).
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.lifecycle.machine import Lifecycle, LifecyclePolicy, State
from tests.unit.lifecycle_support import INPUTS, POLICIES

OFFSET = 5_000.0  # where the reader's clock is when the writer's reads 0
STEPS = st.lists(st.tuples(st.sampled_from(INPUTS), st.sampled_from([0.0, 0.125, 0.5, 1.0, 5.0, 11.0, 31.0, 61.0, 700.0]),
                           st.integers(0, 2), st.integers(0, 2), st.sampled_from([None, 0, 1, 2])), max_size=50)


def apply(life: Lifecycle, step: tuple[str, float, int, int, int | None], now: float, pid: int) -> list[object]:
    name, _, a, b, code = step
    if name == "spawned":
        return list(life.spawned(now, pid))
    if name == "spawn_failed":
        return list(life.spawn_failed(now, "cannot execute", fatal=bool(a)))
    if name == "exited":
        return list(life.exited(now, "exited with status 1", requested=bool(a)))
    if name == "load":
        return list(life.load(now, clients=a, inflight=b))
    if name == "predicate_done":
        return list(life.predicate_done(now, code))
    if name == "used":
        return list(life.activity(now, used=True))
    return list(getattr(life, name)(now))


def norm(value: object) -> object:
    """`value` with every float rounded to the microsecond."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [norm(v) for v in value]
    return value


def moved(fields: dict[str, object], by: float) -> object:
    return norm({k: (v + by if k in ("started_at", "next_restart_at") and isinstance(v, float) else v)
                 for k, v in fields.items()})


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.sampled_from(POLICIES), st.integers(0, 3), STEPS, STEPS)
def test_a_lifecycle_read_back_on_another_clock_decides_as_the_original(
        policy: LifecyclePolicy, seed: int, before: list[tuple[str, float, int, int, int | None]],
        after: list[tuple[str, float, int, int, int | None]]) -> None:
    rng = random.Random(seed)
    life = Lifecycle(policy, rng)
    now, pid = 0.0, 1
    for step in before:
        now += step[1]
        apply(life, step, now, pid)
        pid += 1
    state = json.loads(json.dumps(life.to_state(now)))
    twin_rng = random.Random()
    twin_rng.setstate(rng.getstate())
    twin = Lifecycle.from_state(state, policy, twin_rng, now + OFFSET)
    assert moved(life.status_fields(), OFFSET) == norm(twin.status_fields())
    for step in after:
        now += step[1]
        expected = apply(life, step, now, pid)
        assert apply(twin, step, now + OFFSET, pid) == expected, step
        pid += 1
        assert moved(life.status_fields(), OFFSET) == norm(twin.status_fields())
        deadline = life.next_deadline()
        assert norm(twin.next_deadline()) == norm(None if deadline is None else deadline + OFFSET)
    assert norm(twin.to_state(now + OFFSET)) == norm(life.to_state(now))


def test_a_running_servers_linger_left_is_still_left_after_the_hand_over() -> None:
    life = Lifecycle(LifecyclePolicy(linger_s=60.0), random.Random(0))
    life.activity(0.0, used=True)  # a real request: the server's linger is linger_s
    life.demand(0.0)
    life.spawned(0.0, 42)
    life.ready(1.0)  # no client: the linger clock starts at ready
    twin = Lifecycle.from_state(life.to_state(31.0), LifecyclePolicy(linger_s=60.0), random.Random(0), 9_031.0)
    assert twin.state is State.RUNNING and twin.pid == 42
    assert twin.next_deadline() == 9_061.0
    assert twin.tick(9_060.0) == []
    assert [type(a).__name__ for a in twin.tick(9_061.0)] == ["Stop"]


def test_a_state_naming_an_unknown_lifecycle_state_is_refused() -> None:
    state = Lifecycle(LifecyclePolicy(), random.Random(0)).to_state(0.0)
    state["state"] = "dozing"
    with pytest.raises(ValueError, match="lifecycle.state"):
        Lifecycle.from_state(state, LifecyclePolicy(), random.Random(0), 0.0)
