"""Registrations in a YAML client config (Continue's ``mcpServers:`` list), edited in place by splicing.

A block member or item is inserted and removed as whole lines, with its neighbours' indentation; a
flow one with its ``, ``. What is kept and what is refused: docs/wrapping.md, "What is kept, byte
for byte".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from lazyd.ctl.wrap.model import Entry, decode, entry_of
from lazyd.ctl.wrap.spans import (Alias, Array, Found, Member, Node, Object, Scalar, SpanEditor, Splice, column,
                                  line_end, line_start, runs, to_python, walk)  # fmt: skip
from lazyd.ctl.wrap.yamlspan import parse, resolve_plain
from lazyd.errors import WrapError

BOM = "\ufeff"
DEFAULT_STEP = 2  # indentation added per level when a file gives no example to copy
# Plain scalars we write ourselves: no spaces, flow indicators, ': ' or ' #', no leading indicator
# but the '-' of an option (`-y`, `--port`).
_PLAIN_SAFE = re.compile(r"[A-Za-z0-9_/.~+@=$%^]([A-Za-z0-9_/.~+@=$%^:-]*[A-Za-z0-9_/.~+@=$%^-])?"
                         r"|-[A-Za-z0-9_/.~+@=-][A-Za-z0-9_/.~+@=$%^:-]*")


class YamlConfig(SpanEditor):
    """One YAML config file."""

    def __init__(self, data: bytes, *, container: str, where: str) -> None:
        text = decode(data, where)
        super().__init__(text)
        self._where = where
        self._container = container
        try:
            root = parse(text, 1 if text.startswith(BOM) else 0)
        except WrapError as exc:
            raise WrapError(f"{where} cannot be read as YAML: {exc}") from None
        self._found = self._locate(root)

    def _locate(self, root: Node | None) -> list[Found]:
        if root is None:
            return []
        if not isinstance(root, Object):
            raise WrapError(f"{self._where}: the top level is not a mapping")
        members = root.find(self._container)
        if not members:
            return []
        if len(members) > 1:
            raise WrapError(f"{self._where}: {self._container} appears twice")
        servers = members[0].value
        if isinstance(servers, Scalar) and servers.value is None:
            return []
        if isinstance(servers, Alias) or servers.anchor is not None:
            raise WrapError(f"{self._where}: {self._container} is an alias or has an anchor; "
                            "lazyctl cannot edit it safely")  # fmt: skip
        if not isinstance(servers, Array):
            raise WrapError(f"{self._where}: {self._container} is not a list")
        found = [self._entry(index, item) for index, item in enumerate(servers.items)]
        names = [f.entry.name for f in found]
        for f in found:
            if names.count(f.entry.name) > 1 and f.entry.problem is None:
                f.entry = Entry(f.entry.name, None, f.entry.transport, None,
                                f"two servers are named {f.entry.name!r} in {self._container}", f.entry.cwd)  # fmt: skip
        return found

    def _entry(self, index: int, node: Node) -> Found:
        label = f"{self._container}[{index}]"
        if not isinstance(node, Object):
            return Found(Entry(label, None, "unknown", None, "the registration is not a mapping"), None)
        members = to_python(node)
        assert isinstance(members, dict)
        name = members.get("name")
        if not isinstance(name, str) or not name:
            return Found(Entry(label, None, "unknown", None, "the registration has no name"), node)
        problem = self._problem(node)
        entry = entry_of(name, None, members, problem)
        if problem is not None and entry.transport == "unknown":
            # A merge key or alias may bring its command: refused, never skipped.
            entry = Entry(name, None, "stdio", None, problem, entry.cwd)
        return Found(entry, node)

    def _problem(self, reg: Object) -> str | None:
        if any(n.anchor is not None or n.tag is not None or isinstance(n, Alias) for n in walk(reg)) or reg.find("<<"):
            return "it uses a YAML anchor, alias, tag or merge key, which lazyctl cannot edit safely"
        duplicate = reg.duplicate_key()
        if duplicate is not None:
            return f"duplicate key {duplicate!r} in the registration"
        for member in reg.members:
            if member.key in ("command", "args", "env"):
                if isinstance(member.value, Object) and member.value.duplicate_key() is not None:
                    return f"duplicate key {member.value.duplicate_key()!r} in its env"
                if any(isinstance(n, Scalar) and (n.multiline or n.style in "|>") and n.style != "empty"
                       for n in walk(member.value)):
                    return f"its {member.key} uses a multi-line or block scalar, which lazyctl cannot edit safely"
                if isinstance(member.value, Array) and not member.value.flow and any(
                        self.text[line_start(self.text, m) : m].strip(" ") for m in member.value.marks):
                    return f"its {member.key} list shares a line with another item"
        return None

    def _scalar(self, value: str, raw: Mapping[str, Scalar], *, flow: bool) -> str:
        source = raw.get(value)
        if source is not None:
            text = self.text[source.start : source.end]
            if source.style != "plain" or not flow or not any(c in text for c in ",[]{}"):
                return text
        if _PLAIN_SAFE.fullmatch(value) and resolve_plain(value) == value:
            return value
        return json.dumps(value, ensure_ascii=self.ascii_only)

    def _indent(self, reg: Object) -> str:
        return " " * column(self.text, reg.members[0].key_start)

    def _step(self, reg: Object) -> int:
        for member in reg.members:
            value = member.value
            if isinstance(value, Object) and not value.flow and value.members:
                return max(1, column(self.text, value.members[0].key_start) - column(self.text, member.key_start))
            if isinstance(value, Array) and not value.flow and value.marks:
                step = column(self.text, value.marks[0]) - column(self.text, member.key_start)
                if step > 0:
                    return step
        return DEFAULT_STEP

    def _new_list(self, reg: Object, items: Sequence[str], raw: Mapping[str, Scalar]) -> str:
        if reg.flow or not items:
            return super()._new_list(reg, items, raw)
        pad = self._indent(reg) + " " * self._step(reg)
        return "".join(self.newline + pad + "- " + self._scalar(v, raw, flow=False) for v in items)

    def _new_map(self, reg: Object, values: Mapping[str, object]) -> str:
        pairs = [(self._scalar(k, {}, flow=True), self.value_text(v)) for k, v in values.items()]
        if reg.flow or not pairs:
            return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
        pad = self._indent(reg) + " " * self._step(reg)
        return "".join(f"{self.newline}{pad}{k}: {v}" for k, v in pairs)

    def _insert_member(self, reg: Object, after: Member, key: str, value: str) -> None:
        # A block collection value starts on the next line ("args:" + lines); a scalar after ": ".
        key = self._scalar(key, {}, flow=True)
        text = f"{key}:{value}" if value.startswith(self.newline) else f"{key}: {value}"
        if reg.flow:
            self.edits.append(Splice(after.value.end, after.value.end, ", " + text))
            return
        end = line_end(self.text, max(after.value.end, after.key_end))
        if end < len(self.text):
            self.edits.append(Splice(end + 1, end + 1, self._indent(reg) + text + self.newline))
        else:
            self.edits.append(Splice(end, end, self.newline + self._indent(reg) + text))

    def _remove_members(self, reg: Object, indices: Sequence[int]) -> None:
        """Remove members, each run of neighbours as one splice (so that no two edits overlap)."""
        members = reg.members
        for first, last in runs(indices):
            if reg.flow:
                if first > 0:
                    self.edits.append(Splice(members[first - 1].value.end, members[last].value.end, ""))
                elif last + 1 < len(members):
                    self.edits.append(Splice(members[first].key_start, members[last + 1].key_start, ""))
                else:
                    self.edits.append(Splice(members[first].key_start, members[last].value.end, ""))
                continue
            following = members[last + 1].key_start if last + 1 < len(members) else None
            self._remove_lines(members[first].key_start, max(members[last].value.end, members[last].key_end), following)

    def _remove_lines(self, start: int, last: int, following: int | None) -> None:
        """Remove the lines from ``start``'s to ``last``'s, with one line end. When ``start`` is not
        first on its line (the first member of a ``- key: value`` item), remove up to the next
        member instead, so that it takes the item's place."""
        t = self.text
        first = line_start(t, start)
        if t[first:start].strip(" "):
            assert following is not None, "the only member of an item is never removed"
            self.edits.append(Splice(start, following, ""))
            return
        end = line_end(t, last)
        if end < len(t):
            self.edits.append(Splice(first, end + 1, ""))
        else:
            cut = first - 1 if first > 0 else first
            if cut > 0 and t[cut - 1] == "\r":
                cut -= 1
            self.edits.append(Splice(cut, end, ""))

    def _edit_list(self, seq: Array, old: Sequence[str], new: Sequence[str], raw: Mapping[str, Scalar]) -> None:
        if seq.flow:
            super()._edit_list(seq, old, new, raw)
            return
        grow = len(new) - len(old)
        t = self.text
        if grow > 0 and tuple(new[grow:]) == tuple(old):
            mark = seq.marks[0]
            lead = t[line_start(t, mark) : mark] + "-" + t[mark + 1 : seq.items[0].start]
            lines = "".join(lead + self._scalar(v, raw, flow=False) + self.newline for v in new[:grow])
            self.edits.append(Splice(line_start(t, mark), line_start(t, mark), lines))
        elif grow < 0 and new and tuple(old[-grow:]) == tuple(new):
            self.edits.append(Splice(line_start(t, seq.marks[0]), line_start(t, seq.marks[-grow]), ""))
        elif not new:
            self.edits.append(Splice(seq.start, seq.end, "[]"))
        else:
            mark = seq.marks[0]
            lead = t[line_start(t, mark) : mark] + "- "
            body = self.newline.join(lead + self._scalar(v, raw, flow=False) for v in new)
            end = line_end(t, seq.end)
            self.edits.append(Splice(line_start(t, mark), end - 1 if t[end - 1] == "\r" else end, body))

    def _edit_map(self, env: Object, old: Mapping[str, object], new: Mapping[str, object], reg: Object) -> None:
        self._remove_members(env, [i for i, member in enumerate(env.members) if member.key not in new])
        for member in env.members:
            if member.key in new and old.get(member.key) != new[member.key]:
                self.edits.append(Splice(member.value.start, member.value.end, self.value_text(new[member.key])))
        added = {k: v for k, v in new.items() if k not in old}
        if added:
            if not env.members:
                body = ", ".join(f"{self._scalar(k, {}, flow=True)}: {self.value_text(v)}" for k, v in added.items())
                self.edits.append(Splice(env.start + 1, env.start + 1, body))
            else:
                last = env.members[-1]
                for key, setting in added.items():
                    self._insert_member(env, last, key, self.value_text(setting))
