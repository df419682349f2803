"""The trivial echo MCP server the relay benchmarks measure against (stdlib only, one thread).

It answers `initialize`, `ping`, `tools/list` (one tool, `echo`) and `tools/call` of `echo` by
returning the `text` argument, so a round trip measures the transport, not the server's work.
It declares itself shareable (`experimental.lazyd.sharing`): it keeps no session's state, and the
benchmarks measure lazyd's own cost of one shared process, not its guess about a server.
"""

import json
import sys

TOOL = {"name": "echo", "description": "Return the text argument",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def main() -> None:
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        if "id" not in msg or "method" not in msg:
            continue
        method = msg["method"]
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}, "experimental": {"lazyd": {"sharing": "shared"}}},
                      "serverInfo": {"name": "echo", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": msg["params"]["arguments"]["text"]}]}
        elif method == "ping":
            result = {}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}}
            out.write(json.dumps(reply).encode() + b"\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
