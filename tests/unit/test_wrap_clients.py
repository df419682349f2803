"""The clients beside the first seven: where each keeps its file, and what wrap-status says of a
registration that lost its lazyd-shim on the way in.

Each default file is the one the client itself reads or writes (found by running it: `copilot help
environment`, `kilo mcp add` with each candidate present, cn's continueHome, `amp mcp add`'s
message; Crush from its published docs). Kilo CLI is an opencode fork: opencode's layout at its own
path, tried here with opencode's fixture. Amp keeps its servers under one flat dotted key,
`"amp.mcpServers"`; a nested `{"amp": {"mcpServers": ...}}` is not read by Amp, and not by us.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lazyd.ctl.main import main
from lazyd.ctl.wrap import clients, engine
from lazyd.ctl.wrap.plan import WITHOUT_SHIM
from tests.unit.fixtures_wrap.helpers import FIXTURES, SHIM, Lazyctl, loads


@pytest.fixture
def lazyctl(tmp_path: Path) -> Lazyctl:
    return Lazyctl(tmp_path)


def run_lazyctl(*words: str) -> int:
    return main(list(words))


def default_file(client: str, env: dict[str, str], cwd: Path) -> Path:
    return clients.config_path(clients.client_named(client), None, env, cwd)


def test_each_new_client_has_its_own_default_file_and_the_variables_that_move_it(tmp_path: Path) -> None:
    home = {"HOME": "/home/u"}
    assert default_file("copilot", home, tmp_path) == Path("/home/u/.copilot/mcp-config.json")
    assert default_file("copilot", {**home, "COPILOT_HOME": "/c"}, tmp_path) == Path("/c/mcp-config.json")
    assert default_file("continue", home, tmp_path) == Path("/home/u/.continue/config.yaml")
    assert default_file("continue", {**home, "CONTINUE_GLOBAL_DIR": "/g"}, tmp_path) == Path("/g/config.yaml")
    # cn resolves a relative CONTINUE_GLOBAL_DIR against its current directory.
    assert default_file("continue", {**home, "CONTINUE_GLOBAL_DIR": "rel"}, tmp_path) == tmp_path / "rel" / "config.yaml"
    assert default_file("amp", home, tmp_path) == Path("/home/u/.config/amp/settings.json")
    assert default_file("amp", {**home, "XDG_CONFIG_HOME": "/x"}, tmp_path) == Path("/x/amp/settings.json")
    assert default_file("crush", home, tmp_path) == Path("/home/u/.config/crush/crush.json")
    assert default_file("crush", {**home, "XDG_CONFIG_HOME": "/x"}, tmp_path) == Path("/x/crush/crush.json")
    assert default_file("crush", {**home, "CRUSH_GLOBAL_CONFIG": "/g"}, tmp_path) == Path("/g/crush.json")


def test_kilos_default_file_is_the_first_of_its_candidates_that_exists_as_kilo_mcp_add_picks(tmp_path: Path) -> None:
    env = {"HOME": "/home/u", "XDG_CONFIG_HOME": str(tmp_path)}
    directory = tmp_path / "kilo"
    assert default_file("kilo", env, tmp_path) == directory / "kilo.jsonc"  # none yet: where kilo writes
    directory.mkdir()
    for name in ("config.json", "opencode.json", "opencode.jsonc", "kilo.json", "kilo.jsonc"):
        (directory / name).write_text("{}")
        assert default_file("kilo", env, tmp_path) == directory / name


@pytest.mark.parametrize("kind", ["lf", "crlf", "no-final-newline"])
def test_kilo_takes_opencodes_layout_and_unwrap_gives_back_the_bytes(lazyctl: Lazyctl, kind: str) -> None:
    path = lazyctl.fixture("opencode.jsonc", kind)
    before = path.read_bytes()
    report = lazyctl.run("wrap", "kilo", path, env={"LAZYD_LINGER": "30m"})
    assert report.written and not report.refused
    after = loads(path.read_bytes().decode(), "kilo")
    assert isinstance(after, dict)
    command = after["mcp"]["time"]["command"]
    assert command[0] == SHIM and after["mcp"]["time"]["environment"]["LAZYD_LINGER"] == "30m"
    lazyctl.run("unwrap", "kilo", path)
    assert path.read_bytes() == before


def test_amp_reads_only_the_flat_dotted_key_so_a_nested_one_holds_no_registrations(lazyctl: Lazyctl) -> None:
    nested = lazyctl.put("settings.json", b'{"amp": {"mcpServers": {"time": {"command": "mcp-server-time"}}}}\n')
    assert lazyctl.run("status", "amp", nested).statuses == []
    flat = lazyctl.fixture("amp.json")
    rows = {s.server: s for s in lazyctl.run("status", "amp", flat).statuses}
    assert set(rows) == {"time", "filesystem", "bare", "remote"} and rows["remote"].transport == "http"


def test_a_registration_a_client_rewrote_without_the_shim_is_reported_so(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture("amp.json")
    lazyctl.run("wrap", "amp", path, servers=("time",))
    # What `amp mcp add time -- lazyd-shim -- mcp-server-time` leaves: Amp keeps what follows the
    # last `--`, so the shim is gone and the server runs directly.
    text = path.read_text()
    doc = loads(text, "amp")
    assert isinstance(doc, dict)
    wrapped_args = json.dumps(doc["amp.mcpServers"]["time"]["args"])
    path.write_text(text.replace(json.dumps(SHIM), '"mcp-server-time"', 1).replace(wrapped_args, "[]", 1))
    rows = {s.server: s for s in lazyctl.run("status", "amp", path).statuses}
    assert rows["time"].without_shim and not rows["time"].wrapped and rows["time"].managed
    assert rows["time"].note.startswith(WITHOUT_SHIM) and "reapply" in rows["time"].note
    assert not rows["bare"].without_shim and rows["bare"].note == ""


def test_a_direct_registration_of_a_server_lazyd_wraps_for_another_client_is_reported_so(lazyctl: Lazyctl) -> None:
    claude = lazyctl.put(".claude.json", json.dumps({"mcpServers": {
        "time": {"command": "/usr/local/bin/mcp-server-time", "args": ["--local-timezone", "UTC"]}}}).encode())
    lazyctl.run("wrap", "claude", claude)
    amp = lazyctl.put("amp-settings.json", json.dumps({"amp.mcpServers": {
        "clock": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "other": {"command": "mcp-server-time", "args": ["--local-timezone", "Europe/Paris"]}}}).encode())
    rows = {s.server: s for s in lazyctl.run("status", "amp", amp).statuses}
    # The same program by name rather than path, with the same arguments: the same server.
    assert rows["clock"].without_shim and rows["clock"].note.startswith(WITHOUT_SHIM)
    assert "Claude Code's time" in rows["clock"].note and str(claude) in rows["clock"].note
    assert not rows["other"].without_shim and rows["other"].note == ""
    # Once wrapped, it runs through the shim and the note is gone.
    lazyctl.run("wrap", "amp", amp, servers=("clock",))
    assert not {s.server: s for s in lazyctl.run("status", "amp", amp).statuses}["clock"].without_shim


def test_wrap_status_prints_registered_without_lazyd_shim(lazyctl: Lazyctl, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("HOME", str(lazyctl.root / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(lazyctl.root / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(lazyctl.root / "config"))
    settings = lazyctl.root / "config" / "amp" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_bytes((FIXTURES / "amp.json").read_bytes())
    assert run_lazyctl("wrap", "--client", "amp", "--server", "time", "--shim", SHIM) == 0
    settings.write_text(settings.read_text().replace(json.dumps(SHIM), '"mcp-server-time"', 1))
    capsys.readouterr()
    assert run_lazyctl("wrap-status", "--client", "amp") == 0
    out = capsys.readouterr().out
    assert WITHOUT_SHIM in out and "SECRET" not in out


def test_every_client_is_in_the_help_and_has_a_title() -> None:
    for client in ("copilot", "kilo", "continue", "amp", "crush"):
        spec = clients.client_named(client)
        assert spec.title and spec.default_file_text
    request = engine.Request("status", "nonesuch", "/x")
    with pytest.raises(Exception, match="known: claude, .*copilot, kilo, continue, amp, crush"):
        engine.execute(request, {"HOME": "/h"}, Path("/"))
