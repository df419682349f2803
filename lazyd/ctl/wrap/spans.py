"""Editing a config by splicing: the span tree both readers build (JSON's scanner, YAML's builder),
the splices, and the editor both formats share.

To edit a client's config without moving an unedited byte we need where every value is, then
replace exactly those spans. A node's ``text[start:end]`` is its exact source; a JSON value is a
flow one (between brackets), a YAML collection may be a block one. Edits are made by difference,
so that wrap and unwrap are inverse at the byte level (docs/wrapping.md, "What is kept, byte for
byte"); each format says how its values are spelled and its members and items inserted and removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lazyd.ctl.wrap.model import Entry, RegState, newline_of


@dataclass(eq=False, slots=True)
class Node:
    """A value; ``anchor`` and ``tag`` are YAML's properties (not part of the span)."""

    start: int
    end: int
    anchor: str | None = None
    tag: str | None = None


@dataclass(eq=False, slots=True)
class Scalar(Node):
    """``value`` is what the format's library reads; ``style`` is YAML's: plain, ', ", | or >, and
    "empty" for an absent value (``key:`` alone)."""

    value: object = None
    style: str = "plain"
    multiline: bool = False


@dataclass(eq=False, slots=True)
class Alias(Node):
    """A YAML ``*name``."""

    name: str = ""


@dataclass(eq=False, slots=True)
class Array(Node):
    """A JSON array or YAML sequence; a flow one has ``[`` at ``start`` and ``]`` at ``end - 1``, a
    block one its items' ``-`` at ``marks``."""

    items: list[Node] = field(default_factory=list)
    flow: bool = True
    marks: list[int] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class Member:
    """One ``key: value`` pair; the key (with its quotes) is ``[key_start, key_end)``."""

    key: str
    key_start: int
    key_end: int
    value: Node


@dataclass(eq=False, slots=True)
class Object(Node):
    """A JSON object or YAML mapping, members in document order, duplicates kept; a flow one has
    ``{`` at ``start`` and ``}`` at ``end - 1``."""

    members: list[Member] = field(default_factory=list)
    flow: bool = True

    def find(self, key: str) -> list[Member]:
        """Every member named ``key`` (more than one means a duplicate key)."""
        return [m for m in self.members if m.key == key]

    def duplicate_key(self) -> str | None:
        """The first key that occurs twice, or None."""
        seen: set[str] = set()
        for member in self.members:
            if member.key in seen:
                return member.key
            seen.add(member.key)
        return None


def to_python(node: Node, anchors: dict[str, object] | None = None) -> object:
    """The plain value (the last of duplicate keys wins, as in json.loads); an alias is its
    anchor's value (None if undefined). YAML merge keys (``<<``) are left as members."""
    anchors = {} if anchors is None else anchors
    value: object
    if isinstance(node, Scalar):
        value = node.value
    elif isinstance(node, Alias):
        value = anchors.get(node.name)
    elif isinstance(node, Array):
        value = [to_python(item, anchors) for item in node.items]
    else:
        assert isinstance(node, Object)
        value = {m.key: to_python(m.value, anchors) for m in node.members}
    if node.anchor is not None:
        anchors[node.anchor] = value
    return value


def walk(node: Node) -> list[Node]:
    """``node`` and every node inside it."""
    found = [node]
    if isinstance(node, Array):
        for item in node.items:
            found += walk(item)
    elif isinstance(node, Object):
        for member in node.members:
            found += walk(member.value)
    return found


def line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def line_end(text: str, index: int) -> int:
    """The index of the newline ending ``index``'s line (``len(text)`` on the last line)."""
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def column(text: str, index: int) -> int:
    return index - line_start(text, index)


def line_indent(text: str, index: int) -> str | None:
    """The whitespace between the start of ``index``'s line and ``index``, or None if anything else is there."""
    prefix = text[line_start(text, index) : index]
    return prefix if prefix.strip(" \t") == "" else None


def position(text: str, index: int) -> str:
    """``line L, column C`` (1-based) of ``index`` in ``text``, for error messages."""
    return f"line {text.count(chr(10), 0, index) + 1}, column {column(text, index) + 1}"


@dataclass(frozen=True)
class Splice:
    """Replace ``text[start:end]`` with ``replacement``; ``start == end`` inserts."""

    start: int
    end: int
    replacement: str


def splice(text: str, edits: list[Splice]) -> str:
    """Apply ``edits`` to ``text``; inserts at one position keep their given order, before a
    replacement there. Raises ValueError if two edits overlap (a bug of the caller)."""
    ordered = sorted(enumerate(edits), key=lambda pair: (pair[1].start, pair[1].end, pair[0]))
    out: list[str] = []
    cursor = 0
    for _, edit in ordered:
        if edit.start < cursor or edit.end < edit.start or edit.end > len(text):
            raise ValueError(f"overlapping or out-of-range edit at {edit.start}..{edit.end}")
        out.append(text[cursor : edit.start])
        out.append(edit.replacement)
        cursor = edit.end
    out.append(text[cursor:])
    return "".join(out)


def runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """Runs of consecutive indices as (first, last) pairs, in order: neighbours removed together
    are one splice (two that touch would overlap)."""
    found: list[tuple[int, int]] = []
    for index in sorted(indices):
        if found and found[-1][1] == index - 1:
            found[-1] = (found[-1][0], index)
        else:
            found.append((index, index))
    return found


@dataclass(eq=False)
class Found:
    """A registration as found: its entry, and its object in the tree (None: not editable)."""

    entry: Entry
    node: Object | None


class SpanEditor:
    """One config file's span tree: its registrations found once, edits to several queued, the
    file rendered once."""

    argv = False  # `command` is the whole argv, an array (opencode's layout), and there is no `args`
    env_key = "env"

    def __init__(self, text: str) -> None:
        self.text = text
        self.ascii_only = text.isascii()  # new strings are ASCII-only when the file is
        self.newline = newline_of(text)
        self._found: list[Found] = []
        self.edits: list[Splice] = []

    def entries(self) -> list[Entry]:
        return [found.entry for found in self._found]

    def render(self) -> bytes:
        return splice(self.text, self.edits).encode("utf-8")

    def apply(self, entry: Entry, new: RegState) -> None:
        """Queue the splices that turn ``entry``'s registration into ``new``."""
        found = next(f for f in self._found if f.entry is entry)
        old = entry.state
        assert found.node is not None and old is not None, "only editable entries are applied"
        reg = found.node
        # Source spellings by value, so that a moved string keeps its escapes or quoting: the
        # arguments' first where the command is edited (unwrap moves the first one back), the
        # command's first where args are (wrap moves it there).
        command_raw, args_raw = self._raw_strings(reg, ("args", "command")), self._raw_strings(reg, ("command", "args"))
        command = reg.find("command")[0]
        removals: list[int] = []
        if self.argv:
            old_argv, new_argv = (old.command, *(old.args or ())), (new.command, *(new.args or ()))
            if new_argv != old_argv:
                assert isinstance(command.value, Array)
                self._edit_list(command.value, old_argv, new_argv, args_raw)
        elif new.command != old.command:
            spelled = self._scalar(new.command, command_raw, flow=reg.flow)
            self.edits.append(Splice(command.value.start, command.value.end, spelled))
        if new.args != old.args and not self.argv:
            args = reg.find("args")
            if new.args is None:
                removals.append(reg.members.index(args[0]))
            elif old.args is None:
                self._insert_member(reg, command, "args", self._new_list(reg, new.args, args_raw))
            else:
                assert isinstance(args[0].value, Array)
                self._edit_list(args[0].value, old.args, new.args, args_raw)
        if new.env != old.env:
            env = reg.find(self.env_key)
            if new.env is None:
                removals.append(reg.members.index(env[0]))
            elif old.env is None:
                self._insert_member(reg, reg.members[-1], self.env_key, self._new_map(reg, new.env))
            else:
                assert isinstance(env[0].value, Object)
                self._edit_map(env[0].value, old.env, new.env, reg)
        self._remove_members(reg, removals)  # together: neighbours are one splice

    def _raw_strings(self, reg: Object, order: tuple[str, str]) -> dict[str, Scalar]:
        """Command and args strings by value: of a value found more than once, its first spelling
        in the member named first in ``order``."""
        found: dict[str, Scalar] = {}
        for key in order:
            for member in reg.find(key):
                for node in walk(member.value):
                    if isinstance(node, Scalar) and isinstance(node.value, str):
                        found.setdefault(node.value, node)
        return found

    def _new_list(self, reg: Object, items: Sequence[str], raw: Mapping[str, Scalar]) -> str:
        return "[" + ", ".join(self._scalar(v, raw, flow=True) for v in items) + "]"

    def _edit_list(self, array: Array, old: Sequence[str], new: Sequence[str], raw: Mapping[str, Scalar]) -> None:
        """A flow list edited: arguments put in front or taken from the front keep the rest as it is."""
        items = array.items
        grow = len(new) - len(old)
        if grow > 0 and tuple(new[grow:]) == tuple(old):
            prefix = [self._scalar(v, raw, flow=True) for v in new[:grow]]
            if not items:
                self.edits.append(Splice(array.start + 1, array.start + 1, ", ".join(prefix)))
                return
            sep = self._item_separator(array)
            text = ("," + sep).join(prefix) + "," + sep
            self.edits.append(Splice(items[0].start, items[0].start, text))
        elif grow < 0 and tuple(old[-grow:]) == tuple(new):
            if new:
                self.edits.append(Splice(items[0].start, items[-grow].start, ""))
            else:
                end = items[-1].end
                if self.text[end : array.end - 1].strip(" \t\r\n") == ",":
                    end = self.text.index(",", end) + 1  # a trailing comma goes with the items
                self.edits.append(Splice(items[0].start, end, ""))
        else:
            whole = ", ".join(self._scalar(v, raw, flow=True) for v in new)
            self.edits.append(Splice(array.start, array.end, "[" + whole + "]"))

    def _item_separator(self, array: Array) -> str:
        items = array.items
        if len(items) >= 2:
            gap = self.text[self.comma_after(items[0].end) + 1 : items[1].start]
            if gap.strip(" \t\r\n") == "":
                return gap
        indent = line_indent(self.text, items[0].start)
        if indent is not None and line_start(self.text, items[0].start) > array.start:
            return self.newline + indent
        return " "

    def comma_after(self, index: int) -> int:
        comma = self.text.find(",", index)
        assert comma >= 0, "members are separated by commas"
        return comma

    def value_text(self, value: object) -> str:
        if isinstance(value, str):
            return self._scalar(value, {}, flow=True)
        return json.dumps(value, ensure_ascii=self.ascii_only)

    # Each format's own spelling and layout.

    def _scalar(self, value: str, raw: Mapping[str, Scalar], *, flow: bool) -> str:
        """``value`` as written inside a flow collection (``flow``) or a block one; its source
        spelling from ``raw`` where that means the same there."""
        raise NotImplementedError

    def _insert_member(self, obj: Object, after: Member, key: str, value: str) -> None:
        raise NotImplementedError

    def _remove_members(self, obj: Object, indices: Sequence[int]) -> None:
        raise NotImplementedError

    def _new_map(self, reg: Object, values: Mapping[str, object]) -> str:
        raise NotImplementedError

    def _edit_map(self, obj: Object, old: Mapping[str, object], new: Mapping[str, object], reg: Object) -> None:
        raise NotImplementedError
