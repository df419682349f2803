"""Memory pressure's decision (lazyd/core/pressure.py): which idle server sleeps, and when.

Fed explicit figures, servers and times: every rule of the module docstring by example, then a
hypothesis walk over random figures and server sets that checks the invariants on every step
(never a busy, keep_alive or stopped server; one at a time; the pause; least recently used first;
hysteresis against a model of it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.config.load import parse_config_text
from lazyd.errors import ConfigError
from lazyd.core.pressure import Began, Candidate, Ended, PressureRelief, PressureSettings, Sleep, parse_psi

S = PressureSettings()  # start 10 %, stop 5 %, pause 10 s


def idle(name: str, last_used: float | None = None) -> Candidate:
    return Candidate(name, running=True, busy=False, keep_alive=False, last_used=last_used)


def sleeps(actions: Sequence[object]) -> list[str]:
    return [a.name for a in actions if isinstance(a, Sleep)]


def test_no_pressure_puts_nothing_to_sleep() -> None:
    relief = PressureRelief(S)
    assert relief.sample(0.0, 9.99, [idle("a")]) == []
    assert relief.sample(1.0, None, [idle("a")]) == []
    assert not relief.under_pressure


def test_pressure_reaching_start_sleeps_the_least_recently_used_idle_server_first() -> None:
    relief = PressureRelief(S)
    actions = relief.sample(0.0, 10.0, [idle("recent", 50.0), idle("old", 10.0), idle("older", 5.0)])
    assert actions[0] == Began(10.0)
    assert sleeps(actions) == ["older"]
    assert "memory pressure: some avg10 10.0% >= 10%" in actions[1].reason  # type: ignore[union-attr]


def test_a_server_never_used_goes_before_any_used_one_and_ties_go_by_name() -> None:
    relief = PressureRelief(S)
    assert sleeps(relief.sample(0.0, 50.0, [idle("b", 1.0), idle("z"), idle("c")])) == ["c"]


@pytest.mark.parametrize("spared", [
    Candidate("busy", running=True, busy=True, keep_alive=False, last_used=0.0),
    Candidate("kept", running=True, busy=False, keep_alive=True, last_used=0.0),
    Candidate("asleep", running=False, busy=False, keep_alive=False, last_used=0.0),
])
def test_a_busy_kept_alive_or_stopped_server_is_never_chosen(spared: Candidate) -> None:
    relief = PressureRelief(S)
    assert sleeps(relief.sample(0.0, 90.0, [spared, idle("other", 100.0)])) == ["other"]
    relief = PressureRelief(S)
    assert sleeps(relief.sample(0.0, 90.0, [spared])) == []


def test_one_server_per_pause_while_the_pressure_lasts() -> None:
    relief = PressureRelief(S)
    servers = [idle("a", 1.0), idle("b", 2.0), idle("c", 3.0)]
    assert sleeps(relief.sample(0.0, 30.0, servers)) == ["a"]
    assert sleeps(relief.sample(2.0, 30.0, servers[1:])) == []
    assert sleeps(relief.sample(9.99, 30.0, servers[1:])) == []
    assert sleeps(relief.sample(10.0, 30.0, servers[1:])) == ["b"]


def test_between_stop_and_start_pressure_keeps_its_state_both_ways() -> None:
    relief = PressureRelief(S)
    assert relief.sample(0.0, 7.0, [idle("a")]) == []  # under start: not begun
    assert sleeps(relief.sample(1.0, 12.0, [idle("a"), idle("b")])) == ["a"]
    assert sleeps(relief.sample(11.0, 7.0, [idle("b")])) == ["b"]  # still on: above stop
    assert relief.sample(21.0, 4.9, [idle("c")]) == [Ended(4.9)]
    assert not relief.under_pressure
    assert relief.sample(31.0, 7.0, [idle("c")]) == []  # off again: under start


def test_pressure_that_begins_again_does_not_wait_for_the_old_pause() -> None:
    relief = PressureRelief(S)
    assert sleeps(relief.sample(0.0, 20.0, [idle("a")])) == ["a"]
    assert relief.sample(1.0, 1.0, []) == [Ended(1.0)]
    actions = relief.sample(2.0, 20.0, [idle("b")])
    assert actions == [Began(20.0), Sleep("b", actions[1].reason)]  # type: ignore[union-attr]


def test_disabled_relief_does_nothing_at_any_pressure() -> None:
    relief = PressureRelief(PressureSettings(enabled=False))
    assert relief.sample(0.0, 100.0, [idle("a")]) == []


@pytest.mark.parametrize(("text", "message"), [
    ("start = 0", "pressure.start: 0 is not a percentage above 0 and at most 100"),
    ("start = 101", "pressure.start: 101 is not a percentage above 0 and at most 100"),
    ("stop = 20", "pressure.stop: 20 is above start (10); it must be at most start"),
    ('pause = "0"', "pressure.pause: must be longer than 0"),
    ("stop = nan", "pressure.stop: nan is not a percentage above 0 and at most 100"),
])
def test_settings_out_of_range_are_refused_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"config.toml: {message}")):
        parse_config_text(f"[pressure]\n{text}\n", {}, None)


@pytest.mark.parametrize(("text", "pct"), [
    ("some avg10=12.50 avg60=3.00 avg300=1.00 total=1234\nfull avg10=1.00 avg60=0 avg300=0 total=9\n", 12.5),
    ("full avg10=1.00 avg60=0 avg300=0 total=9\nsome avg10=0.00 avg60=0 avg300=0 total=0\n", 0.0),
    ("some avg60=3.00\n", None), ("", None), ("some avg10=x\n", None), ("some avg10=-1\n", None),
])
def test_the_some_avg10_figure_is_read_from_psi_text(text: str, pct: float | None) -> None:
    assert parse_psi(text) == pct


servers_st = st.lists(
    st.builds(Candidate, st.sampled_from("abcdef"), st.booleans(), st.booleans(), st.booleans(),
              st.one_of(st.none(), st.floats(0, 1000))),
    max_size=6, unique_by=lambda c: c.name)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 30), st.one_of(st.none(), st.floats(0, 100)), servers_st),
                min_size=1, max_size=40))
def test_any_walk_keeps_every_rule(steps: list[tuple[float, float | None, list[Candidate]]]) -> None:
    relief = PressureRelief(S)
    now, model_on, last_sleep = 0.0, False, None
    for gap, pct, servers in steps:
        now += gap
        actions = relief.sample(now, pct, servers)
        figure = 0.0 if pct is None else pct
        began = not model_on and figure >= S.start_pct
        ended = model_on and figure < S.stop_pct
        model_on = (model_on or began) and not ended
        assert relief.under_pressure == model_on
        assert (Began(figure) in actions) == began and (Ended(figure) in actions) == ended
        chosen = sleeps(actions)
        assert len(chosen) <= 1, "one at a time"
        eligible = [s for s in servers if s.running and not s.busy and not s.keep_alive]
        if began:
            last_sleep = None
        waiting = last_sleep is not None and now < last_sleep + S.pause_s
        if model_on and eligible and not waiting:
            lru = min(eligible, key=lambda s: (s.last_used is not None, s.last_used or 0.0, s.name))
            assert chosen == [lru.name]
            last_sleep = now
        else:
            assert chosen == []
