"""A YAML reader that remembers where every node is, for editing a config without moving a byte.

PyYAML's event stream carries where each scalar and flow collection starts and ends; this builds
from it nodes with their spans (a block collection spans from its first indicator to the end of
its last node), and the value of a plain scalar by YAML 1.2's core schema, as Continue's own
library reads it (PyYAML alone would read ``yes`` as true). Several documents, directives, and
keys that are collections, carry properties or span lines are refused with a WrapError naming
line and column: a file we cannot read exactly is one we must not edit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import yaml
import yaml.events as ev

from lazyd.ctl.wrap.spans import Alias, Array, Member, Node, Object, Scalar, position
from lazyd.errors import WrapError

MAX_NESTING_DEPTH = 100  # configs nest a handful of levels; the recursive builder stays far from Python's limit


_NULLS = {"", "~", "null", "Null", "NULL"}
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}
_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


def resolve_plain(text: str) -> object:
    """A plain scalar's value by the YAML 1.2 core schema."""
    if text in _NULLS:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if _INT.fullmatch(text):
        if text.startswith("0o"):
            return int(text[2:], 8)
        return int(text, 16) if text.startswith("0x") else int(text)
    if _FLOAT.fullmatch(text):
        lowered = text.lower()
        if lowered.endswith("inf"):
            return float("-inf") if lowered.startswith("-") else float("inf")
        return float("nan") if lowered.endswith("nan") else float(text)
    return text


def parse(text: str, start: int = 0) -> Node | None:
    """Read the document in ``text`` (from ``start``, past a byte-order mark); None if empty."""
    try:
        events = list(yaml.parse(text[start:], Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise WrapError(f"{exc.context + ': ' if exc.context else ''}{exc.problem}{where}") from None
    except yaml.YAMLError as exc:
        raise WrapError(" ".join(str(exc).split())) from None
    return _Builder(text, start).document(events)


class _Builder:
    def __init__(self, text: str, offset: int) -> None:
        self.text = text
        self.offset = offset

    def fail(self, index: int, message: str) -> WrapError:
        return WrapError(f"{message} at {position(self.text, index)}")

    def at(self, mark: yaml.Mark) -> int:
        return self.offset + int(mark.index)

    def document(self, events: list[ev.Event]) -> Node | None:
        starts = [e for e in events if isinstance(e, ev.DocumentStartEvent)]
        if len(starts) > 1:
            raise self.fail(self.at(starts[1].start_mark), "several YAML documents (not supported)")
        if not starts:
            return None
        if starts[0].version is not None or starts[0].tags:
            raise self.fail(self.at(starts[0].start_mark), "a YAML directive (not supported)")
        stream = iter(events[events.index(starts[0]) + 1 :])
        node = self.node(next(stream), stream, 0)
        if isinstance(node, Scalar) and node.style == "empty" and node.anchor is None and node.tag is None:
            return None
        return node

    def node(self, event: ev.Event, stream: Iterator[ev.Event], depth: int) -> Node:
        start, end = self.at(event.start_mark), self.at(event.end_mark)
        if depth > MAX_NESTING_DEPTH:
            raise self.fail(start, "nesting too deep")
        if isinstance(event, ev.AliasEvent):
            return Alias(start, end, name=str(event.anchor))
        assert isinstance(event, ev.NodeEvent)
        if event.anchor is not None or event.tag is not None:
            start = self.past_properties(start)
        node: Node
        if isinstance(event, ev.ScalarEvent):
            node = self.scalar(event, start, end)
        elif isinstance(event, ev.SequenceStartEvent):
            node = self.seq(event, stream, start, depth)
        else:
            assert isinstance(event, ev.MappingStartEvent)
            node = self.map(event, stream, start, depth)
        node.anchor, node.tag = event.anchor, event.tag
        return node

    def past_properties(self, i: int) -> int:
        """Past ``&anchor`` and ``!tag`` (and the spaces after them): where the node itself starts."""
        t = self.text
        while i < len(t) and t[i] in "&!":
            while i < len(t) and t[i] not in " \t\r\n,[]{}":
                i += 1
            while i < len(t) and t[i] in " \t\r\n":
                i += 1
        return i

    def scalar(self, event: ev.ScalarEvent, start: int, end: int) -> Scalar:
        if event.style in ("|", ">"):
            end = start + len(self.text[start:end].rstrip())  # not the blank lines that follow
        multiline = "\n" in self.text[start:end]
        if event.style is not None:
            return Scalar(start, end, value=event.value, style=event.style, multiline=multiline)
        if start == end:
            return Scalar(start, end, value=None, style="empty")
        value = resolve_plain(event.value) if event.tag is None else event.value
        return Scalar(start, end, value=value, style="plain", multiline=multiline)

    def seq(self, event: ev.SequenceStartEvent, stream: Iterator[ev.Event], start: int, depth: int) -> Array:
        result = Array(start, start, flow=bool(event.flow_style))
        after = start  # where the next block item's '-' is searched from
        for item in stream:
            if isinstance(item, ev.SequenceEndEvent):
                result.end = self.at(item.end_mark) if result.flow else max(result.end, after)
                return result
            if not result.flow:
                mark = self.indicator(after)
                result.marks.append(mark)
                after = mark + 1
            node = self.node(item, stream, depth + 1)
            result.items.append(node)
            after = max(after, node.end)
            result.end = after
        raise AssertionError("PyYAML ends every sequence it starts")

    def indicator(self, i: int) -> int:
        """The next block sequence item's ``-`` from ``i``: past spaces, line breaks and comments."""
        t = self.text
        while i < len(t):
            if t[i] == "#":
                i = t.find("\n", i)
                i = len(t) if i < 0 else i
            elif t[i] in " \t\r\n":
                i += 1
            else:
                assert t[i] == "-", "PyYAML found a block sequence item here"
                return i
        raise AssertionError("PyYAML found a block sequence item here")

    def map(self, event: ev.MappingStartEvent, stream: Iterator[ev.Event], start: int, depth: int) -> Object:
        flow = bool(event.flow_style)
        result = Object(start, start, flow=flow)
        for key in stream:
            if isinstance(key, ev.MappingEndEvent):
                result.end = self.at(key.end_mark) if flow else result.end
                return result
            key_start = self.at(key.start_mark)
            if not isinstance(key, ev.ScalarEvent):
                raise self.fail(key_start, "a key that is not a scalar (not supported)")
            if key.anchor is not None or key.tag is not None:
                raise self.fail(key_start, "an anchor or tag on a mapping key (not supported)")
            key_end = self.at(key.end_mark)
            if "\n" in self.text[key_start:key_end]:
                raise self.fail(key_start, "a key over several lines")
            if not result.members and not flow:
                result.start = key_start
            value = self.node(next(stream), stream, depth + 1)
            result.members.append(Member(key.value, key_start, key_end, value))
            result.end = max(value.end, key_end)
        raise AssertionError("PyYAML ends every mapping it starts")
