"""A session's roots: what it declared, as a key that sessions must share to share a process.

The relay asks a client that declares `roots` itself (docs/relay.md, "Roots are a session's"), and
answers a server's `roots/list` with the roots of the sessions its process serves: equal by the
join (lazyd/core/sharing/join.py), or, where one changed since, only those they all have, so no
session reaches a root it did not declare. Pure.
"""

from __future__ import annotations

import hashlib
import json

from lazyd.core.relay.jsonrpc import JsonObj

# A root as a client gave it: its uri and its optional name (names are shown by some servers).
Root = tuple[str, str | None]

# The key of a session that does not declare `roots`: a server asking it gets an error, as on a
# direct connection, so it shares only with sessions that declare none either.
NO_ROOTS = "roots: none declared"
# The key of a session that declares `roots` but did not answer the relay's `roots/list` in time.
UNANSWERED = "roots: not answered"


def parse_roots(result: object) -> tuple[Root, ...] | None:
    """The roots of a `ListRootsResult` (None: not one); the key ignores order and duplicates."""
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
    """Equal sets of (uri, name), equal keys; a digest, so no path is spelled out in logs."""
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
