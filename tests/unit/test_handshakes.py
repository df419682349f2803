"""The daemon's memory of each client's handshake (lazyd/daemon/control/handshakes.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lazyd.core.sharing.client_profiles import PROFILES
from lazyd.daemon.control import handshakes
from lazyd.daemon.control.handshakes import LearnedHandshakes, initialize_params

CLAUDE = {"protocolVersion": "2025-11-25", "capabilities": {"roots": {}}, "clientInfo": {"name": "claude-code", "version": "9"}}


def test_a_learned_handshake_beats_the_built_in_one_and_survives_a_restart(tmp_path: Path) -> None:
    store = LearnedHandshakes(tmp_path)
    params, source = store.for_profile(PROFILES["claude"])
    assert params == PROFILES["claude"].builtin and source.startswith("built in, captured from Claude Code 2.1.")
    assert store.learn(CLAUDE) and not store.learn(CLAUDE)  # the same again writes nothing
    again = LearnedHandshakes(tmp_path)
    assert again.for_profile(PROFILES["claude"]) == (CLAUDE, "learned from a claude-code session")
    assert os.stat(tmp_path / "clients.json").st_mode & 0o777 == 0o600


def test_a_client_without_a_built_in_handshake_says_so(tmp_path: Path) -> None:
    params, source = LearnedHandshakes(tmp_path).for_profile(PROFILES["cursor"])
    assert params is None and "no Cursor session seen yet" in source


def test_params_without_a_client_name_or_too_large_are_not_learned(tmp_path: Path) -> None:
    store = LearnedHandshakes(tmp_path)
    assert not store.learn({"protocolVersion": "x", "clientInfo": {}})
    assert not store.learn({"protocolVersion": "x", "clientInfo": {"name": "big"}, "pad": "x" * handshakes.MAX_PARAMS_BYTES})
    assert not store.learn("not params") and store.clients == {}


def test_only_the_latest_clients_are_kept(tmp_path: Path) -> None:
    store = LearnedHandshakes(tmp_path)
    for i in range(handshakes.MAX_CLIENTS + 5):
        store.learn({"protocolVersion": "v", "clientInfo": {"name": f"c{i}"}})
    assert len(store.clients) == handshakes.MAX_CLIENTS and "c0" not in store.clients


def test_a_corrupt_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "clients.json").write_text("{not json")
    assert LearnedHandshakes(tmp_path).clients == {}
    (tmp_path / "clients.json").write_text(json.dumps({"x": {"params": "no", "seen_at": 1}}))
    assert LearnedHandshakes(tmp_path).clients == {}


def test_only_an_initialize_request_line_yields_params() -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": CLAUDE}).encode()
    assert initialize_params(line) == CLAUDE
    assert initialize_params(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}') is None
    assert initialize_params(b'"initialize" but not json') is None
