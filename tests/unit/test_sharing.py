"""`share = true | false | "session-aware" | "auto"`: the sharing decision from a snapshot and the
known-servers entry, without any process; every rule, its order, and its words."""

from __future__ import annotations

from typing import Any

import pytest

from lazyd.core.cache import HandshakeEntry, Listing, Snapshot, handshake_key
from lazyd.core.sharing.known_servers import KnownServer
from lazyd.core.sharing.modes import (NOT_KNOWN_RULE, UNDECIDED_RULE, declares_session_aware, decide_sharing,
                                      stateful_tools)

PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}}
PLAYWRIGHT = KnownServer("playwright", "isolated", ("@playwright/mcp",))
TIME = KnownServer("time", "shared", ("mcp-server-time",))
UNLISTED = KnownServer("playwright", "auto", ())


def snapshot(tools: list[str] | None, capabilities: dict[str, Any] | None = None,
             discover_capabilities: dict[str, Any] | None = None) -> Snapshot:
    listings = {"tools/list": Listing(items=[{"name": n} for n in tools])} if tools is not None else {}
    result = {"capabilities": {"tools": {}, **(capabilities or {})}}
    snap = Snapshot(entries={handshake_key(PARAMS): HandshakeEntry(PARAMS, result, listings)})
    if discover_capabilities is not None:
        snap.discover["2026-07-28"] = {"result": {"capabilities": discover_capabilities}}
    return snap


def decided(setting: Any, snap: Snapshot, known: KnownServer | None = None,
            live: HandshakeEntry | None = None, looked: bool = True) -> tuple[str | None, str, str]:
    d = decide_sharing(setting, snap, known, live, looked=looked)
    return d.mode, d.rule, d.source


def test_true_false_and_session_aware_decide_by_hand_whatever_the_server_says_or_the_table_knows() -> None:
    browser = snapshot(["browser_navigate"], {"x-mux": {"sharing": "shared"}})
    assert decided(True, browser, PLAYWRIGHT) == ("shared", "share = true", "setting")
    assert decided(False, snapshot(["echo"]), TIME) == ("isolated", "share = false", "setting")
    assert decided(False, Snapshot()) == ("isolated", "share = false", "setting")
    assert decided("session-aware", browser, PLAYWRIGHT) == ("session-aware", 'share = "session-aware"', "setting")


@pytest.mark.parametrize(("capabilities", "mode", "rule"), [
    ({"x-mux": {"sharing": "isolated"}}, "isolated", "auto: isolated (declared: x-mux.sharing)"),
    ({"x-mux": {"sharing": "session-aware"}}, "session-aware", "auto: session-aware (declared: x-mux.sharing)"),
    ({"x-mux": {"sharing": "shared"}}, "shared", "auto: shared (declared: x-mux.sharing)"),
    ({"experimental": {"x-mux": {"sharing": "isolated"}}}, "isolated",
     "auto: isolated (declared: experimental.x-mux.sharing)"),
    ({"experimental": {"lazyd": {"sharing": "isolated"}}}, "isolated",
     "auto: isolated (declared: experimental.lazyd.sharing)"),
    ({"experimental": {"lazyd": {"sharing": "session-aware"}}}, "session-aware",
     "auto: session-aware (declared: experimental.lazyd.sharing)"),
    # lazyd's own spelling wins over mcp-mux's.
    ({"experimental": {"lazyd": {"sharing": "shared"}}, "x-mux": {"sharing": "isolated"}}, "shared",
     "auto: shared (declared: experimental.lazyd.sharing)"),
])
def test_auto_follows_what_the_server_declares_before_the_table_and_the_tool_names(
        capabilities: dict[str, Any], mode: str, rule: str) -> None:
    # The tools say "stateful" and the table says "shared": a declaration outranks both.
    assert decided("auto", snapshot(["browser_navigate"], capabilities), TIME) == (mode, rule, "declared")


def test_a_declaration_in_a_discover_answer_counts_and_unknown_values_are_ignored() -> None:
    assert decided("auto", snapshot(["echo"], discover_capabilities={"x-mux": {"sharing": "isolated"}}))[0] == "isolated"
    odd = snapshot(["echo"], {"x-mux": {"sharing": "sometimes"}, "experimental": {"lazyd": "isolated"}})
    assert decided("auto", odd) == ("isolated", NOT_KNOWN_RULE, "unknown")


def test_a_known_server_is_decided_before_anything_is_cached_and_before_its_tool_names() -> None:
    assert decided("auto", Snapshot(), PLAYWRIGHT) == ("isolated", "auto: isolated (known server: playwright)", "known")
    # A known shared server with tools whose names look stateful: the table knows better.
    assert decided("auto", snapshot(["open_session"]), TIME) == ("shared", "auto: shared (known server: time)", "known")


def test_an_entry_the_user_set_to_auto_leaves_the_decision_to_the_other_rules() -> None:
    assert decided("auto", snapshot(["browser_navigate"]), UNLISTED) == (
        "isolated", "auto: isolated (tool names: browser_navigate)", "tools")
    assert decided("auto", snapshot(["get_current_time"]), UNLISTED) == ("isolated", NOT_KNOWN_RULE, "unknown")
    assert decided("auto", Snapshot(), UNLISTED)[0] is None


def test_auto_gives_one_process_per_session_to_a_server_whose_tools_look_stateful() -> None:
    names = ["browser_navigate", "take_screenshot", "newTab", "run-in-terminal", "get_weather"]
    assert decided("auto", snapshot(names)) == (
        "isolated", "auto: isolated (tool names: browser_navigate, take_screenshot, newTab, …)", "tools")
    assert decided("auto", snapshot(["echo", "shell.exec"]))[:2] == ("isolated", "auto: isolated (tool names: shell.exec)")
    # Tool names isolate at once, before the process tree was looked at.
    assert decided("auto", snapshot(["browser_navigate"]), looked=False)[0] == "isolated"


@pytest.mark.parametrize("tools", [
    ["get_current_time", "convert_time", "get-tiny-image", "echo"],
    ["git_status", "git_set_working_dir", "git_commit"],  # a session's working directory, in the process
    ["get_tasks", "add_task", "parse_prd"],  # a project's .env keys, loaded into the process
    ["sequentialthinking"],  # a session's thoughts
    [],
])
def test_innocent_tool_names_never_share_a_server_nothing_else_says_is_shareable(tools: list[str]) -> None:
    d = decide_sharing("auto", snapshot(tools), looked=True)
    assert (d.mode, d.rule, d.source, d.shared) == ("isolated", "auto: isolated (not known to be shareable)",
                                                   "unknown", False)  # the words `lazyctl status` shows


def test_a_server_nothing_is_known_about_yet_is_undecided_until_it_answered_and_its_tree_was_looked_at() -> None:
    # Never run: nothing cached, nothing looked at.
    for snap, looked in ((Snapshot(), False), (Snapshot(), True), (snapshot(["echo"]), False)):
        unknown = decide_sharing("auto", snap, looked=looked)
        assert (unknown.mode, unknown.rule, unknown.source) == (None, UNDECIDED_RULE, "undecided")
        # Undecided lets a first session have the registration's process (join.py decides more).
        assert unknown.shared is True
    assert decide_sharing(False, Snapshot()).shared is False


def test_the_same_registration_is_decided_alike_from_a_cold_start_and_from_a_warm_cache() -> None:
    # Cold: the first start's answer, then its tree looked at. Warm: the cache and the record.
    for capabilities, known, mode in (({}, None, "isolated"), ({}, TIME, "shared"),
                                      ({"experimental": {"lazyd": {"sharing": "shared"}}}, None, "shared")):
        live = HandshakeEntry(PARAMS, {"capabilities": {"tools": {}, **capabilities}})
        cold = decide_sharing("auto", Snapshot(), known, live, looked=True)
        warm = decide_sharing("auto", snapshot(["echo"], capabilities), known, looked=True)
        assert cold.mode == warm.mode == mode


def test_a_declared_initialize_without_tools_listed_yet_is_decided_by_its_declaration() -> None:
    # The first start's initialize result is in before its tools/list: a second session need not
    # wait for the listing when the server declared itself.
    snap = Snapshot(entries={handshake_key(PARAMS): HandshakeEntry(
        PARAMS, {"capabilities": {"x-mux": {"sharing": "isolated"}}})})
    assert decided("auto", snap)[0] == "isolated"


def test_declares_session_aware_reads_either_spelling_and_nothing_else() -> None:
    assert declares_session_aware([{"capabilities": {"x-mux": {"sharing": "session-aware"}}}])
    assert declares_session_aware([{"capabilities": {"experimental": {"lazyd": {"sharing": "session-aware"}}}}])
    assert not declares_session_aware([{"capabilities": {"x-mux": {"sharing": "shared"}}}])
    assert not declares_session_aware([{"capabilities": "session-aware"}, {}])


@pytest.mark.parametrize(("name", "stateful"), [
    ("browser_click", True), ("navigate", True), ("list_tabs", True), ("getPageText", True),
    ("create_session", True), ("run_shell_command", True), ("open-terminal", True), ("screenshot", True),
    # Words, not substrings: these hold the letters but not the word.
    ("pagerduty_alerts", False), ("establish", False), ("tablespace_size", False), ("sessionize", False),
    ("echo", False), ("get_current_time", False),
])
def test_the_stateful_name_rule_matches_whole_words_of_a_tool_name(name: str, stateful: bool) -> None:
    assert bool(stateful_tools([name])) is stateful


def test_a_start_under_way_decides_as_soon_as_its_answer_is_in_and_its_tree_was_looked_at() -> None:
    live = HandshakeEntry(PARAMS, {})  # initialize sent, unanswered: nothing to decide from yet
    assert decided("auto", Snapshot(), live=live)[0] is None
    live.result = {"capabilities": {"tools": {}}}
    assert decided("auto", Snapshot(), live=live, looked=False)[0] is None  # its tree not looked at yet
    assert decided("auto", Snapshot(), live=live) == ("isolated", NOT_KNOWN_RULE, "unknown")
    live.listings["tools/list"] = Listing(items=[{"name": "browser_navigate"}])
    assert decided("auto", Snapshot(), live=live) == (
        "isolated", "auto: isolated (tool names: browser_navigate)", "tools")
    declared = HandshakeEntry(PARAMS, {"capabilities": {"x-mux": {"sharing": "session-aware"}}})
    assert decided("auto", Snapshot(), live=declared, looked=False)[:2] == (
        "session-aware", "auto: session-aware (declared: x-mux.sharing)")
    # The live process's listing is fresher than the cache's.
    assert decided("auto", snapshot(["echo"]), live=live)[0] == "isolated"
