"""Reading one value of the config file or of a shim option, with a one-line error saying where.

`At` is where a value stood (the file and the key path, or the shim option); each reader checks
one kind of value and raises `At.error(...)`, a `ConfigError` of exactly one line:
"<file>: <key path>: <problem>", or "option --<name>: <problem>" for a shim option.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from lazyd.config.durations import parse_duration
from lazyd.errors import ConfigError

T = TypeVar("T")

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# "$$", or "${" up to the next "}" (group 3 empty when there is none); a lone "$" is left alone.
_REFERENCE = re.compile(r"\$(?:(\$)|\{([^}]*)(\}?))")


@dataclass(frozen=True)
class At:
    """Where a value stood: the file and the key path, for error messages."""

    label: str
    keys: tuple[str, ...] = ()
    # Shim options name their flag instead ("option --wake-interval"), having no file or table.
    option: bool = False

    def __truediv__(self, key: str) -> At:
        return At(self.label, (*self.keys, key), self.option)

    def error(self, problem: str) -> ConfigError:
        if self.option:
            return ConfigError(f"option --{'-'.join(self.keys).replace('_', '-')}: {problem}")
        path = ".".join(k if _BARE_KEY.fullmatch(k) else json.dumps(k) for k in self.keys)
        return ConfigError(f"{self.label}: {path}: {problem}" if path else f"{self.label}: {problem}")


def expand(value: str, environ: Mapping[str, str]) -> str:
    """Replace `${NAME}` with the variable's value and `$$` with `$`; any other `$` is literal."""
    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "$"
        name, closed = match.group(2), match.group(3)
        if not closed:
            raise ValueError("has an unterminated '${' (write $$ for a literal dollar sign)")
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"'${{{name}}}' is not a variable reference "
                             "(use ${NAME}, or $$ for a literal dollar sign)")
        if name not in environ:
            raise ValueError(f"${{{name}}} is not set in lazyd's environment (a lazyd a client started has only "
                             "the variables \"The daemon's environment\" in docs/configuration.md lists)")
        return environ[name]

    return _REFERENCE.sub(substitute, value)


def directory(at: At, text: str, environ: Mapping[str, str]) -> str:
    if text == "~" or text.startswith("~/"):
        home = environ.get("HOME")
        if not home:
            raise at.error("starts with ~ but HOME is not set")
        text = home + text[1:]
    elif text.startswith("~"):
        raise at.error("~user is not expanded; write the full path")
    if "\0" in text:
        raise at.error("contains a NUL character")
    if not posixpath.isabs(text):
        raise at.error(f"{text!r} must be an absolute path or start with ~/")
    return posixpath.normpath(text)


def check_keys(at: At, table: Mapping[str, object], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            import difflib  # only for a misspelled key: not kept by every daemon

            near = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise (at / key).error(f"unknown key; {hint}allowed here: {', '.join(allowed)}")


def table(at: At, value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise at.error(f"expected a table, got {type_name(value)}")
    return value


def string(at: At, value: object) -> str:
    if not isinstance(value, str):
        raise at.error(f"expected a string, got {type_name(value)}")
    if "\0" in value:
        raise at.error("contains a NUL character, which no command line or environment can carry")
    return value


def strings(at: At, value: object, *, allow_empty: bool) -> list[str]:
    if not isinstance(value, list):
        raise at.error(f"expected an array of strings, got {type_name(value)}")
    if not value and not allow_empty:
        raise at.error("must not be empty")
    return [string(at, item) for item in value]


def boolean(at: At, value: object) -> bool:
    if not isinstance(value, bool):
        raise at.error(f"expected true or false, got {type_name(value)}")
    return value


def duration(at: At, value: object) -> float:
    """A duration string ("30s") or a number of seconds."""
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as error:
            raise at.error(str(error)) from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
        if not 0 <= seconds < float("inf"):
            raise at.error(f"{value!r} is not a duration (it must be finite and not negative)")
        return seconds
    raise at.error(f"expected a duration such as \"30s\", got {type_name(value)}")


def one_of(at: At, value: object, allowed: tuple[T, ...]) -> T:
    """`value` as the one of `allowed` it equals (a setting's word: `era = "auto"`)."""
    for word in allowed:
        if isinstance(value, str) and value == word:
            return word
    shown = repr(value) if isinstance(value, str) else type_name(value)
    raise at.error(f"{shown} is not one of: {', '.join(map(str, allowed))}")


def type_name(value: object) -> str:
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"),
                       (str, "a string"), (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            return name
    return "a date or time" if value is not None else "nothing"
