"""The check linger: a start only listings came for lingers `check_linger_s`, not `linger_s`
(rule 6 of lazyd/core/lifecycle/machine.py, written in lazyd/core/lifecycle/usage.py).

A health check (`claude mcp list`, `gemini mcp list`, opencode's `mcp list`) with nothing cached
starts every server for its listings and leaves; directly, those servers exit with the listing.
Through lazyd such a start lingers 30 s by default, while a server that served a real request
lingers its 10 minutes. Driven with explicit times, no process.
"""

from __future__ import annotations

import pytest

from lazyd.core.lifecycle.machine import Lifecycle, LifecyclePolicy, Spawn, State, Stop
from tests.unit.lifecycle_support import CRASH, make

LISTINGS_STOP = "no client for 30s (started for listings only)"


def listing_start(lc: Lifecycle, now: float, pid: int = 100, clients: int = 1) -> None:
    """A client attaches and asks for listings nothing cached: a start with no real request."""
    assert lc.load(now, clients=clients, inflight=0) == []
    assert lc.demand(now) == [Spawn()]
    assert lc.spawned(now, pid) == []
    assert lc.ready(now) == []


def test_a_start_only_listings_came_for_stops_30_s_after_its_last_client_left() -> None:
    lc = make()
    listing_start(lc, 0.0)
    assert lc.status_fields()["linger_rule"] == "check_linger"
    assert lc.load(2.0, clients=0, inflight=0) == []
    assert lc.next_deadline() == 32.0
    assert lc.tick(31.9) == []
    assert lc.tick(32.0) == [Stop(LISTINGS_STOP)]
    assert lc.exited(32.5, "exited with status 0", requested=True) == []
    assert lc.state is State.SLEEPING and lc.last_error is None


def test_a_real_request_during_the_run_gives_the_server_the_full_linger() -> None:
    lc = make()
    listing_start(lc, 0.0)
    assert lc.activity(3.0, used=True) == []  # tools/call
    assert lc.status_fields()["linger_rule"] == "linger"
    assert lc.load(4.0, clients=0, inflight=0) == []
    assert lc.next_deadline() == 604.0
    assert lc.tick(32.0) == []
    assert lc.tick(604.0) == [Stop("no client for 10m")]


def test_a_start_made_by_a_real_request_keeps_the_full_linger() -> None:
    lc = make()
    lc.load(0.0, clients=1, inflight=0)
    assert lc.activity(0.0, used=True) == []
    assert lc.demand(0.0) == [Spawn()]
    lc.spawned(0.0, 7)
    lc.ready(1.0)
    lc.load(2.0, clients=0, inflight=0)
    assert (lc.status_fields()["linger_rule"], lc.next_deadline()) == ("linger", 602.0)


def test_a_listing_start_whose_client_left_before_ready_lingers_30_s_from_ready() -> None:
    lc = make()
    lc.load(0.0, clients=1, inflight=0)
    assert lc.demand(0.0) == [Spawn()]
    lc.spawned(0.1, 8)
    lc.load(0.5, clients=0, inflight=0)
    assert lc.ready(2.0) == []
    assert lc.next_deadline() == 32.0
    assert lc.tick(32.0) == [Stop(LISTINGS_STOP)]


def test_the_check_linger_follows_its_setting_and_is_never_longer_than_linger() -> None:
    lc = make(check_linger_s=5.0)
    listing_start(lc, 0.0)
    lc.load(1.0, clients=0, inflight=0)
    assert lc.tick(6.0) == [Stop("no client for 5s (started for listings only)")]
    short = make(linger_s=10.0)  # check_linger 30 s, longer than linger: linger wins
    listing_start(short, 0.0)
    short.load(1.0, clients=0, inflight=0)
    assert short.next_deadline() == 11.0
    assert short.status_fields()["linger_s"] == 10.0


def test_a_check_linger_of_zero_stops_a_listing_start_as_soon_as_its_last_client_leaves() -> None:
    lc = make(check_linger_s=0.0)
    listing_start(lc, 0.0, clients=2)
    assert lc.load(1.0, clients=1, inflight=0) == []
    assert lc.load(2.0, clients=0, inflight=0) == [Stop("last client left (started for listings only)")]


def test_a_second_session_that_only_lists_leaves_the_check_linger_in_force() -> None:
    lc = make()
    listing_start(lc, 0.0)
    lc.load(1.0, clients=2, inflight=0)  # another health check attaches; listings come from the instance
    lc.load(2.0, clients=1, inflight=0)
    lc.load(3.0, clients=0, inflight=0)
    assert lc.tick(33.0) == [Stop(LISTINGS_STOP)]


@pytest.mark.parametrize("how", ["eager", "keep_alive", "predicate", "operator_wake"])
def test_starts_nobody_demanded_keep_the_full_linger(how: str) -> None:
    if how == "predicate":
        lc = make(wake_interval_s=5.0)
        lc.boot(0.0)
        lc.tick(0.0)
        assert lc.predicate_done(0.1, 0) == [Spawn()]
    elif how == "operator_wake":
        lc = make()
        assert lc.operator_wake(0.0) == [Spawn()]
    else:
        lc = make(**{how: True})
        assert lc.boot(0.0) == [Spawn()]
    lc.spawned(0.2, 9)
    lc.ready(1.0)
    assert lc.status_fields()["linger_rule"] == "linger"
    lc.load(2.0, clients=1, inflight=0)
    lc.demand(2.0)  # a client's listing finds it running: nothing changes
    lc.load(3.0, clients=0, inflight=0)
    assert lc.tick(33.0) == []


def test_lazyctl_wake_joining_a_listing_start_gives_it_the_full_linger() -> None:
    lc = make()
    lc.load(0.0, clients=1, inflight=0)
    assert lc.demand(0.0) == [Spawn()]
    assert lc.operator_wake(0.1) == []  # joins the start under way
    lc.spawned(0.2, 10)
    lc.ready(1.0)
    lc.load(2.0, clients=0, inflight=0)
    assert (lc.status_fields()["linger_rule"], lc.next_deadline()) == ("linger", 602.0)


def test_the_mark_of_use_is_cleared_when_the_server_goes_to_sleep() -> None:
    lc = make()
    lc.load(0.0, clients=1, inflight=0)
    lc.activity(0.0, used=True)
    lc.demand(0.0)
    lc.spawned(0.0, 11)
    lc.ready(1.0)
    assert lc.operator_sleep(2.0) == [Stop("lazyctl sleep")]
    lc.exited(2.5, "exited with status 0", requested=True)
    assert lc.state is State.SLEEPING and lc.status_fields()["linger_rule"] is None
    assert lc.demand(3.0) == [Spawn()]  # the next start only lists
    lc.spawned(3.0, 12)
    lc.ready(4.0)
    assert lc.status_fields()["linger_rule"] == "check_linger"


def test_a_backoff_restart_keeps_the_rule_of_the_start_it_repeats() -> None:
    lc = make()
    listing_start(lc, 0.0)
    assert lc.exited(20.0, CRASH, requested=False) == []  # a client is attached: backoff
    assert lc.state is State.BACKOFF and lc.next_restart_at is not None
    assert lc.tick(lc.next_restart_at) == [Spawn()]
    lc.spawned(21.0, 13)
    lc.ready(22.0)
    assert lc.status_fields()["linger_rule"] == "check_linger"
    used = make()
    listing_start(used, 0.0)
    used.activity(1.0, used=True)
    used.exited(20.0, CRASH, requested=False)
    assert used.next_restart_at is not None
    used.tick(used.next_restart_at)
    used.spawned(21.0, 14)
    used.ready(22.0)
    assert used.status_fields()["linger_rule"] == "linger"


def test_a_demand_remembered_while_stopping_starts_a_listing_run() -> None:
    lc = make()
    lc.load(0.0, clients=1, inflight=0)
    lc.activity(0.0, used=True)
    lc.demand(0.0)
    lc.spawned(0.0, 15)
    lc.ready(1.0)
    lc.operator_sleep(2.0)
    assert lc.demand(2.1) == []  # remembered: the stop completes first
    assert lc.exited(2.5, "exited with status 0", requested=True) == [Spawn()]
    lc.spawned(2.6, 16)
    lc.ready(3.0)
    # The mark of use outlives the stop (nothing went to rest in between): the full linger.
    assert lc.status_fields()["linger_rule"] == "linger"


def test_status_names_the_linger_that_applies() -> None:
    lc = make()
    assert (lc.status_fields()["linger_rule"], lc.status_fields()["linger_s"]) == (None, None)
    listing_start(lc, 0.0)
    assert (lc.status_fields()["linger_rule"], lc.status_fields()["linger_s"]) == ("check_linger", 30.0)
    lc.activity(1.0, used=True)
    assert (lc.status_fields()["linger_rule"], lc.status_fields()["linger_s"]) == ("linger", 600.0)


def test_a_negative_or_infinite_check_linger_is_refused() -> None:
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="check_linger_s"):
            LifecyclePolicy(check_linger_s=bad)


def test_the_status_table_marks_a_process_only_listings_came_for() -> None:
    from lazyd.ctl.format import status_row

    row = {"name": "time", "state": "running", "pid": 7, "linger_rule": "check_linger"}
    assert status_row(row, 0.0)[1] == "running (listings only)"
    assert status_row({**row, "linger_rule": "linger"}, 0.0)[1] == "running"
    assert status_row({**row, "state": "sleeping", "pid": None, "linger_rule": None}, 0.0)[1] == "sleeping"
