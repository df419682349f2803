"""The nodes of a YAML document as the span reader reads it: each with its span in the text, its value
by YAML 1.2's core schema, and the line arithmetic editors need. No parsing here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lazyd.ctl.wrap.jsonspan import Keyed, Member, line_start


@dataclass(eq=False, slots=True)
class Node:
    """``text[start:end]`` is the node's exact source (properties such as ``&a`` not included)."""

    start: int
    end: int
    anchor: str | None = None
    tag: str | None = None


@dataclass(eq=False, slots=True)
class Scalar(Node):
    value: object = None
    style: str = "plain"  # plain, ', ", | or >; "empty" for an absent value (``key:`` alone)
    multiline: bool = False


@dataclass(eq=False, slots=True)
class Alias(Node):
    name: str = ""


@dataclass(eq=False, slots=True)
class Seq(Node):
    items: list[Node] = field(default_factory=list)
    flow: bool = False
    marks: list[int] = field(default_factory=list)  # where each block item's '-' is


@dataclass(eq=False, slots=True)
class Map(Node, Keyed[Node]):
    members: list[Member[Node]] = field(default_factory=list)
    flow: bool = False


def to_python(node: Node, anchors: dict[str, object] | None = None) -> object:
    """The plain value (the last of duplicate keys wins); an alias is its anchor's value (None if
    undefined). Merge keys (``<<``) are left as members: editors refuse servers that use them."""
    anchors = {} if anchors is None else anchors
    value: object
    if isinstance(node, Scalar):
        value = node.value
    elif isinstance(node, Alias):
        value = anchors.get(node.name)
    elif isinstance(node, Seq):
        value = [to_python(item, anchors) for item in node.items]
    else:
        assert isinstance(node, Map)
        value = {m.key: to_python(m.value, anchors) for m in node.members}
    if node.anchor is not None:
        anchors[node.anchor] = value
    return value


def walk(node: Node) -> list[Node]:
    """``node`` and every node inside it."""
    found = [node]
    if isinstance(node, Seq):
        for item in node.items:
            found += walk(item)
    elif isinstance(node, Map):
        for member in node.members:
            found += walk(member.value)
    return found


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


def line_end(text: str, index: int) -> int:
    """The index of the newline ending ``index``'s line (``len(text)`` on the last line)."""
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def column(text: str, index: int) -> int:
    return index - line_start(text, index)
