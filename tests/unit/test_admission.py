"""The daemon's descriptor budget (lazyd/core/admission.py): when a connection is refused, and why.

Testing policy: the decision is a pure function of the limit, the new descriptor's number, the
open connections and the registered servers; each rule is checked at its edge.
"""

from __future__ import annotations

from lazyd.core.admission import FDS_PER_SERVER, RESERVE_BASE_FDS, Admission


def test_a_connection_is_served_while_its_descriptor_is_below_the_limit_minus_the_reserve() -> None:
    budget = Admission(1024)
    edge = 1024 - RESERVE_BASE_FDS
    assert budget.refusal(edge - 1, 10, 0) is None
    refusal = budget.refusal(edge, 10, 0)
    assert refusal is not None and "near its descriptor limit" in refusal and "1024" in refusal


def test_each_registered_server_widens_the_reserve_so_that_it_can_still_start() -> None:
    budget = Admission(4096)
    assert budget.reserve(30) == RESERVE_BASE_FDS + 30 * FDS_PER_SERVER
    edge = 4096 - budget.reserve(30)
    assert budget.refusal(edge - 1, 1, 30) is None
    assert budget.refusal(edge, 1, 30) is not None


def test_the_reserve_never_takes_more_than_a_quarter_of_a_small_limit() -> None:
    assert Admission(64).reserve(100) == 16
    assert Admission(64).refusal(47, 1, 100) is None


def test_the_connection_cap_follows_the_limit_never_a_fixed_number() -> None:
    small, large = Admission(1024), Admission(524288)
    assert small.cap(0) == 1024 - RESERVE_BASE_FDS
    assert large.cap(0) == 524288 - RESERVE_BASE_FDS
    # Low descriptor numbers (freed ones are reused first) but more connections than the cap.
    refusal = small.refusal(100, small.cap(0) + 1, 0)
    assert refusal is not None and f"limit {small.cap(0)}" in refusal
    assert small.refusal(100, small.cap(0), 0) is None
    assert large.refusal(5000, 4000, 30) is None  # a thousand sessions are nowhere near it
