"""The hub's meta-tools: their definitions (what the model reads), their arguments, their answers.

Pure. The definitions are all a hub registration adds to a model's context
(tests/benchmarks/bench_hub_tokens.py), so each is short and says when to use the tool. Answers
are compact text; a bad argument is a tool error the model can correct, as MCP asks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lazyd.core.hub.catalog import ToolInfo, first_line
from lazyd.config.sizes import format_bytes
from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.core.policy import Decision, ToolPolicy, Verdict

LIST_SERVERS = "list_servers"
SEARCH_TOOLS = "search_tools"
GET_TOOL_SCHEMA = "get_tool_schema"
CALL_TOOL = "call_tool"
WAKE_SERVER = "wake_server"
SLEEP_SERVER = "sleep_server"
RESTART_SERVER = "restart_server"
SERVER_STATUS = "server_status"

# The control tools are under the tool policy as tools of the server `lazyd`; with no rule, one
# that starts or stops a server asks first (it interrupts every client of it).
CONTROL_SERVER = "lazyd"
CONTROL_TOOLS = (LIST_SERVERS, SERVER_STATUS, WAKE_SERVER, SLEEP_SERVER, RESTART_SERVER)
_ASK_BY_DEFAULT = frozenset({WAKE_SERVER, SLEEP_SERVER, RESTART_SERVER})

DEFAULT_LIMIT = 10  # a screenful: enough to choose from, few enough tokens to be cheap
MAX_LIMIT = 100  # beyond this a search is a dump; list one server's tools instead
MAX_ABOUT_CHARS = 300  # a server's description in search results: a sentence or two, once per server

HUB_INSTRUCTIONS = (
    "lazyd hub: the tools of several MCP servers, not listed here. Find one with search_tools, "
    "read its arguments with get_tool_schema, run it with call_tool."
)

_SERVER = {"type": "string", "description": "Server name"}
_TOOL = {"type": "string", "description": "Tool name on that server"}
_NAME = {"type": "string"}  # the control tools' one argument: its name says what it is


def _schema(properties: dict[str, Any], required: Sequence[str] = ()) -> JsonObj:
    schema: JsonObj = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


META_TOOLS: list[JsonObj] = [
    {
        "name": LIST_SERVERS,
        "description": "List the available MCP servers with their state and a one-line description. "
                       "Starts nothing. Use it to see what exists; use search_tools to find a tool.",
        "inputSchema": _schema({}),
    },
    {
        "name": SEARCH_TOOLS,
        "description": "Find tools across all servers by words from their names and descriptions, "
                       "best match first. Starts nothing. An empty query lists all tools "
                       "(of one server, if given).",
        "inputSchema": _schema({
            "query": {"type": "string", "description": "Words describing the task, e.g. 'convert timezone'"},
            "server": {"type": "string", "description": "Only this server's tools (optional)"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "description": f"Most results (default {DEFAULT_LIMIT})"},
        }),
    },
    {
        "name": GET_TOOL_SCHEMA,
        "description": "Get a tool's full description and input schema. Call it before call_tool; "
                       "it also starts the server in the background so the call is fast.",
        "inputSchema": _schema({"server": _SERVER, "tool": _TOOL}, ["server", "tool"]),
    },
    {
        "name": CALL_TOOL,
        "description": "Run a tool of a server and return its result unchanged. Starts the server "
                       "if needed (the first call may take seconds).",
        "inputSchema": _schema({
            "server": _SERVER,
            "tool": _TOOL,
            "arguments": {"type": "object", "description": "The tool's arguments, per its schema"},
        }, ["server", "tool"]),
    },
    {
        "name": WAKE_SERVER,
        "description": "Start a server now and wait until it runs. Rarely needed: call_tool starts "
                       "servers itself.",
        "inputSchema": _schema({"server": _NAME}, ["server"]),
    },
    {
        "name": SLEEP_SERVER,
        "description": "Stop a server to free its memory. Its tools stay searchable; the next "
                       "call starts it again.",
        "inputSchema": _schema({"server": _NAME}, ["server"]),
    },
    {
        "name": RESTART_SERVER,
        "description": "Stop a server and start it again; its running calls fail.",
        "inputSchema": _schema({"server": _NAME}, ["server"]),
    },
    {
        "name": SERVER_STATUS,
        "description": "A server's state, memory, CPU time, restarts and last error. Starts nothing.",
        "inputSchema": _schema({"server": _NAME}, ["server"]),
    },
]
_NAMES = frozenset(t["name"] for t in META_TOOLS)


@dataclass(frozen=True)
class MetaCall:
    """A meta-tool call with checked arguments (fields the tool does not take stay empty)."""

    name: str
    server: str = ""
    tool: str = ""
    query: str = ""
    limit: int = DEFAULT_LIMIT
    arguments: JsonObj = field(default_factory=dict)


def parse_meta_call(name: str, arguments: object) -> MetaCall | str:
    """Check a meta-tool call's arguments; a string is the problem, for a tool error."""
    if name not in _NAMES:
        return f"unknown tool {name!r}; this hub has: {', '.join(sorted(_NAMES))}"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"{name}: arguments must be an object"

    def text(key: str, required: bool) -> str | None:
        value = arguments.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            return None
        return value

    checked: dict[str, Any] = {}
    wanted = {LIST_SERVERS: (), SEARCH_TOOLS: ("query", "server"), GET_TOOL_SCHEMA: ("server", "tool"),
              CALL_TOOL: ("server", "tool"), WAKE_SERVER: ("server",), SLEEP_SERVER: ("server",),
              RESTART_SERVER: ("server",), SERVER_STATUS: ("server",)}[name]
    for key in wanted:
        required = name != SEARCH_TOOLS
        value = text(key, required)
        if value is None:
            return f"{name}: {key!r} must be a {'non-empty ' if required else ''}string"
        checked[key] = value
    if name == SEARCH_TOOLS and arguments.get("limit") is not None:
        limit = arguments["limit"]
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            return f"{name}: 'limit' must be an integer from 1 to {MAX_LIMIT}"
        checked["limit"] = limit
    if name == CALL_TOOL:
        inner = arguments.get("arguments")
        if inner is None:
            inner = {}
        if not isinstance(inner, dict):
            return f"{name}: 'arguments' must be an object (the tool's arguments)"
        checked["arguments"] = inner
    if "tool" in checked:
        return MetaCall(name, server=checked["server"], tool=checked["tool"], arguments=checked.get("arguments", {}))
    return MetaCall(name, **checked)


@dataclass(frozen=True)
class ServerView:
    """One server as list_servers shows it."""

    name: str
    state: str
    description: str
    tools: int | None  # None: never ran, so its tools are unknown
    hidden: int = 0  # tools the policy denies: not counted, not shown
    pid: int | None = None
    last_error: str | None = None


def control_verdict(policy: ToolPolicy, tool: str) -> Verdict:
    """The policy's word on one of the hub's control tools (`lazyd.TOOL`; see CONTROL_SERVER)."""
    verdict = policy.decide(CONTROL_SERVER, tool)
    if verdict.rule is None and tool in _ASK_BY_DEFAULT and verdict.decision == "allow":
        return Verdict("ask", f"{CONTROL_SERVER}.{tool} (asks by default)")
    return verdict


def visible_tools(policy: ToolPolicy) -> list[JsonObj]:
    """The hub's tools/list: the control tools the policy denies are left out."""
    return [tool for tool in META_TOOLS
            if tool["name"] not in CONTROL_TOOLS or control_verdict(policy, tool["name"]).decision != "deny"]


def control_ask_params(tool: str, server: str, verdict: Verdict) -> JsonObj:
    """The `elicitation/create` params asking the user whether the model may run a control tool."""
    action = {WAKE_SERVER: "start", SLEEP_SERVER: "stop", RESTART_SERVER: "restart"}.get(tool, "inspect")
    message = (f'Allow the model to {action} the MCP server "{server}" through lazyd ({tool})?\n'
               f"(lazyd asks because of {verdict.reason()}; set \"{CONTROL_SERVER}.{tool}\" = \"allow\" "
               "in [policy] of its config to stop asking.)")
    return {"message": message, "requestedSchema": {"type": "object", "properties": {}}}


@dataclass(frozen=True)
class StatusView:
    """One server as server_status shows it (sizes in bytes, times in seconds)."""

    name: str
    state: str
    pid: int | None
    processes: int
    memory_bytes: int | None
    memory_max: int | None
    cpu_s: float | None
    uptime_s: float | None
    clients: int
    inflight: int
    restarts: int
    last_error: str | None
    last_stop: str | None


def render_status(view: StatusView) -> str:
    lines = [f"{view.name}: {view.state}" + (f", pid {view.pid} ({view.processes} processes)" if view.pid else "")]
    if view.memory_bytes is not None:
        limit = f" of memory_max {format_bytes(view.memory_max)}" if view.memory_max else " (no memory_max)"
        lines.append(f"memory: {format_bytes(view.memory_bytes)} PSS{limit}")
    elif view.memory_max:
        lines.append(f"memory_max: {format_bytes(view.memory_max)}")
    if view.cpu_s is not None:
        lines.append(f"cpu time: {view.cpu_s:.1f}s")
    if view.uptime_s is not None:
        lines.append(f"uptime: {view.uptime_s:.0f}s")
    lines.append(f"clients: {view.clients}, requests in flight: {view.inflight}, restarts: {view.restarts}")
    lines.append(f"last error: {first_line(view.last_error, 300) if view.last_error else 'none'}")
    if view.last_stop:
        lines.append(f"last stopped: {first_line(view.last_stop, 200)}")
    return "\n".join(lines)


def render_servers(views: Sequence[ServerView], unknown: Sequence[str]) -> str:
    if not views and not unknown:
        return ("No servers: name servers in lazyd's config.toml, or register some with lazyd-shim; "
                "the hub lists every server the daemon knows.")
    lines = [f"{len(views)} server{'s' if len(views) != 1 else ''} (call_tool starts a sleeping one):"]
    for view in views:
        state = f"{view.state}, pid {view.pid}" if view.pid is not None else view.state
        if view.tools is None:
            count = "tools unknown until it runs once (wake_server to learn them)"
        else:
            count = f"{view.tools} tool{'s' if view.tools != 1 else ''}"
            if view.hidden:
                count += f" (+{view.hidden} denied by policy)"
        line = f"- {view.name} [{state}] {count}"
        if view.description:
            line += f": {view.description}"
        if view.last_error and view.state in ("failed", "backoff"):
            line += f" (last error: {first_line(view.last_error, 120)})"
        lines.append(line)
    if unknown:
        lines.append(f"Not known to the daemon: {', '.join(unknown)} (not in config.toml, never registered).")
    return "\n".join(lines)


def render_search(query: str, found: Sequence[tuple[ToolInfo, Decision]], total_tools: int,
                  unknown_servers: Sequence[str], about: Mapping[str, str] | None = None) -> str:
    """The search answer; `about`: the user's description of each server, shown once a server
    (its own instructions are left to list_servers, or every search would pay for them)."""
    subject = f"for {query!r}" if query.strip() else "(all tools)"
    if not found:
        lines = [f"No tool matches {subject} among {total_tools} tools."]
    else:
        lines = [f"{len(found)} tool{'s' if len(found) != 1 else ''} {subject}, best first:"]
        for info, decision in found:
            line = f"- server={info.server} tool={info.name}: {first_line(info.description) or '(no description)'}"
            if decision == "ask":
                line += " [asks the user first]"
            lines.append(line)
        servers = list(dict.fromkeys(info.server for info, _ in found))
        notes = [(server, (about or {}).get(server, "")) for server in servers]
        notes = [(server, text) for server, text in notes if text]
        if notes:
            lines.append("About these servers:")
            lines.extend(f"- {server}: {first_line(text, MAX_ABOUT_CHARS)}" for server, text in notes)
        lines.append("Next: get_tool_schema(server, tool), then call_tool(server, tool, arguments).")
    if unknown_servers:
        lines.append(f"Tools not known yet (never ran): {', '.join(unknown_servers)}.")
    return "\n".join(lines)


def render_schema(server: str, tool: JsonObj, decision: Decision, state: str) -> str:
    """The tool's listing object as JSON, without `outputSchema` (often as long as the rest, and
    the model needs only the arguments to make the call)."""
    answer: JsonObj = {"server": server, "server_state": state,
                       **{k: v for k, v in tool.items() if k != "outputSchema"}}
    if decision == "ask":
        answer["policy"] = "the user is asked before this tool runs"
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))


def text_result(text: str) -> JsonObj:
    return {"content": [{"type": "text", "text": text}]}


def error_result(text: str) -> JsonObj:
    return {"content": [{"type": "text", "text": text}], "isError": True}
