"""The server the official MCP conformance suite tests, built on the python SDK's low-level `Server`,
on stdio (the suite reaches it over HTTP through supergateway).

`@modelcontextprotocol/conformance`'s server scenarios each call something by name: tools
(`test_simple_text`, `test_sampling`, `test_elicitation`...), resources (`test://static-text`,
`test://template/{id}/data`, `test://watched-resource`), prompts (`test_prompt_with_arguments`...),
`logging/setLevel`, `completion/complete`, subscriptions. This server implements each one as the
scenario describes it (the descriptions are printed by `conformance list --server` and shipped in
the package), and nothing else. It is the SDK's dual-era server (`Server.run`): the first request
of a connection decides its era, exactly like every published server built on the SDK, so the
sampling and elicitation tools work only on a handshake-era connection.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

# A 1x1 red PNG and a minimal WAV file, as small as content of those types gets.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema"

Ctx = ServerRequestContext[Any]
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def _string_args(*names: str) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": list(names)}


TOOLS = [
    types.Tool(name="test_simple_text", description="Returns one text block", input_schema=NO_ARGS),
    types.Tool(name="test_image_content", description="Returns an image", input_schema=NO_ARGS),
    types.Tool(name="test_audio_content", description="Returns audio", input_schema=NO_ARGS),
    types.Tool(name="test_embedded_resource", description="Returns an embedded resource", input_schema=NO_ARGS),
    types.Tool(name="test_multiple_content_types", description="Returns text, image and a resource", input_schema=NO_ARGS),
    types.Tool(name="test_tool_with_logging", description="Logs three messages while it runs", input_schema=NO_ARGS),
    types.Tool(name="test_tool_with_progress", description="Reports progress 0, 50, 100 of 100", input_schema=NO_ARGS),
    types.Tool(name="test_error_handling", description="Always fails with isError", input_schema=NO_ARGS),
    types.Tool(name="test_sampling", description="Asks the client's model", input_schema=_string_args("prompt")),
    types.Tool(name="test_elicitation", description="Asks the user", input_schema=_string_args("message")),
    types.Tool(name="test_elicitation_sep1034_defaults", description="Elicitation with defaults", input_schema=NO_ARGS),
    types.Tool(name="test_elicitation_sep1330_enums", description="Elicitation with enums", input_schema=NO_ARGS),
    types.Tool(name="json_schema_2020_12_tool", description="Has a JSON Schema 2020-12 input schema", input_schema={
        "$schema": SCHEMA_2020_12,
        "type": "object",
        "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
        "additionalProperties": False,
    }),
]

DEFAULTS_SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "description": "Verification status", "default": True},
}, "required": []}

ENUMS_SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "untitledSingle": {"type": "string", "description": "One option", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "description": "One titled option", "oneOf": [
        {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"},
        {"const": "value3", "title": "Third Option"}]},
    "legacyEnum": {"type": "string", "description": "One option (legacy)", "enum": ["opt1", "opt2", "opt3"],
                   "enumNames": ["Option One", "Option Two", "Option Three"]},
    "untitledMulti": {"type": "array", "description": "Several options", "minItems": 1, "maxItems": 3,
                      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {"type": "array", "description": "Several titled options", "minItems": 1, "maxItems": 3,
                    "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                        {"const": "value2", "title": "Second Choice"},
                                        {"const": "value3", "title": "Third Choice"}]}},
}, "required": []}


def _text(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


async def _elicit(ctx: Ctx, message: str, schema: dict[str, Any]) -> types.CallToolResult:
    result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    return _text(f"Elicitation completed: action={result.action}, content={json.dumps(result.content or {})}")


async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    name = params.name
    if name == "test_simple_text":
        return _text("This is a simple text response for testing.")
    if name == "test_image_content":
        return types.CallToolResult(content=[types.ImageContent(type="image", data=PNG, mime_type="image/png")])
    if name == "test_audio_content":
        return types.CallToolResult(content=[types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")])
    if name == "test_embedded_resource":
        return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."))])
    if name == "test_multiple_content_types":
        return types.CallToolResult(content=[
            types.TextContent(type="text", text="Multiple content types test:"),
            types.ImageContent(type="image", data=PNG, mime_type="image/png"),
            types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
                uri="test://mixed-content-resource", mime_type="application/json", text='{"test":"data","value":123}')),
        ])
    if name == "test_tool_with_logging":
        for i, message in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
            if i:
                await anyio.sleep(0.05)
            await ctx.session.send_log_message("info", message, related_request_id=ctx.request_id)
        return _text("Tool with logging executed successfully")
    if name == "test_tool_with_progress":
        for i, done in enumerate((0, 50, 100)):
            if i:
                await anyio.sleep(0.05)
            await ctx.session.report_progress(done, 100, f"Completed step {done} of 100")
        return _text("Tool with progress executed successfully")
    if name == "test_error_handling":
        return _text("This tool intentionally returns an error for testing", is_error=True)
    if name == "test_sampling":
        prompt = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=str(args.get("prompt", ""))))
        sampled = await ctx.session.create_message([prompt], max_tokens=100, related_request_id=ctx.request_id)
        content = sampled.content
        return _text(f"LLM response: {content.text if isinstance(content, types.TextContent) else 'No response'}")
    if name == "test_elicitation":
        schema = {"type": "object", "properties": {"response": {"type": "string", "description": "User's response"}},
                  "required": ["response"]}
        return await _elicit(ctx, str(args.get("message", "")), schema)
    if name == "test_elicitation_sep1034_defaults":
        return await _elicit(ctx, "Please review and update the form fields with defaults", DEFAULTS_SCHEMA)
    if name == "test_elicitation_sep1330_enums":
        return await _elicit(ctx, "Please select options from the enum fields", ENUMS_SCHEMA)
    if name == "json_schema_2020_12_tool":
        return _text(f"JSON Schema 2020-12 tool called with: {json.dumps(args)}")
    return _text(f"Unknown tool: {name}", is_error=True)


RESOURCES = [
    types.Resource(uri="test://static-text", name="static-text", mime_type="text/plain", description="Static text"),
    types.Resource(uri="test://static-binary", name="static-binary", mime_type="image/png", description="Static binary"),
    types.Resource(uri="test://watched-resource", name="watched-resource", mime_type="text/plain", description="Watched"),
]


async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=RESOURCES)


async def list_templates(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
        uri_template="test://template/{id}/data", name="template", mime_type="application/json",
        description="A template with one parameter")])


async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    contents: list[types.TextResourceContents | types.BlobResourceContents]
    if uri == "test://static-text":
        contents = [types.TextResourceContents(uri=uri, mime_type="text/plain", text="This is the content of the static text resource.")]
    elif uri == "test://static-binary":
        contents = [types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG)]
    elif uri == "test://watched-resource":
        contents = [types.TextResourceContents(uri=uri, mime_type="text/plain", text="Watched resource content")]
    elif uri.startswith("test://template/") and uri.endswith("/data"):
        item = uri.removeprefix("test://template/").removesuffix("/data")
        text = json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})
        contents = [types.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
    else:
        raise ValueError(f"unknown resource {uri}")
    return types.ReadResourceResult(contents=contents)


async def subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


async def unsubscribe(ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A prompt without arguments"),
    types.Prompt(name="test_prompt_with_arguments", description="A prompt with two arguments", arguments=[
        types.PromptArgument(name="arg1", description="First argument", required=True),
        types.PromptArgument(name="arg2", description="Second argument", required=True)]),
    types.Prompt(name="test_prompt_with_embedded_resource", description="A prompt with an embedded resource",
                 arguments=[types.PromptArgument(name="resourceUri", description="The resource to embed", required=True)]),
    types.Prompt(name="test_prompt_with_image", description="A prompt with an image"),
]


async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


def _user(content: Any) -> types.PromptMessage:
    return types.PromptMessage(role="user", content=content)


async def get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    args = params.arguments or {}
    if params.name == "test_simple_prompt":
        messages = [_user(types.TextContent(type="text", text="This is a simple prompt for testing."))]
    elif params.name == "test_prompt_with_arguments":
        text = f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"
        messages = [_user(types.TextContent(type="text", text=text))]
    elif params.name == "test_prompt_with_embedded_resource":
        resource = types.TextResourceContents(uri=str(args.get("resourceUri", "test://example")), mime_type="text/plain",
                                              text="Embedded resource content for testing.")
        messages = [_user(types.EmbeddedResource(type="resource", resource=resource)),
                    _user(types.TextContent(type="text", text="Please process the embedded resource above."))]
    elif params.name == "test_prompt_with_image":
        messages = [_user(types.ImageContent(type="image", data=PNG, mime_type="image/png")),
                    _user(types.TextContent(type="text", text="Please analyze the image above."))]
    else:
        raise ValueError(f"unknown prompt {params.name}")
    return types.GetPromptResult(messages=messages)


async def complete(ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
    return types.CompleteResult(completion=types.Completion(values=[], total=0, has_more=False))


async def set_level(ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


server: Server[Any] = Server(
    "conformance-fixture", version="1.0",
    on_list_tools=list_tools, on_call_tool=call_tool,
    on_list_resources=list_resources, on_list_resource_templates=list_templates, on_read_resource=read_resource,
    on_subscribe_resource=subscribe, on_unsubscribe_resource=unsubscribe,
    on_list_prompts=list_prompts, on_get_prompt=get_prompt,
    on_completion=complete, on_set_logging_level=set_level,
)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
