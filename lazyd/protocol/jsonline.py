"""A JSON-RPC line as every reader in lazyd reads it: `json.loads`, a bound on nesting, the ids taken.

The shim reading its client's stdin (lazyd/protocol/linepeek.py), the relay core (lazyd/core/relay/jsonrpc.py)
and through it a hand-off session's ledger read a line with `read` here, so that no two of them can
differ on what a line says: the object `json.loads` gives (the last of repeated keys wins), or a
refusal. Standard library only: the shim imports it on the frame path.

Nesting. A line whose containers nest deeper than MAX_NESTING_DEPTH is refused (TOO_DEEP), and
so is one too deep for the parser to finish at all: the C parser recurses once per level and gives
up at the interpreter's recursion limit, which depends on how deep the caller's stack already is;
every line it gives up on is far deeper than the bound, so the verdict is the same whoever reads
the line. The exact depth is walked (without recursion) only for a line holding more brackets
than the bound.

Ids. A request id is a string or an integer that msgpack carries, from -2^63 to 2^64-1: the wire
carries a client's id back to the shim with each final answer (`done`, docs/protocol.md). Any other
JSON number (a fraction, an exponent, an integer beyond those bounds) is no id (`valid_id`).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the shim start-up time
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

MAX_NESTING_DEPTH = 256
# Containers nested deeper than this are refused: far beyond any real schema, and shallow enough
# that re-encoding (the C encoder recurses once per level) never meets the interpreter's recursion
# limit, whatever the call depth of the code that re-serialises.
ID_MIN, ID_MAX = -(2**63), 2**64 - 1  # the integers msgpack carries

NOT_JSON, TOO_DEEP = "not JSON", "too deep"  # why `read` refuses a line


def read(line: bytes) -> tuple[Any, str | None]:
    """What `line` says: (value, None) for a line `json.loads` reads within the nesting bound;
    (None, NOT_JSON) for one it refuses; (value, TOO_DEEP) for one nested deeper than the bound,
    value being what the parser made of it, or None when it was too deep for the parser to finish
    (see the module docstring). Never raises."""
    try:
        value = json.loads(line)
    except RecursionError:
        return None, TOO_DEEP
    except ValueError:  # not JSON, or not text (UnicodeDecodeError is a ValueError)
        return None, NOT_JSON
    if _brackets_above(line, MAX_NESTING_DEPTH) and _deeper_than(value, MAX_NESTING_DEPTH):
        return value, TOO_DEEP
    return value, None


def valid_id(value: object) -> bool:
    """Whether `value` is a request id lazyd takes: a string, or an integer msgpack carries."""
    if type(value) is int:  # not bool, a subclass of int
        return ID_MIN <= value <= ID_MAX
    return isinstance(value, str)


_DECODER = json.JSONDecoder()
_SPACES = " \t\r\n"


def members(text: str, pos: int) -> Iterator[tuple[str, Any, int]]:
    """The members of the JSON object whose text continues at `pos` (just past its "{", or at a ","
    or "}" after a member), as the JSON scanner reads them: (key, value, where the value ends).
    It stops at the object's end, or before the first member the text does not hold whole (a line
    cut off, or not JSON there)."""
    end = len(text)
    while True:
        while pos < end and text[pos] in _SPACES:
            pos += 1
        if pos < end and text[pos] == ",":
            pos += 1
            while pos < end and text[pos] in _SPACES:
                pos += 1
        if pos >= end or text[pos] != '"':
            return
        try:
            key, pos = _DECODER.raw_decode(text, pos)
            while pos < end and text[pos] in _SPACES:
                pos += 1
            if pos >= end or text[pos] != ":":
                return
            pos += 1
            while pos < end and text[pos] in _SPACES:
                pos += 1
            value, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):  # cut off, or not JSON
            return
        if pos >= end and type(value) in (int, float):  # a number at the cut may go on past it
            return
        yield key, value, pos


def _brackets_above(line: bytes, limit: int) -> bool:
    """Whether `line` holds more than `limit` of "[" and "{" in all: a bound from above on how deep
    it nests, found with one-byte finds (memchr) that stop past the limit (`bytes.count` walks all)."""
    found = 0
    for bracket in (b"[", b"{"):
        pos = line.find(bracket)
        while pos >= 0:
            found += 1
            if found > limit:
                return True
            pos = line.find(bracket, pos + 1)
    return False


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether containers in `value` nest more than `limit` levels (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            return True
        children = container.values() if isinstance(container, dict) else container
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
