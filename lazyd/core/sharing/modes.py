"""How the sessions of one registration share server processes (`share`).

Pure: from the setting, the cached snapshot and the matching known-servers entry, so deciding
costs no start. One process is right for a server whose state is the world's (an API, the time)
and wrong for one whose state is a session's (a browser's tabs, a shell). `shared`: one process;
`isolated`: one per session; `session-aware`: one, every request carrying its session's id
(session_meta.py). `share = "auto"` takes the first rule that applies:

1. **Declared** in `capabilities`: `"experimental": {"lazyd": {"sharing": MODE}}`, else mcp-mux's
   `"x-mux": {"sharing": MODE}` (top level or under `experimental`).
2. **A known server** (known_servers.py), matched by what the registration runs or, once it ran,
   what its process tree ran (lazyd/daemon/sessions/running.py: `looked`).
3. **Stateful tool names** (a word of `STATEFUL_TOOL_WORDS`, split as the hub splits names):
   `isolated`. Names may isolate a server, never share it.
4. **Not known to be shareable** (handshake known, tree looked at): `isolated`; one session's
   files or keys must never serve another, and a process too many costs memory only.
5. **Nothing to decide from yet**: `undecided`, mode None; the daemon holds a second session until
   the first start has told (lazyd/core/sharing/join.py), so a cold cache decides as a warm one.

`rule` says which, in the words `lazyctl status` and `explain` show.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from lazyd.core.cache import HandshakeEntry, Snapshot
from lazyd.core.hub.catalog import cached_tools, words
from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.core.sharing.known_servers import KnownServer

Mode = Literal["shared", "isolated", "session-aware"]
MODES: Final[tuple[Mode, ...]] = ("shared", "isolated", "session-aware")
ShareSetting = bool | Literal["auto", "session-aware"]

# Words of tool names that mean state kept for whoever drives the server: a page, a tab, a shell.
STATEFUL_TOOL_WORDS: Final = frozenset({
    "browser", "page", "pages", "tab", "tabs", "navigate", "screenshot", "terminal", "shell", "session",
    "sessions",
})
# The words of rule 4 (status and explain add how to opt in, with the registration's name).
NOT_KNOWN_PREFIX: Final = "auto: isolated (not known to be shareable"
NOT_KNOWN_RULE: Final = NOT_KNOWN_PREFIX + ")"
UNDECIDED_RULE: Final = "auto: undecided (its first start tells what it is)"
# How many stateful tool names a rule quotes: enough to recognise the server, short for a status line.
MAX_QUOTED_TOOLS: Final = 3
_LAZYD_KEY: Final = "lazyd"
_MUX_KEY: Final = "x-mux"


@dataclass(frozen=True)
class SharingDecision:
    """`mode` (None: undecided, see rule 5), `rule`: why, and `source`: which rule ("setting",
    "declared", "known", "tools", "unknown", "undecided"), for `status` and `explain`."""

    mode: Mode | None
    rule: str
    source: str

    @property
    def shared(self) -> bool:
        """Whether sessions may join one process (an undecided registration's first session may)."""
        return self.mode != "isolated"


def decide_sharing(setting: ShareSetting, snapshot: Snapshot, known: KnownServer | None = None,
                   live: HandshakeEntry | None = None, *, looked: bool = False) -> SharingDecision:
    """Apply `setting` (module docstring) to `snapshot`, the matching `known` entry, and `live`,
    the handshake and listings of a process being started, as they arrive."""
    if setting is True:
        return SharingDecision("shared", "share = true", "setting")
    if setting is False:
        return SharingDecision("isolated", "share = false", "setting")
    if setting == "session-aware":
        return SharingDecision("session-aware", 'share = "session-aware"', "setting")
    declared = declared_sharing(([live.result] if live is not None else []) + _results(snapshot))
    if declared is not None:
        where, value = declared
        return SharingDecision(value, f"auto: {value} (declared: {where})", "declared")
    if known is not None and known.sharing != "auto":
        return SharingDecision(known.sharing, f"auto: {known.sharing} (known server: {known.name})", "known")
    tools = cached_tools(snapshot, live, None)
    stateful = stateful_tools(str(t["name"]) for t in tools or [])
    if stateful:
        quoted = ", ".join(stateful[:MAX_QUOTED_TOOLS]) + (", …" if len(stateful) > MAX_QUOTED_TOOLS else "")
        return SharingDecision("isolated", f"auto: isolated (tool names: {quoted})", "tools")
    answered = (live is not None and bool(live.result)) or bool(_results(snapshot))  # {}: not answered yet
    if answered and looked:
        return SharingDecision("isolated", NOT_KNOWN_RULE, "unknown")
    return SharingDecision(None, UNDECIDED_RULE, "undecided")


def declared_sharing(results: Iterable[JsonObj]) -> tuple[str, Mode] | None:
    """(where, mode) of the first sharing declaration in these initialize/discover results."""
    results = list(results)
    for spelling in (_LAZYD_KEY, _MUX_KEY):
        for result in results:
            caps = result.get("capabilities")
            if not isinstance(caps, dict):
                continue
            experimental = caps.get("experimental")
            experimental = experimental if isinstance(experimental, dict) else {}
            if spelling == _LAZYD_KEY:
                found = _sharing_of(experimental.get(_LAZYD_KEY))
                where = "experimental.lazyd.sharing"
            else:
                found = _sharing_of(caps.get(_MUX_KEY))
                where = "x-mux.sharing"
                if found is None:
                    found = _sharing_of(experimental.get(_MUX_KEY))
                    where = "experimental.x-mux.sharing"
            if found is not None:
                return where, found
    return None


def declares_session_aware(results: Iterable[JsonObj]) -> bool:
    """Whether these results declare `session-aware` (the relay then sends session ids)."""
    declared = declared_sharing(results)
    return declared is not None and declared[1] == "session-aware"


def stateful_tools(names: Iterable[str]) -> list[str]:
    """The names, in order, that hold a word of `STATEFUL_TOOL_WORDS`."""
    return [name for name in names if STATEFUL_TOOL_WORDS.intersection(words(name))]


def _sharing_of(block: object) -> Mode | None:
    if not isinstance(block, dict):
        return None
    value = block.get("sharing")
    return next((mode for mode in MODES if mode == value), None)


def _results(snapshot: Snapshot) -> list[JsonObj]:
    results = [entry.result for entry in snapshot.entries.values()]
    results += [a["result"] for a in snapshot.discover.values() if isinstance(a.get("result"), dict)]
    return results
