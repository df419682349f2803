"""Durations and booleans as users type them: in the config file, in shim flags and in status output.

One spelling everywhere: a number with a unit (`500ms`, `30s`, `10m`, `1h`, `1.5s`), several in
decreasing order (`1h30m`: what `format_duration` prints, so a status figure pastes back into a
config), or a bare number of seconds. Never negative, always finite, no exponents (a typo such as
`1e` must not look almost valid). Stdlib only and pure: the shim imports it at every client start.
"""

from __future__ import annotations

import math
import re

# Seconds per unit, largest first: the order a compound duration must follow.
_UNIT_SECONDS: dict[str, float] = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_UNIT_RANK: dict[str, int] = {unit: rank for rank, unit in enumerate(_UNIT_SECONDS)}

# ASCII digits only: `\d` would otherwise accept other scripts' digits, which float() reads.
# `ms` must be tried before `m` and `s`, or "500ms" would read as 500 minutes followed by garbage.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)", re.ASCII)
_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)

# Below this, status output shows milliseconds ("800ms" reads better than "0.8s").
_MS_BELOW_S = 1.0
# Below this, status output keeps one decimal ("1.5s"); above it whole seconds are precise enough.
_DECIMAL_BELOW_S = 10.0

_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


# Echoing a whole pasted paragraph back would drown the message that explains it.
_MAX_QUOTED_CHARS = 40


def _quoted(text: str) -> str:
    return repr(text if len(text) <= _MAX_QUOTED_CHARS else text[: _MAX_QUOTED_CHARS - 3] + "...")


def _not_a_duration(text: str) -> ValueError:
    return ValueError(f"{_quoted(text)} is not a duration (use 500ms, 30s, 10m, 1h or 0)")


def parse_duration(text: str) -> float:
    """The seconds `text` spells; ValueError quoting it and showing valid spellings otherwise."""
    stripped = text.strip()
    if stripped.startswith("-"):
        raise ValueError(f"{_quoted(text)} is negative; a duration cannot be")
    if _BARE_NUMBER.fullmatch(stripped):
        seconds = float(stripped)
    else:
        seconds = 0.0
        position = 0
        last_rank = -1
        while position < len(stripped):
            match = _PART.match(stripped, position)
            if match is None:
                raise _not_a_duration(text)
            number, unit = match.groups()
            rank = _UNIT_RANK[unit]
            # "30s10m" and "1m1m" are typos, not sums the user meant.
            if rank <= last_rank:
                raise ValueError(
                    f"{_quoted(text)} is not a duration (units must go from hours down to "
                    f"milliseconds, each at most once, as in 1h30m or 2m30s)"
                )
            last_rank = rank
            seconds += float(number) * _UNIT_SECONDS[unit]
            position = match.end()
        if last_rank < 0:
            raise _not_a_duration(text)
    if not math.isfinite(seconds):
        raise ValueError(f"{_quoted(text)} is too large to be a duration")
    return seconds


def format_duration(seconds: float) -> str:
    """Spell `seconds` for status output ("800ms", "1.5s", "2m30s", "26h5m"), as `parse_duration`
    reads it back; a passed deadline gets a "-"; ValueError for NaN and infinities."""
    if not math.isfinite(seconds):
        raise ValueError(f"{seconds!r} seconds cannot be shown as a duration")
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if seconds < _MS_BELOW_S:
        milliseconds = round(seconds * 1000)
        if milliseconds < 1000:
            return f"{milliseconds}ms"
    if seconds < _DECIMAL_BELOW_S:
        tenths = round(seconds * 10)
        if tenths < _DECIMAL_BELOW_S * 10:
            whole, tenth = divmod(tenths, 10)
            return f"{whole}s" if tenth == 0 else f"{whole}.{tenth}s"
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{count}{unit}" for count, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if count)


def parse_bool(text: str) -> bool:
    """true/false, 1/0, yes/no, on/off in any case; ValueError otherwise (an empty option is more
    likely a mistake than "false")."""
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"{_quoted(text)} is not a boolean (use true or false; also yes/no, on/off, 1/0)")


def parse_share(text: str) -> bool | str:
    """The `share` option (a shim flag or its hello's value): auto, session-aware or a boolean."""
    word = text.strip().lower()
    if word in ("auto", "session-aware"):
        return word
    try:
        return parse_bool(text)
    except ValueError as error:
        raise ValueError(f"{error}, auto or session-aware") from None
