"""Durations and booleans as users type them (lazyd/config/durations.py).

Every spelling the docs promise is accepted with its exact value; every near miss is refused
with a message that quotes the text; and whatever status output prints parses back.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.config.durations import format_duration, parse_bool, parse_duration
from lazyd.ctl.registration import check_text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        ("0.25h", 900.0),
        ("0s", 0.0),
        ("0ms", 0.0),
        ("90", 90.0),
        ("2.5", 2.5),
        ("1h30m", 5400.0),
        ("2m30s", 150.0),
        ("1s500ms", 1.5),
        ("1h1m1s1ms", 3661.001),
        ("  30s\n", 30.0),
    ],
)
def test_every_documented_spelling_parses_to_its_value_in_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["10x", "", "   ", "1e3", "1 h", "ms", "s", "1.s", ".5s", "1H", "10M", "1d", "inf", "nan",
     "1h30", "30s-", "+1s", "0x10", "1_000", "٣s", "1,5s", "one second"],
)
def test_a_text_that_is_no_duration_is_refused_with_a_message_quoting_it(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(text)
    message = str(caught.value)
    assert repr(text) in message
    assert "is not a duration" in message
    assert "\n" not in message


def test_the_message_for_a_bad_duration_shows_the_accepted_spellings() -> None:
    with pytest.raises(ValueError, match=r"^'10x' is not a duration \(use 500ms, 30s, 10m, 1h or 0\)$"):
        parse_duration("10x")


@pytest.mark.parametrize("text", ["-1s", "-0", " -5"])
def test_a_negative_duration_is_refused_as_negative(text: str) -> None:
    with pytest.raises(ValueError, match="is negative"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["30s10m", "1m1m", "500ms1s", "1s1h"])
def test_units_out_of_order_or_repeated_are_refused_as_a_likely_typo(text: str) -> None:
    with pytest.raises(ValueError, match="units must go from hours down to milliseconds"):
        parse_duration(text)


def test_a_number_too_large_to_be_finite_is_refused_rather_than_becoming_infinity() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_duration("9" * 400 + "h")


def test_a_very_long_bad_text_is_shortened_in_the_message() -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration("x" * 10_000)
    assert len(str(caught.value)) < 120


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.8, "800ms"),
        (0.0004, "0ms"),
        (0.001, "1ms"),
        (0.9996, "1s"),
        (1.5, "1.5s"),
        (9.96, "10s"),
        (45, "45s"),
        (150, "2m30s"),
        (600, "10m"),
        (3600, "1h"),
        (3605, "1h5s"),
        (5400, "1h30m"),
        (93784, "26h3m4s"),
        (-3, "-3s"),
        (-0.25, "-250ms"),
    ],
)
def test_status_output_spells_durations_compactly(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf])
def test_formatting_a_non_finite_duration_is_an_error(seconds: float) -> None:
    with pytest.raises(ValueError):
        format_duration(seconds)


@settings(max_examples=500, derandomize=True)
@given(st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False))
def test_whatever_status_output_prints_parses_back_to_the_same_duration(seconds: float) -> None:
    # The precision shown: milliseconds below 1 s, tenths below 10 s, whole seconds above.
    tolerance = 0.0005 if seconds < 1 else 0.05 if seconds < 10 else 0.5
    assert abs(parse_duration(format_duration(seconds)) - seconds) <= tolerance + 1e-9


@pytest.mark.parametrize("text", ["true", "TRUE", "True", "1", "yes", "YES", "on", "On", " true "])
def test_true_words_in_any_case_are_true(text: str) -> None:
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["false", "FALSE", "0", "no", "No", "off", "OFF", "\tfalse\n"])
def test_false_words_in_any_case_are_false(text: str) -> None:
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["", "maybe", "2", "tru", "y", "n", "enable", "true false"])
def test_any_other_boolean_text_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_bool(text)
    assert repr(text) in str(caught.value)
    assert "is not a boolean" in str(caught.value)


@pytest.mark.parametrize(("duration_s", "shown"), [(7.0, "7s"), (60.0, "1m"), (0.834, "834ms"), (90.4, "1m30s")])
def test_lazyctl_check_prints_its_duration_in_the_configs_syntax(duration_s: float, shown: str) -> None:
    report = {"name": "srv", "duration_s": duration_s, "pid": 7, "listings": {}, "cache_path": "/c"}
    assert check_text(report).splitlines()[0] == f"checked srv in {shown} (pid 7, stopped)"
    assert parse_duration(shown) == pytest.approx(round(duration_s, 0) if duration_s >= 10 else duration_s, abs=0.05)
