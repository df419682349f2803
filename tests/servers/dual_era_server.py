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
  DUAL_ONLY=stateless  serve the stateless era only: every connection is the SDK's own modern
                       stream loop (the one a dual-era connection switches to), so `initialize`
                       is refused with -32022 even as the first request

It declares itself shareable (`experimental.lazyd.sharing`, in its initialize result and its
discovery answer): it keeps no session's state the era tests guard, and they count on one process
per era. DUAL_SHARING=MODE declares MODE instead ("" for nothing).

Tools: echo(text); pid(); whoami() -> "<protocol version> <client name>"; add_tool(name) adds a
tool and announces it on listen streams; touch(uri) announces a resource update.
Call-backs written for the handshake era (the SDK's server-to-client requests, which work only on
a handshake connection): sample(prompt) asks the client's model; elicit_form() asks for a name
with a form; elicit_url() sends the user to a URL; roots() lists the client's roots;
log_progress() logs twice and reports progress twice.
Call-backs written for the stateless era (`input_required` results, which the SDK refuses on a
handshake connection): ask() asks for the caller's name (elicitation) and says hello to it;
ask_sample(prompt) asks the client's model; ask_roots() asks for the client's roots.
Resources: demo://note. Prompts: greet(name).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

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


# ---- call-backs written for the handshake era --------------------------------------------------------


class Name(BaseModel):
    name: str


def _reply_text(content: object) -> str:
    return content.text if isinstance(content, types.TextContent) else "?"


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    result = await ctx.request_context.session.create_message([message], max_tokens=50, related_request_id=ctx.request_id)
    return f"sampled: {_reply_text(result.content)}"


@server.tool()
async def elicit_form(ctx: Context) -> str:
    result = await ctx.elicit("Your name?", schema=Name)
    return f"form: {result.action} {result.data.name if result.action == 'accept' and result.data else '-'}"


@server.tool()
async def elicit_url(ctx: Context) -> str:
    result = await ctx.elicit_url("Sign in, please", "https://example.invalid/sign-in", "sign-in-1")
    return f"url: {result.action}"


@server.tool()
async def roots(ctx: Context) -> str:
    listed = await ctx.request_context.session.list_roots()
    return "roots: " + ",".join(str(root.uri) for root in listed.roots)


@server.tool()
async def log_progress(ctx: Context) -> str:
    await ctx.info("step one")
    await ctx.report_progress(1, 2)
    await ctx.info("step two")
    await ctx.report_progress(2, 2)
    return "logged"


# ---- call-backs written for the stateless era ----------------------------------------------------------


@server.tool()
async def ask_sample(prompt: str, ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    answer = (ctx.input_responses or {}).get("model")
    if answer is not None:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"sampled: {_reply_text(getattr(answer, 'content', None))}")])
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[message], max_tokens=50))
    return types.InputRequiredResult(input_requests={"model": request})


@server.tool()
async def ask_roots(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    answer = (ctx.input_responses or {}).get("roots")
    if answer is not None:
        listed = getattr(answer, "roots", None) or []
        return types.CallToolResult(content=[types.TextContent(type="text", text="roots: " + ",".join(str(r.uri) for r in listed))])
    return types.InputRequiredResult(input_requests={"roots": types.ListRootsRequest()})


@server.resource("demo://note")
def note() -> str:
    return "a note"


@server.prompt()
def greet(name: str) -> str:
    return f"Hello, {name}!"


def _declare_sharing() -> None:
    """Every capabilities object the server builds (initialize, server/discover) carries the
    sharing declaration: the SDK's way for a server to add capabilities of its own."""
    low = server._lowlevel_server
    build = low.get_capabilities
    sharing = os.environ.get("DUAL_SHARING", "shared")

    def declared(notification_options: Any = None, experimental_capabilities: Any = None, extensions: Any = None,
                 *, protocol_version: str | None = None) -> types.ServerCapabilities:
        experimental = {**(experimental_capabilities or {}), **({"lazyd": {"sharing": sharing}} if sharing else {})}
        return build(notification_options, experimental or None, extensions, protocol_version=protocol_version)

    low.get_capabilities = declared  # type: ignore[method-assign]


_declare_sharing()


async def stateless_only() -> None:
    from mcp.server.runner import _serve_modern_stream
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream), low.lifespan(low) as state:
        await _serve_modern_stream(low, read_stream, write_stream, lifespan_state=state, raise_exceptions=False)


if __name__ == "__main__":
    if os.environ.get("DUAL_ONLY") == "stateless":
        import anyio

        anyio.run(stateless_only)
    else:
        server.run("stdio")
