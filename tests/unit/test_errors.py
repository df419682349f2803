"""The one exception tree (lazyd/errors.py): the drawing in its docstring is the tree in the code."""

from __future__ import annotations

import re

import pytest

from lazyd import errors
from lazyd.errors import (
    ConfigError,
    CtlError,
    DaemonNotRunning,
    JsonSyntaxError,
    LazydError,
    Refused,
    SpawnError,
    Unavailable,
    UsageError,
)

# "    │   ├── UsageError        text": the column where the name starts gives its depth, 4 a level.
_DRAWN = re.compile(r"^    [│├└─ ]*(?P<name>[A-Z][A-Za-z]+)\s")


def drawn_tree() -> dict[str, str | None]:
    """Each class drawn in the docstring, mapped to the class drawn as its parent."""
    doc = errors.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in block.splitlines():
        match = _DRAWN.match(line)
        if match is None:
            continue  # a continuation line of a description
        depth = (match.start("name") - 4) // 4
        del path[depth:]
        parents[match["name"]] = path[-1] if path else None
        path.append(match["name"])
    return parents


def test_the_docstring_draws_every_exception_class_under_its_real_parent() -> None:
    classes = {name: obj for name, obj in vars(errors).items()
               if isinstance(obj, type) and issubclass(obj, BaseException)}
    real = {name: next((b.__name__ for b in cls.__bases__ if b.__module__ == errors.__name__), None)
            for name, cls in classes.items()}
    assert drawn_tree() == real
    assert set(errors.__all__) == set(classes)


def test_every_error_descends_from_the_one_root() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), LazydError), name


def test_the_tree_keeps_the_fields_and_exit_statuses_callers_rely_on() -> None:
    assert (CtlError.exit_code, DaemonNotRunning.exit_code) == (1, 3)
    failed = CtlError("boom", {"x": 1})
    assert (failed.message, failed.data, str(failed)) == ("boom", {"x": 1}, "boom")
    refused = Refused("options", "bad linger")
    assert (refused.code, refused.message, str(refused)) == ("options", "bad linger", "bad linger")
    spawn = SpawnError(2, "cannot execute 'x': No such file or directory")
    assert spawn.errno == 2 and str(spawn) == spawn.message
    unavailable = Unavailable("refused option", user_error=True)
    assert unavailable.final and unavailable.user_error and str(unavailable) == "refused option"
    assert not Unavailable("no daemon").final


def test_a_config_error_is_one_line_whatever_the_message_held() -> None:
    assert str(ConfigError("config.toml: a\nb\r")) == "config.toml: a\\nb\\r"


def test_a_json_syntax_error_is_still_a_value_error_for_the_parsers_callers() -> None:
    with pytest.raises(ValueError):
        raise JsonSyntaxError("line 1, column 1: expected a value")


def test_usage_errors_of_the_shim_lazyctl_and_wrap_are_one_class() -> None:
    from lazyd.ctl.wrap import shimargs

    with pytest.raises(UsageError):
        shimargs.parse_env_pairs(["NOT A PAIR"])
