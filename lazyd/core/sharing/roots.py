"""A session's roots: what it declared, as a key that sessions must share to share a process.

A client that declares the `roots` capability is asked `roots/list` by the relay itself
(docs/relay.md, "Roots are a session's"); its answer is the session's roots. A server asking
`roots/list` is answered by the relay with the roots of the sessions its process serves, never
routed to some other client: a process serves only sessions whose roots are equal (the key below
is part of the join, lazyd/core/sharing/join.py), and where they still differ (a session's roots
changed while it shared a process) the server is given only the roots they all have, so no
session ever reaches a root it did not declare.

Pure: plain JSON in, plain values out.
"""

from __future__ import annotations

import hashlib
import json

from lazyd.core.relay.jsonrpc import JsonObj

__all__ = ["NO_ROOTS", "UNANSWERED", "Root", "common_roots", "parse_roots", "roots_key", "roots_result"]

# A root as a client gave it: its uri and its optional name (names are shown by some servers).
Root = tuple[str, str | None]

# The key of a session that does not declare `roots`: a server asking it gets an error, as on a
# direct connection, so it shares only with sessions that declare none either.
NO_ROOTS = "roots: none declared"
# The key of a session that declares `roots` but did not answer the relay's `roots/list` in time.
UNANSWERED = "roots: not answered"


def parse_roots(result: object) -> tuple[Root, ...] | None:
    """The roots of a `ListRootsResult` (None: not one). Order and duplicates are the client's
    business: the key below ignores them."""
    if not isinstance(result, dict) or not isinstance(result.get("roots"), list):
        return None
    roots: list[Root] = []
    for item in result["roots"]:
        if not isinstance(item, dict) or not isinstance(item.get("uri"), str):
            return None
        name = item.get("name")
        roots.append((item["uri"], name if isinstance(name, str) else None))
    return tuple(roots)


def roots_key(roots: tuple[Root, ...]) -> str:
    """The key of a session that declared these roots: equal sets of (uri, name), equal keys. A
    digest, so that no path is spelled out where keys are shown or logged."""
    canonical = json.dumps(sorted(set(roots), key=lambda r: (r[0], r[1] or "")), separators=(",", ":"))
    return "roots: " + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def common_roots(sets: list[tuple[Root, ...]]) -> tuple[Root, ...]:
    """The roots every one of `sets` has, in the order of the first (none when `sets` is empty)."""
    if not sets:
        return ()
    others = [set(s) for s in sets[1:]]
    seen: set[Root] = set()
    out: list[Root] = []
    for root in sets[0]:
        if root not in seen and all(root in other for other in others):
            seen.add(root)
            out.append(root)
    return tuple(out)


def roots_result(roots: tuple[Root, ...]) -> JsonObj:
    """A `ListRootsResult` holding `roots`."""
    return {"roots": [{"uri": uri, **({"name": name} if name is not None else {})} for uri, name in roots]}
