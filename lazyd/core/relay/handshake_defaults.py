"""Which `initialize` params lazyd sends when no client is there to send its own, and who lazyd is.

Pure, and the one answer wherever the need arises (rules cited below):

1. lazyd's identity is `LAZYD_CLIENT_INFO`, shown in a server's log wherever it spoke for no client.
2. Its own handshake (`lazyd_initialize_params`): the newest version every SDK speaks, with no
   client capabilities, so a server cannot ask an absent client for anything.
3. An unattended start replays the snapshot's last params, a queued `initialize` as is, else an
   attached client's, else lazyd's own (`unattended_params`).
4. An operator's wake replays the snapshot's last params, else the asking hub client's, else
   lazyd's own (`wake_params`).
5. A hub `call_tool` replays the hub client's own params (`hub_call_params`).
6. A check sends `--initialize-json`, else the client profile's learned or built-in params, else
   lazyd's own, and says which (`check_params`, `profile_params`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lazyd.core.eras.versions import LATEST_HANDSHAKE_VERSION
from lazyd.core.relay.jsonrpc import JsonObj

LAZYD_VERSION = "0.1.0"  # the package's version (pyproject.toml; a unit test keeps them equal)
LAZYD_CLIENT_INFO: JsonObj = {"name": "lazyd", "version": LAZYD_VERSION}
GIVEN_SOURCE = "given with --initialize-json"
OWN_SOURCE = "lazyctl's own"


def lazyd_initialize_params() -> JsonObj:
    """lazyd's own `initialize` params (rule 2): a fresh object, the caller may keep it."""
    return {"protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {}, "clientInfo": dict(LAZYD_CLIENT_INFO)}


def unattended_params(last_params: JsonObj | None, queued: bool,
                      attached: Iterable[JsonObj | None]) -> JsonObj | None:
    """The params to record as the snapshot's last before a start (rule 3); None: keep them."""
    if last_params is not None or queued:
        return None
    known = next((params for params in attached if params is not None), None)
    return known if known is not None else lazyd_initialize_params()


def wake_params(last_params: JsonObj | None, client: JsonObj | None = None) -> JsonObj | None:
    """The params to record before an operator's wake (rule 4); None: keep the snapshot's."""
    if last_params is not None:
        return None
    return dict(client) if client is not None else lazyd_initialize_params()


def hub_call_params(client: JsonObj | None) -> JsonObj:
    """The `initialize` a hub call's internal session sends (rule 5)."""
    return dict(client) if client is not None else lazyd_initialize_params()


def profile_params(learned: Mapping[str, Mapping[str, Any]], client_names: Iterable[str],
                   builtin: Mapping[str, Any] | None, title: str, release: str) -> tuple[JsonObj | None, str]:
    """A client profile's params for a check and where they came from (rule 6): the first of its
    `client_names` learned from a session, else the built-in capture, else None."""
    for name in client_names:
        known = learned.get(name)
        if known is not None:
            return dict(known), f"learned from a {name} session"
    if builtin is not None:
        return dict(builtin), f"built in, captured from {release}"
    return None, f"no {title} session seen yet and none built in"


def check_params(given: object, profile: tuple[JsonObj | None, str] | None) -> tuple[object, str]:
    """What a check sends and why (rule 6); `given`: the op's `initialize` argument."""
    if given is not None:
        return given, GIVEN_SOURCE
    if profile is not None:
        params, source = profile
        if params is not None:
            return params, source
        return lazyd_initialize_params(), f"{source}; {OWN_SOURCE} used"
    return lazyd_initialize_params(), OWN_SOURCE
