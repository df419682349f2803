"""lazyd-shim: the tiny stdio relay a client runs instead of an MCP server (stdlib + msgpack only)."""

__version__ = "0.1.0"
