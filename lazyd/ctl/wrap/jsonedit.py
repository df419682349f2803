"""Registrations in a JSON client config, found and edited in place by splicing spans.

Registrations are ``<container>.<name>`` (Claude Code's also ``projects.<path>.<container>.<name>``);
in the argv layout (opencode) ``command`` is one array. New members copy the layout around them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from lazyd.ctl.wrap.jsonspan import Dialect, parse
from lazyd.ctl.wrap.model import Entry, decode, entry_of
from lazyd.ctl.wrap.spans import (Found, Member, Node, Object, Scalar, SpanEditor, Splice, line_indent, line_start,
                                  runs, to_python)  # fmt: skip
from lazyd.errors import JsonSyntaxError, WrapError

BOM = "\ufeff"
DEFAULT_INDENT_UNIT = "  "  # when a file gives no example of nesting to copy (an inline registration)


class JsonConfig(SpanEditor):
    """One JSON config file."""

    def __init__(self, data: bytes, *, container: str, projects: bool, dialect: Dialect, where: str,
                 argv: bool = False, env_key: str = "env", nested: str | None = None) -> None:
        text = decode(data, where)
        super().__init__(text)
        self._where = where
        try:
            root = parse(text, dialect, start=1 if text.startswith(BOM) else 0)
        except JsonSyntaxError as exc:
            raise WrapError(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(root, Object):
            raise WrapError(f"{where}: the top level is not an object")
        self.root = root
        self._container = container
        self.argv = argv
        self.env_key = env_key
        self._nested = nested  # a member of the container that may hold the registrations one level down
        self._found = self._locate(projects)

    def _locate(self, projects: bool) -> list[Found]:
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

    def _scope(self, parent: Object, project: str | None, path: list[tuple[str, Object]]) -> list[Found]:
        found: list[Found] = []
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

    def _entry(self, member: Member, project: str | None, path: list[tuple[str, Object]], within: str) -> Found:
        name = member.key
        node = member.value
        if not isinstance(node, Object):
            return Found(Entry(name, project, "unknown", None, "the registration is not an object"), None)
        own = f"{within}.{name}"
        full = [*path, (own, node)]
        env = node.find(self.env_key)
        if env and isinstance(env[-1].value, Object):
            full.append((f"{own}.{self.env_key}", env[-1].value))
        members = to_python(node)
        assert isinstance(members, dict)
        problem = next((f"duplicate key {obj.duplicate_key()!r} in {label}" for label, obj in full
                        if obj.duplicate_key() is not None), None)  # fmt: skip
        return Found(entry_of(name, project, members, problem, argv=self.argv, env_key=self.env_key), node)

    def _scalar(self, value: str, raw: Mapping[str, Scalar], *, flow: bool = True) -> str:
        source = raw.get(value)
        return self.text[source.start : source.end] if source is not None else self._json(value)

    def _json(self, value: object) -> str:
        return json.dumps(value, ensure_ascii=self.ascii_only)

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
            gap = self.text[self.comma_after(obj.members[-2].value.end) + 1 : last.key_start]
            if gap.strip(" \t\r\n") == "":
                return gap
        if obj.members:
            first = obj.members[0]
            gap = self.text[obj.start + 1 : first.key_start]
            if gap.strip(" \t\r\n") == "" and "\n" in gap:
                return gap
            indent = line_indent(self.text, first.key_start)
            if indent is not None and line_start(self.text, first.key_start) > obj.start:
                return self.newline + indent
        return " "

    def _insert_member(self, obj: Object, after: Member, key: str, value: str) -> None:
        at = after.value.end
        self.edits.append(Splice(at, at, "," + self._separator(obj) + self._json(key) + self._colon(obj) + value))

    def _remove_members(self, obj: Object, indices: Sequence[int]) -> None:
        for first, last in runs(indices):
            if first == 0 and last == len(obj.members) - 1:
                self.edits.append(Splice(obj.start + 1, obj.end - 1, ""))
            elif first > 0:
                self.edits.append(Splice(obj.members[first - 1].value.end, obj.members[last].value.end, ""))
            else:
                self.edits.append(Splice(obj.members[0].key_start, obj.members[last + 1].key_start, ""))

    def _new_map(self, reg: Object, values: Mapping[str, object]) -> str:
        return "{" + self._object_body(reg, values, True) + "}"

    def _edit_map(self, obj: Object, old: Mapping[str, object], new: Mapping[str, object], reg: Object) -> None:
        removed = {i for i, m in enumerate(obj.members) if m.key not in new}
        added = [k for k in new if k not in old]
        if removed and added:
            # Never produced by the planner; rewriting the object keeps even this case correct.
            self.edits.append(Splice(obj.start, obj.end, "{" + self._object_body(reg, new, True) + "}"))
            return
        for member in obj.members:
            if member.key in new and member.key in old and new[member.key] != old[member.key]:
                self.edits.append(Splice(member.value.start, member.value.end, self._json(new[member.key])))
        if added and not obj.members:
            inline = "\n" not in self.text[obj.start + 1 : obj.end - 1]
            body = self._object_body(reg, {k: new[k] for k in added}, inline)
            self.edits.append(Splice(obj.start + 1, obj.start + 1, body))
        elif added:
            for key in added:
                self._insert_member(obj, obj.members[-1], key, self._json(new[key]))
        else:
            self._remove_members(obj, sorted(removed))

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
        inner = self.newline + indent + unit
        return inner + ("," + inner).join(pairs) + (self.newline + indent if close else "")


def _is_map(node: Node) -> bool:
    """A map of registrations, not a registration: an object of objects with no registration key
    of its own (opencode 2's `mcp.servers`, beside a 1.x server that may be named `servers`)."""
    return (isinstance(node, Object) and all(isinstance(m.value, Object) for m in node.members)
            and not any(m.key in ("type", "command", "url", "enabled") for m in node.members))
