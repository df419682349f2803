"""A JSON scanner that remembers where every value is, for editing a config without moving a byte.

It builds the span tree (lazyd/ctl/wrap/spans.py), so that an edit keeps key order, indentation,
CRLF, ``1e3``, ``\\u00e9`` and the trailing newline. Strict JSON unless a ``Dialect`` allows
comments (JSONC, which VS Code and Gemini CLI read) or trailing commas (VS Code). Duplicate keys
are kept, in order: refusing is the editor's decision, and only along the path it edits. Errors
are ``JsonSyntaxError`` with a 1-based line and column.
"""

from __future__ import annotations

import gc
import json
import json.decoder
import re
from collections.abc import Callable
from dataclasses import dataclass

from lazyd.ctl.wrap.spans import Array, Member, Node, Object, Scalar, position
from lazyd.errors import JsonSyntaxError

MAX_NESTING_DEPTH = 200  # configs nest a handful of levels; the recursive scanner stays far from Python's limit

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?", re.ASCII)
_WHITESPACE_RUN = re.compile(r"[ \t\n\r]*")  # always matches (possibly empty): one C call per gap
_LITERALS = {"true": True, "false": False, "null": None}
# The stdlib's own (C) string scanner: exact JSON string rules, and it says where a string ends.
_scanstring: Callable[[str, int, bool], tuple[str, int]] = getattr(json.decoder, "scanstring")


@dataclass(frozen=True)
class Dialect:
    """Which JSON extensions a client accepts in its file (we only ever preserve them)."""

    comments: bool = False
    trailing_commas: bool = False


STRICT = Dialect()


def parse(text: str, dialect: Dialect = STRICT, *, start: int = 0) -> Node:
    """Parse the document in ``text[start:]``; raise JsonSyntaxError unless it is exactly one value."""
    scanner = _Scanner(text, dialect)
    # The tree is acyclic, but building many nodes triggers the cycle collector again and again
    # (docs/benchmarks.md, "lazyctl and the floors"): it is paused while we build.
    collecting = gc.isenabled()
    gc.disable()
    try:
        pos = scanner.skip(start)
        node = scanner.value(pos, 0)
        end = scanner.skip(node.end)
        if end != len(text):
            scanner.fail(end, "unexpected text after the document")
        return node
    finally:
        if collecting:
            gc.enable()


class _Scanner:
    def __init__(self, text: str, dialect: Dialect) -> None:
        self.text = text
        self.dialect = dialect

    def fail(self, index: int, message: str) -> None:
        raise JsonSyntaxError(f"{position(self.text, index)}: {message}")

    def skip(self, pos: int) -> int:
        """The index of the next token at or after ``pos`` (whitespace and allowed comments skipped)."""
        text = self.text
        while True:
            pos = _WHITESPACE_RUN.match(text, pos).end()  # type: ignore[union-attr]
            if not self.dialect.comments or not text.startswith("/", pos):
                return pos
            if text.startswith("//", pos):
                newline = text.find("\n", pos)
                pos = len(text) if newline < 0 else newline + 1
            elif text.startswith("/*", pos):
                close = text.find("*/", pos + 2)
                if close < 0:
                    self.fail(pos, "unterminated /* comment")
                pos = close + 2
            else:
                return pos

    def value(self, pos: int, depth: int) -> Node:
        text = self.text
        if pos >= len(text):
            self.fail(pos, "unexpected end of file, expected a value")
        char = text[pos]
        if char == "{":
            return self.object(pos, depth + 1)
        if char == "[":
            return self.array(pos, depth + 1)
        if char == '"':
            value, end = self.string(pos)
            return Scalar(pos, end, value=value)
        number = _NUMBER.match(text, pos)
        if number is not None:
            spelled = number.group()
            return Scalar(pos, number.end(), value=json.loads(spelled))
        for word, literal in _LITERALS.items():
            if text.startswith(word, pos):
                return Scalar(pos, pos + len(word), value=literal)
        self.fail(pos, f"expected a value, found {text[pos]!r}")
        raise AssertionError("unreachable")

    def string(self, pos: int) -> tuple[str, int]:
        try:
            return _scanstring(self.text, pos + 1, True)
        except json.JSONDecodeError as exc:
            self.fail(exc.pos, f"bad string: {exc.msg}")
            raise AssertionError("unreachable") from None

    def _enter(self, pos: int, depth: int) -> None:
        if depth > MAX_NESTING_DEPTH:
            self.fail(pos, f"nested deeper than {MAX_NESTING_DEPTH} levels")

    def object(self, open_pos: int, depth: int) -> Object:
        self._enter(open_pos, depth)
        text = self.text
        node = Object(open_pos, -1)
        pos = self.skip(open_pos + 1)
        while True:
            if pos < len(text) and text[pos] == "}" and (not node.members or self.dialect.trailing_commas):
                node.end = pos + 1
                return node
            if pos >= len(text) or text[pos] != '"':
                self.fail(pos, "expected a member name in double quotes" + ("" if node.members else " or '}'"))
            key, key_end = self.string(pos)
            colon = self.skip(key_end)
            if colon >= len(text) or text[colon] != ":":
                self.fail(colon, "expected ':' after the member name")
            value = self.value(self.skip(colon + 1), depth)
            node.members.append(Member(key, pos, key_end, value))
            pos = self.skip(value.end)
            if pos < len(text) and text[pos] == ",":
                pos = self.skip(pos + 1)
                if pos < len(text) and text[pos] == "}" and not self.dialect.trailing_commas:
                    self.fail(pos, "trailing comma before '}'")
                continue
            if pos < len(text) and text[pos] == "}":
                node.end = pos + 1
                return node
            self.fail(pos, "expected ',' or '}' after an object member")

    def array(self, open_pos: int, depth: int) -> Array:
        self._enter(open_pos, depth)
        text = self.text
        node = Array(open_pos, -1)
        pos = self.skip(open_pos + 1)
        if pos < len(text) and text[pos] == "]":
            node.end = pos + 1
            return node
        while True:
            item = self.value(pos, depth)
            node.items.append(item)
            pos = self.skip(item.end)
            if pos < len(text) and text[pos] == ",":
                pos = self.skip(pos + 1)
                if pos < len(text) and text[pos] == "]":
                    if not self.dialect.trailing_commas:
                        self.fail(pos, "trailing comma before ']'")
                    node.end = pos + 1
                    return node
                continue
            if pos < len(text) and text[pos] == "]":
                node.end = pos + 1
                return node
            self.fail(pos, "expected ',' or ']' after an array element")
