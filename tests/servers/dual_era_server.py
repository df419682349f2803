"""A dual-era MCP server built with the python SDK's `MCPServer`, on stdio, for the era tests.

`MCPServer.run("stdio")` is the SDK's own dual-era server (`serve_dual_era_loop`): the first
request of a connection decides its era, for good. A 2026-07-28 request (with the `_meta`
envelope) opens a stateless connection; `initialize` opens a handshake one; the other era is then
refused (-32022 for a late `initialize`, -32600 for a late envelope). That is exactly how the
published SDK-built servers behave, which is what lazyd has to cope with.

Environment (all optional):
  DUAL_TTL_MS=N        ttlMs of discovery and the four listings (default 60000)
  DUAL_SCOPE=S         their cacheScope: public | private (default public)
  DUAL_LOG=PATH        append "<method> <era> <client name>" per request that reaches the server

Tools: echo(text); pid(); whoami() -> "<protocol version> <client name>"; add_tool(name) adds a
tool and announces it on listen streams; touch(uri) announces a resource update; ask() asks for
the caller's name through an `input_required` result (elicitation) and says hello to it.
Resources: demo://note. Prompts: greet(name).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer

CACHEABLE = ("server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list")


def _hints() -> dict[Any, CacheHint]:
    ttl = int(os.environ.get("DUAL_TTL_MS", "60000"))
    scope: Literal["public", "private"] = "private" if os.environ.get("DUAL_SCOPE") == "private" else "public"
    return {method: CacheHint(ttl_ms=ttl, scope=scope) for method in CACHEABLE}


server = MCPServer("dual-era-fixture", version="1.0", instructions="A dual-era test server.", cache_hints=_hints())


async def log_requests(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    path = os.environ.get("DUAL_LOG")
    if path:
        params = ctx.session.client_params
        name = params.client_info.name if params is not None else "-"
        era = "stateless" if ctx.protocol_version >= "2026-07-28" else "handshake"
        with open(path, "a") as f:
            f.write(f"{ctx.method} {era} {name}\n")
    return await call_next(ctx)


server.middleware.append(log_requests)


@server.tool()
def echo(text: str) -> str:
    return text


@server.tool()
def pid() -> str:
    return str(os.getpid())


@server.tool()
def whoami(ctx: Context) -> str:
    params = ctx.request_context.session.client_params
    return f"{ctx.protocol_version} {params.client_info.name if params is not None else '-'}"


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description=f"added at run time as {name}")
    await ctx.notify_tools_changed()
    return f"added {name}"


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    await ctx.notify_resource_updated(uri)
    return f"touched {uri}"


@server.tool()
async def ask(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    answers = ctx.input_responses
    if answers and "name" in answers:
        answer = answers["name"]
        content = getattr(answer, "content", None) or {}
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"hello {content.get('name', '?')}")])
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    request = types.ElicitRequest(params=types.ElicitRequestFormParams(message="Your name?", requested_schema=schema))
    return types.InputRequiredResult(input_requests={"name": request})


@server.resource("demo://note")
def note() -> str:
    return "a note"


@server.prompt()
def greet(name: str) -> str:
    return f"Hello, {name}!"


if __name__ == "__main__":
    server.run("stdio")
