"""The wrap subcommands as a user runs them: options, exit statuses, output without secrets, --check."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lazyd.protocol import wire
from lazyd.protocol.frames import Hello, Reply, Welcome
from lazyd.ctl.main import build_parser, main
from tests.unit.fixtures_wrap.helpers import FIXTURES, SECRETS, SHIM

WAIT_S = 20.0  # bound on the fake daemon thread; never a timing assertion
REPORT = {"name": "server-1a2b3c", "protocol_version": "2025-06-18", "listings": {}}  # a check's, as the daemon sends it


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home").mkdir()
    shutil.copy(FIXTURES / "claude.json", tmp_path / "home" / ".claude.json")
    return tmp_path / "home"


def lazyctl(*words: str) -> int:
    return main(list(words))


def test_every_subcommand_has_help_naming_the_clients_and_their_files(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("wrap", "unwrap", "reapply", "wrap-status"):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([name, "--help"])
        assert exited.value.code == 0
        text = capsys.readouterr().out
        assert "--client" in text and "~/.codex/config.toml" in text and ".vscode/mcp.json" in text
    assert "wrap-status" in build_parser().format_help()


def test_dry_run_prints_field_names_and_never_a_value(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (home / ".claude.json").read_bytes()
    assert lazyctl("wrap", "--client", "claude", "--all", "--dry-run", "--env", "LAZYD_LINGER=10m") == 0
    out, err = capsys.readouterr()
    assert (home / ".claude.json").read_bytes() == before
    assert "would be wrapped" in out and "command, args, env.LAZYD_LINGER" in out and "nothing was written" in out
    for value in [*SECRETS, "npx", "server-filesystem", SHIM, "10m", "/usr/local/bin/server-bare"]:
        assert value not in out + err


def test_json_output_is_one_document_with_results_and_no_values(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lazyctl("wrap", "--client", "claude", "--server", "git", "--server", "remote-http", "--json") == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert data["written"] and data["backup"]
    assert [(r["server"], r["action"]) for r in data["results"]] == [("git", "wrapped"), ("remote-http", "skipped")]
    assert data["results"][0]["changed"] == ["command", "args"]
    assert not any(secret in out for secret in SECRETS) and "uvx" not in out


def test_wrap_status_reports_wrapped_managed_and_recoverable(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lazyctl("wrap", "--client", "claude", "--server", "git")
    capsys.readouterr()
    assert lazyctl("wrap-status", "--client", "claude", "--json") == 0
    out = capsys.readouterr().out
    rows = {(r["server"], r["project"]): r for r in json.loads(out)["servers"]}
    assert (rows[("git", None)]["wrapped"], rows[("git", None)]["managed"], rows[("git", None)]["recoverable"]) == (True, True, True)
    assert (rows[("bare", None)]["wrapped"], rows[("bare", None)]["managed"]) == (False, False)
    assert rows[("remote-http", None)]["transport"] == "http"
    assert rows[("local-db", "/home/me/project-a")]["transport"] == "stdio"
    assert lazyctl("wrap-status", "--client", "claude") == 0
    out = capsys.readouterr().out
    assert "RECOVERABLE" in out and not any(secret in out for secret in SECRETS)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["wrap", "--client", "claude", "--all", "--env", "LAZYD_LINGER=soon"], "lazyd-shim would refuse"),
        (["wrap", "--client", "cursor", "--all", "--project", "/p"], "--project and --user-scope apply to Claude"),
        (["wrap", "--client", "claude"], "--server NAME (repeatable) or --all"),
        (["wrap", "--client", "claude", "--all", "--shim", "relative/shim"], "absolute path"),
    ],
)
def test_bad_usage_exits_2_with_one_line(home: Path, capsys: pytest.CaptureFixture[str], words: list[str],
                                         message: str) -> None:  # fmt: skip
    before = (home / ".claude.json").read_bytes()
    assert lazyctl(*words) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and err.startswith("lazyctl ")
    assert (home / ".claude.json").read_bytes() == before


def test_argparse_refuses_an_unknown_client_and_server_with_all(home: Path) -> None:
    for words in (["wrap", "--client", "emacs", "--all"], ["wrap", "--client", "claude", "--all", "--server", "x"]):
        with pytest.raises(SystemExit) as exited:
            lazyctl(*words)
        assert exited.value.code == 2


def test_a_refusal_exits_1_and_says_nothing_was_written(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "dup.json").write_text('{"mcpServers": {"s": {"command": "a", "command": "b"}}}')
    assert lazyctl("wrap", "--client", "cursor", "--file", "home/dup.json", "--all") == 1
    out, err = capsys.readouterr()
    assert "refused" in out and "duplicate key 'command'" in out and "nothing was written" in err


def test_a_failed_operation_exits_1_with_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lazyctl("unwrap", "--client", "gemini", "--all") == 1
    err = capsys.readouterr().err
    assert err == f"lazyctl: {home}/.gemini/settings.json does not exist\n"
    assert lazyctl("unwrap", "--client", "gemini", "--all", "--json") == 1
    assert json.loads(capsys.readouterr().out)["error"].endswith("does not exist")


# --- --check ----------------------------------------------------------------------------------------


class FakeDaemon:
    """A real Unix socket speaking the wire protocol, answering each `check` with a canned reply."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.dir = tempfile.mkdtemp(prefix="lzw", dir="/tmp")  # short: sun_path is 108 bytes
        self.path = os.path.join(self.dir, "lazyd.sock")
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen()
        self.server.settimeout(WAIT_S)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                reader = wire.BlockingFrameReader(conn)
                hello = reader.read()
                assert isinstance(hello, Hello) and hello.role == "ctl"
                conn.sendall(wire.encode(Welcome(0, "control", os.getpid())))
                frame = reader.read()
                assert frame is not None
                self.requests.append(frame.to_map())
                conn.sendall(wire.encode(Reply(**self.reply)))

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone would not
        self.server.close()
        self.thread.join(WAIT_S)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cursor_file(home: Path) -> Path:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    path.write_text('{"mcpServers": {"s": {"command": "/usr/bin/server", "args": ["--port", "3"], "env": {"K": "v"}},'
                    ' "r": {"url": "https://x"}}}')  # fmt: skip
    return path


@pytest.fixture
def fake_daemon(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDaemon]:
    daemon = FakeDaemon(request.param)
    monkeypatch.setenv("LAZYD_SOCKET", daemon.path)
    yield daemon
    daemon.close()


@pytest.mark.parametrize(
    "fake_daemon",
    [{"ok": True, "data": {"name": "s-1a2b3c", "protocol_version": "2025-06-18",
                           "listings": {"tools": {"count": 3, "pages": 1}, "prompts": {"error": "boom"}}}}],
    indirect=True,
)
def test_check_asks_the_daemon_to_warm_each_wrapped_server_with_its_own_argv_and_env(
    cursor_file: Path, fake_daemon: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lazyctl("wrap", "--client", "cursor", "--all", "--check", "--env", "LAZYD_LINGER=10m") == 0
    out = capsys.readouterr().out
    assert "check s: ok, cached as s-1a2b3c (protocol 2025-06-18): 3 tools\n" in out
    (request,) = fake_daemon.requests  # the HTTP registration is not checked
    assert request["op"] == "check"
    args = request["args"]
    assert args["argv"] == ["/usr/bin/server", "--port", "3"]
    assert os.path.isabs(args["cwd"])
    # The registration's own env apart from ours: the daemon rebuilds what the client would pass.
    assert args["declared_env"] == {"K": "v", "LAZYD_LINGER": "10m", "LAZYD_IDENTITY_ENV": "K"}
    assert args["env"]["HOME"] == os.environ["HOME"] and "K" not in args["env"]
    assert args["client"] == "cursor"
    assert args["initialize"] is None  # the client's learned or built-in params, chosen by the daemon


@pytest.mark.parametrize("fake_daemon", [{"ok": True, "data": REPORT}], indirect=True)
def test_check_of_a_client_lazyd_has_no_profile_for_names_no_client(
    home: Path, fake_daemon: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    from lazyd.core.sharing.client_profiles import PROFILES

    assert "crush" not in PROFILES  # if Crush gets a profile, this test should name another client
    crush = home / "crush.json"
    crush.write_text('{"mcp": {"s": {"type": "stdio", "command": "/usr/bin/server"}}}')
    assert lazyctl("wrap", "--client", "crush", "--file", str(crush), "--all", "--check") == 0
    assert "check s: ok" in capsys.readouterr().out
    (request,) = fake_daemon.requests
    assert request["args"]["client"] is None and request["args"]["argv"] == ["/usr/bin/server"]


@pytest.mark.parametrize("fake_daemon", [{"ok": True, "data": REPORT}], indirect=True)
def test_check_sends_the_clients_initialize_params_from_a_captured_session(
    cursor_file: Path, fake_daemon: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    params = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": True}},
              "clientInfo": {"name": "claude-code", "version": "2.1.0"}}  # fmt: skip
    capture = cursor_file.parent / "session.jsonl"
    capture.write_text("not json\n" + json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
                       + "\n" + json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")  # fmt: skip
    assert lazyctl("wrap", "--client", "cursor", "--all", "--check", "--initialize-json", f"@{capture}") == 0
    assert "check s: ok, cached as server-1a2b3c" in capsys.readouterr().out
    assert fake_daemon.requests[0]["args"]["initialize"] == params


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--initialize-json", '{"protocolVersion": "2025-06-18"}'], "--initialize-json applies to --check"),
        (["--check", "--initialize-json", '{"capabilities": {}}'], "holds no initialize params"),
        (["--check", "--initialize-json", "@/nonexistent/init.json"], "cannot read /nonexistent/init.json"),
    ],
)
def test_bad_initialize_params_are_bad_usage_before_anything_is_written(cursor_file: Path, capsys: pytest.CaptureFixture[str],
                                                                         words: list[str], message: str) -> None:  # fmt: skip
    before = cursor_file.read_bytes()
    assert lazyctl("wrap", "--client", "cursor", "--all", *words) == 2
    assert message in capsys.readouterr().err
    assert cursor_file.read_bytes() == before


@pytest.mark.parametrize("fake_daemon", [{"ok": False, "data": None, "error": "unknown control operation 'check'"}],
                         indirect=True)  # fmt: skip
def test_a_check_the_daemon_refuses_prints_its_error_and_keeps_the_wrap(
    cursor_file: Path, fake_daemon: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lazyctl("wrap", "--client", "cursor", "--all", "--check") == 1
    out = capsys.readouterr().out
    assert "check s: FAILED: unknown control operation 'check'" in out
    assert SHIM in cursor_file.read_text()


def test_check_without_a_daemon_fails_clearly_after_wrapping(cursor_file: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("LAZYD_SOCKET", str(cursor_file.parent / "no.sock"))
    assert lazyctl("wrap", "--client", "cursor", "--all", "--check", "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["written"]
    assert not data["checks"][0]["ok"] and "lazyd is not running" in data["checks"][0]["message"]


def test_dry_run_with_check_checks_nothing(cursor_file: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("LAZYD_SOCKET", str(cursor_file.parent / "no.sock"))
    assert lazyctl("wrap", "--client", "cursor", "--all", "--check", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "would be wrapped" in out and "check s:" not in out


def test_a_check_with_no_daemon_to_start_says_how_to_retry_and_keeps_the_wrap(
    cursor_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAZYD_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv("LAZYD_NO_AUTOSTART", "1")
    assert lazyctl("wrap", "--client", "cursor", "--all", "--check") == 1
    out = capsys.readouterr().out
    assert "check s: FAILED: lazyd is not running" in out and "retry with reapply --check" in out
    assert SHIM in cursor_file.read_text()


def test_a_state_dir_others_can_read_is_one_line_and_exit_1(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = Path(os.environ["XDG_STATE_HOME"]) / "lazyd"
    state.mkdir(parents=True)
    state.chmod(0o755)
    before = (home / ".claude.json").read_bytes()
    assert lazyctl("wrap", "--client", "claude", "--all") == 1
    err = capsys.readouterr().err
    assert err.startswith("lazyctl: refusing lazyd state dir") and "chmod 700" in err and err.count("\n") == 1
    assert (home / ".claude.json").read_bytes() == before
