"""Which process a new session joins: every mode, taken or free, before and after the bound."""

from __future__ import annotations

import itertools

import pytest

from lazyd.core.share_join import Join, join
from lazyd.core.sharing import SharingDecision

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
