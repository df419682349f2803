"""A YAML reader that remembers where every node is, for editing a config without moving a byte.

YAML libraries do not keep spans well enough (round-trip loaders re-emit the text), so this reads
the subset configs use: one document, block and flow collections, plain, quoted and block scalars,
comments, anchors, aliases and tags; plain scalars resolve by YAML 1.2's core schema, as Continue's
library does. Directives, several documents, tabs in indentation, complex or multi-line keys are
refused with a WrapError naming line and column: a file we cannot read exactly is one we must not
edit. A mapping keeps duplicate keys, in order.
"""

from __future__ import annotations

import re

from lazyd.ctl.wrap.jsonspan import line_start, position
from lazyd.ctl.wrap.yamlnodes import Alias, Map, Member, Node, Scalar, Seq, column, line_end, resolve_plain
from lazyd.errors import WrapError

MAX_NESTING_DEPTH = 100  # configs nest a handful of levels; the recursive reader stays far from Python's limit


_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
            "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
            "L": "\u2028", "P": "\u2029"}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_FLOW_INDICATORS = ",[]{}"


class _Reader:
    def __init__(self, text: str, start: int) -> None:
        self.text = text
        self.start = start

    def fail(self, index: int, message: str) -> WrapError:
        return WrapError(f"{message} at {position(self.text, index)}")

    def spaces(self, i: int) -> int:
        """Past spaces and tabs."""
        t = self.text
        while i < len(t) and t[i] in " \t":
            i += 1
        return i

    def indicator(self, i: int, chars: str) -> bool:
        """Whether one of ``chars`` is at ``i``, followed by a blank or the end (``- ``, ``: ``)."""
        t = self.text
        return i < len(t) and t[i] in chars and (i + 1 >= len(t) or t[i + 1] in " \t\r\n")

    def skip_inline(self, i: int) -> int:
        """Past spaces (and a comment) on this line; stops at the newline or the next token."""
        t = self.text
        i = self.spaces(i)
        if i < len(t) and t[i] == "#" and (i == 0 or t[i - 1] in " \t\n"):
            i = line_end(t, i)
        return i

    def next_token(self, i: int) -> int:
        """The next content position past spaces, comments and line breaks (``len`` at the end)."""
        t = self.text
        while True:
            i = self.skip_inline(i)
            if i < len(t) and t[i] == "\r" and t[i + 1 : i + 2] == "\n":
                i += 1
            if i >= len(t) or t[i] != "\n":
                return i
            i += 1
            while i < len(t) and t[i] == " ":
                i += 1
            if i < len(t) and t[i] == "\t" and not self.at_line_end(self.skip_inline(i)):
                raise self.fail(i, "a tab in indentation")

    def at_line_end(self, i: int) -> bool:
        t = self.text
        return i >= len(t) or t[i] == "\n" or (t[i] == "\r" and t[i + 1 : i + 2] == "\n")

    def document(self) -> Node | None:
        t = self.text
        i = self.next_token(self.start)
        if i < len(t) and t[i] == "%" and column(t, i) == 0:
            raise self.fail(i, "a YAML directive (not supported)")
        if t.startswith("---", i) and column(t, i) == 0 and (i + 3 >= len(t) or t[i + 3] in " \t\r\n"):
            after = self.skip_inline(i + 3)
            if not self.at_line_end(after):
                raise self.fail(after, "content after ---")
            i = self.next_token(after)
        if i >= len(t):
            return None
        if self._marker(i):
            raise self.fail(i, "several YAML documents (not supported)")
        node, end = self.block_node(-1, i, 0)
        rest = self.next_token(end)
        if rest < len(t):
            if self._marker(rest):
                raise self.fail(rest, "several YAML documents (not supported)")
            raise self.fail(rest, "unexpected content")
        return node

    def _marker(self, i: int) -> bool:
        t = self.text
        return column(t, i) == 0 and (t.startswith("---", i) or t.startswith("...", i)) and (
            i + 3 >= len(t) or t[i + 3] in " \t\r\n")

    def properties(self, i: int) -> tuple[str | None, str | None, int]:
        t = self.text
        anchor = tag = None
        while i < len(t) and t[i] in "&!":
            j = i + 1
            while j < len(t) and t[j] not in " \t\r\n" + _FLOW_INDICATORS:
                j += 1
            if t[i] == "&":
                if anchor is not None or j == i + 1:
                    raise self.fail(i, "a bad anchor")
                anchor = t[i + 1 : j]
            else:
                if tag is not None:
                    raise self.fail(i, "two tags")
                tag = t[i:j]
            i = self.spaces(j)
        return anchor, tag, i

    def block_node(self, parent: int, i: int, depth: int) -> tuple[Node, int]:
        """The node starting at ``i`` in a block collection indented ``parent``; (node, end)."""
        if depth > MAX_NESTING_DEPTH:
            raise self.fail(i, "nesting too deep")
        t = self.text
        anchor, tag, j = self.properties(i)
        if j != i and (self.at_line_end(self.skip_inline(j))):
            # Properties alone on their line: the node follows on the next lines.
            k = self.next_token(j)
            if k < len(t) and column(t, k) > parent:
                node, end = self.block_node(parent, k, depth + 1)
                if node.anchor or node.tag:
                    raise self.fail(k, "two sets of properties")
                node.anchor, node.tag = anchor, tag
                return node, end
            return Scalar(j, j, anchor, tag, None, "empty"), j
        i = j
        c = column(t, i)
        if self.indicator(i, "-"):
            if anchor or tag:
                node, end = self.block_seq(c, i, depth)
                node.anchor, node.tag = anchor, tag
                return node, end
            return self.block_seq(c, i, depth)
        if self.indicator(i, "?"):
            raise self.fail(i, "a complex mapping key (not supported)")
        if t[i] in "|>":
            node, end = self.block_scalar(parent, i)
        elif t[i] == "*":
            node, end = self.alias(i)
        elif t[i] in "[{":
            node, end = self.flow_node(i, depth + 1)
        elif t[i] in "'\"":
            node, end = self.quoted(i)
        else:
            node, end = self.plain(i, parent, flow=False)
        if self.indicator(self.spaces(end), ":"):  # `key : value` is a key too
            if anchor or tag:
                # Properties before the first key belong to the mapping only when on a line of their own.
                raise self.fail(i, "an anchor or tag on a mapping key (not supported)")
            return self.block_map(c, i, depth)
        node.anchor, node.tag = anchor, tag
        return node, end

    def key(self, i: int) -> tuple[str, int, int]:
        """A block mapping key at ``i``: (text, key end, index past the ':')."""
        t = self.text
        if t[i] in "'\"":
            node, end = self.quoted(i)
            if node.multiline:
                raise self.fail(i, "a key over several lines")
        elif t[i] in "[{":
            raise self.fail(i, "a collection as a mapping key (not supported)")
        elif t[i] in "&!*":
            raise self.fail(i, "an anchor, tag or alias on a mapping key (not supported)")
        else:
            node, end = self.plain(i, -1, flow=False, key=True)
        after = self.spaces(end)
        if not self.indicator(after, ":"):
            raise self.fail(i, "expected a 'key:' here")
        # A key is compared as written (`1:` is the key "1"); a quoted one as decoded.
        return (t[i:end] if node.style == "plain" else str(node.value)), end, after + 1

    def block_map(self, c: int, i: int, depth: int) -> tuple[Map, int]:
        t = self.text
        result = Map(i, i)
        end = i
        while True:
            key, key_end, j = self.key(i)
            value, end = self.block_value(c, j, depth, allow_compact_seq=True)
            result.members.append(Member(key, i, key_end, value))
            result.end = end
            k = self.next_token(end)
            if k >= len(t) or column(t, k) < c or self._marker(k):
                return result, end
            if column(t, k) > c:
                raise self.fail(k, "bad indentation")
            i = k

    def block_value(self, c: int, j: int, depth: int, allow_compact_seq: bool) -> tuple[Node, int]:
        """The value after a ':' (or '-') at column ``c``; ``j`` is just past the indicator."""
        t = self.text
        k = self.skip_inline(j)
        if self.at_line_end(k):
            n = self.next_token(k)
            if n < len(t) and not self._marker(n):
                if column(t, n) > c:
                    return self.block_node(c, n, depth + 1)
                if allow_compact_seq and column(t, n) == c and self.indicator(n, "-"):
                    return self.block_seq(c, n, depth + 1)
            return Scalar(j, j, None, None, None, "empty"), j
        node, end = self.block_node(c, k, depth + 1)
        if allow_compact_seq and isinstance(node, Map | Seq) and not node.flow:
            # `key: a: b` or `key: - a`: only a sequence item may open a block collection on its line.
            raise self.fail(k, "a block collection on its key's line")
        return node, end

    def block_seq(self, c: int, i: int, depth: int) -> tuple[Seq, int]:
        t = self.text
        result = Seq(i, i)
        while True:
            item, end = self.block_value(c, i + 1, depth, allow_compact_seq=False)
            result.items.append(item)
            result.marks.append(i)
            result.end = max(end, i + 1)
            k = self.next_token(result.end)
            if k >= len(t) or column(t, k) < c or self._marker(k):
                return result, result.end
            if column(t, k) > c or not self.indicator(k, "-"):
                if column(t, k) == c:
                    return result, result.end  # a compact sequence ends at its mapping's next key
                raise self.fail(k, "bad indentation")
            i = k

    def alias(self, i: int) -> tuple[Alias, int]:
        t = self.text
        j = i + 1
        while j < len(t) and t[j] not in " \t\r\n" + _FLOW_INDICATORS:
            j += 1
        if j == i + 1:
            raise self.fail(i, "a bad alias")
        return Alias(i, j, name=t[i + 1 : j]), j

    def plain(self, i: int, parent: int, *, flow: bool, key: bool = False) -> tuple[Scalar, int]:
        """A plain scalar from ``i``. In block context, lines indented past ``parent`` continue it
        (folded into one space, or a newline per blank line); a comment ends it."""
        t = self.text
        stops = " \t\r\n" + (_FLOW_INDICATORS if flow else "")
        if t[i] in "#,[]{}&*!|>'\"%@`" or (t[i] in "-?:" and (i + 1 >= len(t) or t[i + 1] in stops)):
            raise self.fail(i, "a scalar cannot start here")
        pieces: list[str] = []
        piece_start = end = j = i
        while True:
            while j < len(t) and t[j] not in "\r\n":
                ch = t[j]
                if (ch == ":" and (j + 1 >= len(t) or t[j + 1] in stops)) or (ch == "#" and t[j - 1] in " \t"):
                    break
                if flow and ch in _FLOW_INDICATORS:
                    break
                j += 1
            piece_end = j
            while piece_end > piece_start and t[piece_end - 1] in " \t":
                piece_end -= 1
            pieces.append(t[piece_start:piece_end])
            end = piece_end
            if key or (j < len(t) and t[j] not in "\r\n"):
                break  # stopped at ':', a comment or a flow indicator
            n = self.next_token(j)
            if n >= len(t) or self._marker(n) or "#" in t[j:n] or (not flow and column(t, n) <= parent):
                break
            if flow and t[n] in _FLOW_INDICATORS + ":":
                break
            blank_lines = t.count("\n", j, n) - 1
            pieces.append("\n" * blank_lines if blank_lines else " ")
            piece_start = j = n
        if len(pieces) == 1:
            return Scalar(i, end, None, None, resolve_plain(pieces[0]), "plain", False), end
        return Scalar(i, end, None, None, "".join(pieces), "plain", True), end

    def quoted(self, i: int) -> tuple[Scalar, int]:
        t = self.text
        quote = t[i]
        j = i + 1
        out: list[str] = []
        multiline = False
        while True:
            if j >= len(t):
                raise self.fail(i, "an unterminated quoted scalar")
            ch = t[j]
            if ch == quote:
                if quote == "'" and t[j + 1 : j + 2] == "'":
                    out.append("'")
                    j += 2
                    continue
                return Scalar(i, j + 1, None, None, "".join(out), quote, multiline), j + 1
            if ch == "\\" and quote == '"':
                esc = t[j + 1 : j + 2]
                if esc in _ESCAPES:
                    out.append(_ESCAPES[esc])
                    j += 2
                elif esc in _HEX_ESCAPES:
                    digits = t[j + 2 : j + 2 + _HEX_ESCAPES[esc]]
                    if len(digits) != _HEX_ESCAPES[esc] or not all(d in "0123456789abcdefABCDEF" for d in digits):
                        raise self.fail(j, "a bad escape")
                    out.append(chr(int(digits, 16)))
                    j += 2 + len(digits)
                elif esc in ("\n", "\r"):
                    multiline = True
                    j = self._fold_break(j + 1, out, escaped=True)
                else:
                    raise self.fail(j, "a bad escape")
                continue
            if ch in "\r\n":
                multiline = True
                while out and out[-1] in (" ", "\t"):
                    out.pop()
                j = self._fold_break(j, out, escaped=False)
                continue
            out.append(ch)
            j += 1

    def _fold_break(self, j: int, out: list[str], *, escaped: bool) -> int:
        """Past a line break inside a quoted scalar and the next line's indentation; folds it."""
        t = self.text
        breaks = 0
        while j < len(t) and t[j] in " \t\r\n":
            if t[j] == "\n":
                breaks += 1
            j += 1
        if self._marker(line_start(t, j)) and column(t, j) == 0:
            raise self.fail(j, "a document marker inside a quoted scalar")
        if not escaped:
            out.append("\n" * (breaks - 1) if breaks > 1 else " ")
        elif breaks > 1:
            out.append("\n" * (breaks - 1))
        return j

    def block_scalar(self, parent: int, i: int) -> tuple[Scalar, int]:
        t = self.text
        style = t[i]
        j = i + 1
        indent_indicator = 0
        chomp = "clip"
        while j < len(t) and t[j] in "+-123456789":
            if t[j] in "+-":
                chomp = "keep" if t[j] == "+" else "strip"
            else:
                indent_indicator = int(t[j])
            j += 1
        k = self.skip_inline(j)
        if not self.at_line_end(k):
            raise self.fail(k, "content after a block scalar indicator")
        lines: list[str] = []
        end = k
        pos = line_end(t, k) + 1
        content_indent = max(parent, 0) + indent_indicator if indent_indicator else None
        while pos <= len(t):
            e = line_end(t, pos)
            line = t[pos:e].rstrip("\r")
            stripped = line.lstrip(" ")
            spaces = len(line) - len(stripped)
            if not stripped:
                lines.append("")
                if e >= len(t):
                    break
                pos = e + 1
                continue
            if content_indent is None:
                if spaces <= parent:
                    break
                content_indent = spaces
            if spaces < content_indent:
                break
            lines.append(line[content_indent:])
            end = e if not t[pos:e].endswith("\r") else e - 1
            if e >= len(t):
                break
            pos = e + 1
        trailing = 0
        while lines and lines[-1] == "" and len(lines) > 0:
            lines.pop()
            trailing += 1
        if style == "|":
            body = "\n".join(lines)
        else:
            # Folding: a lone line break is a space, each further one a newline (more-indented
            # lines, which keep theirs, are not told apart: folded values are never edited).
            body = re.sub(r"\n(\n*)", lambda m: m.group(1) or " ", "\n".join(lines))
        if body and chomp != "strip":
            body += "\n" + ("\n" * trailing if chomp == "keep" else "")
        return Scalar(i, end, None, None, body, style, True), end

    def flow_node(self, i: int, depth: int) -> tuple[Node, int]:
        if depth > MAX_NESTING_DEPTH:
            raise self.fail(i, "nesting too deep")
        t = self.text
        anchor, tag, j = self.properties(i)
        i = j
        if i >= len(t):
            raise self.fail(i, "unexpected end in a flow collection")
        ch = t[i]
        node: Node
        if ch == "[":
            node, end = self.flow_seq(i, depth)
        elif ch == "{":
            node, end = self.flow_map(i, depth)
        elif ch == "*":
            node, end = self.alias(i)
        elif ch in "'\"":
            node, end = self.quoted(i)
        else:
            node, end = self.plain(i, -1, flow=True)
        node.anchor, node.tag = anchor, tag
        return node, end

    def flow_seq(self, i: int, depth: int) -> tuple[Seq, int]:
        t = self.text
        result = Seq(i, i, flow=True)
        j = self.next_token(i + 1)
        while True:
            if j >= len(t):
                raise self.fail(i, "an unterminated flow sequence")
            if t[j] == "]":
                result.end = j + 1
                return result, j + 1
            item, end = self.flow_node(j, depth + 1)
            k = self.next_token(end)
            if k < len(t) and t[k] == ":":
                raise self.fail(j, "a key: value pair inside a flow sequence (not supported)")
            result.items.append(item)
            if k < len(t) and t[k] == ",":
                j = self.next_token(k + 1)
            elif k < len(t) and t[k] == "]":
                j = k
            else:
                raise self.fail(k, "expected ',' or ']'")

    def flow_map(self, i: int, depth: int) -> tuple[Map, int]:
        t = self.text
        result = Map(i, i, flow=True)
        j = self.next_token(i + 1)
        while True:
            if j >= len(t):
                raise self.fail(i, "an unterminated flow mapping")
            if t[j] == "}":
                result.end = j + 1
                return result, j + 1
            if t[j] in "[{&!*?":
                raise self.fail(j, "a key that is not a scalar (not supported)")
            if t[j] in "'\"":
                key_node, key_end = self.quoted(j)
            else:
                key_node, key_end = self.plain(j, -1, flow=True)
            if key_node.multiline:
                raise self.fail(j, "a key over several lines")
            key = t[j:key_end] if key_node.style == "plain" else str(key_node.value)
            k = self.next_token(key_end)
            if k < len(t) and t[k] == ":":
                v = self.next_token(k + 1)
                if v < len(t) and t[v] in ",}":
                    value: Node = Scalar(k + 1, k + 1, None, None, None, "empty")
                    end = k + 1
                else:
                    value, end = self.flow_node(v, depth + 1)
            else:
                value, end = Scalar(key_end, key_end, None, None, None, "empty"), key_end
            result.members.append(Member(key, j, key_end, value))
            n = self.next_token(end)
            if n < len(t) and t[n] == ",":
                j = self.next_token(n + 1)
            elif n < len(t) and t[n] == "}":
                j = n
            else:
                raise self.fail(n, "expected ',' or '}'")


def parse(text: str, start: int = 0) -> Node | None:
    """Read the document in ``text`` (from ``start``, past a byte-order mark); None if empty."""
    return _Reader(text, start).document()
