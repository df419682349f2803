"""`share = true | false | "auto"`: the sharing decision from a snapshot, without any process."""

from __future__ import annotations

from typing import Any

import pytest

from lazyd.core.cache import HandshakeEntry, Listing, Snapshot, handshake_key
from lazyd.core.sharing import decide_sharing, stateful_tools

PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}}


def snapshot(tools: list[str] | None, capabilities: dict[str, Any] | None = None,
             discover_capabilities: dict[str, Any] | None = None) -> Snapshot:
    listings = {"tools/list": Listing(items=[{"name": n} for n in tools])} if tools is not None else {}
    result = {"capabilities": {"tools": {}, **(capabilities or {})}}
    snap = Snapshot(entries={handshake_key(PARAMS): HandshakeEntry(PARAMS, result, listings)})
    if discover_capabilities is not None:
        snap.discover["2026-07-28"] = {"result": {"capabilities": discover_capabilities}}
    return snap


def test_true_and_false_decide_by_hand_whatever_the_server_says() -> None:
    browser = snapshot(["browser_navigate"], {"x-mux": {"sharing": "shared"}})
    assert (decide_sharing(True, browser).shared, decide_sharing(True, browser).rule) == (True, "share = true")
    assert (decide_sharing(False, snapshot(["echo"])).shared, decide_sharing(False, Snapshot()).rule) == (False, "share = false")


@pytest.mark.parametrize(("capabilities", "shared", "rule"), [
    ({"x-mux": {"sharing": "isolated"}}, False, "auto: the server declares x-mux.sharing = isolated"),
    ({"x-mux": {"sharing": "session-aware"}}, False, "auto: the server declares x-mux.sharing = session-aware"),
    ({"x-mux": {"sharing": "shared"}}, True, "auto: the server declares x-mux.sharing = shared"),
    ({"experimental": {"x-mux": {"sharing": "isolated"}}}, False,
     "auto: the server declares experimental.x-mux.sharing = isolated"),
    ({"experimental": {"lazyd": {"sharing": "isolated"}}}, False,
     "auto: the server declares experimental.lazyd.sharing = isolated"),
    # lazyd's own spelling wins over mcp-mux's.
    ({"experimental": {"lazyd": {"sharing": "shared"}}, "x-mux": {"sharing": "isolated"}}, True,
     "auto: the server declares experimental.lazyd.sharing = shared"),
])
def test_auto_follows_what_the_server_declares_first(capabilities: dict[str, Any], shared: bool, rule: str) -> None:
    # The tools say "stateful": a declaration outranks the name rule either way.
    decision = decide_sharing("auto", snapshot(["browser_navigate"], capabilities))
    assert (decision.shared, decision.rule) == (shared, rule)


def test_a_declaration_in_a_discover_answer_counts_and_unknown_values_are_ignored() -> None:
    decision = decide_sharing("auto", snapshot(["echo"], discover_capabilities={"x-mux": {"sharing": "isolated"}}))
    assert decision.shared is False
    odd = snapshot(["echo"], {"x-mux": {"sharing": "sometimes"}, "experimental": {"lazyd": "isolated"}})
    assert decide_sharing("auto", odd).rule == "auto: no stateful tool names among 1 tools"


def test_auto_gives_one_process_per_session_to_a_server_whose_tools_look_stateful() -> None:
    names = ["browser_navigate", "take_screenshot", "newTab", "run-in-terminal", "get_weather"]
    decision = decide_sharing("auto", snapshot(names))
    assert (decision.shared, decision.rule) == (False, "auto: tools browser_navigate, take_screenshot, newTab, … look stateful")
    one = decide_sharing("auto", snapshot(["echo", "shell.exec"]))
    assert (one.shared, one.rule) == (False, "auto: tool shell.exec looks stateful")


def test_auto_shares_a_server_with_plain_tools_and_one_nothing_is_known_about_yet() -> None:
    plain = decide_sharing("auto", snapshot(["get_current_time", "convert_time", "get-tiny-image", "echo"]))
    assert (plain.shared, plain.rule) == (True, "auto: no stateful tool names among 4 tools")
    unknown = decide_sharing("auto", Snapshot())
    assert (unknown.shared, unknown.rule) == (True, "auto: nothing cached yet, so shared until the server has run once")


@pytest.mark.parametrize(("name", "stateful"), [
    ("browser_click", True), ("navigate", True), ("list_tabs", True), ("getPageText", True),
    ("create_session", True), ("run_shell_command", True), ("open-terminal", True), ("screenshot", True),
    # Words, not substrings: these hold the letters but not the word.
    ("pagerduty_alerts", False), ("establish", False), ("tablespace_size", False), ("sessionize", False),
    ("echo", False), ("get_current_time", False),
])
def test_the_stateful_name_rule_matches_whole_words_of_a_tool_name(name: str, stateful: bool) -> None:
    assert bool(stateful_tools([name])) is stateful
