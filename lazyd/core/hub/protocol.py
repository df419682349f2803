"""The hub's side of the protocol that needs no daemon: its hello options and its handshake.

Pure. A hub hello (docs/protocol.md) carries no command or server name and
`opts = {"hub": "true"[, "servers": "a,b"]}` (`hub_servers` checks it); `initialize_result` is the
hub's answer to `initialize`, at the client's version when it speaks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lazyd.core.eras.versions import HANDSHAKE_VERSIONS, LATEST_HANDSHAKE_VERSION
from lazyd.core.hub.tools import HUB_INSTRUCTIONS
from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.errors import Refused

HUB_VERSION = "0.1.0"
HUB_OPTS = ("hub", "servers")


def hub_servers(argv: Sequence[str], server: str | None, opts: Mapping[str, str]) -> tuple[str, ...] | None:
    """The `--servers` filter of a hub hello with these `argv`, `server` and `opts` (None: every
    server); raises Refused ("options")."""
    if argv or server:
        raise Refused("options", "--hub takes no server command and no --server: it serves them all")
    for key in opts:
        if key not in HUB_OPTS:
            option = key.replace("_", "-")
            raise Refused("options", f"option --{option} does not apply to --hub (it configures one server)")
    if opts.get("hub") != "true":
        raise Refused("options", f"option hub must be \"true\", got {opts.get('hub')!r}")
    if "servers" not in opts:
        return None
    names = tuple(n.strip() for n in opts["servers"].split(","))
    if any(not n for n in names):
        raise Refused("options", f"option --servers: {opts['servers']!r} is not a comma-separated list of server names")
    return names


def initialize_result(params: JsonObj) -> JsonObj:
    asked = params.get("protocolVersion")
    return {
        "protocolVersion": asked if asked in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION,  # a handshake-era server
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "lazyd-hub", "title": "lazyd hub", "version": HUB_VERSION},
        "instructions": HUB_INSTRUCTIONS,
    }

