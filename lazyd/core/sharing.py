"""Whether the sessions of one registration may share one server process (`share`).

Pure: decided from the registration's setting and its cached snapshot, so deciding costs no start.

Sharing one process is right for a server whose state is the world's (an API, a database, the
time) and wrong for one whose state is a session's: a browser and its open tabs, a shell, an
editor buffer. `share = true` and `share = false` settle it by hand. `share = "auto"` (the
default) decides per registration, by the first rule that applies:

1. **The server says so.** In its `initialize` result (or a `server/discover` answer), under
   `capabilities`:
   - lazyd's spelling: `"experimental": {"lazyd": {"sharing": "isolated" | "shared"}}`;
   - mcp-mux's: `"x-mux": {"sharing": "isolated" | "shared" | "session-aware"}`, at the top of
     `capabilities` or under `experimental` (where SDKs put capabilities of their own).
   `isolated` gives every session its own process, and so does `session-aware`: such a server
   tells sessions apart by an mcp-mux session id that lazyd does not send, so one process would
   mix them. `shared` shares. lazyd's spelling wins over mcp-mux's where both are present.
2. **Its tools look stateful.** A tool name with one of the words in `STATEFUL_TOOL_WORDS` (split
   as the hub splits names: at `_`, `-`, `.`, `/` and camelCase, any case) gives every session its
   own process: `browser_navigate`, `take_screenshot`, `newTab`, `run-in-terminal`.
3. **Otherwise it shares.**

Until the server has run once (or been checked), its snapshot holds neither its capabilities nor
its tools: nothing to decide from, so it shares, and the rule says so. The decision is made when a
session attaches; sessions already attached keep their process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from lazyd.core.cache import Snapshot
from lazyd.core.hub_catalog import cached_tools, words
from lazyd.core.jsonrpc import JsonObj

__all__ = ["ShareSetting", "SharingDecision", "STATEFUL_TOOL_WORDS", "decide_sharing", "declared_sharing",
           "stateful_tools"]

ShareSetting = bool | Literal["auto"]

# Words of tool names that mean state kept for whoever drives the server: a page, a tab, a shell.
STATEFUL_TOOL_WORDS: Final = frozenset({
    "browser", "page", "pages", "tab", "tabs", "navigate", "screenshot", "terminal", "shell", "session",
    "sessions",
})
# How many stateful tool names a rule quotes: enough to recognise the server, short for a status line.
MAX_QUOTED_TOOLS: Final = 3
_LAZYD_KEY: Final = "lazyd"
_MUX_KEY: Final = "x-mux"
_LAZYD_VALUES: Final = ("shared", "isolated")
_MUX_VALUES: Final = ("shared", "isolated", "session-aware")


@dataclass(frozen=True)
class SharingDecision:
    """`shared`: one process for every session; `rule`: why, in words for `status` and `explain`."""

    shared: bool
    rule: str


def decide_sharing(setting: ShareSetting, snapshot: Snapshot) -> SharingDecision:
    """Apply `setting` (and for "auto" the rules of the module docstring) to what `snapshot` holds."""
    if setting is True:
        return SharingDecision(True, "share = true")
    if setting is False:
        return SharingDecision(False, "share = false")
    declared = declared_sharing(_results(snapshot))
    if declared is not None:
        where, value = declared
        return SharingDecision(value == "shared", f"auto: the server declares {where} = {value}")
    tools = cached_tools(snapshot, None, None)
    if tools is None:
        return SharingDecision(True, "auto: nothing cached yet, so shared until the server has run once")
    stateful = stateful_tools(str(t["name"]) for t in tools)
    if stateful:
        quoted = ", ".join(stateful[:MAX_QUOTED_TOOLS]) + (", …" if len(stateful) > MAX_QUOTED_TOOLS else "")
        words_ = ("tool", "looks") if len(stateful) == 1 else ("tools", "look")
        return SharingDecision(False, f"auto: {words_[0]} {quoted} {words_[1]} stateful")
    return SharingDecision(True, f"auto: no stateful tool names among {len(tools)} tools")


def declared_sharing(results: Iterable[JsonObj]) -> tuple[str, str] | None:
    """(where, value) of the first sharing declaration in these initialize/discover results."""
    results = list(results)
    for spelling in ("lazyd", "x-mux"):
        for result in results:
            caps = result.get("capabilities")
            if not isinstance(caps, dict):
                continue
            experimental = caps.get("experimental")
            experimental = experimental if isinstance(experimental, dict) else {}
            if spelling == "lazyd":
                found = _sharing_of(experimental.get(_LAZYD_KEY), _LAZYD_VALUES)
                where = "experimental.lazyd.sharing"
            else:
                found = _sharing_of(caps.get(_MUX_KEY), _MUX_VALUES)
                where = "x-mux.sharing"
                if found is None:
                    found = _sharing_of(experimental.get(_MUX_KEY), _MUX_VALUES)
                    where = "experimental.x-mux.sharing"
            if found is not None:
                return where, found
    return None


def stateful_tools(names: Iterable[str]) -> list[str]:
    """The names, in order, that hold a word of `STATEFUL_TOOL_WORDS`."""
    return [name for name in names if STATEFUL_TOOL_WORDS.intersection(words(name))]


def _sharing_of(block: object, allowed: tuple[str, ...]) -> str | None:
    if not isinstance(block, dict):
        return None
    value = block.get("sharing")
    return value if isinstance(value, str) and value in allowed else None


def _results(snapshot: Snapshot) -> list[JsonObj]:
    results = [entry.result for entry in snapshot.entries.values()]
    results += [a["result"] for a in snapshot.discover.values() if isinstance(a.get("result"), dict)]
    return results
