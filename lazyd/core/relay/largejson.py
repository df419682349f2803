"""`json.loads` of a large line whose bulk is long plain strings, at memchr speed for their bytes.

A 1 MiB `tools/call` is nearly all one string (a file, a base64 blob). `json.loads` walks each of
its characters in Python's C scanner, after decoding the whole line: ~1 ms per MiB, the largest
part of what relaying the request costs the daemon (docs/benchmarks.md, "The 1 MiB echo, fifth
pass"). What makes a plain string's bytes valid JSON is simple enough to check with one-byte
finds (memchr, ~15 us per MiB each): no control character (U+0000 to U+001F), no quotation mark
(it would end the string) and valid UTF-8 (`json.loads` reads bytes as UTF-8, lone surrogates
allowed). So `loads`, for a line with no backslash at all:

1. cuts the line at its quotation marks: with no backslash, none is escaped, so between the
   first and the second, the third and the fourth, ... lie the strings, and nothing else does;
2. checks each long string's bytes as above and decodes them (at C speed: no JSON to scan);
3. parses the line with each long string's bytes replaced by a placeholder (`json.loads` of a
   few hundred bytes: the structure, the numbers, the keys and the short strings are judged by
   the parser itself, exactly as before), and puts the decoded strings where the placeholders
   came out.

The result is the object `json.loads(line)` gives, and a line it refuses is refused: whatever
this path cannot be sure of (a backslash anywhere, which is every escaped newline or quotation
mark, a line not opening an object, too many strings, a long string as a key, or any check
failing) is left to `json.loads(line)` itself, whose verdict and error stand.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["LONG_STRING_BYTES", "loads"]

LONG_STRING_BYTES = 4096  # a string this long is checked by finds; shorter ones are parsed
_MAX_QUOTES = 4096  # a line of more strings than this is parsed whole (each costs a find here)
_CONTROLS = tuple(bytes([c]) for c in range(0x20))
# A placeholder cannot be mistaken for a string of the line: it holds U+0000, which a string
# of a line with no backslash cannot (a raw control character is refused, an escaped one
# needs a backslash).
_MARK = "\x00"


def loads(line: bytes) -> Any:
    """`json.loads(line)` (same result, same errors), cheaper when long plain strings make it up."""
    fast = _with_long_strings(line)
    return json.loads(line) if fast is None else fast[0]


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
