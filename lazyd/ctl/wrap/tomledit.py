"""Registrations in a TOML client config (Codex CLI's ``[mcp_servers.NAME]``), edited with tomlkit.

tomlkit keeps comments, key order and unedited tables as written; this module adds what our edits
need beyond it (docs/wrapping.md, "What is kept, byte for byte"): inline-table registrations are
refused, moved strings keep their quoting, a single-line ``args`` keeps its own separator, CRLF
files get CRLF back (tomlkit writes ``\\n``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tomlkit
import tomlkit.exceptions
from tomlkit.items import Array, InlineTable, Item, String, Table

from lazyd.errors import WrapError
from lazyd.ctl.wrap.model import Entry, RegState, decode, entry_of

_INLINE_REFUSAL = ("an inline-table registration cannot be edited safely; "
                   "rewrite it as a [{container}.{name}] table")  # fmt: skip


class TomlConfig:
    """One TOML config file: parse once, apply edits to several registrations, render once."""

    def __init__(self, data: bytes, *, container: str, where: str) -> None:
        text = decode(data, where)
        try:
            self.doc = tomlkit.parse(text)
        except tomlkit.exceptions.TOMLKitError as exc:
            raise WrapError(f"{where} is not valid TOML: {exc}") from None
        self._crlf = "\r\n" in text and "\n" not in text.replace("\r\n", "")
        self._container = container
        self._where = where
        self._entries = self._locate()

    def entries(self) -> list[Entry]:
        return list(self._entries)

    def _servers(self) -> Mapping[str, object] | None:
        servers = self.doc.get(self._container)
        if servers is None:
            return None
        if not isinstance(servers, Mapping):
            raise WrapError(f"{self._where}: {self._container} is not a table")
        return servers

    def _locate(self) -> list[Entry]:
        servers = self._servers()
        if servers is None:
            return []
        inline_container = isinstance(servers, InlineTable)
        found = []
        for name, item in servers.items():
            if not isinstance(item, Mapping):
                found.append(Entry(name, None, "unknown", None, "the registration is not a table"))
                continue
            problem = None
            if inline_container or isinstance(item, InlineTable):
                problem = _INLINE_REFUSAL.format(container=self._container, name=name)
            found.append(entry_of(name, None, _plain(item), problem, env_vars=True))
        return found

    def apply(self, entry: Entry, new: RegState) -> None:
        """Edit ``entry``'s table into ``new``."""
        old = entry.state
        assert old is not None, "only editable entries are applied"
        servers = self._servers()
        assert servers is not None
        table = servers[entry.name]
        assert isinstance(table, (Table, Mapping))
        items = _items(table)
        if new.command != old.command:
            table["command"] = items.get(new.command, new.command)  # type: ignore[index]
        if new.args != old.args:
            if new.args is None:
                del table["args"]  # type: ignore[attr-defined]
            else:
                old_array = table.get("args")
                fresh = self._array(old_array if isinstance(old_array, Array) else None, old.args or (), new.args, items)
                if fresh is not None:
                    table["args"] = fresh  # type: ignore[index]
        if new.env != old.env:
            if new.env is None:
                del table["env"]  # type: ignore[attr-defined]
            elif old.env is None:
                inline = tomlkit.inline_table()
                inline.update(new.env)
                table["env"] = inline  # type: ignore[index]
            else:
                env = table["env"]
                by_text = isinstance(env, InlineTable)
                dropped: set[str] = set()
                added: dict[str, object] = {}
                for name in sorted(set(old.env) | set(new.env)):
                    if name not in new.env:
                        if by_text:
                            dropped.add(name)
                        else:
                            del env[name]
                    elif name not in old.env and by_text:
                        added[name] = new.env[name]
                    elif name not in old.env or old.env[name] != new.env[name]:
                        env[name] = new.env[name]
                if dropped or added:
                    assert isinstance(env, InlineTable)
                    table["env"] = _inline_edited(env, dropped, added)  # type: ignore[index]

    def _array(self, array: Array | None, old: Sequence[str], new: Sequence[str], items: dict[str, Item]) -> Array | None:
        """The new args array, or None when ``array`` was edited in place."""
        grow = len(new) - len(old)
        if array is not None and grow > 0 and tuple(new[grow:]) == tuple(old):
            prefix = [items.get(v) or tomlkit.string(v) for v in new[:grow]]
            text = array.as_string()
            if "\n" in text:
                for position, item in enumerate(prefix):
                    array.insert(position, item)
                return None
            open_at = len(text) - len(text[1:].lstrip(" \t"))
            sep = "" if old and ", " not in text and "," in text else " "
            words = [p.as_string() for p in prefix]
            inner = ("," + sep).join(words) + ("," + sep if old else "")
            return self._parsed_array(array, text[:open_at] + inner + text[open_at:])
        if array is not None and grow < 0 and tuple(old[-grow:]) == tuple(new):
            for _ in range(-grow):
                del array[0]
            return None
        fresh = tomlkit.array()
        fresh.extend(items.get(v) or tomlkit.string(v) for v in new)
        if array is not None:
            fresh.trivia.comment_ws, fresh.trivia.comment = array.trivia.comment_ws, array.trivia.comment
        return fresh

    @staticmethod
    def _parsed_array(old: Array, text: str) -> Array:
        parsed = tomlkit.parse("x = " + text)["x"]
        assert isinstance(parsed, Array)
        parsed.trivia.comment_ws, parsed.trivia.comment = old.trivia.comment_ws, old.trivia.comment
        return parsed

    def render(self) -> bytes:
        text = self.doc.as_string()
        if self._crlf:
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        return text.encode("utf-8")


def _inline_edited(table: InlineTable, dropped: set[str], added: Mapping[str, object]) -> InlineTable:
    """``table`` without the members ``dropped`` and with ``added`` appended, by text: tomlkit
    guesses a new member's separator badly and leaves a deleted one's space behind. A new member
    takes a copy of the table's last gap and a removed one goes with the gap that joined it, so
    appending then removing the same members gives back the table's bytes."""
    head, tail = "", ""
    names: list[str] = []
    members: list[str] = []
    gaps: list[str] = []
    pending = ""
    for key, item in table.value.body:
        if key is None:
            pending += item.as_string()
            continue
        trail = item.trivia.trail.replace("\n", "")
        text = f"{item.trivia.indent}{key.as_string()}{key.sep}{item.as_string()}{item.trivia.comment}{trail}"
        if members:
            gaps.append(pending)
        else:
            head = pending
        pending = ""
        names.append(key.key)
        members.append(text)
    tail = pending
    if not members:
        head, tail = pending, ""
    for name in [n for n in names if n in dropped]:
        at = names.index(name)
        if len(members) > 1:
            del gaps[at if at < len(gaps) else at - 1]
        del names[at], members[at]
    spelled = "".join(members)
    eq = "=" if "=" in spelled and " = " not in spelled else " = "
    for name, value in added.items():
        text = f"{tomlkit.key(name).as_string()}{eq}{tomlkit.item(value).as_string()}"
        if members:
            gaps.append(gaps[-1] if gaps else ", ")
        elif not tail:
            tail = head  # "{ }" becomes "{ NAME = … }"
        names.append(name)
        members.append(text)
    inner = head + "".join(m + (gaps[i] if i < len(gaps) else "") for i, m in enumerate(members)) + tail
    if not members:
        inner = head
    parsed = tomlkit.parse(f"x = {{{inner}}}\n")["x"]
    assert isinstance(parsed, InlineTable)
    parsed.trivia.comment_ws, parsed.trivia.comment = table.trivia.comment_ws, table.trivia.comment
    return parsed


def _plain(item: Mapping[str, object]) -> dict[str, object]:
    unwrap = getattr(item, "unwrap", None)
    value = unwrap() if callable(unwrap) else dict(item)
    assert isinstance(value, dict)
    return value


def _items(table: Mapping[str, object]) -> dict[str, Item]:
    """Parsed string items of command and args by value, to move them with their spelling."""
    found: dict[str, Item] = {}
    args = table.get("args")
    if isinstance(args, Array):
        for item in args:
            if isinstance(item, String):
                found.setdefault(str(item), item)
    command = table.get("command")
    if isinstance(command, String):
        found.setdefault(str(command), command)
    return found
