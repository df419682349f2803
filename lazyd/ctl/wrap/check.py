"""``--check``: warm the daemon's cache for each registration just wrapped.

For every wrapped registration, lazyctl asks the daemon (control op ``check``, docs/protocol.md)
to start the server once, record its handshake and listings, and stop it, so the first client
session is answered from cache. The registration is described the way its shim will describe it:
the server's argv (the wrapped args after the shim's own options), its working directory (its
``cwd`` setting, else the Claude project it belongs to, else ours) and lazyctl's environment with
the registration's ``env`` on top (the daemon drops per-session and ``LAZYD_*`` variables from the
identity, so a check from a terminal finds the same server as a client's session).

Blocking socket I/O through lazyd.wire only; no trio in lazyctl.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lazyd import wire
from lazyd.ctl.wrap import shimargs
from lazyd.ctl.wrap.errors import BadUsage
from lazyd.ctl.wrap.model import RegState

CONNECT_TIMEOUT_S = 5.0
# A live daemon accepts at once; a full backlog for this long means a hung daemon.
CHECK_REPLY_TIMEOUT_S = 600.0
# The daemon bounds each check by the server's start_timeout (60 s by default, configurable);
# this is only a backstop against a daemon that never answers.

MAX_INITIALIZE_FILE_BYTES = 1024 * 1024
# A captured initialize is a few KiB; a captured session log may hold more before its first one.

CHECKED_ACTIONS = frozenset({"wrapped", "reapplied", "updated", "unchanged"})


@dataclass(frozen=True)
class CheckOutcome:
    server: str
    project: str | None
    ok: bool
    message: str  # the daemon's one-line error, or a short summary of what was cached

    def to_json(self) -> dict[str, object]:
        return {"server": self.server, "project": self.project, "ok": self.ok, "message": self.message}


def initialize_params(value: str) -> dict[str, Any]:
    """``--initialize-json``: inline JSON, or ``@FILE`` holding the params, an initialize request, or
    a captured session (JSON lines) whose first initialize request is used. Raises BadUsage.

    The daemon caches per protocol version and client capabilities, so a check only warms the
    cache a client will use when it sends that client's own initialize params.
    """
    source = "the value"
    text = value
    if value.startswith("@"):
        source = value[1:]
        try:
            with open(source, "rb") as f:
                raw = f.read(MAX_INITIALIZE_FILE_BYTES + 1)
        except OSError as exc:
            raise BadUsage(f"--initialize-json: cannot read {source}: {exc.strerror}") from None
        if len(raw) > MAX_INITIALIZE_FILE_BYTES:
            raise BadUsage(f"--initialize-json: {source} is larger than {MAX_INITIALIZE_FILE_BYTES} bytes")
        text = raw.decode("utf-8", "replace")
    try:
        candidates: list[object] = [json.loads(text)]
    except ValueError:
        candidates = []
        for line in text.splitlines():
            try:
                candidates.append(json.loads(line))
            except ValueError:
                continue
    for obj in candidates:
        if isinstance(obj, dict) and obj.get("method") == "initialize":
            obj = obj.get("params")
        if isinstance(obj, dict) and isinstance(obj.get("protocolVersion"), str):
            return obj
    raise BadUsage(f"--initialize-json: {source} holds no initialize params (an object with a string protocolVersion)")


def check_args(state: RegState, cwd: str, environ: Mapping[str, str],
               initialize: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The ``check`` op's args for a wrapped registration. Raises ValueError if its args name no command."""
    args = state.args or ()
    argv = list(args[shimargs.command_index(args):])
    env = dict(environ)
    env.update({k: v for k, v in (state.env or {}).items() if isinstance(v, str)})
    request: dict[str, Any] = {"argv": argv, "cwd": cwd, "env": env}
    if initialize is not None:
        request["initialize"] = dict(initialize)
    return request


def run_check(socket_path: str, args: Mapping[str, Any]) -> tuple[bool, str]:
    """Send one ``check`` to the daemon at ``socket_path``; return (ok, one-line message)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(socket_path)
        except (FileNotFoundError, ConnectionRefusedError):
            return False, (f"lazyd is not running (nothing listens on {socket_path}); start it "
                           "(systemctl --user start lazyd.socket, or run lazyd) and retry with reapply --check")  # fmt: skip
        reader = wire.BlockingFrameReader(sock)
        hello = {"t": "hello", "v": wire.WIRE_VERSION, "role": "ctl", "pid": os.getpid(), "argv": [],
                 "cwd": os.getcwd(), "env": {}, "opts": {}, "server": None, "resume": []}  # fmt: skip
        wire.send_frame(sock, hello)
        welcome = reader.read()
        if welcome is None or welcome["t"] != "welcome":
            reason = welcome.get("message", welcome["t"]) if welcome else "it closed the connection"
            return False, f"lazyd refused the control connection: {reason}"
        sock.settimeout(CHECK_REPLY_TIMEOUT_S)
        wire.send_frame(sock, {"t": "ctl", "op": "check", "args": dict(args)})
        reply = reader.read()
    except (OSError, wire.WireError) as exc:
        return False, f"lost the connection to lazyd: {exc}"
    finally:
        sock.close()
    if reply is None or reply["t"] != "reply":
        return False, "lazyd closed the connection without answering the check"
    if not reply["ok"]:
        error = str(reply.get("error") or "unknown error")
        if error.startswith("unknown control operation"):
            return False, "this lazyd has no check operation yet; upgrade and restart it (lazyctl stop)"
        return False, error
    return True, _summary(reply.get("data"))


def _summary(data: object) -> str:
    # Counts and versions only: listings can be long and names of tools are not needed here.
    if not isinstance(data, dict):
        return "cached"
    listings = data.get("listings")
    parts = []
    if isinstance(listings, dict):
        for kind, info in sorted(listings.items()):
            if isinstance(info, dict) and "count" in info:
                parts.append(f"{info['count']} {kind}")
    version = data.get("protocol_version")
    name = data.get("name")
    head = f"cached as {name}" if isinstance(name, str) else "cached"
    head += f" (protocol {version})" if isinstance(version, str) else ""
    return head + (": " + ", ".join(parts) if parts else "")
