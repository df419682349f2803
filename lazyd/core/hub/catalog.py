"""What the hub knows about its servers' tools, from their snapshots alone, and how it searches them.

Pure: the hub never starts a server to list or search. A server's tools come from its live
handshake, else the snapshot entry of the hub client's handshake key, else the most recent
client's, else any with tools, else the newest stateless `tools/list` result (public first); a
server that never ran has `None` (unknown, not empty). Its description comes from the same
places and its `server/discover` answers.

Search scores each query word against a tool's name words, its description, its server's name and
the user's description of that server (docs/hub.md gives the weights; a "prefix" match needs 3
characters on both sides); tools are ordered by words matched, then score, then server and name.
Filler words are dropped from the query, so "get the time" does not match every "the".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lazyd.core.cache import PUBLIC, HandshakeEntry, Snapshot
from lazyd.core.relay.jsonrpc import JsonObj

DESCRIPTION_LINE_CHARS = 160  # one line of a listing: enough for a sentence, not a manual
_MIN_PREFIX = 3
_SPLIT = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be by can for from i in is it me my of on or please that the this to "
    "use using what with".split()
)


@dataclass(frozen=True)
class ToolInfo:
    """One tool of one server, as the server listed it (`tool` is the listing's object, whole)."""

    server: str
    name: str
    description: str
    tool: JsonObj


def cached_tools(snapshot: Snapshot, live: HandshakeEntry | None, params: JsonObj | None) -> list[JsonObj] | None:
    """The tools to show for a server, by the preference in the module docstring; None: unknown."""
    candidates: list[HandshakeEntry | None] = [live]
    if params is not None:
        candidates.append(snapshot.entry_for(params))
    if snapshot.last_params is not None:
        candidates.append(snapshot.entry_for(snapshot.last_params))
    candidates.extend(snapshot.entries.values())
    for entry in candidates:
        if entry is None:
            continue
        listing = entry.listings.get("tools/list")
        if listing is not None and listing.error is None:
            return _named(listing.items or [])
    stored = _stateless_results(snapshot, "tools/list|")
    if stored:
        tools = stored[0].get("tools")
        return _named(tools if isinstance(tools, list) else [])
    return None


def _named(tools: list[Any]) -> list[JsonObj]:
    return [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


def _stateless_results(snapshot: Snapshot, prefix: str) -> list[JsonObj]:
    """Stateless-era results whose key (`stateless_key`: method|version|caps|identity) starts
    with `prefix`: public ones first, then the newest first."""
    found = [(key.endswith(f"|{PUBLIC}"), cached.stored_at, cached.result)
             for key, cached in snapshot.stateless.items() if key.startswith(prefix)]
    found.sort(key=lambda f: (not f[0], -f[1]))
    return [result for _, _, result in found]


def first_line(text: object, limit: int = DESCRIPTION_LINE_CHARS) -> str:
    """The first non-empty line of `text`, cut at `limit` characters."""
    if not isinstance(text, str):
        return ""
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def server_description(snapshot: Snapshot, live: HandshakeEntry | None) -> str:
    """One line about a server: its instructions' first line, else its serverInfo."""
    results = [e.result for e in (live, *snapshot.entries.values()) if e is not None]
    results += [a["result"] for a in snapshot.discover.values() if isinstance(a.get("result"), dict)]
    for result in results:
        line = first_line(result.get("instructions"))
        if line:
            return line
    for result in results:
        info = result.get("serverInfo")
        if isinstance(info, dict):
            line = first_line(info.get("description"))
            if line:
                return line
            name = info.get("title") or info.get("name")
            version = info.get("version")
            if isinstance(name, str) and name:
                return first_line(f"{name} {version}" if isinstance(version, str) and version else name)
    return ""


def words(text: str) -> list[str]:
    """Lower-case words of `text`: `get_current_time`, `getCurrentTime` and `get-current-time`
    all give get, current, time."""
    return [w.lower() for w in _SPLIT.findall(text)]


def _related(a: str, b: str) -> bool:
    return len(a) >= _MIN_PREFIX and len(b) >= _MIN_PREFIX and (a.startswith(b) or b.startswith(a))


def _score_word(word: str, name_words: set[str], name: str, description_words: set[str],
                server_words: set[str], about_words: set[str]) -> float:
    if word in name_words:
        score = 10.0
    elif any(_related(word, w) for w in name_words):
        score = 6.0
    elif len(word) >= _MIN_PREFIX and word in name:
        score = 4.0
    else:
        score = 0.0
    if word in description_words:
        score += 3.0
    elif any(_related(word, w) for w in description_words):
        score += 1.5
    if word in server_words:
        score += 2.0
    if word in about_words:
        score += 1.0
    return score


def query_words(query: str) -> list[str]:
    found = [w for w in words(query) if w not in _STOPWORDS]
    # A query of filler words only ("what is it") still means something: keep them then.
    return list(dict.fromkeys(found or words(query)))


def search(tools: Iterable[ToolInfo], query: str, limit: int,
           about: Mapping[str, str] | None = None) -> list[ToolInfo]:
    """The best `limit` tools for `query` (module docstring; no words: every tool); `about`: the
    user's description of each server."""
    about_words = {server: set(words(text)) for server, text in (about or {}).items()}
    wanted = query_words(query)
    ordered = sorted(tools, key=lambda t: (t.server, t.name))
    if not wanted:
        return ordered[:limit]
    ranked: list[tuple[int, float, ToolInfo]] = []
    for info in ordered:
        name_words = set(words(info.name))
        name = info.name.lower()
        description_words = set(words(info.description))
        server_words = set(words(info.server))
        scores = [_score_word(w, name_words, name, description_words, server_words,
                              about_words.get(info.server, set())) for w in wanted]
        matched = sum(1 for s in scores if s > 0)
        if matched:
            ranked.append((matched, sum(scores), info))
    ranked.sort(key=lambda r: (-r[0], -r[1]))  # stable: equal ranks keep server, name order
    return [info for _, _, info in ranked[:limit]]


def tool_infos(server: str, tools: Sequence[Any]) -> list[ToolInfo]:
    """ToolInfo for each well-formed tool object of a listing."""
    out = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            description = tool.get("description")
            out.append(ToolInfo(server, tool["name"], description if isinstance(description, str) else "", tool))
    return out
