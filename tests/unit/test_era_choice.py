"""The era policy (lazyd/core/eras/choice.py) as properties over the facts, plus the spec's own rows.

What the policy is fed: the `era` setting, what the snapshot recorded about the server (`Facts`),
the era of the new client, and the registration's lanes (their era, whether busy). What must hold,
whatever those are, is stated below as properties, each from a sentence of the rules (the module
docstring and docs/protocol-eras.md); none recomputes the tables. The rows of the tables the docs
illustrate with real peers (server-everything, mcp-server-time, a stateless-only server, the
settings) are then written out as literal answers.
"""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from lazyd.core.cache import Snapshot
from lazyd.core.eras.choice import Era, EraPolicy, EraSetting, Facts, Kind, Lane, LaneChoice, StartPlan, client_era, facts_of
from lazyd.core.eras.versions import CLIENT_INFO_META, PROTOCOL_VERSION_META

# Hypothesis draws the facts and the lanes; each example is checked for every setting and client
# era (6 decisions), so 100 derandomized examples per property cover the space (27 facts x lanes)
# well and take a fraction of a second.
PROPERTY = settings(derandomize=True, max_examples=100, deadline=None)

ALL_SETTINGS: tuple[EraSetting, ...] = ("auto", "handshake", "stateless")
ALL_ERAS: tuple[Era, ...] = ("handshake", "stateless")
FACTS = st.builds(Facts, st.sampled_from(("unknown", "none", "stateless")),
                  st.sampled_from((None, True, False)), st.sampled_from((None, True, False)))
LANE = st.builds(Lane, st.sampled_from((None, "handshake", "stateless")), st.booleans())
LANES = st.lists(LANE, max_size=4)
LANE_ERAS: tuple[Era | None, ...] = (None, "handshake", "stateless")

# The kinds the lane table's "processes" column says one process serves every client of (spec).
ONE_PROCESS_KINDS = {Kind.HANDSHAKE_ONLY, Kind.ONE_CONNECTION, Kind.STATELESS_ONLY}
# The kinds whose connections may be locked to one era: each era gets its own process (spec).
LOCKING_KINDS = {Kind.UNKNOWN, Kind.PER_CONNECTION}


def one_process(setting: EraSetting, facts: Facts) -> bool:
    return setting != "auto" or facts.kind in ONE_PROCESS_KINDS


def speaks(setting: EraSetting, facts: Facts, lane: Era | None, client: Era) -> bool:
    """Whether a process started by the start plan of `lane` can serve a client of era `client`,
    by what the plan sends it and what the docs allow: a handshake-era client natively when the
    connection got a handshake, bridged only onto a server without a handshake era (or with
    era = "stateless"); a stateless client natively when the connection was probed first or
    learned after its handshake that it carries both eras, or from cache (-32601: fall back to
    `initialize`) when the server or the setting is handshake-only."""
    plan = EraPolicy(setting).start_plan(lane, facts)
    if client == "handshake":
        bridged_allowed = setting == "stateless" or facts.kind is Kind.STATELESS_ONLY
        return plan.initialize != "never" or bridged_allowed
    native = plan.probe_first or (plan.probe_after_handshake and facts.kind is Kind.ONE_CONNECTION)
    falls_back = setting == "handshake" or facts.kind is Kind.HANDSHAKE_ONLY
    return native or falls_back


# ---- the kinds ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("facts", "kind"), [
    (Facts(), Kind.UNKNOWN),
    (Facts("unknown", True, False), Kind.UNKNOWN),  # nothing counts while discovery was never asked
    (Facts("none", None, None), Kind.HANDSHAKE_ONLY),  # server-everything: -32601
    (Facts("none", True, False), Kind.HANDSHAKE_ONLY),  # a refused discovery outweighs the rest
    (Facts("stateless", True, None), Kind.ONE_CONNECTION),
    (Facts("stateless", True, False), Kind.ONE_CONNECTION),  # mixed True is decisive
    (Facts("stateless", False, True), Kind.PER_CONNECTION),  # mcp-server-time
    (Facts("stateless", None, None), Kind.PER_CONNECTION),  # assumed while untried
    (Facts("stateless", None, False), Kind.STATELESS_ONLY),
    (Facts("stateless", False, False), Kind.STATELESS_ONLY),
])
def test_recorded_facts_make_the_kind_the_docs_name(facts: Facts, kind: Kind) -> None:
    assert facts.kind is kind


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


# ---- which process a client gets: properties ------------------------------------------------------

def decisions(facts: Facts, lanes: list[Lane]) -> Iterator[tuple[EraSetting, Era, LaneChoice]]:
    """Every setting's choice for a client of either era, in the situation drawn."""
    for setting in ALL_SETTINGS:
        for client in ALL_ERAS:
            choice = EraPolicy(setting).choose(client, facts, lanes)
            assert choice.index is None or 0 <= choice.index < len(lanes)
            assert choice.reason  # the log and `lazyctl explain` always have a why
            yield setting, client, choice


@PROPERTY
@given(FACTS, LANES)
def test_a_client_is_never_given_a_process_that_cannot_speak_its_era(facts: Facts, lanes: list[Lane]) -> None:
    for setting, client, choice in decisions(facts, lanes):
        assert speaks(setting, facts, choice.era, client)


@PROPERTY
@given(FACTS, LANES)
def test_a_handshake_client_is_bridged_only_onto_a_server_without_a_handshake_era_or_when_told_to(
        facts: Facts, lanes: list[Lane]) -> None:
    for setting, client, choice in decisions(facts, lanes):
        if client == "handshake" and EraPolicy(setting).start_plan(choice.era, facts).initialize == "never":
            assert setting == "stateless" or (setting == "auto" and facts.kind is Kind.STATELESS_ONLY)


@PROPERTY
@given(FACTS, LANES)
def test_on_a_server_that_may_lock_connections_the_era_follows_the_client(facts: Facts, lanes: list[Lane]) -> None:
    for setting, client, choice in decisions(facts, lanes):
        if setting == "auto" and facts.kind in LOCKING_KINDS:
            assert choice.era == client
            if choice.index is not None:
                assert lanes[choice.index].era == client or not lanes[choice.index].busy


@PROPERTY
@given(FACTS, LANES)
def test_a_server_one_process_can_serve_never_gets_a_second_while_one_is_up(facts: Facts, lanes: list[Lane]) -> None:
    for setting, _, choice in decisions(facts, lanes):
        if one_process(setting, facts) and any(lane.busy for lane in lanes):
            assert choice.index is not None and lanes[choice.index].busy


@PROPERTY
@given(FACTS, LANES)
def test_a_new_process_is_opened_only_when_no_lane_can_be_used_or_taken_over(facts: Facts, lanes: list[Lane]) -> None:
    for _, _, choice in decisions(facts, lanes):
        if choice.index is None:
            assert all(lane.busy and lane.era != choice.era for lane in lanes)
        elif not lanes[choice.index].busy:
            # an idle lane is taken over only when no lane already runs in the era wanted
            own = [i for i, lane in enumerate(lanes) if lane.era == choice.era]
            assert not own or lanes[choice.index].era == choice.era


@PROPERTY
@given(FACTS, LANES)
def test_a_busy_process_never_has_its_era_changed_under_it(facts: Facts, lanes: list[Lane]) -> None:
    for _, _, choice in decisions(facts, lanes):
        if choice.index is not None and lanes[choice.index].busy:
            assert lanes[choice.index].era in (None, choice.era)


@PROPERTY
@given(FACTS, FACTS, LANES)
def test_the_choice_is_decided_by_the_setting_and_the_kind_alone(facts: Facts, other: Facts, lanes: list[Lane]) -> None:
    policies = {setting: EraPolicy(setting) for setting in ALL_SETTINGS}  # one each, asked again and again
    for setting, client, choice in decisions(facts, lanes):
        for _ in range(3):  # no state kept between decisions
            assert policies[setting].choose(client, facts, list(lanes)) == choice
        if other.kind is facts.kind:
            twin = policies[setting].choose(client, other, lanes)
            assert (twin.index, twin.era) == (choice.index, choice.era)


# ---- how a process starts: properties -------------------------------------------------------------

def plans(facts: Facts) -> Iterator[tuple[EraSetting, Era | None, StartPlan]]:
    for setting in ALL_SETTINGS:
        for lane in LANE_ERAS:
            yield setting, lane, EraPolicy(setting).start_plan(lane, facts)


@PROPERTY
@given(FACTS)
def test_a_connection_begins_with_either_the_era_probe_or_the_handshake(facts: Facts) -> None:
    for _, _, plan in plans(facts):
        assert plan.probe_first == (plan.initialize != "first")
        if plan.probe_after_handshake:
            assert plan.initialize == "first"  # a probe after a handshake needs the handshake


@PROPERTY
@given(FACTS)
def test_a_handshake_lane_and_a_start_no_client_asked_for_replay_initialize_first(facts: Facts) -> None:
    for setting, lane, plan in plans(facts):
        if setting == "auto" and lane != "stateless" and facts.kind is not Kind.STATELESS_ONLY:
            assert not plan.probe_first and plan.initialize == "first"


@PROPERTY
@given(FACTS, LANES)
def test_a_forced_era_is_kept_whatever_was_recorded(facts: Facts, lanes: list[Lane]) -> None:
    # era = "handshake": no era probe is ever sent; era = "stateless": never given a handshake.
    for setting, _, plan in plans(facts):
        if setting == "handshake":
            assert plan == StartPlan(probe_first=False, initialize="first", probe_after_handshake=False)
        if setting == "stateless":
            assert plan == StartPlan(probe_first=True, initialize="never", probe_after_handshake=False)
    for setting, _, choice in decisions(facts, lanes):
        if setting != "auto" and (choice.index is None or not lanes[choice.index].busy):
            assert choice.era == setting


@PROPERTY
@given(FACTS)
def test_what_is_learned_once_is_not_asked_again(facts: Facts) -> None:
    for setting, lane, plan in plans(facts):
        if setting != "auto":
            continue
        if facts.kind is Kind.HANDSHAKE_ONLY:  # -32601 on record: never probed again
            assert not plan.probe_first and not plan.probe_after_handshake
        if facts.mixed is False:  # one era per connection on record: nothing to pipeline or probe for
            assert plan.initialize != "pipelined" and not plan.probe_after_handshake
        if plan.initialize == "pipelined":  # pipelined only while it can still teach something
            assert lane == "stateless" and facts.kind in (Kind.UNKNOWN, Kind.ONE_CONNECTION)


@PROPERTY
@given(FACTS)
def test_a_handshake_lane_asks_what_its_connection_carries_while_that_is_unknown(facts: Facts) -> None:
    for setting, lane, plan in plans(facts):
        if setting != "auto":
            continue
        if lane != "stateless" and facts.kind in LOCKING_KINDS and facts.mixed is None:
            assert plan.probe_after_handshake
        if plan.probe_after_handshake:
            assert facts.mixed is None or facts.kind is Kind.ONE_CONNECTION


# ---- the spec's rows, as literals -----------------------------------------------------------------

FIRST = StartPlan(probe_first=False, initialize="first", probe_after_handshake=False)
FIRST_THEN_PROBE = StartPlan(probe_first=False, initialize="first", probe_after_handshake=True)
BRIDGED = StartPlan(probe_first=True, initialize="never", probe_after_handshake=False)
PIPELINED = StartPlan(probe_first=True, initialize="pipelined", probe_after_handshake=False)

EVERYTHING = Facts("none", None, True)  # server-everything: server/discover -> -32601
TIME = Facts("stateless", False, True)  # mcp-server-time: both eras, one per connection
STATELESS_ONLY = Facts("stateless", None, False)  # refused a first initialize
BOTH = Facts("stateless", True, True)  # both eras on one connection


@pytest.mark.parametrize(("setting", "facts", "client", "lanes", "index", "era"), [
    # auto, unknown: each era its own lane
    ("auto", Facts(), "handshake", [], None, "handshake"),
    ("auto", Facts(), "stateless", [Lane("handshake", True)], None, "stateless"),
    ("auto", Facts(), "stateless", [Lane("handshake", False)], 0, "stateless"),  # an unused lane is taken over
    # auto, handshake only: everyone on the handshake lane, a process up serves every client
    ("auto", EVERYTHING, "stateless", [], None, "handshake"),
    ("auto", EVERYTHING, "stateless", [Lane("handshake", True)], 0, "handshake"),
    ("auto", EVERYTHING, "handshake", [Lane("stateless", True)], 0, "stateless"),
    # auto, one per connection: two processes while both eras are in use
    ("auto", TIME, "handshake", [Lane(None, False)], 0, "handshake"),
    ("auto", TIME, "stateless", [Lane("handshake", True)], None, "stateless"),
    ("auto", TIME, "stateless", [Lane("handshake", True), Lane("stateless", True)], 1, "stateless"),
    ("auto", TIME, "handshake", [Lane("handshake", True), Lane("stateless", True)], 0, "handshake"),
    # auto, stateless only / both on one connection: one stateless process for everyone
    ("auto", STATELESS_ONLY, "handshake", [], None, "stateless"),
    ("auto", STATELESS_ONLY, "handshake", [Lane("stateless", True)], 0, "stateless"),
    ("auto", BOTH, "handshake", [], None, "stateless"),
    ("auto", BOTH, "stateless", [Lane("handshake", True)], 0, "handshake"),
    # forced eras
    ("handshake", TIME, "stateless", [], None, "handshake"),
    ("stateless", EVERYTHING, "handshake", [], None, "stateless"),
    ("stateless", BOTH, "handshake", [Lane("stateless", True)], 0, "stateless"),
])
def test_the_lane_table_rows(setting: EraSetting, facts: Facts, client: Era, lanes: list[Lane],
                             index: int | None, era: Era) -> None:
    choice = EraPolicy(setting).choose(client, facts, lanes)
    assert (choice.index, choice.era) == (index, era)


@pytest.mark.parametrize(("setting", "facts", "lane", "plan"), [
    ("handshake", STATELESS_ONLY, "stateless", FIRST),
    ("stateless", EVERYTHING, "handshake", BRIDGED),
    ("auto", STATELESS_ONLY, "handshake", BRIDGED),
    ("auto", EVERYTHING, "stateless", FIRST),
    ("auto", Facts(), None, FIRST_THEN_PROBE),  # a start no client asked for, server unknown
    ("auto", Facts(), "handshake", FIRST_THEN_PROBE),
    ("auto", TIME, "handshake", FIRST),  # mixed False on record: nothing left to learn
    ("auto", BOTH, "handshake", FIRST_THEN_PROBE),  # the probe lets the process serve stateless clients
    ("auto", Facts(), "stateless", PIPELINED),
    ("auto", BOTH, "stateless", PIPELINED),
    # one per connection: its handshake clients go to a handshake lane
    ("auto", Facts("stateless", None, True), "stateless", BRIDGED),
    ("auto", TIME, "stateless", BRIDGED),
])
def test_the_start_plan_rows(setting: EraSetting, facts: Facts, lane: Era | None, plan: StartPlan) -> None:
    assert EraPolicy(setting).start_plan(lane, facts) == plan


def test_a_dual_era_server_that_locks_connections_says_why_it_opens_a_second_process() -> None:
    stateless = EraPolicy().choose("stateless", TIME, [Lane("handshake", True)])
    assert "locks each connection" in stateless.reason and "cannot serve it" in stateless.reason
