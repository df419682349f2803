"""The hub's meta-tools (lazyd/core/hub/tools.py), the hub hello's options (lazyd/core/hub/protocol.py)
and the shim's `--hub` flag (shim/options.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lazyd.core.hub import tools as ht
from lazyd.core.hub.catalog import ToolInfo
from lazyd.core.hub.protocol import hub_servers
from lazyd.errors import Refused
from lazyd.errors import UsageError
from shim.options import parse


def test_the_meta_tools_are_eight_with_short_descriptions_and_object_schemas() -> None:
    assert [t["name"] for t in ht.META_TOOLS] == ["list_servers", "search_tools", "get_tool_schema",
                                                  "call_tool", "wake_server", "sleep_server", "restart_server",
                                                  "server_status"]
    for meta in ht.META_TOOLS:
        assert meta["inputSchema"]["type"] == "object"
        assert len(meta["description"]) < 200, meta["name"]
    # The whole listing is what every session pays for in its context: keep it small.
    assert len(json.dumps({"tools": ht.META_TOOLS}, separators=(",", ":"))) < 2500


@pytest.mark.parametrize(("name", "arguments", "expected"), [
    ("list_servers", None, ht.MetaCall("list_servers")),
    ("search_tools", {"query": "time"}, ht.MetaCall("search_tools", query="time")),
    ("search_tools", {}, ht.MetaCall("search_tools")),
    ("search_tools", {"query": "x", "server": "time", "limit": 5.0}, ht.MetaCall("search_tools", server="time", query="x", limit=5)),
    ("get_tool_schema", {"server": "a", "tool": "b"}, ht.MetaCall("get_tool_schema", server="a", tool="b")),
    ("call_tool", {"server": "a", "tool": "b"}, ht.MetaCall("call_tool", server="a", tool="b")),
    ("call_tool", {"server": "a", "tool": "b", "arguments": {"x": 1}}, ht.MetaCall("call_tool", server="a", tool="b", arguments={"x": 1})),
    ("wake_server", {"server": "a"}, ht.MetaCall("wake_server", server="a")),
])
def test_good_arguments_are_accepted(name: str, arguments: Any, expected: ht.MetaCall) -> None:
    assert ht.parse_meta_call(name, arguments) == expected


@pytest.mark.parametrize(("name", "arguments", "problem"), [
    ("nope", {}, "unknown tool 'nope'"),
    ("call_tool", [], "call_tool: arguments must be an object"),
    ("call_tool", {"tool": "b"}, "call_tool: 'server' must be a non-empty string"),
    ("call_tool", {"server": "", "tool": "b"}, "call_tool: 'server' must be a non-empty string"),
    ("call_tool", {"server": "a", "tool": "b", "arguments": "x=1"}, "call_tool: 'arguments' must be an object"),
    ("search_tools", {"query": 3}, "search_tools: 'query' must be a string"),
    ("search_tools", {"limit": 0}, "search_tools: 'limit' must be an integer from 1 to 100"),
    ("search_tools", {"limit": True}, "search_tools: 'limit' must be an integer from 1 to 100"),
    ("sleep_server", {}, "sleep_server: 'server' must be a non-empty string"),
])
def test_bad_arguments_are_a_problem_the_model_can_read(name: str, arguments: Any, problem: str) -> None:
    result = ht.parse_meta_call(name, arguments)
    assert isinstance(result, str) and result.startswith(problem)


def test_the_server_listing_shows_state_counts_policy_and_unknown_names() -> None:
    text = ht.render_servers([
        ht.ServerView("time", "running", "mcp-time 1.0", 2, pid=42),
        ht.ServerView("fixture", "sleeping", "", 9, hidden=1),
        ht.ServerView("new", "failed", "", None, last_error="exited with status 3\nmore"),
    ], ["typo"])
    assert text.splitlines() == [
        "3 servers (call_tool starts a sleeping one):",
        "- time [running, pid 42] 2 tools: mcp-time 1.0",
        "- fixture [sleeping] 9 tools (+1 denied by policy)",
        "- new [failed] tools unknown until it runs once (wake_server to learn them) (last error: exited with status 3)",
        "Not known to the daemon: typo (not in config.toml, never registered).",
    ]
    assert "No servers" in ht.render_servers([], [])


def test_a_search_answer_lists_tools_marks_ask_and_says_what_to_do_next() -> None:
    info = ToolInfo("fs", "delete_file", "Delete a file.\nLong text.", {"name": "delete_file"})
    assert ht.render_search("delete", [(info, "ask")], 10, ["gh"]).splitlines() == [
        "1 tool for 'delete', best first:",
        "- server=fs tool=delete_file: Delete a file. [asks the user first]",
        "Next: get_tool_schema(server, tool), then call_tool(server, tool, arguments).",
        "Tools not known yet (never ran): gh.",
    ]
    assert ht.render_search("zzz", [], 10, []) == "No tool matches for 'zzz' among 10 tools."


def test_a_schema_answer_is_the_servers_tool_object_without_its_output_schema() -> None:
    tool = {"name": "t", "description": "d", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    answer = json.loads(ht.render_schema("s", {**tool, "outputSchema": {"type": "object"}}, "allow", "sleeping"))
    assert answer == {"server": "s", "server_state": "sleeping", **tool}
    assert "policy" in json.loads(ht.render_schema("s", tool, "ask", "running"))


def test_a_hub_hello_takes_only_the_hub_options_and_no_command() -> None:
    hello: dict[str, Any] = {"argv": [], "server": None}
    assert hub_servers(hello["argv"], hello["server"], {"hub": "true"}) is None
    assert hub_servers(hello["argv"], hello["server"], {"hub": "true", "servers": "a, b"}) == ("a", "b")
    cases: list[tuple[dict[str, Any], dict[str, str], str]] = [
        ({"argv": ["node"], "server": None}, {"hub": "true"}, "takes no server command"),
        ({"argv": [], "server": "x"}, {"hub": "true"}, "takes no server command"),
        (hello, {"hub": "true", "linger": "1m"}, "option --linger does not apply to --hub"),
        (hello, {"hub": "yes"}, 'option hub must be "true"'),
        (hello, {"hub": "true", "servers": "a,,b"}, "is not a comma-separated list"),
    ]
    for bad_hello, opts, problem in cases:
        with pytest.raises(Refused, match=problem) as refused:
            hub_servers(bad_hello["argv"], bad_hello["server"], opts)
        assert refused.value.code == "options"  # the shim exits 2 on it: the user's mistake


def test_the_shim_hub_flag_sends_no_command_and_the_hub_options() -> None:
    opts = parse(["--hub", "--servers", "time, fixture"], {})
    assert (opts.hub, opts.command, opts.server) == (True, [], None)
    assert opts.daemon_opts == {"hub": "true", "servers": "time,fixture"}
    from_env = parse([], {"LAZYD_HUB": "1", "LAZYD_HUB_SERVERS": "a"})
    assert from_env.daemon_opts == {"hub": "true", "servers": "a"}


@pytest.mark.parametrize(("argv", "env", "problem"), [
    (["--hub", "node", "server.js"], {}, "--hub serves every server; it takes no COMMAND and no --server"),
    (["--hub", "--server", "x"], {}, "--hub serves every server"),
    (["--hub", "--linger", "1m"], {}, "--linger configures one server; it does not apply to --hub"),
    (["--servers", "a", "node"], {}, "--servers needs --hub"),
    (["--hub", "--servers", "a,"], {}, "--servers: 'a,' is not a comma-separated list"),
    (["--hub"], {"LAZYD_IDLE_TIMEOUT": "5m"}, "--idle-timeout configures one server"),
])
def test_the_shim_refuses_hub_combinations_that_make_no_sense(argv: list[str], env: dict[str, str], problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        parse(argv, env)


def test_a_search_answer_adds_the_users_description_of_each_server_in_it_once() -> None:
    first = ToolInfo("notes", "add_note", "Add a note", {})
    second = ToolInfo("notes", "delete_note", "Delete a note", {})
    other = ToolInfo("time", "now", "The time", {})
    about = {"notes": "The team's shared notebook; use it for meeting notes.", "ghost": "never listed"}
    lines = ht.render_search("note", [(first, "allow"), (second, "allow"), (other, "allow")], 3, [], about)
    assert lines.splitlines()[4:] == [
        "About these servers:",
        "- notes: The team's shared notebook; use it for meeting notes.",
        "Next: get_tool_schema(server, tool), then call_tool(server, tool, arguments).",
    ]
    assert "About" not in ht.render_search("note", [(other, "allow")], 1, [], about)


def test_control_tools_that_start_or_stop_ask_by_default_and_the_readers_follow_the_default() -> None:
    from lazyd.config.load import parse_config_text

    none = parse_config_text("", {}, None).tool_policy
    assert {tool: ht.control_verdict(none, tool).decision for tool in ht.CONTROL_TOOLS} == {
        "list_servers": "allow", "server_status": "allow", "wake_server": "ask", "sleep_server": "ask",
        "restart_server": "ask"}
    rules = parse_config_text('[policy]\nrules = { "lazyd.*" = "allow", "lazyd.sleep_server" = "deny" }\n', {},
                              None).tool_policy
    assert ht.control_verdict(rules, "restart_server").decision == "allow"
    assert "sleep_server" not in [t["name"] for t in ht.visible_tools(rules)]
    strict = parse_config_text('[policy]\ndefault = "deny"\n', {}, None).tool_policy
    assert [t["name"] for t in ht.visible_tools(strict)] == ["search_tools", "get_tool_schema", "call_tool"]


def test_server_status_says_memory_against_its_limit_and_the_last_error() -> None:
    view = ht.StatusView(name="a", state="running", pid=9, processes=2, memory_bytes=300 * 1024 * 1024,
                         memory_max=1024 ** 3, cpu_s=1.25, uptime_s=61.0, clients=2, inflight=1, restarts=3,
                         last_error="restarted: 1.3 GiB over memory_max 1 GiB", last_stop="memory pressure: x")
    assert ht.render_status(view).splitlines() == [
        "a: running, pid 9 (2 processes)", "memory: 300 MiB PSS of memory_max 1 GiB", "cpu time: 1.2s", "uptime: 61s",
        "clients: 2, requests in flight: 1, restarts: 3", "last error: restarted: 1.3 GiB over memory_max 1 GiB",
        "last stopped: memory pressure: x"]
