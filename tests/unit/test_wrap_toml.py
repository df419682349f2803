"""Wrapping Codex CLI's TOML config with tomlkit: comments, unrelated tables, inline tables, CRLF."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomlkit

from lazyd.errors import WrapError
from tests.unit.fixtures_wrap.helpers import SHIM, Lazyctl

MANAGED = {"LAZYD_LINGER": "10m"}


@pytest.fixture
def lazyctl(tmp_path: Path) -> Lazyctl:
    return Lazyctl(tmp_path)


def _comments(text: str) -> list[str]:
    return re.findall(r"#[^\r\n]*", text)


def _plain(text: str) -> dict[str, object]:
    return tomlkit.parse(text).unwrap()


def _section(text: str, header: str) -> str:
    """The text of one [table] up to the next header or the end."""
    start = text.index(header)
    following = text.find("\n[", start + 1)
    return text[start : None if following < 0 else following]


@pytest.mark.parametrize("kind", ["lf", "crlf"])
def test_wrap_keeps_comments_and_unrelated_tables_and_wraps_every_stdio_server(lazyctl: Lazyctl, kind: str) -> None:
    path = lazyctl.fixture("codex.toml", kind)
    before = path.read_bytes().decode()
    report = lazyctl.run("wrap", "codex", path, env=MANAGED)
    after = path.read_bytes().decode()
    assert {r.key.server: r.action for r in report.results} == {
        "docs": "wrapped", "literal": "wrapped", "sub": "wrapped", "remote": "skipped"}  # fmt: skip
    assert _comments(after) == _comments(before)
    # Unrelated settings and tables are byte-identical, not just equal.
    assert after.startswith(before[: before.index("[mcp_servers.docs]")])
    for header in ("[mcp_servers.remote]", "[profiles.fast]"):
        assert _section(after, header) == _section(before, header)
    old, new = _plain(before), _plain(after)
    assert {k: v for k, v in new.items() if k != "mcp_servers"} == {k: v for k, v in old.items() if k != "mcp_servers"}
    servers = new["mcp_servers"]
    assert isinstance(servers, dict)
    assert servers["docs"] == {"command": SHIM, "args": ["npx", "-y", "mcp-server-docs"],
                               "env": {"API_KEY": "SECRET-docs", "LAZYD_IDENTITY_ENV": "API_KEY", **MANAGED},
                               "startup_timeout_sec": 20}  # fmt: skip
    assert servers["literal"]["args"] == ["C:\\tools\\server.exe", "--flag", "x"]
    assert servers["sub"]["env"] == {"TOKEN": "SECRET-sub", "LAZYD_IDENTITY_ENV": "TOKEN", **MANAGED}
    if kind == "crlf":
        assert after.count("\n") == after.count("\r\n")


@pytest.mark.parametrize("kind", ["lf", "crlf"])
def test_unwrap_restores_an_equal_document_with_every_comment(lazyctl: Lazyctl, kind: str) -> None:
    path = lazyctl.fixture("codex.toml", kind)
    before = path.read_bytes()
    lazyctl.run("wrap", "codex", path, env=MANAGED)
    lazyctl.run("unwrap", "codex", path)
    after = path.read_bytes()
    assert _plain(after.decode()) == _plain(before.decode())
    assert _comments(after.decode()) == _comments(before.decode())
    assert after == before  # what tomlkit allows here: the exact original


def test_a_literal_string_moved_between_command_and_args_stays_literal(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("codex.toml")
    lazyctl.run("wrap", "codex", path, servers=("literal",))
    assert "  'C:\\tools\\server.exe',\n  '--flag',   # a comment inside the array" in path.read_text()


def test_an_inline_env_table_stays_inline(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("codex.toml")
    lazyctl.run("wrap", "codex", path, servers=("docs",), env=MANAGED)
    line = next(l for l in path.read_text().splitlines() if l.startswith("env ="))
    # Every member spelled like the table's own (tomlkit alone writes `"API_KEY",LAZYD_LINGER` and
    # drops the space before the brace when a one-member table grows).
    assert line == 'env = { "API_KEY" = "SECRET-docs", LAZYD_IDENTITY_ENV = "API_KEY", LAZYD_LINGER = "10m" }'


def test_wrapping_twice_never_nests(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("codex.toml")
    lazyctl.run("wrap", "codex", path)
    once = path.read_bytes()
    report = lazyctl.run("wrap", "codex", path)
    assert not report.written and path.read_bytes() == once
    assert {r.action for r in report.results} == {"unchanged", "skipped"}


def test_an_inline_table_registration_is_refused_but_a_dotted_key_one_is_wrapped(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("codex_inline_registration.toml")
    before = path.read_bytes()
    report = lazyctl.run("wrap", "codex", path)
    assert [(r.key.server, r.action) for r in report.results] == [("inline", "refused"), ("plain", "wrapped")]
    assert "inline-table registration" in report.refused[0].reason
    assert path.read_bytes() == before  # one refusal stops the whole edit
    report = lazyctl.run("wrap", "codex", path, servers=("plain",))
    assert report.written
    assert _plain(path.read_text())["mcp_servers"]["plain"] == {"command": SHIM, "args": ["uvx"]}  # type: ignore[index]
    assert 'inline = { command = "npx", args = ["x"] }' in path.read_text()


def test_an_inline_mcp_servers_table_is_refused(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("codex_inline_container.toml")
    before = path.read_bytes()
    report = lazyctl.run("wrap", "codex", path)
    assert report.refused and "inline-table registration" in report.refused[0].reason
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'[mcp_servers.a]\ncommand = "x"\ncommand = "y"\n', "not valid TOML"),
        (b'[mcp_servers.a\ncommand = "x"\n', "not valid TOML"),
        (b'mcp_servers = 3\n', "mcp_servers is not a table"),
    ],
)
def test_malformed_toml_is_refused_and_left_alone(lazyctl: Lazyctl, data: bytes, message: str) -> None:
    path = lazyctl.put("config.toml", data)
    with pytest.raises(WrapError, match=message):
        lazyctl.run("wrap", "codex", path)
    assert path.read_bytes() == data


def test_user_edits_to_a_wrapped_toml_registration_survive_unwrap(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("codex.toml")
    lazyctl.run("wrap", "codex", path, servers=("sub",), env=MANAGED)
    text = path.read_text().replace('args = ["uvx"]', 'args = ["uvx", "mcp-server-fetch"]  # added by hand')
    path.write_text(text.replace('LAZYD_LINGER = "10m"', 'LAZYD_LINGER = "2h"'))
    lazyctl.run("unwrap", "codex", path, servers=("sub",))
    sub = _plain(path.read_text())["mcp_servers"]["sub"]  # type: ignore[index]
    assert sub == {"command": "uvx", "args": ["mcp-server-fetch"], "env": {"TOKEN": "SECRET-sub", "LAZYD_LINGER": "2h"}}
    assert "# added by hand" in path.read_text() and "# keep me" in path.read_text()
