"""Which `initialize` params lazyd sends when no client is there to send its own, and who lazyd is.

Pure: every part of the daemon that needs a handshake nobody gave it asks here, so the answer is
the same wherever the need arises. The rules:

1. lazyd's own identity is one: `LAZYD_CLIENT_INFO`, `{"name": "lazyd", "version": LAZYD_VERSION}`.
   A server's log shows it wherever lazyd spoke for no client: an unattended start, a check with
   no client profile, a hub call from a client that never initialized, the stateless relay's own
   probes and refreshes.
2. lazyd's own handshake (`lazyd_initialize_params`) is the newest handshake-era version every SDK
   speaks, and no client capabilities, so a server cannot ask a client that is not there for
   anything (sampling, roots, elicitation).
3. A start no client asked for (eager, keep_alive, a wake predicate, a backoff restart) replays the
   snapshot's last params when it has them; a queued client's `initialize` is replayed as is; else
   the params of a client attached now (a resumed session: a real client's), else lazyd's own
   (`unattended_params`).
4. An operator's wake (`lazyctl wake`, the hub's `wake_server` and the background start of
   `get_tool_schema`) replays the snapshot's last params; a server never initialized is woken with
   the asking hub client's params if there is one, else lazyd's own (`wake_params`).
5. A hub `call_tool` replays the hub client's own params, so the server sees that client's
   capabilities; lazyd's own for a client that never sent any (`hub_call_params`).
6. A check sends, in order of preference: the params given with `--initialize-json`; for a client
   profile, that client's params learned from its sessions, else those built into the profile;
   else lazyd's own, and says which (`check_params`, `profile_params`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lazyd.core.eras.versions import LATEST_HANDSHAKE_VERSION
from lazyd.core.relay.jsonrpc import JsonObj

__all__ = ["LAZYD_VERSION", "LAZYD_CLIENT_INFO", "LAZYD_PROTOCOL_VERSION", "lazyd_initialize_params",
           "unattended_params", "wake_params", "hub_call_params", "profile_params", "check_params",
           "GIVEN_SOURCE", "OWN_SOURCE"]

LAZYD_VERSION = "0.1.0"  # the package's version (pyproject.toml; a unit test keeps them equal)
LAZYD_CLIENT_INFO: JsonObj = {"name": "lazyd", "version": LAZYD_VERSION}
# The newest handshake-era version every SDK speaks: a server of any SDK accepts it.
LAZYD_PROTOCOL_VERSION = LATEST_HANDSHAKE_VERSION

GIVEN_SOURCE = "given with --initialize-json"
OWN_SOURCE = "lazyctl's own"


def lazyd_initialize_params() -> JsonObj:
    """lazyd's own `initialize` params (rule 2): a fresh object, the caller may keep it."""
    return {"protocolVersion": LAZYD_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": dict(LAZYD_CLIENT_INFO)}


def unattended_params(last_params: JsonObj | None, queued: bool,
                      attached: Iterable[JsonObj | None]) -> JsonObj | None:
    """The params to record as the snapshot's last before a start (rule 3); None: keep what is
    there (the snapshot has params, or a queued client's `initialize` is what is replayed)."""
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
    """What a check sends and why (rule 6). `given` is the op's `initialize` argument (None when
    absent; not validated here), `profile` what `profile_params` said for the check's client."""
    if given is not None:
        return given, GIVEN_SOURCE
    if profile is not None:
        params, source = profile
        if params is not None:
            return params, source
        return lazyd_initialize_params(), f"{source}; {OWN_SOURCE} used"
    return lazyd_initialize_params(), OWN_SOURCE
