"""The pure wrap/unwrap/reapply/status decisions, one rule per test, no files."""

from __future__ import annotations

from lazyd.ctl.wrap.model import Entry, RegState
from lazyd.ctl.wrap.plan import Settings, describe, plan_unwrap, plan_wrap
from lazyd.ctl.wrap.records import Record, RegKey

SHIM = "/opt/lazyd/bin/lazyd-shim"
KEY = RegKey("claude", "/home/me/.claude.json", "fs")
SETTINGS = Settings(SHIM, env={"LAZYD_LINGER": "10m"})


def _entry(command: str, args: tuple[str, ...] | None = None, env: dict[str, object] | None = None) -> Entry:
    return Entry("fs", None, "stdio", RegState(command, args, env))


def _wrap(entry: Entry, record: Record | None = None, settings: Settings = SETTINGS, reapply: bool = False) -> tuple[RegState, Record]:
    decision = plan_wrap(KEY, entry, record, settings, reapply=reapply)
    assert decision.state is not None and decision.record is not None, decision
    return decision.state, decision.record


def test_wrap_puts_the_shim_first_and_the_original_command_at_the_front_of_args() -> None:
    state, record = _wrap(_entry("npx", ("-y", "pkg"), {"TOKEN": "t"}))
    assert state == RegState(SHIM, ("npx", "-y", "pkg"), {"TOKEN": "t", "LAZYD_IDENTITY_ENV": "TOKEN", "LAZYD_LINGER": "10m"})
    assert record == Record(KEY, SHIM, True, True, {"LAZYD_IDENTITY_ENV": "TOKEN", "LAZYD_LINGER": "10m"},
                            {"LAZYD_IDENTITY_ENV": None, "LAZYD_LINGER": None})


def test_wrap_records_the_names_of_the_variables_a_registration_declares_and_only_theirs() -> None:
    state, _ = _wrap(_entry("npx", (), {"B_KEY": "x", "A_URL": "y", "LAZYD_SHARE": "false"}))
    assert state.env is not None and state.env["LAZYD_IDENTITY_ENV"] == "A_URL,B_KEY"
    bare, _ = _wrap(_entry("npx", (), None))
    assert bare.env == {"LAZYD_LINGER": "10m"}  # nothing declared, nothing recorded


def test_wrap_records_that_args_and_env_were_absent() -> None:
    state, record = _wrap(_entry("server"))
    assert state == RegState(SHIM, ("server",), {"LAZYD_LINGER": "10m"})
    assert (record.args_present, record.env_present) == (False, False)


def test_wrap_without_settings_adds_no_env() -> None:
    state, record = _wrap(_entry("server"), settings=Settings(SHIM))
    assert state.env is None and record.managed_env == {}


def test_unwrap_removes_what_wrap_created_and_gives_back_the_original() -> None:
    original = _entry("server")
    state, record = _wrap(original)
    decision = plan_unwrap(KEY, _entry(state.command, state.args, dict(state.env or {})), record, SHIM, recover=False)
    assert decision.action == "unwrapped" and decision.state == original.state
    assert decision.record_changes and decision.record is None


def test_unwrap_restores_a_managed_variable_to_the_value_it_had_before() -> None:
    state, record = _wrap(_entry("s", (), {"LAZYD_LINGER": "5m"}))
    assert record.original_env == {"LAZYD_LINGER": "5m"}
    decision = plan_unwrap(KEY, _entry(state.command, state.args, dict(state.env or {})), record, SHIM, recover=False)
    assert decision.state == RegState("s", (), {"LAZYD_LINGER": "5m"})


def test_unwrap_keeps_a_managed_value_the_user_changed_and_their_later_args() -> None:
    _, record = _wrap(_entry("s", ("a",)))
    edited = _entry(SHIM, ("s", "a", "--more"), {"LAZYD_LINGER": "1h"})
    decision = plan_unwrap(KEY, edited, record, SHIM, recover=False)
    assert decision.state == RegState("s", ("a", "--more"), {"LAZYD_LINGER": "1h"})


def test_unwrap_skips_the_shims_own_options_in_front_of_the_command() -> None:
    _, record = _wrap(_entry("s", ("a",)))
    edited = _entry(SHIM, ("--linger", "5m", "--", "s", "a"), {"LAZYD_LINGER": "10m"})
    decision = plan_unwrap(KEY, edited, record, SHIM, recover=False)
    assert decision.state == RegState("s", ("a",), None)


def test_wrap_of_a_registration_already_running_the_shim_without_a_record_is_skipped_not_nested() -> None:
    decision = plan_wrap(KEY, _entry("/elsewhere/lazyd-shim", ("s",)), None, SETTINGS, reapply=False)
    assert decision.action == "skipped" and decision.state is None and "no record" in decision.reason


def test_wrap_of_a_managed_registration_is_unchanged_or_updates_only_its_settings() -> None:
    state, record = _wrap(_entry("s"))
    wrapped = _entry(state.command, state.args, dict(state.env or {}))
    assert plan_wrap(KEY, wrapped, record, SETTINGS, reapply=False).action == "unchanged"
    decision = plan_wrap(KEY, wrapped, record, Settings(SHIM, env={"LAZYD_SHARE": "false"}), reapply=False)
    assert decision.action == "updated"
    assert decision.state == RegState(SHIM, ("s",), {"LAZYD_LINGER": "10m", "LAZYD_SHARE": "false"})
    assert decision.record is not None and decision.record.original_env == {"LAZYD_LINGER": None, "LAZYD_SHARE": None}


def test_an_explicit_shim_path_moves_wrapped_registrations_to_it() -> None:
    state, record = _wrap(_entry("s"))
    wrapped = _entry(state.command, state.args, dict(state.env or {}))
    decision = plan_wrap(KEY, wrapped, record, Settings("/new/lazyd-shim", shim_explicit=True), reapply=True)
    assert decision.action == "updated" and decision.state is not None
    assert decision.state.command == "/new/lazyd-shim" and decision.record is not None
    assert decision.record.shim == "/new/lazyd-shim"


def test_reapply_adopts_the_command_a_clients_setup_wrote_back() -> None:
    _, record = _wrap(_entry("old-server", ("--x",)))
    rewritten = _entry("new-server", ("--y",), {"LAZYD_LINGER": "10m"})  # setup kept our env object
    decision = plan_wrap(KEY, rewritten, record, Settings(SHIM), reapply=True)
    assert decision.action == "reapplied"
    assert decision.state == RegState(SHIM, ("new-server", "--y"), {"LAZYD_LINGER": "10m"})
    # Our value kept by setup is not mistaken for the user's original, nor the env object for theirs.
    assert decision.record is not None
    assert decision.record.original_env == {"LAZYD_LINGER": None} and not decision.record.env_present
    undo = plan_unwrap(KEY, _entry(SHIM, ("new-server", "--y"), {"LAZYD_LINGER": "10m"}), decision.record, SHIM, recover=False)
    assert undo.state == RegState("new-server", ("--y",), None)


def test_reapply_leaves_registrations_lazyd_does_not_manage() -> None:
    assert plan_wrap(KEY, _entry("s"), None, SETTINGS, reapply=True).action == "skipped"


def test_another_lazy_relay_is_refused() -> None:
    decision = plan_wrap(KEY, _entry("/usr/local/bin/MCP-LAZY", ("node", "x.js")), None, SETTINGS, reapply=False)
    assert decision.action == "refused" and "mcp-lazy" in decision.reason


def test_unwrap_without_a_record_needs_recover_and_then_leaves_env_alone() -> None:
    stale = _entry(SHIM, ("s", "a"), {"LAZYD_LINGER": "10m", "TOKEN": "t"})
    assert plan_unwrap(KEY, stale, None, SHIM, recover=False).action == "refused"
    decision = plan_unwrap(KEY, stale, None, SHIM, recover=True)
    assert decision.action == "recovered"
    assert decision.state == RegState("s", ("a",), {"LAZYD_LINGER": "10m", "TOKEN": "t"})
    assert not decision.record_changes
    only_command = plan_unwrap(KEY, _entry(SHIM, ("s",)), None, SHIM, recover=True)
    assert only_command.state == RegState("s", (), None)  # the args array stays: its origin is unknown


def test_unwrap_refuses_args_that_name_no_command_or_another_shim() -> None:
    _, record = _wrap(_entry("s"))
    no_command = plan_unwrap(KEY, _entry(SHIM, ("--linger", "5m")), record, SHIM, recover=False)
    assert no_command.action == "refused" and "command" in no_command.reason
    nested = plan_unwrap(KEY, _entry(SHIM, ("/x/lazyd-shim", "s")), record, SHIM, recover=False)
    assert nested.action == "refused" and "nested" in nested.reason


def test_unwrap_of_a_registration_gone_from_the_file_forgets_its_record() -> None:
    _, record = _wrap(_entry("s"))
    decision = plan_unwrap(KEY, None, record, SHIM, recover=False)
    assert decision.action == "forgotten" and decision.record_changes and decision.record is None


def test_unwrap_of_a_registration_the_client_rewrote_only_removes_managed_values() -> None:
    _, record = _wrap(_entry("s"))
    rewritten = _entry("other", ("x",), {"LAZYD_LINGER": "10m", "K": "v"})
    decision = plan_unwrap(KEY, rewritten, record, SHIM, recover=False)
    assert decision.state == RegState("other", ("x",), {"K": "v"})


def test_status_tells_wrapped_managed_and_recoverable_apart() -> None:
    state, record = _wrap(_entry("s"))
    wrapped = _entry(state.command, state.args, dict(state.env or {}))
    both = describe(wrapped, record, SHIM, "fs", None)
    assert (both.wrapped, both.managed, both.recoverable, both.note) == (True, True, True, "")
    stale = describe(wrapped, None, SHIM, "fs", None)
    assert (stale.wrapped, stale.managed, stale.recoverable) == (True, False, True) and "--recover" in stale.note
    rewritten = describe(_entry("s"), record, SHIM, "fs", None)
    assert (rewritten.wrapped, rewritten.managed) == (False, True) and "reapply" in rewritten.note
    hand_edit = describe(_entry(SHIM, ("s",), {"LAZYD_LINGER": "1h"}), record, SHIM, "fs", None)
    assert "LAZYD_LINGER" in hand_edit.note
    unreadable = describe(_entry(SHIM, ("--server", "x")), None, SHIM, "fs", None)
    assert (unreadable.wrapped, unreadable.recoverable) == (True, False)
    gone = describe(None, record, SHIM, "fs", None)
    assert (gone.transport, gone.managed) == ("missing", True)
