"""A JSON-RPC line as every reader in lazyd reads it: `json.loads`, a bound on nesting, the ids taken.

The shim reading its client's stdin (lazyd/protocol/linepeek.py), the relay core (lazyd/core/relay/jsonrpc.py)
and through it a hand-off session's ledger read a line with `read` here, so that no two of them can
differ on what a line says: the object `json.loads` gives (the last of repeated keys wins), or a
refusal. Standard library only: the shim imports it on the frame path.

Nesting. A line whose containers nest deeper than MAX_NESTING_DEPTH is refused (TOO_DEEP), and
so is one too deep for the parser to finish at all: the C parser recurses once
per level and gives up at the interpreter's recursion limit, which depends on how deep the
caller's stack already is; every line it gives up on is far deeper than the bound, so the verdict
is the same whoever reads the line. The work is bounded either way: the parser stops at the
limit, and the exact depth is walked (without recursion) only for a line holding more brackets
than the bound.

Ids. A request id is a string or an integer that msgpack carries, from -2^63 to 2^64-1: the wire
carries a client's id back to the shim with each final answer (`done`, docs/protocol.md). Any other
JSON number (a fraction, an exponent, an integer beyond those bounds) is no id (`valid_id`).

Large lines (`LARGE_LINE_BYTES` and over) are parsed at memchr speed for their long plain strings.
A 1 MiB `tools/call` is nearly all one string (a file, a base64 blob). `json.loads` walks each of
its characters in Python's C scanner, after decoding the whole line: ~1 ms per MiB, the largest
part of what relaying the request costs the daemon (docs/benchmarks.md, "The 1 MiB echo, fifth
pass"). What makes a plain string's bytes valid JSON is simple enough to check with one-byte
finds (memchr, ~15 us per MiB each): no control character (U+0000 to U+001F), no quotation mark
(it would end the string) and valid UTF-8 (`json.loads` reads bytes as UTF-8, lone surrogates
allowed). So for a line with no backslash at all, `read`:

1. cuts the line at its quotation marks: with no backslash, none is escaped, so between the
   first and the second, the third and the fourth, ... lie the strings, and nothing else does;
2. checks each long string's bytes as above and decodes them (at C speed: no JSON to scan);
3. parses the line with each long string's bytes replaced by a placeholder (`json.loads` of a
   few hundred bytes: the structure, the numbers, the keys and the short strings are judged by
   the parser itself, exactly as before), and puts the decoded strings where the placeholders
   came out.

The result is the object `json.loads(line)` gives, and a line it refuses is refused: whatever
this path cannot be sure of (a backslash anywhere, which is every escaped newline or quotation
mark, a line not opening an object, too many strings, a long string as a key, a placeholder a
repeated key dropped, or any check failing) is left to `json.loads(line)` itself, whose verdict
and error stand.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the shim start-up time
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ID_MAX", "ID_MIN", "LARGE_LINE_BYTES", "LONG_STRING_BYTES", "MAX_NESTING_DEPTH", "NOT_JSON", "TOO_DEEP",
           "read", "valid_id"]

MAX_NESTING_DEPTH = 256
# Containers nested deeper than this are refused: far beyond any real schema, and shallow enough
# that re-encoding (the C encoder recurses once per level) never meets the interpreter's recursion
# limit, whatever the call depth of the code that re-serialises.
ID_MIN, ID_MAX = -(2**63), 2**64 - 1  # the integers msgpack carries
LARGE_LINE_BYTES = 64 * 1024  # from this size on, long plain strings are checked by finds

LONG_STRING_BYTES = 4096  # a string this long is checked by finds; shorter ones are parsed
_MAX_QUOTES = 4096  # a line of more strings than this is parsed whole (each costs a find here)
_CONTROLS = tuple(bytes([c]) for c in range(0x20))
# A placeholder cannot be mistaken for a string of the line: it holds U+0000, which a string
# of a line with no backslash cannot (a raw control character is refused, an escaped one
# needs a backslash).
_MARK = "\x00"


NOT_JSON, TOO_DEEP = "not JSON", "too deep"  # why `read` refuses a line


def read(line: bytes) -> tuple[Any, str | None]:
    """What `line` says: (value, None) for a line `json.loads` reads within the nesting bound;
    (None, NOT_JSON) for one it refuses; (value, TOO_DEEP) for one nested deeper than the bound,
    value being what the parser made of it, or None when it was too deep for the parser to finish
    (see the module docstring). Never raises."""
    try:
        if len(line) >= LARGE_LINE_BYTES and (fast := _with_long_strings(line)) is not None:
            value = fast[0]
        else:
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


def _with_long_strings(line: bytes) -> tuple[Any] | None:
    """The parsed line in a 1-tuple, or None when this path cannot decide (see the docstring)."""
    # An object's first bytes, `{` and no NUL, are what has `json.loads` read the line and the
    # placeholders' version of it alike as UTF-8.
    if line[:1] != b"{" or line[1:2] == b"\0" or line.find(b"\\") >= 0:
        return None
    quotes: list[int] = []
    at = line.find(b'"')
    while at >= 0:
        if len(quotes) >= _MAX_QUOTES:
            return None
        quotes.append(at)
        at = line.find(b'"', at + 1)
    if len(quotes) % 2:
        # A string that never ends: the parser's error to give (the placeholders' version of the
        # line would hold the same unpaired quotation mark: this only spares its parse).
        return None
    parts: list[bytes | memoryview] = []
    texts: list[str] = []
    view = memoryview(line)
    last = 0
    for opening, closing in zip(quotes[::2], quotes[1::2]):
        start, end = opening + 1, closing
        if end - start < LONG_STRING_BYTES:
            continue
        if any(line.find(control, start, end) >= 0 for control in _CONTROLS):
            return None
        try:
            texts.append(str(view[start:end], "utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            return None
        parts.append(view[last:start])
        parts.append(b"\\u0000%d" % (len(texts) - 1))  # the placeholder, as JSON: _MARK + its index
        last = end
    if not texts:
        return None
    parts.append(view[last:])
    try:
        skeleton = json.loads(b"".join(parts))
    except (ValueError, RecursionError):
        return None
    placed = _place(skeleton, texts)
    return (skeleton,) if placed == len(texts) else None


def _place(value: Any, texts: list[str]) -> int:
    """Put each text where its placeholder came out (a dict's value or a list's item); returns
    how many were put. A placeholder as a key is not put (the caller then parses the line whole)."""
    placed = 0
    stack = [value]
    while stack:
        container = stack.pop()
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in items:
            if isinstance(item, str):
                if item[:1] == _MARK:
                    container[key] = texts[int(item[1:])]
                    placed += 1
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return placed


def _brackets_above(line: bytes, limit: int) -> bool:
    """Whether `line` holds more than `limit` of "[" and "{" in all: a bound from above on how
    deep it nests, at C speed. A large line is scanned with one-byte finds (memchr) that stop
    past the limit: `bytes.count` walks a megabyte at about 2 GB/s, twice, where a line with
    few brackets is two memchr passes."""
    if len(line) < _MEMCHR_ABOVE_BYTES:
        return line.count(b"[") + line.count(b"{") > limit
    found = 0
    for bracket in (b"[", b"{"):
        pos = line.find(bracket)
        while pos >= 0:
            found += 1
            if found > limit:
                return True
            pos = line.find(bracket, pos + 1)
    return False


_MEMCHR_ABOVE_BYTES = 4096


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
