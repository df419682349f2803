"""The era policy's tables (lazyd/core/eras/policy.py), every row of them, without a process.

Each expected table below is written out as literal rows, the way the module docstring states
them, rather than recomputed: a change to the policy must change a row here too.
"""

from __future__ import annotations

import itertools

import pytest

from lazyd.core.cache import Snapshot
from lazyd.core.eras.policy import (
    ERA_SETTINGS,
    Era,
    EraPolicy,
    EraSetting,
    Facts,
    Kind,
    Lane,
    StartPlan,
    client_era,
    facts_of,
)
from lazyd.core.eras.versions import CLIENT_INFO_META, PROTOCOL_VERSION_META

DISCOVERIES = ("unknown", "none", "stateless")
TRISTATE = (None, True, False)
ALL_FACTS = [Facts(d, m, h) for d, m, h in itertools.product(DISCOVERIES, TRISTATE, TRISTATE)]  # type: ignore[arg-type]
ERAS: tuple[Era, Era] = ("handshake", "stateless")


def expected_kind(facts: Facts) -> Kind:
    # The kinds table of the module docstring, row by row.
    if facts.discovery == "unknown":
        return Kind.UNKNOWN
    if facts.discovery == "none":
        return Kind.HANDSHAKE_ONLY
    if facts.mixed:
        return Kind.ONE_CONNECTION
    if facts.handshake_first is False:
        return Kind.STATELESS_ONLY
    return Kind.PER_CONNECTION


@pytest.mark.parametrize("facts", ALL_FACTS, ids=repr)
def test_every_combination_of_recorded_facts_makes_the_kind_the_table_names(facts: Facts) -> None:
    assert facts.kind is expected_kind(facts)


def test_the_five_kinds_are_each_reached_by_some_facts() -> None:
    assert {f.kind for f in ALL_FACTS} == set(Kind)


def test_a_snapshot_says_what_was_learned_of_the_eras() -> None:
    assert facts_of(Snapshot()) == Facts("unknown", None, None)
    no_discovery = Snapshot(discover={"*": {"error": {"code": -32601, "message": "Method not found"}}})
    assert facts_of(no_discovery).kind is Kind.HANDSHAKE_ONLY
    dual = Snapshot(discover={"2026-07-28": {"result": {"supportedVersions": ["2026-07-28"]}}}, mixed_connection=False)
    assert facts_of(dual) == Facts("stateless", False, None) and facts_of(dual).kind is Kind.PER_CONNECTION
    dual.handshake_first = False
    assert facts_of(dual).kind is Kind.STATELESS_ONLY


# ---- which era a client is of ---------------------------------------------------------------------

ENVELOPE = {"_meta": {PROTOCOL_VERSION_META: "2026-07-28", CLIENT_INFO_META: {"name": "c", "version": "1"}}}


@pytest.mark.parametrize(("method", "params", "era"), [
    ("initialize", {"protocolVersion": "2025-11-25"}, "handshake"),
    ("initialize", ENVELOPE, "handshake"),  # initialize is the handshake whatever its _meta says
    ("tools/list", {}, "handshake"),
    ("tools/call", {"name": "x", "_meta": {"progressToken": 1}}, "handshake"),
    ("tools/list", {"_meta": {PROTOCOL_VERSION_META: "2025-11-25"}}, "handshake"),  # a handshake version
    ("tools/list", ENVELOPE, "stateless"),
    ("server/discover", ENVELOPE, "stateless"),
    ("server/discover", {}, "stateless"),  # a bare probe is stateless vocabulary too
    ("ping", {}, "handshake"),
])
def test_a_clients_era_is_that_of_its_first_request(method: str, params: dict[str, object], era: Era) -> None:
    assert client_era(method, params) == era


# ---- the lane table -------------------------------------------------------------------------------

# (setting, kind) -> (lane of a handshake client, lane of a stateless client, one process for all)
LANE_TABLE: dict[tuple[EraSetting, Kind], tuple[Era, Era, bool]] = {
    **{("handshake", k): ("handshake", "handshake", True) for k in Kind},
    **{("stateless", k): ("stateless", "stateless", True) for k in Kind},
    ("auto", Kind.UNKNOWN): ("handshake", "stateless", False),
    ("auto", Kind.HANDSHAKE_ONLY): ("handshake", "handshake", True),
    ("auto", Kind.ONE_CONNECTION): ("stateless", "stateless", True),
    ("auto", Kind.PER_CONNECTION): ("handshake", "stateless", False),
    ("auto", Kind.STATELESS_ONLY): ("stateless", "stateless", True),
}


def test_the_lane_table_has_a_row_for_every_setting_and_kind() -> None:
    assert set(LANE_TABLE) == {(s, k) for s in ERA_SETTINGS for k in Kind}


@pytest.mark.parametrize(("setting", "facts", "client"), list(itertools.product(ERA_SETTINGS, ALL_FACTS, ERAS)), ids=repr)
def test_each_client_gets_the_lane_of_the_table(setting: EraSetting, facts: Facts, client: Era) -> None:
    handshake, stateless, single = LANE_TABLE[(setting, facts.kind)]
    era, one, reason = EraPolicy(setting).lane_era(client, facts)
    assert (era, one) == (handshake if client == "handshake" else stateless, single)
    assert reason


# Lane situations a registration can be in, as (era, busy) pairs.
SITUATIONS: list[list[Lane]] = [
    [],
    [Lane(None, False)],
    [Lane("handshake", False)],
    [Lane("stateless", False)],
    [Lane("handshake", True)],
    [Lane("stateless", True)],
    [Lane("handshake", True), Lane("stateless", True)],
    [Lane("handshake", True), Lane("stateless", False)],
    [Lane("stateless", True), Lane("handshake", False)],
    [Lane("stateless", False), Lane("handshake", False)],
]


def expected_choice(situation: list[Lane], era: Era, single: bool) -> tuple[int | None, Era]:
    """The rule in words: with one process for all, a busy one serves (its own era kept); else the
    lane of the era, else an unused lane (taken over), else a new one."""
    busy = [i for i, lane in enumerate(situation) if lane.busy]
    if single and busy:
        same = [i for i in busy if situation[i].era == era]
        index = (same or busy)[0]
        return index, situation[index].era or era
    named = [i for i, lane in enumerate(situation) if lane.era == era]
    if named:
        return named[0], era
    free = [i for i, lane in enumerate(situation) if not lane.busy]
    return (free[0] if free else None), era


@pytest.mark.parametrize(("setting", "facts", "client", "situation"),
                         list(itertools.product(ERA_SETTINGS, ALL_FACTS, ERAS, SITUATIONS)), ids=repr)
def test_the_chosen_process_follows_the_lane_rule(setting: EraSetting, facts: Facts, client: Era,
                                                  situation: list[Lane]) -> None:
    handshake, stateless, single = LANE_TABLE[(setting, facts.kind)]
    era = handshake if client == "handshake" else stateless
    choice = EraPolicy(setting).choose(client, facts, situation)
    assert (choice.index, choice.era) == expected_choice(situation, era, single)
    assert choice.reason


def test_a_dual_era_server_that_locks_connections_gives_each_era_its_own_process() -> None:
    policy = EraPolicy()
    facts = Facts("stateless", False, True)
    handshake = policy.choose("handshake", facts, [Lane(None, False)])
    assert (handshake.index, handshake.era) == (0, "handshake")
    stateless = policy.choose("stateless", facts, [Lane("handshake", True)])
    assert (stateless.index, stateless.era) == (None, "stateless")
    assert "locks each connection" in stateless.reason and "cannot serve it" in stateless.reason
    # A third client of either era joins its own era's process.
    both = [Lane("handshake", True), Lane("stateless", True)]
    assert policy.choose("stateless", facts, both).index == 1
    assert policy.choose("handshake", facts, both).index == 0


def test_a_handshake_only_server_never_gets_a_second_process_while_one_is_up() -> None:
    facts = Facts("none", None, True)
    # The first contact was a stateless client's probe: its lane learned the server has no
    # stateless era, and now serves the handshake clients too.
    choice = EraPolicy().choose("handshake", facts, [Lane("stateless", True)])
    assert (choice.index, choice.era) == (0, "stateless")


# ---- the start plan -------------------------------------------------------------------------------

FIRST = StartPlan(probe_first=False, initialize="first", probe_after_handshake=False)
FIRST_THEN_PROBE = StartPlan(probe_first=False, initialize="first", probe_after_handshake=True)
BRIDGED = StartPlan(probe_first=True, initialize="never", probe_after_handshake=False)
PIPELINED = StartPlan(probe_first=True, initialize="pipelined", probe_after_handshake=False)


def expected_plan(setting: EraSetting, facts: Facts, lane: Era | None) -> StartPlan:
    # The start-plan table of the module docstring, row by row.
    kind = facts.kind
    if setting == "handshake":
        return FIRST
    if setting == "stateless" or kind is Kind.STATELESS_ONLY:
        return BRIDGED
    if kind is Kind.HANDSHAKE_ONLY:
        return FIRST
    if lane in (None, "handshake"):
        return FIRST_THEN_PROBE if facts.mixed is None or kind is Kind.ONE_CONNECTION else FIRST
    if kind in (Kind.UNKNOWN, Kind.ONE_CONNECTION) and facts.mixed is not False:
        return PIPELINED
    return BRIDGED


@pytest.mark.parametrize(("setting", "facts", "lane"),
                         list(itertools.product(ERA_SETTINGS, ALL_FACTS, (None, "handshake", "stateless"))), ids=repr)
def test_each_start_follows_the_plan_of_the_table(setting: EraSetting, facts: Facts, lane: Era | None) -> None:
    assert EraPolicy(setting).start_plan(lane, facts) == expected_plan(setting, facts, lane)


def test_a_handshake_lane_never_sends_the_era_probe_first() -> None:
    for setting, facts in itertools.product(ERA_SETTINGS, ALL_FACTS):
        plan = EraPolicy(setting).start_plan("handshake", facts)
        if setting == "auto" and facts.kind is not Kind.STATELESS_ONLY:
            assert not plan.probe_first and plan.initialize == "first"


def test_a_forced_stateless_era_never_replays_a_handshake_and_a_forced_handshake_era_never_probes() -> None:
    for facts, lane in itertools.product(ALL_FACTS, (None, "handshake", "stateless")):
        stateless = EraPolicy("stateless").start_plan(lane, facts)  # type: ignore[arg-type]
        assert stateless.initialize == "never" and stateless.probe_first
        handshake = EraPolicy("handshake").start_plan(lane, facts)  # type: ignore[arg-type]
        assert not handshake.probe_first and not handshake.probe_after_handshake
