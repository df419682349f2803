"""The lifecycle state machine, driven with explicit times and no process.

Testing policy: every test feeds inputs with explicit `now` values and asserts the exact list of
actions that comes back, so supervision timing (backoff, linger, idle, start timeout, predicates)
is checked to the microsecond without a clock or a sleep. Jitter comes from seeded
`random.Random` instances. The hypothesis test at the end drives random input sequences against a
small model of the process (alive or not, pid known or not, predicate outstanding or not) and
checks the invariants the daemon's supervisor relies on.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lazyd.core.lifecycle.machine import (
    PROCESS_STATES,
    Action,
    FailWaiting,
    KillAndFail,
    Lifecycle,
    LifecyclePolicy,
    Log,
    PredicateState,
    RunPredicate,
    Spawn,
    State,
    Stop,
)
from tests.unit.lifecycle_support import CRASH, INPUTS, POLICIES, make

PARK_LOG = Log(f"parked as failed after 5 failed restarts within 1m; last error: {CRASH}")


def state_of(lc: Lifecycle) -> State:
    """Read the state afresh: mypy would otherwise keep an earlier narrowing across inputs."""
    return lc.state


def predicate_of(lc: Lifecycle) -> PredicateState:
    return lc.predicate_state


def start(lc: Lifecycle, now: float, pid: int = 100, clients: int = 1) -> None:
    """Attach `clients`, send a (real) request and bring the server up: the common preamble."""
    assert lc.load(now, clients=clients, inflight=0) == []
    assert lc.activity(now, used=True) == []
    assert lc.demand(now) == [Spawn()]
    assert lc.spawned(now, pid) == []
    assert lc.ready(now) == []
    assert lc.state is State.RUNNING


def crash_while_starting(lc: Lifecycle, now: float, pid: int = 100) -> list[Action]:
    assert lc.spawned(now, pid) == []
    return lc.exited(now, CRASH, requested=False)


# The documented schedule (lifecycle rule 4), written out rather than computed from the module's
# constants, so a changed base, factor, jitter or cap fails these tests: the delay after the n-th
# consecutive failure, as (lowest, highest) seconds. 0.5 s doubling, +-20 % jitter, never under
# 0.5 s, never over 30 s.
BACKOFF_SCHEDULE_S: dict[int, tuple[float, float]] = {
    1: (0.5, 0.6),
    2: (0.8, 1.2),
    3: (1.6, 2.4),
    4: (3.2, 4.8),
    5: (6.4, 9.6),
    6: (12.8, 19.2),
    7: (25.6, 30.0),
}
FASTEST_RESTART_S = 0.5  # the floor of the schedule: a crash loop never spins faster
SLOWEST_RESTART_S = 30.0  # its cap: a keep_alive server that never comes up


def expected_delay_bounds(failure: int) -> tuple[float, float]:
    return BACKOFF_SCHEDULE_S.get(failure, (SLOWEST_RESTART_S, SLOWEST_RESTART_S))


def run_crash_loop(lc: Lifecycle, now: float, restarts: int) -> tuple[float, list[float]]:
    """Demand a start that crashes at once, then let backoff restart it `restarts` times."""
    assert lc.demand(now) == [Spawn()]
    assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
    delays = []
    for _ in range(restarts):
        assert lc.state is State.BACKOFF and lc.next_restart_at is not None
        delays.append(lc.next_restart_at - now)
        assert lc.next_deadline() == lc.next_restart_at
        now = lc.next_restart_at
        assert lc.tick(now) == [Spawn()]
        actions = crash_while_starting(lc, now)
        assert actions[0] == FailWaiting(CRASH)
    return now, delays


# -- starts and backoff ----------------------------------------------------------------------------


def test_a_request_to_a_sleeping_server_spawns_exactly_once() -> None:
    lc = make()
    assert lc.demand(0.0) == [Spawn()]
    assert lc.demand(0.1) == []
    assert lc.spawned(0.2, 42) == []
    assert lc.demand(0.3) == []
    assert lc.ready(0.4) == []
    assert lc.demand(0.5) == []
    assert (state_of(lc), lc.pid, lc.started_at) == (State.RUNNING, 42, 0.4)


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 2024])
def test_a_crash_loop_backs_off_about_half_a_second_doubling_and_never_faster(seed: int) -> None:
    lc = make(seed)
    assert lc.load(0.0, clients=1, inflight=0) == []
    _, delays = run_crash_loop(lc, 0.0, restarts=5)
    for failure, delay in enumerate(delays, start=1):
        low, high = expected_delay_bounds(failure)
        assert low <= delay <= high, (failure, delay)
    assert lc.restarts == 5


def test_the_jitter_differs_between_seeds_so_servers_that_crashed_together_spread_out() -> None:
    first_delays = set()
    for seed in range(5):
        lc = make(seed)
        lc.load(0.0, clients=1, inflight=0)
        first_delays.add(tuple(run_crash_loop(lc, 0.0, restarts=2)[1]))
    assert len(first_delays) == 5


def test_five_unrequested_failures_within_a_minute_park_the_server_with_no_further_spawns() -> None:
    lc = make(3)
    lc.load(0.0, clients=1, inflight=0)
    now, _ = run_crash_loop(lc, 0.0, restarts=4)
    assert state_of(lc) is State.BACKOFF
    assert lc.next_restart_at is not None
    now = lc.next_restart_at
    assert lc.tick(now) == [Spawn()]
    assert crash_while_starting(lc, now) == [FailWaiting(CRASH), PARK_LOG]
    assert (state_of(lc), lc.last_error, lc.burst) == (State.FAILED, CRASH, 6)
    assert lc.status_fields()["next_restart_at"] is None
    assert lc.next_deadline() is None
    assert lc.tick(now + 3600.0) == []
    assert lc.load(now + 3601.0, clients=2, inflight=1) == []
    assert state_of(lc) is State.FAILED


def test_failed_restarts_spread_over_more_than_a_minute_keep_backing_off() -> None:
    lc = make(5, start_timeout_s=120.0)
    lc.load(0.0, clients=1, inflight=0)
    assert lc.demand(0.0) == [Spawn()]
    now = 20.0  # every start hangs 20 s before it dies, so five failures span 100 s
    assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
    for _ in range(8):
        assert lc.next_restart_at is not None
        restart_at = lc.next_restart_at
        assert lc.tick(restart_at) == [Spawn()]
        now = restart_at + 20.0
        assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
        assert state_of(lc) is State.BACKOFF


def test_a_request_to_a_failed_server_tries_one_fresh_start_at_once() -> None:
    lc = make(1)
    lc.load(0.0, clients=1, inflight=0)
    now, _ = run_crash_loop(lc, 0.0, restarts=5)
    assert state_of(lc) is State.FAILED
    assert lc.demand(now + 100.0) == [Spawn()]
    assert crash_while_starting(lc, now + 100.5) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.FAILED  # one try, not a new crash loop
    assert lc.tick(now + 200.0) == []
    assert lc.demand(now + 300.0) == [Spawn()]
    assert lc.spawned(now + 300.0, 7) == [] and lc.ready(now + 301.0) == []
    assert state_of(lc) is State.RUNNING


def test_operator_wake_resets_the_burst_and_gives_a_parked_server_a_full_burst_again() -> None:
    lc = make(2)
    lc.load(0.0, clients=1, inflight=0)
    now, _ = run_crash_loop(lc, 0.0, restarts=5)
    assert state_of(lc) is State.FAILED and lc.burst == 6
    now += 1.0
    assert lc.operator_wake(now) == [Spawn()]
    assert lc.burst == 0
    assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.BACKOFF and lc.burst == 1
    assert lc.next_restart_at is not None
    assert 0.5 <= lc.next_restart_at - now <= 0.6
    for _ in range(4):
        assert lc.next_restart_at is not None
        now = lc.next_restart_at
        assert lc.tick(now) == [Spawn()]
        assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.BACKOFF
    assert lc.next_restart_at is not None
    now = lc.next_restart_at
    assert lc.tick(now) == [Spawn()]
    assert crash_while_starting(lc, now) == [FailWaiting(CRASH), PARK_LOG]


def test_a_keep_alive_server_never_parks_and_backs_off_at_the_cap() -> None:
    lc = make(9, keep_alive=True)
    assert lc.boot(0.0) == [Spawn()]
    now = 0.0
    for failure in range(1, 21):
        assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
        assert state_of(lc) is State.BACKOFF and lc.next_restart_at is not None
        low, high = expected_delay_bounds(failure)
        assert low - 1e-9 <= lc.next_restart_at - now <= high + 1e-9  # float subtraction
        now = lc.next_restart_at
        assert lc.tick(now) == [Spawn()]
    assert lc.burst == 20 and lc.restarts == 20


def test_a_crash_after_a_stable_run_restarts_after_the_base_delay_with_the_burst_cleared() -> None:
    lc = make(4)
    lc.load(0.0, clients=1, inflight=0)
    now, _ = run_crash_loop(lc, 0.0, restarts=2)
    assert lc.burst == 3 and lc.next_restart_at is not None
    now = lc.next_restart_at
    assert lc.tick(now) == [Spawn()]
    assert lc.spawned(now, 5) == [] and lc.ready(now) == []
    assert lc.next_deadline() == now + 10.0  # the moment the start counts as good
    assert lc.tick(now + 9.9) == [] and lc.burst == 3
    assert lc.tick(now + 10.0) == [] and lc.burst == 0
    assert lc.next_deadline() is None
    assert lc.exited(now + 30.0, CRASH, requested=False) == []
    assert state_of(lc) is State.BACKOFF and lc.burst == 1 and lc.next_restart_at is not None
    assert 0.5 <= lc.next_restart_at - (now + 30.0) <= 0.6


def test_a_crash_soon_after_ready_counts_as_a_failed_start() -> None:
    lc = make(6)
    lc.load(0.0, clients=1, inflight=0)
    now, _ = run_crash_loop(lc, 0.0, restarts=4)
    assert lc.next_restart_at is not None
    now = lc.next_restart_at
    assert lc.tick(now) == [Spawn()]
    assert lc.spawned(now, 8) == [] and lc.ready(now + 1.0) == []
    assert lc.exited(now + 5.0, CRASH, requested=False) == [PARK_LOG]
    assert state_of(lc) is State.FAILED


def test_a_request_joining_a_backoff_restart_makes_its_failure_not_count_toward_parking() -> None:
    lc = make(8)
    lc.load(0.0, clients=1, inflight=0)
    now, _ = run_crash_loop(lc, 0.0, restarts=4)  # four unrequested failures so far
    assert lc.next_restart_at is not None
    now = lc.next_restart_at
    assert lc.tick(now) == [Spawn()]
    assert lc.demand(now) == []  # a request now waits for this start: somebody asked for it
    assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.BACKOFF


def test_an_unexpected_exit_nobody_needs_goes_to_sleep_until_the_next_request() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.load(1.0, clients=0, inflight=0) == []
    assert lc.exited(2.0, CRASH, requested=False) == []
    assert (state_of(lc), lc.last_error) == (State.SLEEPING, CRASH)
    assert lc.pid is None and lc.started_at is None
    assert lc.next_deadline() is None
    assert lc.demand(3.0) == [Spawn()]


def test_a_request_during_backoff_restarts_at_once_without_waiting() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.exited(60.0, CRASH, requested=False) == []
    assert state_of(lc) is State.BACKOFF
    assert lc.demand(60.1) == [Spawn()]
    assert (state_of(lc), lc.restarts, lc.next_restart_at) == (State.STARTING, 1, None)


def test_a_non_fatal_spawn_failure_is_a_failed_start_that_backs_off() -> None:
    lc = make()
    lc.load(0.0, clients=1, inflight=0)
    assert lc.demand(0.0) == [Spawn()]
    assert lc.spawn_failed(0.0, "Resource temporarily unavailable", fatal=False) == [
        FailWaiting("Resource temporarily unavailable")]
    assert state_of(lc) is State.BACKOFF and lc.burst == 1


def test_a_fatal_spawn_failure_parks_at_once_without_retries() -> None:
    lc = make(keep_alive=True)
    assert lc.boot(0.0) == [Spawn()]
    error = "[Errno 2] No such file or directory: 'no-such-server'"
    assert lc.spawn_failed(0.01, error, fatal=True) == [FailWaiting(error)]
    assert (state_of(lc), lc.last_error, lc.pid) == (State.FAILED, error, None)
    assert lc.next_deadline() is None
    assert lc.tick(1000.0) == []


# -- start timeout ---------------------------------------------------------------------------------


def test_a_start_timeout_kills_the_server_and_does_not_restart_it_on_its_own() -> None:
    lc = make()
    lc.load(0.0, clients=1, inflight=0)
    assert lc.demand(0.0) == [Spawn()]
    assert lc.spawned(0.1, 11) == []
    assert lc.next_deadline() == 60.0
    assert lc.tick(59.9) == []
    assert lc.tick(60.0) == [KillAndFail("start timeout after 1m")]
    assert state_of(lc) is State.STOPPING and lc.pid == 11
    assert lc.exited(60.2, "killed by SIGKILL", requested=True) == []
    assert (state_of(lc), lc.last_error) == (State.FAILED, "start timeout after 1m")
    assert lc.next_deadline() is None
    assert lc.tick(3600.0) == []
    assert lc.demand(3601.0) == [Spawn()]


def test_a_keep_alive_server_that_times_out_starting_backs_off_after_the_kill() -> None:
    lc = make(keep_alive=True, start_timeout_s=5.0)
    assert lc.boot(0.0) == [Spawn()]
    assert lc.spawned(0.0, 12) == []
    assert lc.tick(5.0) == [KillAndFail("start timeout after 5s")]
    assert lc.exited(5.5, "killed by SIGKILL", requested=False) == []
    assert state_of(lc) is State.BACKOFF and lc.next_restart_at is not None


# -- linger and idle -------------------------------------------------------------------------------


def test_linger_zero_stops_the_server_as_soon_as_the_last_client_leaves() -> None:
    lc = make(linger_s=0.0)
    start(lc, 0.0, clients=2)
    assert lc.load(5.0, clients=1, inflight=0) == []
    assert lc.load(6.0, clients=0, inflight=0) == [Stop("last client left")]
    assert lc.exited(6.5, "exit status 0", requested=True) == []
    assert (state_of(lc), lc.pid, lc.last_error) == (State.SLEEPING, None, None)


def test_linger_ten_minutes_stops_the_server_ten_minutes_after_the_last_client_left() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.load(100.0, clients=0, inflight=0) == []
    assert lc.next_deadline() == 700.0
    assert lc.tick(699.9) == []
    assert lc.tick(700.0) == [Stop("no client for 10m")]
    assert state_of(lc) is State.STOPPING
    assert lc.next_deadline() is None


def test_a_client_returning_during_linger_cancels_the_stop() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.load(100.0, clients=0, inflight=0) == []
    assert lc.load(400.0, clients=1, inflight=0) == []
    assert lc.next_deadline() is None
    assert lc.tick(700.0) == []
    assert lc.load(500.0 + 300.0, clients=0, inflight=0) == []
    assert lc.next_deadline() == 1400.0


def test_a_keep_alive_server_is_never_stopped_for_lack_of_use() -> None:
    lc = make(keep_alive=True, linger_s=0.0, idle_timeout_s=60.0)
    start(lc, 0.0)
    assert lc.load(1.0, clients=0, inflight=0) == []
    assert lc.next_deadline() is None
    assert lc.tick(10_000.0) == []


def test_idle_timeout_stops_at_sixty_seconds_and_a_request_at_59_9_resets_it() -> None:
    lc = make(idle_timeout_s=60.0)
    start(lc, 0.0)
    assert lc.next_deadline() == 60.0
    assert lc.activity(59.9) == []
    assert lc.tick(60.0) == []
    assert lc.next_deadline() == pytest.approx(119.9)
    assert lc.tick(119.8) == []
    assert lc.tick(119.9) == [Stop("idle for 1m")]


def test_idle_timeout_stops_even_with_clients_attached_and_no_requests() -> None:
    lc = make(idle_timeout_s=60.0)
    start(lc, 0.0, clients=3)
    assert lc.tick(60.0) == [Stop("idle for 1m")]


def test_a_request_in_flight_for_ten_minutes_is_never_idle_or_linger_stopped() -> None:
    lc = make(idle_timeout_s=60.0, linger_s=0.0)
    start(lc, 0.0)
    assert lc.load(0.0, clients=1, inflight=1) == []
    assert lc.load(1.0, clients=0, inflight=1) == []  # the shim left; its request still streams
    assert lc.next_deadline() is None
    for minute in range(1, 11):
        assert lc.tick(minute * 60.0) == []
    assert state_of(lc) is State.RUNNING
    assert lc.load(600.0, clients=0, inflight=0) == [Stop("last client left")]


def test_idle_counts_from_the_end_of_a_long_request() -> None:
    lc = make(idle_timeout_s=60.0)
    start(lc, 0.0)
    assert lc.load(0.0, clients=1, inflight=1) == []
    assert lc.load(600.0, clients=1, inflight=0) == []
    assert lc.next_deadline() == 660.0
    assert lc.tick(659.0) == []
    assert lc.tick(660.0) == [Stop("idle for 1m")]


def test_a_server_started_with_no_client_lingers_from_ready() -> None:
    lc = make(eager=True, linger_s=30.0)
    assert lc.boot(0.0) == [Spawn()]
    assert lc.spawned(0.0, 3) == [] and lc.ready(2.0) == []
    assert lc.next_deadline() == 32.0
    assert lc.tick(32.0) == [Stop("no client for 30s")]


# -- stops and operator commands -------------------------------------------------------------------


def test_a_request_arriving_while_stopping_starts_the_server_again_once_stopped() -> None:
    lc = make(linger_s=0.0)
    start(lc, 0.0)
    assert lc.load(1.0, clients=0, inflight=0) == [Stop("last client left")]
    assert lc.load(1.1, clients=1, inflight=1) == []
    assert lc.demand(1.1) == []
    assert lc.exited(1.5, "exit status 0", requested=True) == [Spawn()]
    assert state_of(lc) is State.STARTING and lc.pid is None


def test_a_server_that_dies_on_its_own_while_stopping_completes_the_stop() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.operator_sleep(1.0) == [Stop("lazyctl sleep")]
    assert lc.exited(1.1, "exit status 1", requested=False) == []
    assert (state_of(lc), lc.burst, lc.last_error) == (State.SLEEPING, 0, None)


def test_operator_sleep_stops_a_running_server_and_it_stays_asleep() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.operator_sleep(5.0) == [Stop("lazyctl sleep")]
    assert lc.exited(5.2, "exit status 0", requested=True) == []
    assert state_of(lc) is State.SLEEPING and lc.next_deadline() is None


def test_operator_sleep_of_a_starting_server_fails_the_requests_waiting_for_it() -> None:
    lc = make()
    assert lc.demand(0.0) == [Spawn()]
    assert lc.operator_sleep(0.1) == [
        Stop("lazyctl sleep"), FailWaiting("stopped by lazyctl sleep")]
    assert lc.spawned(0.2, 9) == []
    assert lc.exited(0.3, "killed by SIGTERM", requested=True) == []
    assert state_of(lc) is State.SLEEPING


def test_operator_sleep_drops_a_request_remembered_while_stopping() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.operator_sleep(1.0) == [Stop("lazyctl sleep")]
    assert lc.demand(1.1) == []
    assert lc.operator_sleep(1.2) == [FailWaiting("stopped by lazyctl sleep")]
    assert lc.exited(1.3, "exit status 0", requested=True) == []
    assert state_of(lc) is State.SLEEPING


def test_operator_sleep_cancels_a_pending_backoff_restart() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.exited(30.0, CRASH, requested=False) == []
    assert state_of(lc) is State.BACKOFF
    assert lc.operator_sleep(30.1) == []
    assert (state_of(lc), lc.next_restart_at, lc.next_deadline()) == (State.SLEEPING, None, None)


def test_an_exit_the_daemon_caused_without_a_stop_is_not_counted_as_a_failure() -> None:
    lc = make()
    start(lc, 0.0)
    assert lc.exited(1.0, "killed: stdout line over the limit", requested=True) == []
    assert (state_of(lc), lc.burst, lc.last_error) == (State.SLEEPING, 0, None)


# -- boot and wake predicates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [({}, []), ({"eager": True}, [Spawn()]), ({"keep_alive": True}, [Spawn()])],
)
def test_boot_starts_eager_and_keep_alive_servers_only(
    policy: dict[str, object], expected: list[Action]
) -> None:
    lc = make(**policy)
    assert lc.boot(0.0) == expected
    assert lc.boot(1.0) == [Log("boot() called twice; ignored")]


# Literal schedule of rule 4 (not computed from the module's constants): the n-th failure waits
# 0.5 * 2**(n-1) s, +-20 %.
EAGER_SCHEDULE_S = [0.5, 1.0, 2.0, 4.0]


@pytest.mark.parametrize("seed", [0, 3, 11])
def test_an_eager_server_failing_at_boot_with_nobody_attached_backs_off_then_parks_after_five_starts(
    seed: int,
) -> None:
    lc = make(seed, eager=True)
    assert lc.boot(0.0) == [Spawn()]
    now = 0.0
    for nominal in EAGER_SCHEDULE_S:
        assert crash_while_starting(lc, now) == [FailWaiting(CRASH)]
        assert state_of(lc) is State.BACKOFF and lc.next_restart_at is not None
        assert nominal * 0.8 - 1e-9 <= lc.next_restart_at - now <= nominal * 1.2 + 1e-9
        now = lc.next_restart_at
        assert lc.tick(now) == [Spawn()]
    assert crash_while_starting(lc, now) == [FailWaiting(CRASH), PARK_LOG]
    assert (state_of(lc), lc.last_error, lc.next_deadline()) == (State.FAILED, CRASH, None)
    assert lc.tick(now + 3600.0) == [] and lc.restarts == 4
    # Parked until a request: that gets one fresh start, and its failure parks it again.
    assert lc.demand(now + 3601.0) == [Spawn()]
    assert crash_while_starting(lc, now + 3601.0) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.FAILED


def test_an_eager_server_that_crashes_after_a_good_start_with_nobody_attached_is_restarted() -> None:
    lc = make(eager=True)
    assert lc.boot(0.0) == [Spawn()]
    assert lc.spawned(0.0, 5) == [] and lc.ready(0.5) == []
    assert lc.exited(100.0, CRASH, requested=False) == []
    assert state_of(lc) is State.BACKOFF and lc.next_restart_at is not None
    assert 0.4 <= lc.next_restart_at - 100.0 <= 0.6


def test_a_lazy_server_nobody_needs_still_sleeps_after_a_failed_boot_less_start() -> None:
    lc = make()
    assert lc.demand(0.0) == [Spawn()]
    assert crash_while_starting(lc, 0.0) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.SLEEPING


def test_a_failed_operator_wake_with_no_client_parks_the_server_as_failed_with_its_reason() -> None:
    lc = make()
    assert lc.operator_wake(0.0) == [Spawn()]
    assert crash_while_starting(lc, 0.5) == [FailWaiting(CRASH)]
    assert (state_of(lc), lc.last_error, lc.next_deadline()) == (State.FAILED, CRASH, None)
    assert lc.demand(1.0) == [Spawn()]  # a request still gets its one fresh try


def test_a_failed_operator_wake_of_a_server_a_client_holds_backs_off_as_before() -> None:
    lc = make()
    assert lc.load(0.0, clients=1, inflight=0) == []
    assert lc.operator_wake(0.0) == [Spawn()]
    assert crash_while_starting(lc, 0.5) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.BACKOFF


def test_an_operator_wake_joining_a_boot_start_that_fails_parks_it_as_failed() -> None:
    lc = make(eager=True)
    assert lc.boot(0.0) == [Spawn()]
    assert lc.operator_wake(0.1) == []
    assert crash_while_starting(lc, 0.5) == [FailWaiting(CRASH)]
    assert state_of(lc) is State.FAILED


def test_a_predicate_flipping_from_1_to_0_starts_the_server_with_no_client() -> None:
    lc = make(wake_interval_s=30.0)
    assert predicate_of(lc) is PredicateState.IDLE
    assert lc.boot(0.0) == []
    assert lc.next_deadline() == 0.0
    assert lc.tick(0.0) == [RunPredicate()]
    assert predicate_of(lc) is PredicateState.RUNNING
    assert lc.next_deadline() is None  # one at a time
    assert lc.predicate_done(0.2, 1) == []
    assert state_of(lc) is State.SLEEPING and lc.next_deadline() == 30.2
    assert lc.tick(30.1) == []
    assert lc.tick(30.2) == [RunPredicate()]
    assert lc.predicate_done(30.4, 0) == [Spawn()]
    assert state_of(lc) is State.STARTING and predicate_of(lc) is PredicateState.IDLE


def test_a_hanging_predicate_does_not_delay_a_request() -> None:
    lc = make(wake_interval_s=30.0)
    assert lc.boot(0.0) == []
    assert lc.tick(0.0) == [RunPredicate()]
    assert lc.demand(0.5) == [Spawn()]
    assert lc.predicate_done(1.0, None) == []  # its answer arrived too late to matter
    assert state_of(lc) is State.STARTING and predicate_of(lc) is PredicateState.IDLE


def test_a_predicate_still_running_when_the_server_falls_asleep_is_never_run_twice() -> None:
    lc = make(wake_interval_s=10.0)
    assert lc.boot(0.0) == [] and lc.tick(0.0) == [RunPredicate()]
    start(lc, 0.1)
    assert lc.operator_sleep(0.2) == [Stop("lazyctl sleep")]
    assert lc.exited(0.3, "exit status 0", requested=True) == []
    assert lc.next_deadline() is None  # the first run has not reported yet
    assert lc.tick(100.0) == []
    assert lc.predicate_done(100.5, 1) == []
    assert lc.next_deadline() == 110.5


def test_a_predicate_timeout_or_odd_status_keeps_sleeping_and_logs() -> None:
    lc = make(wake_interval_s=10.0)
    assert lc.boot(0.0) == [] and lc.tick(0.0) == [RunPredicate()]
    assert lc.predicate_done(1.0, None) == [
        Log("wake predicate timed out or could not run; staying asleep")]
    assert lc.tick(11.0) == [RunPredicate()]
    assert lc.predicate_done(11.5, 3) == [
        Log("wake predicate exited with status 3; staying asleep")]
    assert state_of(lc) is State.SLEEPING and lc.next_deadline() == 21.5


def test_predicates_do_not_run_while_parked() -> None:
    lc = make(7, wake_interval_s=10.0)
    lc.load(0.0, clients=1, inflight=0)
    assert lc.boot(0.0) == [] and lc.tick(0.0) == [RunPredicate()]
    assert lc.predicate_done(0.0, 1) == []
    run_crash_loop(lc, 0.0, restarts=5)
    assert state_of(lc) is State.FAILED
    assert lc.next_deadline() is None
    assert lc.tick(1000.0) == []


def test_a_server_without_a_predicate_reports_it_off() -> None:
    assert make().predicate_state is PredicateState.OFF


# -- errors and observability ----------------------------------------------------------------------


def test_inputs_that_do_not_fit_the_state_are_logged_and_change_nothing() -> None:
    lc = make()
    before = lc.status_fields()
    for actions in (lc.ready(1.0), lc.exited(1.0, "x", requested=False), lc.spawned(1.0, 5),
                    lc.spawn_failed(1.0, "x", fatal=True), lc.predicate_done(1.0, 0)):
        assert len(actions) == 1 and isinstance(actions[0], Log)
    assert lc.status_fields() == before
    start(lc, 2.0, pid=6)
    assert lc.spawned(3.0, 7) == [Log("ignored spawned() while running (pid 6)")]
    assert lc.pid == 6


def test_caller_bugs_raise_lifecycle_error_and_change_nothing() -> None:
    lc = make()
    assert lc.demand(10.0) == [Spawn()]
    before = lc.status_fields()
    with pytest.raises(ValueError, match="time went backwards"):
        lc.tick(9.0)
    with pytest.raises(ValueError, match="negative"):
        lc.load(11.0, clients=-1, inflight=0)
    with pytest.raises(ValueError, match="pid"):
        lc.spawned(11.0, 0)
    assert lc.status_fields() == before
    with pytest.raises(ValueError, match="linger_s"):
        LifecyclePolicy(linger_s=-1.0)
    with pytest.raises(ValueError, match="start_timeout_s"):
        LifecyclePolicy(start_timeout_s=0.0)
    with pytest.raises(ValueError, match="wake_interval_s"):
        LifecyclePolicy(wake_interval_s=float("nan"))


def test_the_snapshot_is_a_plain_dict_of_the_status_fields() -> None:
    lc = make(wake_interval_s=60.0)
    start(lc, 1.0, pid=77)
    assert lc.status_fields() == {
        "state": "running", "pid": 77, "started_at": 1.0, "restarts": 0, "last_error": None,
        "burst": 0, "next_restart_at": None, "predicate_state": "idle",
        "linger_rule": "linger", "linger_s": 600.0,
    }


# -- random sequences ------------------------------------------------------------------------------

STEPS_S = [0.0, 0.1, 0.5, 1.0, 5.0, 11.0, 31.0, 61.0, 700.0, -1.0]


@settings(derandomize=True, max_examples=1000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(POLICIES),
    seed=st.integers(0, 3),
    steps=st.lists(
        st.tuples(st.sampled_from(INPUTS), st.sampled_from(STEPS_S), st.integers(0, 2),
                  st.integers(0, 2), st.sampled_from([None, 0, 1, 2])),
        max_size=80,
    ),
)
def test_random_input_sequences_keep_the_invariants(
    policy: LifecyclePolicy, seed: int, steps: list[tuple[str, float, int, int, int | None]]
) -> None:
    lc = Lifecycle(replace(policy), random.Random(seed))
    now, alive, pid, next_pid, predicate_out, booted = 0.0, False, None, 1, False, False
    assert lc.tick(now) == []  # from here on the machine has seen a time, so -1 s goes backwards
    for name, step, a, b, code in steps:
        if step < 0:
            snapshot = lc.status_fields()
            with pytest.raises(ValueError):
                lc.tick(now + step)
            assert lc.status_fields() == snapshot
            continue
        now += step
        before, state_before = lc.status_fields(), lc.state
        valid = {"spawned": alive and pid is None, "spawn_failed": alive and pid is None,
                 "exited": alive, "ready": lc.state is State.STARTING and pid is not None,
                 "predicate_done": predicate_out, "boot": not booted}.get(name, True)
        if name == "spawned":
            actions = lc.spawned(now, next_pid)
        elif name == "spawn_failed":
            actions = lc.spawn_failed(now, "cannot execute", fatal=bool(a))
        elif name == "exited":
            actions = lc.exited(now, CRASH, requested=bool(a))
        elif name == "load":
            actions = lc.load(now, clients=a, inflight=b)
        elif name == "predicate_done":
            actions = lc.predicate_done(now, code)
        elif name == "used":
            actions = lc.activity(now, used=True)
        else:
            actions = getattr(lc, name)(now)
        if not valid:
            assert len(actions) == 1 and isinstance(actions[0], Log), (name, actions)
            after = lc.status_fields()
            # Time alone may have made the running start good, which clears the burst.
            assert after.pop("burst") in (before.pop("burst"), 0)
            assert after == before
            continue
        if name == "spawned":
            pid, next_pid = next_pid, next_pid + 1
        elif name in ("exited", "spawn_failed"):
            alive, pid = False, None
        elif name == "predicate_done":
            predicate_out = False
        elif name == "boot":
            booted = True
        assert sum(isinstance(action, Spawn) for action in actions) <= 1
        for action in actions:
            if isinstance(action, Spawn):
                assert not alive, "two Spawn actions without an exit in between"
                alive, pid = True, None
            elif isinstance(action, RunPredicate):
                assert not predicate_out and state_before is State.SLEEPING
                predicate_out = True
            elif isinstance(action, Stop):
                assert state_before in (State.STARTING, State.RUNNING)
            elif isinstance(action, KillAndFail):
                assert name == "tick" and state_before is State.STARTING
        assert alive == (lc.state in PROCESS_STATES)
        if name == "used" and alive:
            assert lc.status_fields()["linger_rule"] == "linger"  # a real request: the full linger for this run
        assert (lc.status_fields()["linger_rule"] is None) == (not alive)
        assert lc.pid == pid
        assert lc.started_at is None or lc.state in (State.RUNNING, State.STOPPING)
        assert (lc.next_restart_at is not None) == (lc.state is State.BACKOFF)
        if lc.state is State.BACKOFF and before["next_restart_at"] != lc.next_restart_at:
            assert lc.next_restart_at is not None
            assert now + FASTEST_RESTART_S <= lc.next_restart_at <= now + SLOWEST_RESTART_S
        assert lc.state is not State.FAILED or lc.last_error is not None
        if policy.wake_interval_s is None:
            assert lc.predicate_state is PredicateState.OFF
        else:
            assert (lc.predicate_state is PredicateState.RUNNING) == predicate_out
        assert lc.burst >= 0 and lc.restarts >= 0
        if name == "tick":
            deadline = lc.next_deadline()
            assert deadline is None or deadline > now, "tick left a deadline due"
