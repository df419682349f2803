"""Registrations in a JSON client config, found and edited in place by splicing spans.

Registrations are ``<container>.<name>`` (Claude Code's also ``projects.<path>.<container>.<name>``);
in the argv layout (opencode) ``command`` is one array. Edits are made by difference, so that wrap
and unwrap are inverse at the byte level (docs/wrapping.md, "What is kept, byte for byte").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazyd.ctl.wrap.jsonspan import (Array, Dialect, Member, Node, Object, Scalar, Splice, line_start,
                                     parse, runs, splice, to_python)  # fmt: skip
from lazyd.ctl.wrap.model import Entry, RegState, decode, entry_of, newline_of
from lazyd.errors import JsonSyntaxError, WrapError

BOM = "\ufeff"
DEFAULT_INDENT_UNIT = "  "  # when a file gives no example of nesting to copy (an inline registration)


@dataclass(eq=False)
class _Found:
    entry: Entry
    node: Object | None


class JsonConfig:
    """One JSON config file: parse once, apply edits to several registrations, render once."""

    def __init__(self, data: bytes, *, container: str, projects: bool, dialect: Dialect, where: str,
                 argv: bool = False, env_key: str = "env", nested: str | None = None) -> None:
        text = decode(data, where)
        self._bom = BOM if text.startswith(BOM) else ""
        self.text = text
        self._where = where
        try:
            root = parse(text, dialect, start=len(self._bom))
        except JsonSyntaxError as exc:
            raise WrapError(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(root, Object):
            raise WrapError(f"{where}: the top level is not an object")
        self.root = root
        self._container = container
        self._argv = argv
        self._env_key = env_key
        self._nested = nested  # a member of the container that may hold the registrations one level down
        self._ascii = text.isascii()
        self._newline = newline_of(text)
        self._found = self._locate(projects)
        self._edits: list[Splice] = []

    def entries(self) -> list[Entry]:
        return [found.entry for found in self._found]

    def _locate(self, projects: bool) -> list[_Found]:
        found = self._scope(self.root, None, [("the top-level object", self.root)])
        if projects:
            for project_member in self.root.find("projects"):
                if not isinstance(project_member.value, Object):
                    continue
                for member in project_member.value.members:
                    if isinstance(member.value, Object):
                        path = [("the top-level object", self.root), ("projects", project_member.value),
                                (f"projects.{member.key}", member.value)]  # fmt: skip
                        found += self._scope(member.value, member.key, path)
        return found

    def _scope(self, parent: Object, project: str | None, path: list[tuple[str, Object]]) -> list[_Found]:
        found: list[_Found] = []
        for container_member in parent.find(self._container):
            container = container_member.value
            if not isinstance(container, Object):
                raise WrapError(f"{self._where}: {self._container} is not an object")
            prefix = "" if project is None else f"projects.{project}."
            container_path = [*path, (prefix + self._container, container)]
            for member in container.members:
                if member.key == self._nested and _is_map(member.value):
                    assert isinstance(member.value, Object)
                    label = f"{prefix}{self._container}.{member.key}"
                    for inner in member.value.members:
                        found.append(self._entry(inner, project, [*container_path, (label, member.value)], label))
                else:
                    found.append(self._entry(member, project, container_path, prefix + self._container))
        return found

    def _entry(self, member: Member[Node], project: str | None, path: list[tuple[str, Object]], within: str) -> _Found:
        name = member.key
        node = member.value
        if not isinstance(node, Object):
            return _Found(Entry(name, project, "unknown", None, "the registration is not an object"), None)
        own = f"{within}.{name}"
        full = [*path, (own, node)]
        env = node.find(self._env_key)
        if env and isinstance(env[-1].value, Object):
            full.append((f"{own}.{self._env_key}", env[-1].value))
        members = to_python(node)
        assert isinstance(members, dict)
        problem = next((f"duplicate key {obj.duplicate_key()!r} in {label}" for label, obj in full
                        if obj.duplicate_key() is not None), None)  # fmt: skip
        return _Found(entry_of(name, project, members, problem, argv=self._argv, env_key=self._env_key), node)

    def apply(self, entry: Entry, new: RegState) -> None:
        """Queue the splices that turn ``entry``'s registration into ``new``."""
        found = next(f for f in self._found if f.entry is entry)
        old = entry.state
        assert found.node is not None and old is not None, "only editable entries are applied"
        reg = found.node
        raw = self._raw_strings(reg)
        removals: set[int] = set()
        inserts: list[tuple[int, str, str]] = []  # (anchor member index, key, value text)
        command_index = _index(reg, "command")
        if self._argv:
            # One array: the shim (and its `--`) go in front of the argv, and come off it again.
            old_argv, new_argv = (old.command, *(old.args or ())), (new.command, *(new.args or ()))
            if new_argv != old_argv:
                array = reg.members[command_index].value
                assert isinstance(array, Array)
                self._edit_array(array, old_argv, new_argv, raw)
        elif new.command != old.command:
            value = reg.members[command_index].value
            self._edits.append(Splice(value.start, value.end, self._string(new.command, raw)))
        if new.args != old.args and not self._argv:
            if new.args is None:
                removals.add(_index(reg, "args"))
            elif old.args is None:
                inserts.append((command_index, "args", "[" + ", ".join(self._string(a, raw) for a in new.args) + "]"))
            else:
                member = reg.members[_index(reg, "args")]
                assert isinstance(member.value, Array)
                self._edit_array(member.value, old.args, new.args, raw)
        env_key = self._env_key
        if new.env != old.env:
            if new.env is None:
                removals.add(_index(reg, env_key))
            elif old.env is None:
                inserts.append((len(reg.members) - 1, env_key, "{" + self._object_body(reg, new.env, True) + "}"))
            else:
                member = reg.members[_index(reg, env_key)]
                assert isinstance(member.value, Object)
                self._edit_object(member.value, old.env, new.env, reg)
        self._edit_members(reg, removals, inserts)

    def render(self) -> bytes:
        return splice(self.text, self._edits).encode("utf-8")

    def _raw_strings(self, reg: Object) -> dict[str, str]:
        # Source spellings of the strings in command and args, so a moved string keeps its escapes.
        nodes: list[Node] = [m.value for m in reg.members if m.key == "command"]
        for member in reg.members:
            if member.key in ("args", "command") and isinstance(member.value, Array):
                nodes += member.value.items
        return {str(n.value): self.text[n.start : n.end] for n in nodes if isinstance(n, Scalar) and isinstance(n.value, str)}

    def _string(self, value: str, raw: dict[str, str]) -> str:
        return raw.get(value) or self._json(value)

    def _json(self, value: object) -> str:
        return json.dumps(value, ensure_ascii=self._ascii)

    def _colon(self, obj: Object) -> str:
        for member in obj.members:
            gap = self.text[member.key_end : member.value.start]
            if gap.strip(" \t\r\n") == ":":
                return gap
        return ": "

    def _separator(self, obj: Object) -> str:
        """Whitespace to put after the comma before a new member, copied from the object's layout."""
        if len(obj.members) >= 2:
            last = obj.members[-1]
            gap = self.text[self._comma_after(obj.members[-2].value.end) + 1 : last.key_start]
            if gap.strip(" \t\r\n") == "":
                return gap
        if obj.members:
            first = obj.members[0]
            gap = self.text[obj.start + 1 : first.key_start]
            if gap.strip(" \t\r\n") == "" and "\n" in gap:
                return gap
            indent = _line_indent(self.text, first.key_start)
            if indent is not None and line_start(self.text, first.key_start) > obj.start:
                return self._newline + indent
        return " "

    def _comma_after(self, index: int) -> int:
        comma = self.text.find(",", index)
        assert comma >= 0, "members are separated by commas"
        return comma

    def _edit_members(self, obj: Object, removals: set[int], inserts: Sequence[tuple[int, str, str]]) -> None:
        assert not (removals and inserts), "an edit never both adds and removes members of one object"
        sep = self._separator(obj)
        for anchor, key, value in inserts:
            at = obj.members[anchor].value.end
            self._edits.append(Splice(at, at, "," + sep + self._json(key) + self._colon(obj) + value))
        for first, last in runs(removals):
            if first == 0 and last == len(obj.members) - 1:
                self._edits.append(Splice(obj.start + 1, obj.end - 1, ""))
            elif first > 0:
                self._edits.append(Splice(obj.members[first - 1].value.end, obj.members[last].value.end, ""))
            else:
                self._edits.append(Splice(obj.members[0].key_start, obj.members[last + 1].key_start, ""))

    def _edit_array(self, array: Array, old: Sequence[str], new: Sequence[str], raw: dict[str, str]) -> None:
        items = array.items
        grow = len(new) - len(old)
        if grow > 0 and tuple(new[grow:]) == tuple(old):
            prefix = [self._string(v, raw) for v in new[:grow]]
            if not items:
                self._edits.append(Splice(array.start + 1, array.start + 1, ", ".join(prefix)))
                return
            sep = self._item_separator(array)
            text = ("," + sep).join(prefix) + "," + sep
            self._edits.append(Splice(items[0].start, items[0].start, text))
        elif grow < 0 and tuple(old[-grow:]) == tuple(new):
            if new:
                self._edits.append(Splice(items[0].start, items[-grow].start, ""))
            else:
                self._edits.append(Splice(array.start + 1, array.end - 1, ""))
        else:
            self._edits.append(Splice(array.start, array.end, "[" + ", ".join(self._string(v, raw) for v in new) + "]"))

    def _item_separator(self, array: Array) -> str:
        items = array.items
        if len(items) >= 2:
            gap = self.text[self._comma_after(items[0].end) + 1 : items[1].start]
            if gap.strip(" \t\r\n") == "":
                return gap
        indent = _line_indent(self.text, items[0].start)
        if indent is not None and line_start(self.text, items[0].start) > array.start:
            return self._newline + indent
        return " "

    def _edit_object(self, obj: Object, old: Mapping[str, object], new: Mapping[str, object], reg: Object) -> None:
        removed = {i for i, m in enumerate(obj.members) if m.key not in new}
        added = [k for k in new if k not in old]
        if removed and added:
            # Never produced by the planner; rewriting the object keeps even this case correct.
            self._edits.append(Splice(obj.start, obj.end, "{" + self._object_body(reg, new, True) + "}"))
            return
        for member in obj.members:
            if member.key in new and member.key in old and new[member.key] != old[member.key]:
                self._edits.append(Splice(member.value.start, member.value.end, self._json(new[member.key])))
        if added and not obj.members:
            inline = "\n" not in self.text[obj.start + 1 : obj.end - 1]
            body = self._object_body(reg, {k: new[k] for k in added}, inline)
            self._edits.append(Splice(obj.start + 1, obj.start + 1, body))
        elif added:
            self._edit_members(obj, set(), [(len(obj.members) - 1, k, self._json(new[k])) for k in added])
        else:
            self._edit_members(obj, removed, [])

    def _nesting(self, reg: Object) -> tuple[str, str] | None:
        """(indent of the registration's members, one indent unit), or None for an inline layout."""
        sep = self._separator(reg)
        if "\n" not in sep:
            return None
        member_indent = sep.rsplit("\n", 1)[1]
        own = self.text[line_start(self.text, reg.start) : reg.start]
        outer = own[: len(own) - len(own.lstrip(" \t"))]
        unit = member_indent[len(outer) :] if member_indent.startswith(outer) and len(member_indent) > len(outer) else ""
        return member_indent, unit or DEFAULT_INDENT_UNIT

    def _object_body(self, reg: Object, values: Mapping[str, object], close: bool) -> str:
        """Members for an object inside ``reg``, in its layout; ``close``: then the line end and
        indentation of the ``}``."""
        pairs = [self._json(k) + self._colon(reg) + self._json(v) for k, v in values.items()]
        nesting = self._nesting(reg)
        if nesting is None:
            return ", ".join(pairs)
        indent, unit = nesting
        inner = self._newline + indent + unit
        return inner + ("," + inner).join(pairs) + (self._newline + indent if close else "")


def _is_map(node: Node) -> bool:
    """A map of registrations, not a registration: an object of objects with no registration key
    of its own (opencode 2's `mcp.servers`, beside a 1.x server that may be named `servers`)."""
    return (isinstance(node, Object) and all(isinstance(m.value, Object) for m in node.members)
            and not any(m.key in ("type", "command", "url", "enabled") for m in node.members))


def _index(obj: Object, key: str) -> int:
    return next(i for i, m in enumerate(obj.members) if m.key == key)


def _line_indent(text: str, index: int) -> str | None:
    """The whitespace between the start of ``index``'s line and ``index``, or None if anything else is there."""
    prefix = text[line_start(text, index) : index]
    return prefix if prefix.strip(" \t") == "" else None
