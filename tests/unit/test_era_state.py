"""Era detection alone (lazyd/core/eras/state.py): its table is written as prose in the module
docstring and as data in TRANSITIONS, and the two must say the same; each stage reads the same to
the rest of the core whatever way it was reached; what is learned is recorded in the snapshot.
"""

from __future__ import annotations

import re

import pytest

from lazyd.core.eras import state as era_state
from lazyd.core.cache import Snapshot
from lazyd.core.eras.choice import Kind, facts_of
from lazyd.core.eras.state import ANY, TRANSITIONS, EraState, Event, Stage
from lazyd.core.relay.actions import Phase, SnapshotChanged

STATELESS_DISCOVERY = {"PV": {"result": {"supportedVersions": ["2026-07-28"]}, "stored_at": 0.0}}


def prose_rows() -> dict[str, tuple[str, str]]:
    """The transitions table of the docstring: event text -> (from, to)."""
    doc = era_state.__doc__ or ""
    table = doc.split("The transitions", 1)[1]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("event", "---"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_the_prose_table_and_the_transitions_say_the_same() -> None:
    rows = prose_rows()
    assert set(rows) == {event.value for event in Event}
    for event, (sources, target) in TRANSITIONS.items():
        prose_from, prose_to = rows[event.value]
        assert prose_to == target.value, event
        named = {Stage(s.strip()) for s in prose_from.split(",")} if prose_from != "any" else ANY
        assert named == sources, event


def test_the_prose_says_what_each_stage_means_to_the_rest_of_the_core() -> None:
    doc = era_state.__doc__ or ""
    said = {"True": True, "None": None, "False": False}
    meaning = " ".join(doc.split("What a stage means to the rest of the core", 1)[1].split("The transitions")[0].split())
    covered = set()
    for names, value in re.findall(r"((?:[A-Z_]+(?:, | and )?)+) (?:is|are) (True|None|False)", meaning):
        for name in re.findall(r"[A-Z_]+", names):
            state = EraState("auto", Snapshot())
            state.stage = Stage(name)
            assert state.stateless_up is said[value], name
            covered.add(state.stage)
    assert covered == set(Stage)


def walk(events: list[Event]) -> EraState:
    state = EraState("auto", Snapshot())
    for event in events:
        state.move(event)
    return state


@pytest.mark.parametrize(("events", "stage", "up"), [
    ([], Stage.NONE, None),
    ([Event.SPAWNED_PROBE_FIRST], Stage.PROBING, None),
    ([Event.SPAWNED_PROBE_FIRST, Event.PROBE_STATELESS], Stage.STATELESS, True),
    ([Event.SPAWNED_PROBE_FIRST, Event.PROBE_OTHER], Stage.NOT_STATELESS, False),
    ([Event.SPAWNED_PROBE_FIRST, Event.HANDSHAKE_BEFORE_PROBE], Stage.NOT_STATELESS, False),
    # a late DiscoverResult after the handshake completed without it: both eras on one connection
    ([Event.SPAWNED_PROBE_FIRST, Event.HANDSHAKE_BEFORE_PROBE, Event.PROBE_STATELESS], Stage.STATELESS, True),
    ([Event.SPAWNED_INITIALIZE_FIRST], Stage.HANDSHAKE, False),
    ([Event.SPAWNED_INITIALIZE_FIRST, Event.PROBE_AFTER_STATELESS], Stage.STATELESS, True),
    ([Event.SPAWNED_INITIALIZE_FIRST, Event.FIRST_INITIALIZE_REFUSED], Stage.REPROBING, False),
    ([Event.SPAWNED_INITIALIZE_FIRST, Event.FIRST_INITIALIZE_REFUSED, Event.PROBE_STATELESS], Stage.STATELESS, True),
    ([Event.SPAWNED_PROBE_FIRST, Event.PROBE_STATELESS, Event.EXITED], Stage.NONE, None),
])
def test_each_way_through_the_table_ends_in_its_stage(events: list[Event], stage: Stage, up: bool | None) -> None:
    state = walk(events)
    assert state.stage is stage and state.stateless_up is up


@pytest.mark.parametrize(("events", "event"), [
    ([Event.SPAWNED_PROBE_FIRST], Event.FIRST_INITIALIZE_REFUSED),  # a probe was the first request
    ([Event.SPAWNED_INITIALIZE_FIRST], Event.HANDSHAKE_BEFORE_PROBE),  # no probe was sent
    ([], Event.HANDSHAKE_BEFORE_PROBE),
])
def test_an_event_the_table_does_not_allow_in_a_stage_is_a_bug_said_as_such(events: list[Event], event: Event) -> None:
    state = walk(events)
    with pytest.raises(AssertionError, match="cannot happen in stage"):
        state.move(event)


def test_a_start_no_client_asked_for_takes_the_lane_its_plan_gives_it() -> None:
    state = EraState("auto", Snapshot())
    plan = state.spawned()
    assert state.lane == "handshake" and not plan.probe_first and state.stage is Stage.HANDSHAKE
    snapshot = Snapshot(discover=dict(STATELESS_DISCOVERY), handshake_first=False)
    assert facts_of(snapshot).kind is Kind.STATELESS_ONLY
    state = EraState("auto", snapshot)
    plan = state.spawned()
    assert state.lane == "stateless" and plan.initialize == "never" and state.stage is Stage.PROBING


def test_the_live_plan_holds_until_the_process_is_down() -> None:
    state = EraState("auto", Snapshot())
    state.lane = "stateless"
    live = state.spawned()
    state.snapshot.mixed_connection = False  # learned meanwhile: the next start is planned otherwise
    assert state.start_plan(Phase.READY) is live
    assert state.start_plan(Phase.DOWN) != live


def test_bridging_fetching_and_the_process_era_follow_the_stage() -> None:
    state = walk([Event.SPAWNED_PROBE_FIRST])
    assert state.process_era(Phase.PREINIT, handshake_live=False) is None  # the probe is on its way
    assert not state.can_fetch(Phase.REFRESH) and not state.bridging(Phase.REFRESH, handshake_live=False)
    state.move(Event.PROBE_STATELESS)
    assert state.can_fetch(Phase.REFRESH) and not state.can_fetch(Phase.PREINIT)
    assert state.bridging(Phase.READY, handshake_live=False) and not state.bridging(Phase.READY, handshake_live=True)
    assert state.process_era(Phase.READY, handshake_live=False) == "stateless"
    assert state.process_era(Phase.READY, handshake_live=True) == "both"
    assert state.process_era(Phase.DOWN, handshake_live=False) is None
    assert walk([Event.SPAWNED_INITIALIZE_FIRST]).process_era(Phase.READY, handshake_live=True) == "handshake"


def test_what_one_connection_carries_is_recorded_once() -> None:
    state = EraState("auto", Snapshot())
    assert state.learn_mixed(True) == [SnapshotChanged()] and state.snapshot.mixed_connection is True
    assert state.learn_mixed(True) == []
    assert state.learn_mixed(False) == [SnapshotChanged()] and state.snapshot.mixed_connection is False


def test_the_process_ending_forgets_what_was_learned_of_it_but_not_of_the_server() -> None:
    state = walk([Event.SPAWNED_PROBE_FIRST, Event.PROBE_STATELESS])
    state.discovery = {"supportedVersions": ["2026-07-28"]}
    state.held = {"code": -32022}
    state.learn_mixed(False)
    state.gone()
    assert state.stage is Stage.NONE
    assert state.discovery is None and state.held is None and state.probe_asker is None
    assert state.snapshot.mixed_connection is False


def test_an_accepted_first_initialize_is_saved_with_the_next_change_and_a_refusal_at_once() -> None:
    state = EraState("auto", Snapshot())
    assert state.learn_first_initialize(True) == [] and state.snapshot.handshake_first is True
    assert state.learn_first_initialize(False) == [SnapshotChanged()] and state.snapshot.handshake_first is False
    assert state.learn_first_initialize(False) == []
