"""`lazyctl wrap --client opencode`: opencode's layout, byte for byte.

opencode (1.18) keeps its MCP servers under `mcp`, each local one as
`{"type": "local", "command": [argv...], "environment": {...}, "cwd", "enabled", "timeout"}`: the
executable and its arguments in one array, the variables in `environment`; remote ones are
`{"type": "remote", "url": ...}`. It reads every config file (global `~/.config/opencode/
opencode.jsonc`, `opencode.json` or `config.json`, a project's `opencode.json(c)` or
`.opencode/opencode.json(c)`) with jsonc-parser and trailing commas allowed. Wrapping puts the
shim (and a `--` before an argv that starts with `-`) in front of the argv; unwrapping takes it off
again, so the bytes come back. The fixture is tried as written, with CRLF line ends and without
its final newline.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from lazyd.ctl.wrap import engine, jsonspan, spans
from lazyd.ctl.wrap.clients import CLIENTS
from lazyd.ctl.wrap.shimargs import command_index
from lazyd.errors import WrapError
from tests.unit.fixtures_wrap.helpers import SECRETS, SHIM, Lazyctl, loads

VARIANTS = ["lf", "crlf", "no-final-newline"]
MANAGED = {"LAZYD_LINGER": "30m"}
FIXTURE = "opencode.jsonc"
KEPT = ("type", "cwd", "enabled", "timeout")  # members wrap never touches


@pytest.fixture
def lazyctl(tmp_path: Path) -> Lazyctl:
    return Lazyctl(tmp_path)


def servers(text: str) -> dict[str, dict[str, object]]:
    doc = loads(text, "opencode")
    assert isinstance(doc, dict)
    found: dict[str, dict[str, object]] = doc["mcp"]
    return found


def registration_spans(text: str) -> dict[str, spans.Object]:
    root = jsonspan.parse(text, CLIENTS["opencode"].dialect)
    assert isinstance(root, spans.Object)
    (mcp,) = root.find("mcp")
    assert isinstance(mcp.value, spans.Object)
    return {m.key: m.value for m in mcp.value.members if isinstance(m.value, spans.Object)}


@pytest.mark.parametrize("kind", VARIANTS)
def test_wrap_puts_the_shim_in_front_of_each_local_argv_and_keeps_every_other_byte(lazyctl: Lazyctl, kind: str) -> None:
    path = lazyctl.fixture(FIXTURE, kind)
    before = path.read_bytes().decode()  # not read_text(): it would turn CRLF into LF
    report = lazyctl.run("wrap", "opencode", path, env=MANAGED)
    after = path.read_bytes().decode()
    assert report.written and not report.refused
    assert {r.key.server: r.action for r in report.results} == {
        "filesystem": "wrapped", "time": "wrapped", "dashed": "wrapped", "solo": "wrapped", "docs": "skipped"}
    # Semantically: exactly this, nothing else anywhere in the document.
    expected = copy.deepcopy(servers(before))
    for name, reg in expected.items():
        if reg["type"] != "local":
            continue
        argv = reg["command"]
        assert isinstance(argv, list)
        reg["command"] = [SHIM, *(["--"] if argv[0].startswith("-") else []), *argv]
        env = reg.get("environment", {})
        assert isinstance(env, dict)
        declared = {"LAZYD_IDENTITY_ENV": ",".join(sorted(env))} if env else {}
        reg["environment"] = {**env, **declared, **MANAGED}
    doc_before, doc_after = loads(before, "opencode"), loads(after, "opencode")
    assert isinstance(doc_before, dict) and isinstance(doc_after, dict)
    assert doc_after == {**doc_before, "mcp": expected}
    # Byte for byte: outside the registrations nothing moved, and inside each one the members
    # wrap does not own, the original argv's spellings (escapes too) and env members are intact.
    old, new = registration_spans(before), registration_spans(after)
    assert before[: old["filesystem"].start] == after[: new["filesystem"].start]
    assert before[old["docs"].start :] == after[new["docs"].start :]
    for name in ("filesystem", "time", "dashed", "solo"):
        o, n = old[name], new[name]
        for key in KEPT:
            assert [before[m.key_start : m.value.end] for m in o.find(key)] == \
                   [after[m.key_start : m.value.end] for m in n.find(key)]
        (old_argv,), (new_argv,) = o.find("command"), n.find("command")
        assert isinstance(old_argv.value, spans.Array) and isinstance(new_argv.value, spans.Array)
        old_items = [before[i.start : i.end] for i in old_argv.value.items]
        new_items = [after[i.start : i.end] for i in new_argv.value.items]
        assert new_items[-len(old_items) :] == old_items
    assert r"/home/u/caf\u00e9" in after  # an escape in an argument keeps its spelling
    assert after.endswith("\n") == before.endswith("\n")
    if kind == "crlf":
        assert after.count("\n") == after.count("\r\n")


@pytest.mark.parametrize("kind", VARIANTS)
def test_unwrap_after_wrap_gives_back_the_original_bytes(lazyctl: Lazyctl, kind: str) -> None:
    path = lazyctl.fixture(FIXTURE, kind)
    original = path.read_bytes()
    lazyctl.run("wrap", "opencode", path, env=MANAGED)
    assert path.read_bytes() != original
    report = lazyctl.run("unwrap", "opencode", path)
    assert report.written and path.read_bytes() == original


def test_the_shims_own_parser_reads_each_wrapped_argv_back_as_the_original(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture(FIXTURE)
    originals = {name: reg["command"] for name, reg in servers(path.read_text()).items() if reg["type"] == "local"}
    lazyctl.run("wrap", "opencode", path, env=MANAGED)
    for name, reg in servers(path.read_text()).items():
        if name in originals:
            argv = reg["command"]
            assert isinstance(argv, list) and argv[0] == SHIM
            assert argv[1 + command_index(argv[1:]):] == originals[name]


def test_a_dry_run_writes_nothing_and_names_fields_only(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture(FIXTURE)
    before = path.read_bytes()
    report = lazyctl.run("wrap", "opencode", path, env=MANAGED, dry_run=True)
    assert not report.written and path.read_bytes() == before
    changed = {r.key.server: r.changed for r in report.results}
    assert changed["filesystem"] == ["command", "environment.LAZYD_IDENTITY_ENV", "environment.LAZYD_LINGER"]
    assert changed["time"] == ["command", "environment", "environment.LAZYD_LINGER"]
    text = str(report.to_json())
    assert not any(secret in text for secret in SECRETS) and "npx" not in text


def test_wrapping_twice_never_nests_and_writes_nothing(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture(FIXTURE)
    lazyctl.run("wrap", "opencode", path, env=MANAGED)
    once = path.read_bytes()
    again = lazyctl.run("wrap", "opencode", path, env=MANAGED)
    assert not again.written and path.read_bytes() == once
    assert {r.action for r in again.results} == {"unchanged", "skipped"}


def test_wrap_status_and_reapply_read_the_argv_layout(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture(FIXTURE)
    lazyctl.run("wrap", "opencode", path, env=MANAGED)
    rows = {s.server: (s.wrapped, s.managed) for s in lazyctl.run("status", "opencode", path).statuses}
    assert rows == {"filesystem": (True, True), "time": (True, True), "dashed": (True, True), "solo": (True, True),
                    "docs": (False, False)}
    # opencode's own `mcp add` re-registers "time" directly: reapply wraps the new argv.
    text = path.read_text()
    start = text.index('"time": {')
    end = text.index("},", start) + 1
    path.write_text(text[:start] + '"time": {"type": "local", "command": ["uvx", "mcp-server-time", "--v2"]}' + text[end:])
    report = lazyctl.run("reapply", "opencode", path)
    assert {r.key.server: r.action for r in report.results}["time"] == "reapplied"
    assert servers(path.read_text())["time"]["command"] == [SHIM, "uvx", "mcp-server-time", "--v2"]


REFUSED = [
    ("command a string", b'{"mcp": {"s": {"type": "local", "command": "npx x"}}}', "command is not a non-empty array of strings"),
    ("empty argv", b'{"mcp": {"s": {"type": "local", "command": []}}}', "command is not a non-empty array of strings"),
    ("argv not strings", b'{"mcp": {"s": {"type": "local", "command": ["x", 1]}}}', "command is not a non-empty array of strings"),
    ("environment not an object", b'{"mcp": {"s": {"type": "local", "command": ["x"], "environment": ["K=1"]}}}',
     "environment is not an object"),
    ("duplicate key in environment", b'{"mcp": {"s": {"type": "local", "command": ["x"], "environment": {"K": "1", "K": "2"}}}}',
     "duplicate key 'K'"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "data", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_registration_opencode_would_not_run_as_written_is_refused_and_nothing_is_written(
        lazyctl: Lazyctl, case: str, data: bytes, message: str) -> None:
    path = lazyctl.put("opencode.json", data)
    report = lazyctl.run("wrap", "opencode", path)
    assert report.refused and message in report.refused[0].reason
    assert not report.written and path.read_bytes() == data


def test_the_default_file_is_the_one_opencode_itself_writes(lazyctl: Lazyctl) -> None:
    env = {**lazyctl.env, "XDG_CONFIG_HOME": str(lazyctl.root / "xdg")}
    config = lazyctl.root / "xdg" / "opencode"
    config.mkdir(parents=True)
    request = engine.Request("wrap", "opencode", None, all=True, shim=SHIM)
    with pytest.raises(WrapError, match="opencode/opencode.jsonc does not exist"):
        engine.execute(request, env, lazyctl.root, state_dir=lazyctl.state_dir)
    (config / "config.json").write_text('{"mcp": {"a": {"type": "local", "command": ["a"]}}}')
    (config / "opencode.json").write_text('{"mcp": {"b": {"type": "local", "command": ["b"]}}}')
    report = engine.execute(request, env, lazyctl.root, state_dir=lazyctl.state_dir)
    assert report.file == str(config / "opencode.json") and [r.key.server for r in report.results] == ["b"]
    (config / "opencode.jsonc").write_text('{"mcp": {"c": {"type": "local", "command": ["c"]}}}')
    report = engine.execute(request, env, lazyctl.root, state_dir=lazyctl.state_dir)
    assert report.file == str(config / "opencode.jsonc")
    # Without XDG_CONFIG_HOME: ~/.config/opencode.
    home = lazyctl.root / "home" / ".config" / "opencode"
    home.mkdir(parents=True)
    (home / "opencode.json").write_text('{"mcp": {}}')
    assert engine.execute(request, lazyctl.env, lazyctl.root, state_dir=lazyctl.state_dir).file == str(home / "opencode.json")


def test_a_projects_opencode_json_is_wrapped_with_file(lazyctl: Lazyctl) -> None:
    project = lazyctl.root / "project" / ".opencode"
    project.mkdir(parents=True)
    path = project / "opencode.jsonc"
    path.write_text('{\n  // project servers\n  "mcp": {"local": {"type": "local", "command": ["./bin/mcp"],},},\n}\n')
    report = engine.execute(engine.Request("wrap", "opencode", str(path), all=True, shim=SHIM), lazyctl.env,
                            lazyctl.root, state_dir=lazyctl.state_dir)
    assert report.written
    assert servers(path.read_text())["local"]["command"] == [SHIM, "./bin/mcp"]
    assert "// project servers" in path.read_text()


def test_a_check_for_opencode_uses_its_handshake_and_the_environment_it_gives_a_server() -> None:
    from lazyd.core.sharing.client_profiles import PROFILES, opencode_environment

    assert PROFILES["opencode"].client_names == ("opencode",)
    assert PROFILES["opencode"].builtin == {"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
                                            "clientInfo": {"name": "opencode", "version": "1.18.33"}}
    # Seen in /proc of a server opencode 1.18.33 started: all of its own environment, AGENT=1,
    # OPENCODE=1, OPENCODE_PID (a new value every run: no part of a check), the registration's.
    assert opencode_environment({"HOME": "/h", "AGENT": "0"}, {"K": "v"}) == {
        "HOME": "/h", "AGENT": "1", "OPENCODE": "1", "K": "v"}


V2 = b'''{
  "$schema": "https://opencode.ai/config.json",
  "mcp": {
    "timeout": {"startup": 20000},
    "servers": {
      "fixture": {"type": "local", "command": ["python3", "server.py"], "disabled": false},
      "docs": {"type": "remote", "url": "https://example.com/mcp"},
    },
  },
}
'''


@pytest.mark.parametrize("kind", VARIANTS)
def test_opencode_2s_layout_under_mcp_servers_is_wrapped_and_unwrapped_byte_for_byte(lazyctl: Lazyctl, kind: str) -> None:
    # opencode 1.18 reads 2.x's layout too (`mcp.servers.NAME`, a global `mcp.timeout`): tried with
    # `opencode mcp list`, which connects to the server registered so.
    from tests.unit.fixtures_wrap.helpers import variant

    path = lazyctl.put("opencode.json", variant(V2, kind))
    original = path.read_bytes()
    report = lazyctl.run("wrap", "opencode", path, env=MANAGED)
    # The global `mcp.timeout` is listed too, as what it is: nothing lazyd could run.
    assert {r.key.server: r.action for r in report.results} == {"timeout": "skipped", "fixture": "wrapped",
                                                                "docs": "skipped"}
    doc = loads(path.read_bytes().decode(), "opencode")
    assert isinstance(doc, dict)
    assert doc["mcp"]["timeout"] == {"startup": 20000}
    assert doc["mcp"]["servers"]["fixture"] == {"type": "local", "command": [SHIM, "python3", "server.py"],
                                                "disabled": False, "environment": MANAGED}
    lazyctl.run("unwrap", "opencode", path)
    assert path.read_bytes() == original


def test_a_1x_server_named_servers_is_still_a_server(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("opencode.json", b'{"mcp": {"servers": {"type": "local", "command": ["s"]}}}')
    report = lazyctl.run("wrap", "opencode", path)
    assert [(r.key.server, r.action) for r in report.results] == [("servers", "wrapped")]
    assert servers(path.read_text())["servers"]["command"] == [SHIM, "s"]
