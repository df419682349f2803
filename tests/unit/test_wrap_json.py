"""Wrapping JSON client configs in place: byte preservation, round trips, user edits, refusals.

Every fixture is tried as written, with CRLF line ends and without its final newline. The checks
do not trust the editor's own idea of what it changed: bytes are compared outside the edited
registrations, and inside them member by member, using the span scanner on both files.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from lazyd.ctl.wrap.clients import CLIENTS
from lazyd.errors import WrapError
from tests.unit.fixtures_wrap.helpers import JSON_FIXTURES, SHIM, Lazyctl, assert_only_registrations_changed, loads

VARIANTS = ["lf", "crlf", "no-final-newline"]
MANAGED = {"LAZYD_LINGER": "10m"}


@pytest.fixture
def lazyctl(tmp_path: Path) -> Lazyctl:
    return Lazyctl(tmp_path)


def _servers(doc: object, client: str) -> dict[tuple[str | None, str], dict[str, object]]:
    assert isinstance(doc, dict)
    container = CLIENTS[client].container
    found: dict[tuple[str | None, str], dict[str, object]] = {
        (None, name): reg for name, reg in doc.get(container, {}).items()}  # fmt: skip
    for project, scope in doc.get("projects", {}).items() if client == "claude" else ():
        found.update({(project, name): reg for name, reg in scope.get(container, {}).items()})
    return found


def _is_stdio(reg: dict[str, object]) -> bool:
    return "command" in reg and not any(k in reg for k in ("url", "serverUrl", "httpUrl"))


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize(("client", "name"), JSON_FIXTURES)
def test_wrap_changes_only_the_edited_values_and_keeps_every_other_byte(lazyctl: Lazyctl, client: str, name: str,
                                                                        kind: str) -> None:  # fmt: skip
    path = lazyctl.fixture(name, kind)
    before = path.read_bytes()
    report = lazyctl.run("wrap", client, path, env=MANAGED)
    after = path.read_bytes()
    assert report.written and not report.refused
    original = loads(before.decode(), client)
    wrapped = {(r.key.project, r.key.server) for r in report.results if r.action == "wrapped"}
    assert wrapped == {key for key, reg in _servers(original, client).items() if _is_stdio(reg)}
    assert_only_registrations_changed(before.decode(), after.decode(), client, wrapped)
    # Semantically: exactly the expected transformation, nothing else anywhere in the document.
    expected = copy.deepcopy(original)
    for key, reg in _servers(expected, client).items():
        if key in wrapped:
            command = reg["command"]
            assert isinstance(command, str)
            reg["args"] = (["--"] if command.startswith("-") else []) + [command] + list(reg.get("args", []))  # type: ignore[call-overload]
            reg["command"] = SHIM
            declared = sorted(k for k in reg.get("env", {}) if not k.startswith("LAZYD_"))  # type: ignore[attr-defined]
            # The names of its own variables are recorded, so they always count in its identity.
            recorded = {"LAZYD_IDENTITY_ENV": ",".join(declared)} if declared else {}
            reg["env"] = {**reg.get("env", {}), **recorded, **MANAGED}  # type: ignore[dict-item]
    assert loads(after.decode(), client) == expected
    assert after.endswith(b"\n") == before.endswith(b"\n")
    if kind == "crlf":
        assert after.count(b"\n") == after.count(b"\r\n")


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize(("client", "name"), JSON_FIXTURES)
def test_unwrap_after_wrap_gives_back_the_original_file(lazyctl: Lazyctl, client: str, name: str, kind: str) -> None:
    path = lazyctl.fixture(name, kind)
    before = path.read_bytes()
    lazyctl.run("wrap", client, path, env=MANAGED)
    report = lazyctl.run("unwrap", client, path)
    assert report.written
    assert loads(path.read_text(), client) == loads(before.decode(), client)
    assert path.read_bytes() == before  # stronger than required: the edits are exact inverses
    assert not list((lazyctl.state_dir / "registrations").iterdir())


@pytest.mark.parametrize(("client", "name"), JSON_FIXTURES)
def test_wrapping_twice_never_nests_and_writes_nothing(lazyctl: Lazyctl, client: str, name: str) -> None:
    path = lazyctl.fixture(name)
    lazyctl.run("wrap", client, path, env=MANAGED)
    once = path.read_bytes()
    report = lazyctl.run("wrap", client, path, env=MANAGED)
    assert not report.written
    assert path.read_bytes() == once
    assert {r.action for r in report.results} <= {"unchanged", "skipped"}
    for reg in _servers(loads(once.decode(), client), client).values():
        args = reg.get("args") or []
        assert isinstance(args, list)
        assert SHIM not in args and not any(str(a).endswith("lazyd-shim") for a in args)


def test_a_command_that_looks_like_an_option_is_put_after_a_double_dash(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("claude.json")
    lazyctl.run("wrap", "claude", path, servers=("dash", "git"))
    servers = _servers(loads(path.read_text(), "claude"), "claude")
    assert servers[(None, "dash")]["args"] == ["--", "-weird-name"]
    assert servers[(None, "git")]["args"] == ["uvx", "mcp-server-git", "--repository", "C:\\repo/x"]
    lazyctl.run("unwrap", "claude", path, servers=("dash",))
    assert _servers(loads(path.read_text(), "claude"), "claude")[(None, "dash")] == {"command": "-weird-name", "args": []}


def test_http_and_sse_registrations_are_skipped_and_reported(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("claude.json")
    report = lazyctl.run("wrap", "claude", path)
    skipped = {r.key.server: r.reason for r in report.results if r.action == "skipped"}
    assert set(skipped) == {"remote-http", "remote-sse"}
    assert all("HTTP/SSE" in reason for reason in skipped.values())
    report = lazyctl.run("wrap", "claude", path, servers=("remote-http",))
    assert [r.action for r in report.results] == ["skipped"] and not report.written


def test_user_edits_made_between_wrap_and_unwrap_survive(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("claude.json")
    lazyctl.run("wrap", "claude", path, servers=("filesystem",), env={"LAZYD_LINGER": "10m", "LAZYD_SHARE": "false"})
    text = path.read_text()
    # The user adds a server argument, changes one managed value, and adds a variable of their own.
    text = text.replace('"/home/me/caf\\u00e9"', '"/home/me/caf\\u00e9",\n        "--read-only"')
    assert text.count('"LAZYD_LINGER": "10m"') == 1
    text = text.replace('"LAZYD_LINGER": "10m"', '"LAZYD_LINGER": "1h", "MINE": "kept"')
    path.write_text(text)
    lazyctl.run("unwrap", "claude", path, servers=("filesystem",))
    reg = _servers(loads(path.read_text(), "claude"), "claude")[(None, "filesystem")]
    assert reg["command"] == "npx"
    assert reg["args"] == ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/café", "--read-only"]
    # LAZYD_SHARE still held lazyd's value: removed. LAZYD_LINGER was changed by hand: the user's.
    assert reg["env"] == {"API_TOKEN": "sk-SECRET-filesystem", "LIMIT": 12345678901234567890,
                          "LAZYD_LINGER": "1h", "MINE": "kept"}  # fmt: skip


def test_a_managed_variable_that_existed_before_wrap_gets_its_old_value_back(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("c.json", b'{"mcpServers": {"s": {"command": "x", "env": {"LAZYD_LINGER": "5m"}}}}\n')
    before = path.read_bytes()
    lazyctl.run("wrap", "cursor", path, env={"LAZYD_LINGER": "10m"})
    assert b'"LAZYD_LINGER": "10m"' in path.read_bytes()
    lazyctl.run("unwrap", "cursor", path)
    assert path.read_bytes() == before


def test_an_empty_args_list_comes_back_with_its_spacing_and_a_trailing_comma_goes_with_the_items(
        lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp-config.json", b'{"mcpServers": {"s": {"command": "x", "args": [ ]}}}\n')
    before = path.read_bytes()
    lazyctl.run("wrap", "copilot", path)
    lazyctl.run("unwrap", "copilot", path)
    assert path.read_bytes() == before
    lazyctl.run("wrap", "copilot", path)
    path.write_bytes(path.read_bytes().replace(b'"x" ]', b'"x", ]'))  # the user's trailing comma (JSONC)
    lazyctl.run("unwrap", "copilot", path)
    assert loads(path.read_text(), "copilot") == {"mcpServers": {"s": {"command": "x", "args": []}}}


def test_an_env_object_that_was_empty_before_wrap_stays_and_one_lazyd_created_goes(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("c.json", b'{"mcpServers": {"a": {"command": "x", "env": {}}, "b": {"command": "y"}}}')
    lazyctl.run("wrap", "cursor", path, env=MANAGED)
    servers = loads(path.read_text(), "cursor")["mcpServers"]  # type: ignore[index]
    assert servers["a"]["env"] == MANAGED and servers["b"]["env"] == MANAGED
    lazyctl.run("unwrap", "cursor", path)
    assert loads(path.read_text(), "cursor") == {"mcpServers": {"a": {"command": "x", "env": {}}, "b": {"command": "y"}}}


def test_claude_project_registrations_are_selected_by_project_or_user_scope(lazyctl: Lazyctl) -> None:
    data = (b'{"mcpServers": {"db": {"command": "top"}},\n'
            b' "projects": {"/p": {"mcpServers": {"db": {"command": "proj"}}}}}\n')  # fmt: skip
    path = lazyctl.put(".claude.json", data)
    report = lazyctl.run("wrap", "claude", path, servers=("db",))
    assert report.refused and "several scopes" in report.refused[0].reason
    assert path.read_bytes() == data
    report = lazyctl.run("wrap", "claude", path, servers=("db",), project="/p")
    assert [(r.key.project, r.action) for r in report.results] == [("/p", "wrapped")]
    report = lazyctl.run("wrap", "claude", path, servers=("db",), user_scope=True)
    assert [(r.key.project, r.action) for r in report.results] == [(None, "wrapped")]
    doc = loads(path.read_text(), "claude")
    assert doc["mcpServers"]["db"]["args"] == ["top"]  # type: ignore[index]
    assert doc["projects"]["/p"]["mcpServers"]["db"]["args"] == ["proj"]  # type: ignore[index]
    lazyctl.run("unwrap", "claude", path, project="/p")
    assert loads(path.read_text(), "claude")["projects"]["/p"]["mcpServers"]["db"] == {"command": "proj"}  # type: ignore[index]


def test_the_default_file_of_each_client_is_used_when_none_is_given(lazyctl: Lazyctl) -> None:
    from lazyd.ctl.wrap import engine

    lazyctl.put(".cursor/mcp.json", b'{"mcpServers": {"s": {"command": "x"}}}')
    request = engine.Request("wrap", "cursor", None, all=True, shim=SHIM)
    report = engine.execute(request, lazyctl.env, lazyctl.root, state_dir=lazyctl.state_dir)
    assert report.file == str(lazyctl.root / "home" / ".cursor" / "mcp.json") and report.written
    with pytest.raises(WrapError, match="/nonexistent-codex/config.toml does not exist"):
        engine.execute(engine.Request("status", "codex", None, shim=SHIM), {**lazyctl.env, "CODEX_HOME": "/nonexistent-codex"},
                       lazyctl.root, state_dir=lazyctl.state_dir)  # fmt: skip


REFUSED_FILES = [
    ("duplicate server name", b'{"mcpServers": {"s": {"command": "a"}, "s": {"command": "b"}}}', "duplicate key 's'"),
    ("duplicate key in the registration", b'{"mcpServers": {"s": {"command": "a", "command": "b"}}}', "duplicate key 'command'"),
    ("duplicate key at the top", b'{"x": 1, "x": 2, "mcpServers": {"s": {"command": "a"}}}', "duplicate key 'x'"),
    ("duplicate key in env", b'{"mcpServers": {"s": {"command": "a", "env": {"K": "1", "K": "2"}}}}', "duplicate key 'K'"),
    ("command not a string", b'{"mcpServers": {"s": {"command": ["a"]}}}', "command is not a non-empty string"),
    ("empty command", b'{"mcpServers": {"s": {"command": ""}}}', "command is not a non-empty string"),
    ("args not strings", b'{"mcpServers": {"s": {"command": "a", "args": ["x", 1]}}}', "args are not a list of strings"),
    ("env not an object", b'{"mcpServers": {"s": {"command": "a", "env": ["K=1"]}}}', "env is not an object"),
    ("another relay", b'{"mcpServers": {"s": {"command": "/opt/mcp-lazy", "args": ["node", "x.js"]}}}', "mcp-lazy"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "data", "message"), REFUSED_FILES, ids=[c[0] for c in REFUSED_FILES])
def test_a_registration_that_cannot_be_edited_safely_is_refused_and_nothing_is_written(
    lazyctl: Lazyctl, case: str, data: bytes, message: str
) -> None:
    path = lazyctl.put("mcp.json", data)
    report = lazyctl.run("wrap", "cursor", path, env=MANAGED)
    assert report.refused and message in report.refused[0].reason
    assert not report.written and path.read_bytes() == data
    assert not list((lazyctl.state_dir / "registrations").iterdir())
    assert not list((lazyctl.state_dir / "backups").iterdir())


MALFORMED_FILES = [
    ("trailing comma in strict JSON", b'{"mcpServers": {"s": {"command": "a"},}}', "trailing comma"),
    ("comment in strict JSON", b'// hi\n{"mcpServers": {}}', "line 1, column 1"),
    ("truncated", b'{"mcpServers": {"s": {"command": "a"}', "expected ',' or '}'"),
    ("not UTF-8", b'{"mcpServers": {"s": {"command": "\xff"}}}', "not UTF-8"),
    ("top level not an object", b'[]', "top level is not an object"),
    ("container not an object", b'{"mcpServers": []}', "mcpServers is not an object"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "data", "message"), MALFORMED_FILES, ids=[c[0] for c in MALFORMED_FILES])
def test_a_malformed_file_is_refused_with_a_clear_error_and_left_alone(lazyctl: Lazyctl, case: str, data: bytes,
                                                                       message: str) -> None:  # fmt: skip
    path = lazyctl.put("mcp.json", data)
    with pytest.raises(WrapError, match=message) as caught:
        lazyctl.run("wrap", "cursor", path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == data


def test_a_duplicate_key_off_the_edited_path_does_not_block_an_edit(lazyctl: Lazyctl) -> None:
    data = b'{"mcpServers": {"s": {"command": "a"}}, "projects": {"/p": {"k": 1, "k": 2}}}'
    path = lazyctl.put(".claude.json", data)
    report = lazyctl.run("wrap", "claude", path, servers=("s",))
    assert [r.action for r in report.results] == ["wrapped"]


def test_an_unknown_server_name_is_refused(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("cursor.json")
    report = lazyctl.run("wrap", "cursor", path, servers=("nope",))
    assert report.refused and "no server named 'nope'" in report.refused[0].reason


def test_jsonc_comments_inside_and_around_a_registration_are_kept(lazyctl: Lazyctl) -> None:
    data = (b'{\n  "servers": {\n    // keep 1\n    "s": { /* keep 2 */ "type": "stdio", "command": "a", // keep 3\n'
            b'      "args": [/* keep 4 */ "x",], },\n  },\n}\n')  # fmt: skip
    path = lazyctl.put("mcp.json", data)
    lazyctl.run("wrap", "vscode", path, env=MANAGED)
    text = path.read_text()
    assert all(f"keep {n}" in text for n in (1, 2, 3, 4))
    lazyctl.run("unwrap", "vscode", path)
    assert path.read_bytes() == data


def test_a_byte_order_mark_is_kept(lazyctl: Lazyctl) -> None:
    data = '\ufeff{"mcpServers": {"s": {"command": "a"}}}'.encode()
    path = lazyctl.put("mcp.json", data)
    lazyctl.run("wrap", "cursor", path)
    assert path.read_bytes().startswith("\ufeff{".encode())
    lazyctl.run("unwrap", "cursor", path)
    assert path.read_bytes() == data


def test_the_file_mode_is_kept(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", b'{"mcpServers": {"s": {"command": "a"}}}', mode=0o640)
    lazyctl.run("wrap", "cursor", path)
    assert os.stat(path).st_mode & 0o7777 == 0o640


def test_reapply_wraps_again_what_a_clients_setup_rewrote_and_adopts_its_new_command(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", b'{"mcpServers": {"s": {"command": "old", "args": ["--v1"]}, "t": {"command": "t"}}}\n')
    lazyctl.run("wrap", "cursor", path, env=MANAGED)
    # The product's own setup re-registers "s" directly, keeping the env object it found.
    text = path.read_text()
    wrapped_s = text[text.index('"s": {') : text.index(', "t"')]
    path.write_text(text.replace(wrapped_s, '"s": {"command": "new", "args": ["--v2"], "env": {"LAZYD_LINGER": "10m"}}'))
    report = lazyctl.run("reapply", "cursor", path)
    assert {r.key.server: r.action for r in report.results} == {"s": "reapplied", "t": "unchanged"}
    servers = loads(path.read_text(), "cursor")["mcpServers"]  # type: ignore[index]
    assert servers["s"] == {"command": SHIM, "args": ["new", "--v2"], "env": MANAGED}
    again = lazyctl.run("reapply", "cursor", path)
    assert not again.written and {r.action for r in again.results} == {"unchanged"}
    lazyctl.run("unwrap", "cursor", path)
    # The env object setup kept held only our value, and lazyd had created it: it goes.
    assert loads(path.read_text(), "cursor") == {"mcpServers": {"s": {"command": "new", "args": ["--v2"]},
                                                                "t": {"command": "t"}}}  # fmt: skip


def test_reapply_of_a_registration_lazyd_never_wrapped_changes_nothing(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("cursor.json")
    before = path.read_bytes()
    report = lazyctl.run("reapply", "cursor", path)
    assert {r.action for r in report.results} == {"skipped"} and path.read_bytes() == before


def test_wrap_with_another_shim_path_moves_wrapped_registrations_to_it(lazyctl: Lazyctl, tmp_path: Path) -> None:
    other = tmp_path / "bin" / "lazyd-shim"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    path = lazyctl.fixture("windsurf.json")
    original = path.read_bytes()
    lazyctl.run("wrap", "windsurf", path)
    report = lazyctl.run("wrap", "windsurf", path, shim=str(other))
    assert [r.action for r in report.results if r.key.server == "brave-search"] == ["updated"]
    assert loads(path.read_text(), "windsurf")["mcpServers"]["brave-search"]["command"] == str(other)  # type: ignore[index]
    lazyctl.run("unwrap", "windsurf", path)
    assert path.read_bytes() == original


def test_a_stale_wrapper_restored_after_unwrap_is_reported_and_recovered_only_on_request(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("cursor.json")
    original = path.read_bytes()
    lazyctl.run("wrap", "cursor", path, env=MANAGED)
    wrapped = path.read_bytes()
    lazyctl.run("unwrap", "cursor", path)
    path.write_bytes(wrapped)  # an external writer puts the old wrapped config back
    (row,) = [s for s in lazyctl.run("status", "cursor", path).statuses if s.server == "github"]
    assert (row.wrapped, row.managed, row.recoverable) == (True, False, True)
    report = lazyctl.run("unwrap", "cursor", path)
    assert report.refused and "--recover" in report.refused[0].reason and path.read_bytes() == wrapped
    report = lazyctl.run("unwrap", "cursor", path, recover=True)
    assert [r.action for r in report.results if r.key.server == "github"] == ["recovered"]
    github = loads(path.read_text(), "cursor")["mcpServers"]["github"]  # type: ignore[index]
    expected = loads(original.decode(), "cursor")["mcpServers"]["github"]  # type: ignore[index]
    assert github["command"] == expected["command"] and github["args"] == expected["args"]
    # env values are left, the recorded LAZYD_IDENTITY_ENV too: their origin is unknown
    assert github["env"] == {**expected["env"], "LAZYD_IDENTITY_ENV": "GITHUB_PERSONAL_ACCESS_TOKEN", **MANAGED}


def test_unwrap_of_a_server_removed_from_the_file_forgets_its_record(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", b'{"mcpServers": {"s": {"command": "a"}}}')
    lazyctl.run("wrap", "cursor", path)
    path.write_bytes(b'{"mcpServers": {}}')
    (row,) = lazyctl.run("status", "cursor", path).statuses
    assert (row.server, row.transport, row.managed) == ("s", "missing", True)
    report = lazyctl.run("unwrap", "cursor", path, servers=("s",))
    assert [r.action for r in report.results] == ["forgotten"] and not report.written
    assert not list((lazyctl.state_dir / "registrations").iterdir())
