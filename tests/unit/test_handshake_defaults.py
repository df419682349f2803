"""lazyd's own handshake and identity, and which params each kind of start replays
(lazyd/core/relay/handshake_defaults.py): every rule of its docstring, with literal expectations."""

from __future__ import annotations

from importlib.metadata import version

from lazyd.core.sharing.client_profiles import PROFILES
from lazyd.core.relay.handshake_defaults import (
    LAZYD_CLIENT_INFO,
    check_params,
    hub_call_params,
    lazyd_initialize_params,
    profile_params,
    unattended_params,
    wake_params,
)

OWN = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "lazyd", "version": "0.1.0"}}
CLIENT = {"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": {"name": "c", "version": "2"}}
LAST = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}


def test_lazyd_has_one_identity_the_package_version_everywhere_it_speaks_for_no_client() -> None:
    assert LAZYD_CLIENT_INFO == {"name": "lazyd", "version": version("lazyd")}
    assert lazyd_initialize_params() == OWN


def test_lazyds_own_params_are_a_fresh_object_each_time() -> None:
    first = lazyd_initialize_params()
    first["clientInfo"]["name"] = "changed"
    assert lazyd_initialize_params() == OWN and LAZYD_CLIENT_INFO["name"] == "lazyd"


def test_an_unattended_start_keeps_the_snapshots_params_or_a_queued_initialize() -> None:
    assert unattended_params(LAST, False, [CLIENT]) is None
    assert unattended_params(None, True, [CLIENT]) is None


def test_an_unattended_start_of_a_never_initialized_server_prefers_an_attached_clients_params() -> None:
    assert unattended_params(None, False, [None, CLIENT]) == CLIENT
    assert unattended_params(None, False, [None]) == OWN
    assert unattended_params(None, False, []) == OWN


def test_a_wake_keeps_the_snapshots_params_else_the_asking_client_else_lazyds_own() -> None:
    assert wake_params(LAST, CLIENT) is None
    assert wake_params(None, CLIENT) == CLIENT
    assert wake_params(None) == OWN


def test_a_hub_call_replays_the_hub_clients_own_params_else_lazyds() -> None:
    assert hub_call_params(CLIENT) == CLIENT and hub_call_params(CLIENT) is not CLIENT
    assert hub_call_params(None) == OWN


def test_a_profile_prefers_a_learned_session_in_client_name_order_then_its_built_in_capture() -> None:
    claude = PROFILES["claude"]
    learned = {"claude-code": CLIENT}
    assert profile_params(learned, claude.client_names, claude.builtin, claude.title, claude.release) == (
        CLIENT, "learned from a claude-code session")
    assert profile_params({}, claude.client_names, claude.builtin, claude.title, claude.release) == (
        dict(claude.builtin or {}), "built in, captured from Claude Code 2.1.332")
    assert profile_params({}, ("x", "y"), None, "Cursor", "not captured") == (
        None, "no Cursor session seen yet and none built in")
    assert profile_params({"y": LAST, "x": CLIENT}, ("x", "y"), None, "T", "r")[0] == CLIENT


def test_a_check_sends_given_params_then_the_profiles_then_lazyds_own_and_says_which() -> None:
    assert check_params(CLIENT, (LAST, "learned from a c session")) == (CLIENT, "given with --initialize-json")
    assert check_params(None, (LAST, "learned from a c session")) == (LAST, "learned from a c session")
    assert check_params(None, (None, "no Cursor session seen yet and none built in")) == (
        OWN, "no Cursor session seen yet and none built in; lazyctl's own used")
    assert check_params(None, None) == (OWN, "lazyctl's own")
    assert check_params("not an object", None) == ("not an object", "given with --initialize-json")
