"""Which process a new session joins: every mode, taken or free, before and after the bound, and
the compatibility keys two sessions must share to share a process."""

from __future__ import annotations

import itertools

import pytest

from lazyd.core.sharing.join import Join, join
from lazyd.core.sharing.modes import NOT_KNOWN_RULE, UNDECIDED_RULE, SharingDecision

SHARED = SharingDecision("shared", "auto: shared (known server: time)", "known")
AWARE = SharingDecision("session-aware", "auto: session-aware (declared: x-mux.sharing)", "declared")
ISOLATED = SharingDecision("isolated", "auto: isolated (tool names: browser_navigate)", "tools")
UNKNOWN = SharingDecision("isolated", NOT_KNOWN_RULE, "unknown")
UNDECIDED = SharingDecision(None, UNDECIDED_RULE, "undecided")
BOUND = 5.0


@pytest.mark.parametrize(("taken", "waited", "starting"),
                         list(itertools.product((False, True), (0.0, 4.9, 5.0, 60.0), (False, True))))
def test_a_decided_registration_never_waits_whatever_the_process_and_the_clock(
        taken: bool, waited: float, starting: bool) -> None:
    for decision, where in ((SHARED, Join.BASE), (AWARE, Join.BASE), (ISOLATED, Join.OWN), (UNKNOWN, Join.OWN)):
        choice = join(decision, base_taken=taken, waited_s=waited, bound_s=BOUND, starting=starting, grace_s=1.0)
        assert (choice.join, choice.rule) == (where, decision.rule)


def test_the_first_session_of_an_undecided_registration_takes_its_process_so_its_start_decides() -> None:
    choice = join(UNDECIDED, base_taken=False, waited_s=0.0, bound_s=BOUND)
    assert (choice.join, choice.rule) == (Join.BASE, "auto: undecided, so the first session's start decides")
    # One that waited and found the process free again (the first session left) takes it too.
    assert join(UNDECIDED, base_taken=False, waited_s=4.0, bound_s=BOUND).join is Join.BASE
    assert join(UNDECIDED, base_taken=False, waited_s=60.0, bound_s=BOUND, starting=False).join is Join.BASE


def test_a_second_session_of_an_undecided_registration_waits_until_the_bound_then_gets_its_own_process() -> None:
    assert join(UNDECIDED, base_taken=True, waited_s=0.0, bound_s=BOUND).join is Join.WAIT
    assert join(UNDECIDED, base_taken=True, waited_s=4.999, bound_s=BOUND).join is Join.WAIT
    late = join(UNDECIDED, base_taken=True, waited_s=5.0, bound_s=BOUND)
    assert (late.join, late.rule) == (
        Join.OWN, "auto: isolated (not known to be shareable: its first start had not told after 5s)")


def test_a_wait_ends_the_moment_the_first_start_decides_either_way() -> None:
    # The loop in the daemon asks again after every change: the same session, now decided.
    assert join(UNDECIDED, base_taken=True, waited_s=1.0, bound_s=BOUND).join is Join.WAIT
    assert join(UNKNOWN, base_taken=True, waited_s=1.2, bound_s=BOUND).join is Join.OWN
    assert join(SHARED, base_taken=True, waited_s=1.2, bound_s=BOUND).join is Join.BASE


def test_with_no_start_under_way_the_second_session_waits_only_the_grace_then_gets_its_own_process() -> None:
    # The first session has sent nothing that needs the server (some clients send nothing until
    # they call a tool): no start will tell, and not known to be shareable means not shared.
    early = join(UNDECIDED, base_taken=True, waited_s=0.5, bound_s=BOUND, starting=False, grace_s=1.0)
    assert early.join is Join.WAIT
    late = join(UNDECIDED, base_taken=True, waited_s=1.0, bound_s=BOUND, starting=False, grace_s=1.0)
    assert (late.join, late.rule) == (
        Join.OWN, "auto: isolated (not known to be shareable: no start under way to tell)")
    # A start under way is waited for, up to the bound.
    assert join(UNDECIDED, base_taken=True, waited_s=3.0, bound_s=BOUND, starting=True, grace_s=1.0).join is Join.WAIT


@pytest.mark.parametrize("decision", [SHARED, AWARE, UNDECIDED])
def test_sessions_whose_compatibility_keys_differ_never_share_a_process(decision: SharingDecision) -> None:
    # No conflict: as without keys.
    same = join(decision, base_taken=True, waited_s=0.0, bound_s=BOUND, key_conflict=False)
    assert same.join is (Join.BASE if decision.mode else Join.WAIT)
    # A key that differs from the sessions' on the process (their roots): a process of its own, at once.
    other = join(decision, base_taken=True, waited_s=0.0, bound_s=BOUND, key_conflict=True)
    assert (other.join, other.rule) == (Join.OWN, "its own process: its roots differ from those of the sessions sharing one")


def test_keys_never_make_an_isolated_registration_share() -> None:
    choice = join(UNKNOWN, base_taken=True, waited_s=0.0, bound_s=BOUND, key_conflict=False)
    assert (choice.join, choice.rule) == (Join.OWN, NOT_KNOWN_RULE)
