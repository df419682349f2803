"""What the hub shows from snapshots and how it ranks a search (lazyd/core/hub/catalog.py)."""

from __future__ import annotations

from typing import Any

from lazyd.core.cache import CachedResult, HandshakeEntry, Listing, Snapshot, handshake_key, stateless_key
from lazyd.core.hub.catalog import (
    ToolInfo,
    cached_tools,
    first_line,
    query_words,
    search,
    server_description,
    tool_infos,
    words,
)


def tool(name: str, description: str = "") -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


def entry(params: dict[str, Any], tools: list[dict[str, Any]] | None, result: dict[str, Any] | None = None) -> HandshakeEntry:
    listings = {"tools/list": Listing(items=tools)} if tools is not None else {}
    return HandshakeEntry(params, result or {"capabilities": {"tools": {}}}, listings)


PLAIN = {"protocolVersion": "2025-06-18", "capabilities": {}}
SAMPLING = {"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}}

CATALOG = [
    *tool_infos("time", [tool("get_current_time", "Get current time in a specific timezones"),
                         tool("convert_time", "Convert time between timezones")]),
    *tool_infos("fixture", [tool("echo", "Return the text argument"),
                            tool("counter", "Increment an in-memory counter and return it"),
                            tool("sleep", "Sleep, with progress notifications")]),
    *tool_infos("github", [tool("create_issue", "Create a new issue in a GitHub repository"),
                           tool("list_issues", "List issues in a GitHub repository"),
                           tool("get_file_contents", "Get the contents of a file or directory"),
                           tool("search_code", "Search code in the files of a repository")]),
]


def names(found: list[ToolInfo]) -> list[str]:
    return [f"{t.server}.{t.name}" for t in found]


def test_a_server_that_never_ran_has_unknown_tools_not_an_empty_list() -> None:
    assert cached_tools(Snapshot(), None, PLAIN) is None
    empty = Snapshot(entries={handshake_key(PLAIN): entry(PLAIN, [])})
    assert cached_tools(empty, None, PLAIN) == []


def test_the_live_listing_wins_then_the_clients_own_key_then_the_most_recent_client_then_any() -> None:
    snapshot = Snapshot(entries={handshake_key(PLAIN): entry(PLAIN, [tool("plain")]),
                                 handshake_key(SAMPLING): entry(SAMPLING, [tool("plain"), tool("sampling")])},
                        last_params=PLAIN)
    live = entry(PLAIN, [tool("live")])
    assert [t["name"] for t in cached_tools(snapshot, live, SAMPLING) or []] == ["live"]
    assert [t["name"] for t in cached_tools(snapshot, None, SAMPLING) or []] == ["plain", "sampling"]
    other = {"protocolVersion": "2024-11-05", "capabilities": {"roots": {}}}
    assert [t["name"] for t in cached_tools(snapshot, None, other) or []] == ["plain"]
    snapshot.last_params = None
    assert cached_tools(snapshot, None, other) is not None


def test_a_server_spoken_to_in_the_stateless_era_shows_its_newest_public_tools_listing() -> None:
    snapshot = Snapshot(stateless={
        stateless_key("tools/list", "2026-07-28", "c1", "client-a"): CachedResult({"tools": [tool("private")]}, 300.0),
        stateless_key("tools/list", "2026-07-28", "c1"): CachedResult({"tools": [tool("old")]}, 100.0),
        stateless_key("tools/list", "2026-07-28", "c2"): CachedResult({"tools": [tool("new")]}, 200.0),
        stateless_key("prompts/list", "2026-07-28", "c1"): CachedResult({"prompts": []}, 400.0),
    })
    assert [t["name"] for t in cached_tools(snapshot, None, PLAIN) or []] == ["new"]
    snapshot.discover["2026-07-28"] = {"result": {"supportedVersions": ["2026-07-28"], "instructions": "Clock tools."}}
    assert server_description(snapshot, None) == "Clock tools."


def test_a_listing_that_failed_or_tools_without_a_name_are_not_shown() -> None:
    broken = Snapshot(entries={"k": HandshakeEntry(PLAIN, {}, {"tools/list": Listing(error={"code": -1, "message": "x"})})})
    assert cached_tools(broken, None, PLAIN) is None
    odd = Snapshot(entries={"k": entry(PLAIN, [tool("ok"), {"description": "no name"}, "junk"])})  # type: ignore[list-item]
    assert [t["name"] for t in cached_tools(odd, None, PLAIN) or []] == ["ok"]


def test_the_one_line_description_comes_from_instructions_then_server_info() -> None:
    with_instructions = Snapshot(entries={"k": entry(PLAIN, [], {"instructions": "\n  Tools for GitHub.\nMore.",
                                                                "serverInfo": {"name": "gh", "version": "1"}})})
    assert server_description(with_instructions, None) == "Tools for GitHub."
    info_only = Snapshot(entries={"k": entry(PLAIN, [], {"serverInfo": {"name": "mcp-time", "version": "1.2"}})})
    assert server_description(info_only, None) == "mcp-time 1.2"
    assert server_description(Snapshot(), None) == ""
    assert first_line("x" * 500, 20) == "x" * 19 + "…"


def test_names_split_into_words_whatever_their_case_convention() -> None:
    assert words("get_current_time") == words("getCurrentTime") == words("get-current-time") == ["get", "current", "time"]
    assert words("HTTPServer.v2") == ["http", "server", "v", "2"]
    assert query_words("get the time") == ["get", "time"]
    assert query_words("what is it") == ["what", "is", "it"]  # only filler words: kept


def test_a_word_of_a_description_finds_the_tool() -> None:
    assert names(search(CATALOG, "increment", 10)) == ["fixture.counter"]
    assert names(search(CATALOG, "repository", 10)) == ["github.create_issue", "github.list_issues", "github.search_code"]


def test_a_name_match_ranks_above_a_description_match() -> None:
    assert names(search(CATALOG, "file", 10)) == ["github.get_file_contents", "github.search_code"]
    assert names(search(CATALOG, "issue", 10))[:2] == ["github.create_issue", "github.list_issues"]


def test_tools_matching_every_query_word_come_before_tools_matching_some() -> None:
    found = names(search(CATALOG, "create issue", 10))
    assert found[0] == "github.create_issue"
    assert "github.list_issues" in found[1:]


def test_prefixes_of_three_letters_or_more_match_plurals_and_stems() -> None:
    assert "time.convert_time" in names(search(CATALOG, "timezone", 10))
    assert names(search(CATALOG, "notification", 10)) == ["fixture.sleep"]
    assert names(search(CATALOG, "ti", 10)) == []  # too short to be a prefix of anything


def test_an_empty_query_lists_every_tool_by_server_and_name_and_the_limit_applies() -> None:
    everything = names(search(CATALOG, "", 100))
    assert everything == sorted(everything) and len(everything) == len(CATALOG)
    assert len(search(CATALOG, "", 3)) == 3
    assert len(search(CATALOG, "the", 2)) <= 2


def test_a_query_matching_nothing_finds_nothing() -> None:
    assert search(CATALOG, "kubernetes", 10) == []


def test_a_word_of_the_users_description_of_a_server_finds_its_tools() -> None:
    tools = [ToolInfo("jira", "create_ticket", "Create a ticket", {}), ToolInfo("fs", "read", "Read a file", {})]
    assert search(tools, "sprint", 10) == []
    found = search(tools, "sprint", 10, {"jira": "Sprint planning: tickets, epics and boards."})
    assert [t.name for t in found] == ["create_ticket"]
