"""Helpers shared by the wrap tests: an isolated user for lazyctl, fixture files, byte-diff checks."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lazyd.ctl.wrap import engine, jsonspan, spans
from lazyd.ctl.wrap.clients import CLIENTS
from lazyd.ctl.wrap.shimargs import find_shim

FIXTURES = Path(__file__).resolve().parent
SHIM = find_shim(os.environ)

# (client, fixture file, container path to its registrations)
JSON_FIXTURES = [
    ("claude", "claude.json"),
    ("claude", "claude_project.mcp.json"),
    ("cursor", "cursor.json"),
    ("gemini", "gemini.json"),
    ("vscode", "vscode.json"),
    ("windsurf", "windsurf.json"),
    ("copilot", "copilot.json"),
    ("amp", "amp.json"),
    ("crush", "crush.json"),
]
SECRETS = ["sk-SECRET-filesystem", "SECRET-http", "ghp_SECRET", "$MY_API_TOKEN", "BSA-SECRET", "SECRET-docs",
           "SECRET-sub", "${input:api-key}"]  # fmt: skip
# Every env or header value in the fixtures that a careless report could print.


def variant(data: bytes, kind: str) -> bytes:
    """The fixture as-is ("lf"), with CRLF line ends ("crlf"), or without its trailing newline."""
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n")
    if kind == "no-final-newline":
        return data.rstrip(b"\n")
    return data


@dataclass
class Lazyctl:
    """An isolated user (HOME, XDG_STATE_HOME) and a way to run requests against files in it."""

    root: Path

    @property
    def env(self) -> dict[str, str]:
        return {"HOME": str(self.root / "home"), "XDG_STATE_HOME": str(self.root / "state"),
                "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}  # fmt: skip

    @property
    def state_dir(self) -> Path:
        return self.root / "state" / "lazyd"

    def put(self, name: str, data: bytes, mode: int = 0o644) -> Path:
        path = self.root / "home" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        return path

    def fixture(self, name: str, kind: str = "lf") -> Path:
        return self.put(name, variant((FIXTURES / name).read_bytes(), kind))

    def run(self, op: engine.Op, client: str, path: Path, before_replace: Callable[[], None] | None = None,
            **kwargs: object) -> engine.Report:  # fmt: skip
        kwargs.setdefault("shim", SHIM)
        if "servers" not in kwargs and op != "status":
            kwargs.setdefault("all", True)
        request = engine.Request(op, client, str(path), **kwargs)  # type: ignore[arg-type]
        return engine.execute(request, self.env, self.root, before_replace, state_dir=self.state_dir)


def registrations(text: str, client: str) -> dict[tuple[str | None, str], spans.Object]:
    """Every registration object of a JSON config by (project, name), from the span scanner."""
    spec = CLIENTS[client]
    root = jsonspan.parse(text, spec.dialect)
    assert isinstance(root, spans.Object)
    found: dict[tuple[str | None, str], spans.Object] = {}
    scopes: list[tuple[str | None, spans.Object]] = [(None, root)]
    if spec.projects:
        for projects in root.find("projects"):
            assert isinstance(projects.value, spans.Object)
            scopes += [(m.key, m.value) for m in projects.value.members if isinstance(m.value, spans.Object)]
    for project, scope in scopes:
        for container in scope.find(spec.container):
            assert isinstance(container.value, spans.Object)
            for member in container.value.members:
                if isinstance(member.value, spans.Object):
                    found[(project, member.key)] = member.value
    return found


def assert_only_registrations_changed(before: str, after: str, client: str, edited: set[tuple[str | None, str]]) -> None:
    """Every byte outside the edited registrations is identical, in order; inside each edited one,
    every member other than command/args/env is byte-identical, the original args elements keep
    their exact text at the end of args, and the original env members keep theirs."""
    old, new = registrations(before, client), registrations(after, client)
    cursor_old = cursor_new = 0
    for key in sorted(edited, key=lambda k: old[k].start):
        o, n = old[key], new[key]
        assert before[cursor_old : o.start] == after[cursor_new : n.start], f"bytes before {key} changed"
        cursor_old, cursor_new = o.end, n.end
        kept_old = {m.key: before[m.key_start : m.value.end] for m in o.members if m.key not in ("command", "args", "env")}
        kept_new = {m.key: after[m.key_start : m.value.end] for m in n.members if m.key not in ("command", "args", "env")}
        assert kept_old == kept_new, f"unedited members of {key} changed"
        assert [m.key for m in o.members if m.key in kept_old] == [m.key for m in n.members if m.key in kept_new]
        for name in ("args", "env"):
            old_member = next((m for m in o.members if m.key == name), None)
            new_member = next((m for m in n.members if m.key == name), None)
            if old_member is None:
                continue
            assert new_member is not None
            if isinstance(old_member.value, spans.Array):
                assert isinstance(new_member.value, spans.Array)
                old_items = [before[i.start : i.end] for i in old_member.value.items]
                new_items = [after[i.start : i.end] for i in new_member.value.items]
                assert new_items[len(new_items) - len(old_items) :] == old_items
            if isinstance(old_member.value, spans.Object):
                assert isinstance(new_member.value, spans.Object)
                old_env = [before[m.key_start : m.value.end] for m in old_member.value.members]
                new_env = [after[m.key_start : m.value.end] for m in new_member.value.members]
                assert new_env[: len(old_env)] == old_env
    assert before[cursor_old:] == after[cursor_new:], "bytes after the last edited registration changed"


def loads(text: str, client: str) -> object:
    """The plain value of a config (comments and trailing commas allowed where the client allows them)."""
    return spans.to_python(jsonspan.parse(text, CLIENTS[client].dialect))


def strict_loads(text: str) -> object:
    return json.loads(text)
