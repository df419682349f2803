"""Which process a new session joins: every mode, taken or free, before and after the bound."""

from __future__ import annotations

import itertools

import pytest

from lazyd.core.sharing.join import Join, join
from lazyd.core.sharing.modes import SharingDecision

SHARED = SharingDecision("shared", "auto: shared (known server: time)", "known")
AWARE = SharingDecision("session-aware", "auto: session-aware (declared: x-mux.sharing)", "declared")
ISOLATED = SharingDecision("isolated", "auto: isolated (tool names: browser_navigate)", "tools")
UNDECIDED = SharingDecision(None, "auto: undecided (nothing cached, declared or known yet)", "undecided")
BOUND = 5.0


@pytest.mark.parametrize(("taken", "waited"), list(itertools.product((False, True), (0.0, 4.9, 5.0, 60.0))))
def test_a_decided_registration_never_waits_whatever_the_process_and_the_clock(taken: bool, waited: float) -> None:
    for decision, where in ((SHARED, Join.BASE), (AWARE, Join.BASE), (ISOLATED, Join.OWN)):
        choice = join(decision, base_taken=taken, waited_s=waited, bound_s=BOUND)
        assert (choice.join, choice.rule) == (where, decision.rule)


def test_the_first_session_of_an_undecided_registration_takes_its_process_so_its_start_decides() -> None:
    choice = join(UNDECIDED, base_taken=False, waited_s=0.0, bound_s=BOUND)
    assert (choice.join, choice.rule) == (Join.BASE, "auto: undecided, so the first session's start decides")
    # One that waited and found the process free again (the first session left) takes it too.
    assert join(UNDECIDED, base_taken=False, waited_s=4.0, bound_s=BOUND).join is Join.BASE


def test_a_second_session_of_an_undecided_registration_waits_until_the_bound_then_gets_its_own_process() -> None:
    assert join(UNDECIDED, base_taken=True, waited_s=0.0, bound_s=BOUND).join is Join.WAIT
    assert join(UNDECIDED, base_taken=True, waited_s=4.999, bound_s=BOUND).join is Join.WAIT
    late = join(UNDECIDED, base_taken=True, waited_s=5.0, bound_s=BOUND)
    assert (late.join, late.rule) == (
        Join.OWN, "auto: isolated (still undecided after 5s: a process of its own is the safe guess)")


def test_a_wait_ends_the_moment_the_first_start_decides_either_way() -> None:
    # The loop in the daemon asks again after every change: the same session, now decided.
    assert join(UNDECIDED, base_taken=True, waited_s=1.0, bound_s=BOUND).join is Join.WAIT
    assert join(ISOLATED, base_taken=True, waited_s=1.2, bound_s=BOUND).join is Join.OWN
    assert join(SHARED, base_taken=True, waited_s=1.2, bound_s=BOUND).join is Join.BASE


def test_a_completed_start_that_still_decides_nothing_lets_the_second_session_share_at_once() -> None:
    # A stateless-era start lists nothing until a client asks: waiting would only cost the bound.
    choice = join(UNDECIDED, base_taken=True, waited_s=0.0, bound_s=BOUND, started=True)
    assert (choice.join, choice.rule) == (Join.BASE, "auto: shared (its start declared nothing and listed no tools)")
    # A decision, when there is one, wins over that: the start is not what decides it.
    assert join(ISOLATED, base_taken=True, waited_s=0.0, bound_s=BOUND, started=True).join is Join.OWN
    assert join(UNDECIDED, base_taken=False, waited_s=0.0, bound_s=BOUND, started=True).join is Join.BASE


def test_with_no_start_under_way_the_second_session_waits_only_the_grace_then_shares() -> None:
    # The first session has sent nothing that needs the server (some clients send nothing until
    # they call a tool): no start will decide, so waiting the whole bound would only delay it.
    early = join(UNDECIDED, base_taken=True, waited_s=0.5, bound_s=BOUND, starting=False, grace_s=1.0)
    assert early.join is Join.WAIT
    late = join(UNDECIDED, base_taken=True, waited_s=1.0, bound_s=BOUND, starting=False, grace_s=1.0)
    assert (late.join, late.rule) == (Join.BASE, "auto: shared (undecided, and no start under way to decide it)")
    # A start under way is waited for, up to the bound.
    assert join(UNDECIDED, base_taken=True, waited_s=3.0, bound_s=BOUND, starting=True, grace_s=1.0).join is Join.WAIT
