"""`lazyctl status` on systemd's fd store: a line once it is nearly full, nothing before or without one."""

from __future__ import annotations

from lazyd.ctl.commands import _store_line


def test_a_nearly_full_fd_store_gets_a_line_saying_what_is_no_longer_kept() -> None:
    line = _store_line({"fdstore": {"held": 15000, "budget": 16320}})
    assert line == ("\nthe fd store holds 15000 of the 16320 descriptors a restarted lazyd can be passed: "
                    "servers and sessions past them are not kept across a crash")


def test_a_store_with_room_or_no_store_at_all_says_nothing() -> None:
    assert _store_line({"fdstore": {"held": 7, "budget": 16320}}) == ""
    assert _store_line({"upgrades": 0}) == ""
    assert _store_line(None) == ""
