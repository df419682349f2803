"""The latest `initialize` params of each client, learned from real sessions, for `check --client`.

Each session's first `initialize` is kept under its `clientInfo.name`, the latest per name, in
`<state dir>/clients.json` (0600), so a check after a restart still looks like the client. The
order (lazyd/core/relay/handshake_defaults.py): X's learned handshake, else the one captured from
X's release, else lazyd's own. The params hold no secrets, but are bounded, as the number of
clients is, since any local program can claim to be any client.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from lazyd.core.sharing.client_profiles import ClientProfile
from lazyd.core.relay.handshake_defaults import profile_params
from lazyd.protocol import jsonline
from lazyd.daemon import state_files

log = logging.getLogger("lazyd.handshakes")

FILE_NAME = "clients.json"
MAX_CLIENTS = 64  # distinct clientInfo names kept; the oldest seen goes first
MAX_PARAMS_BYTES = 16 * 1024  # a real client's initialize params are well under 1 KiB
MAX_NAME_CHARS = 200


class LearnedHandshakes:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self.clients: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        data = state_files.load(self.path, MAX_CLIENTS * MAX_PARAMS_BYTES, "client handshakes")
        if not isinstance(data, dict):
            return {}
        return {str(k): v for k, v in data.items()
                if isinstance(v, dict) and isinstance(v.get("params"), dict) and isinstance(v.get("seen_at"), (int, float))}

    def learn(self, params: object) -> bool:
        """Note a session's initialize params; True when they were new for their client."""
        if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str):
            return False
        info = params.get("clientInfo")
        name = info.get("name") if isinstance(info, dict) else None
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            return False
        if len(json.dumps(params)) > MAX_PARAMS_BYTES:
            return False
        known = self.clients.get(name)
        self.clients[name] = {"params": params, "seen_at": time.time()}
        while len(self.clients) > MAX_CLIENTS:
            del self.clients[min(self.clients, key=lambda k: float(self.clients[k]["seen_at"]))]
        if known is not None and known.get("params") == params:
            return False  # same handshake again: keep the file as it is (seen_at is for ordering)
        state_files.save(self.path, self.clients, sort_keys=True)
        log.info("learned the handshake of client %r (protocol %s)", name, params["protocolVersion"])
        return True

    def for_profile(self, profile: ClientProfile) -> tuple[dict[str, Any] | None, str]:
        """The params a check for `profile` should send, and where they came from."""
        learned = {name: known["params"] for name, known in self.clients.items()}
        return profile_params(learned, profile.client_names, profile.builtin, profile.title, profile.release)



# A session's initialize is its first request; a client that sends something else first (a
# discovery probe, a ping) still sends it within a few lines, and nothing after those is looked at.
PEEK_LINES = 4


def initialize_params(line: bytes) -> dict[str, Any] | None:
    """The params of `line` if it is an initialize request (a cheap test before any parsing)."""
    if b'"initialize"' not in line:
        return None
    msg, refused = jsonline.read(line)  # as the relay reads it: a line too deep is no initialize
    if refused is not None:
        return None
    params = msg.get("params") if isinstance(msg, dict) and msg.get("method") == "initialize" else None
    return params if isinstance(params, dict) else None
