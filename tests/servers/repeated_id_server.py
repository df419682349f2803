"""A stdio MCP server whose answers carry two `"id"` members: the fault a relay must read as a
JSON parser does (the last of repeated keys wins), whatever the answer's size.

Python standard library only; one thread; exits 0 at stdin EOF. Tools:

  echo(text)                  an ordinary answer
  twice(text, other, order)   the answer to this call with a second "id" member, `other`, beside
                              the request's own: order "request-first" writes the request's id,
                              the result, then `other` (a parser reads `other`), "other-first"
                              writes `other`, the result, then the request's id (a parser reads
                              the request's); written compactly, as the python SDK writes, with
                              "jsonrpc" and the id before the result
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}},
    {"name": "twice", "inputSchema": {"type": "object"}},
]


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def answer(request_id: Any, result: Any) -> bytes:
    return b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (dumps(request_id), dumps(result))


def call(request_id: Any, params: dict[str, Any]) -> bytes:
    args = params.get("arguments") or {}
    result = {"content": [{"type": "text", "text": args.get("text", "")}]}
    if params.get("name") != "twice":
        return answer(request_id, result)
    first, last = request_id, args.get("other")
    if args.get("order") == "other-first":
        first, last = last, first
    return b'{"jsonrpc":"2.0","id":%s,"result":%s,"id":%s}' % (dumps(first), dumps(result), dumps(last))


def main() -> None:
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        method, request_id = message.get("method"), message.get("id")
        if "id" not in message or method is None:
            continue  # a notification, or a client's answer
        if method == "initialize":
            line = answer(request_id, {"protocolVersion": message["params"]["protocolVersion"],
                                       "capabilities": {"tools": {}},
                                       "serverInfo": {"name": "repeated-id", "version": "1"}})
        elif method == "tools/list":
            line = answer(request_id, {"tools": TOOLS})
        elif method == "tools/call":
            line = call(request_id, message.get("params") or {})
        elif method == "ping":
            line = answer(request_id, {})
        else:
            line = b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}' % dumps(request_id)
        out.write(line + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
