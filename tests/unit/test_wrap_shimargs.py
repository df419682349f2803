"""How a wrapped registration runs the shim, checked against the shim's own parser."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.ctl.wrap import shimargs
from lazyd.errors import UsageError

shim_options: Any = importlib.import_module("lazyd_shim.options")

_words = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), max_size=8)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.one_of(_words, st.sampled_from(["-", "--", "-x", "--linger", "--linger=5m", "--help", "node"])).filter(bool),
       st.lists(st.one_of(_words, st.sampled_from(["--", "-y", "--help", "--linger"])), max_size=4))  # fmt: skip
def test_the_shim_runs_exactly_the_original_command_from_the_wrapped_args(command: str, args: list[str]) -> None:
    wrapped = shimargs.wrapped_args(command, args)
    opts = shim_options.parse(list(wrapped), {})
    assert opts.command == [command, *args]
    assert (wrapped[0] == "--") == command.startswith("-")
    assert wrapped[shimargs.command_index(wrapped):] == (command, *args)


def test_a_plain_command_is_first_in_args_with_no_double_dash() -> None:
    # Some clients check that the first argument is an existing file.
    assert shimargs.wrapped_args("/usr/bin/node", ["server.js"]) == ("/usr/bin/node", "server.js")


def test_wrap_accepts_every_setting_the_shim_documents_but_those_that_would_drop_the_command() -> None:
    settings = shimargs.known_settings()
    assert {"LAZYD_LINGER", "LAZYD_ERA", "LAZYD_MEMORY_MAX", "LAZYD_HANDOFF", "LAZYD_VERBOSE"} <= set(settings)
    assert shimargs.parse_env_pairs(["LAZYD_ERA=stateless", "LAZYD_MEMORY_MAX=1GiB"]) == {
        "LAZYD_ERA": "stateless", "LAZYD_MEMORY_MAX": "1GiB"}
    for refused in ("LAZYD_SERVER", "LAZYD_HUB", "LAZYD_HUB_SERVERS"):
        assert refused in shim_options.USAGE and refused not in settings
        with pytest.raises(UsageError, match=refused):
            shimargs.parse_env_pairs([f"{refused}=x"])


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("LAZYD_LINGER", "expected NAME=VALUE"),
        ("=5m", "expected NAME=VALUE"),
        ("LAZYD_SERVER=github", "ignore the registration's command"),
        ("LAZYD_NOPE=1", "not a lazyd-shim setting"),
        ("HOME=/x", "not a lazyd-shim setting"),
        ("LAZYD_LINGER=", "empty value"),
        ("LAZYD_LINGER=1h30m-secret", "lazyd-shim would refuse this value"),
        ("LAZYD_SHARE=maybe-secret", "lazyd-shim would refuse this value"),
        ("LAZYD_WAKE_COMMAND=not-json-secret", "lazyd-shim would refuse this value"),
    ],
)
def test_a_bad_env_setting_is_bad_usage_and_its_value_is_not_echoed(pair: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        shimargs.parse_env_pairs([pair])
    assert "secret" not in str(caught.value)


def test_good_env_settings_are_kept_as_written() -> None:
    pairs = ["LAZYD_LINGER=10m", "LAZYD_SHARE=false", 'LAZYD_WAKE_COMMAND=["pgrep", "-x", "code"]']
    assert shimargs.parse_env_pairs(pairs) == {"LAZYD_LINGER": "10m", "LAZYD_SHARE": "false",
                                               "LAZYD_WAKE_COMMAND": '["pgrep", "-x", "code"]'}  # fmt: skip


def test_the_installed_shim_is_found_next_to_the_interpreter_first() -> None:
    found = shimargs.find_shim({"PATH": "/nonexistent"})
    assert found == os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "lazyd-shim")


def test_a_shim_path_must_be_absolute_and_executable_or_a_bare_name(tmp_path: Any) -> None:
    with pytest.raises(UsageError, match="absolute path"):
        shimargs.check_shim_path("bin/lazyd-shim")
    with pytest.raises(UsageError, match="no executable file"):
        shimargs.check_shim_path(str(tmp_path / "missing"))
    assert shimargs.check_shim_path("lazyd-shim") == "lazyd-shim"


def test_a_shim_is_recognised_by_path_or_by_its_name() -> None:
    assert shimargs.is_shim("/custom/wrapper", {"/custom/wrapper"})
    assert shimargs.is_shim("/x/Lazyd-Shim.exe", set())
    assert not shimargs.is_shim("/usr/bin/node", {"/custom/wrapper"})
