"""The orphan sweep's pure parts: parsing /proc/<pid>/stat, the verdict on a record, and state.json.

Testing policy: no process is started or signalled here (tests/e2e/test_orphans.py does that with
a daemon killed by SIGKILL). The stat parser is fed the exact text the kernel writes, including
command names that contain spaces and parentheses; state.json is real files in a temp dir.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from lazyd.daemon.orphans import (
    STATE_FILE,
    ChildRecord,
    ProcStat,
    Verdict,
    classify,
    parse_stat,
    read_state,
    write_state,
)


def stat_line(comm: str, state: str = "S", session: int = 4242, start: int = 987654) -> bytes:
    """A /proc/<pid>/stat line as proc(5) lays it out (52 fields; only 3, 6 and 22 matter here)."""
    fields = [state, "1", "4242", str(session)] + ["0"] * 15 + [str(start)] + ["0"] * 30
    return f"4242 ({comm}) {' '.join(fields)}\n".encode()


RECORD = ChildRecord("srv", pid=4242, start_ticks=987654, pgid=4242)


# ---- parse_stat ---------------------------------------------------------------------------------


def test_the_state_session_and_start_time_are_read_from_their_fields() -> None:
    assert parse_stat(stat_line("python3")) == ProcStat(state="S", session=4242, start_ticks=987654)


@pytest.mark.parametrize("comm", ["my server", "a) (b", "x) S 1 2 3 4 5", ")", "(("])
def test_a_command_name_with_spaces_or_parentheses_does_not_shift_the_fields(comm: str) -> None:
    assert parse_stat(stat_line(comm, state="R", session=7, start=55)) == ProcStat("R", 7, 55)


@pytest.mark.parametrize("data", [b"", b"4242 (cut", b"4242 (x) S 1 2", b"4242 (x) S 1 2 abc " + b"0 " * 30,
                                  b"no parentheses at all 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"])
def test_text_that_is_not_a_stat_line_gives_none_rather_than_an_exception(data: bytes) -> None:
    assert parse_stat(data) is None


# ---- classify -----------------------------------------------------------------------------------


def test_a_leader_alive_with_the_recorded_start_time_is_ours() -> None:
    assert classify(RECORD, ProcStat("S", 4242, 987654)) is Verdict.OURS


def test_a_live_process_with_the_pid_but_another_start_time_is_a_recycled_pid() -> None:
    assert classify(RECORD, ProcStat("S", 4242, 987655)) is Verdict.RECYCLED
    assert classify(RECORD, ProcStat("Z", 4242, 1)) is Verdict.RECYCLED  # even someone else's zombie


def test_a_leader_that_is_gone_or_our_own_zombie_leaves_only_its_session_to_sweep() -> None:
    assert classify(RECORD, None) is Verdict.GONE
    assert classify(RECORD, ProcStat("Z", 4242, 987654)) is Verdict.GONE


# ---- state.json ---------------------------------------------------------------------------------


def test_records_written_are_read_back_from_a_private_file_and_no_temporary_is_left(tmp_path: Path) -> None:
    records = [RECORD, ChildRecord("srv (wake predicate)", 5000, 1234, 5000)]
    write_state(tmp_path / "state", records)
    assert read_state(tmp_path / "state") == records
    path = tmp_path / "state" / STATE_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert os.listdir(tmp_path / "state") == [STATE_FILE]
    assert json.loads(path.read_text())["daemon_pid"] == os.getpid()


def test_a_missing_state_file_means_nothing_to_sweep(tmp_path: Path) -> None:
    assert read_state(tmp_path) == []


@pytest.mark.parametrize("text", ["", "{", "[]", '{"children": 5}', '{"children": [{"pid": 1}]}',
                                  '{"children": [{"name": "x", "pid": "abc", "start_ticks": 1, "pgid": 2}]}'])
def test_an_unreadable_state_file_is_ignored(tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / STATE_FILE).write_text(text)
    assert read_state(tmp_path) == []
    assert f"ignoring a state file: {tmp_path / STATE_FILE}: " in caplog.text


def test_records_naming_pid_0_1_or_a_negative_group_are_dropped_because_kill_would_hit_whole_groups(
    tmp_path: Path,
) -> None:
    bad = [ChildRecord("zero", 0, 1, 0), ChildRecord("init", 1, 1, 1), ChildRecord("neg", 300, 1, -300)]
    write_state(tmp_path, [*bad, RECORD])
    assert read_state(tmp_path) == [RECORD]


def test_a_symlink_planted_as_the_state_file_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"children": [RECORD.__dict__]}))
    (tmp_path / STATE_FILE).symlink_to(target)
    assert read_state(tmp_path) == []
    write_state(tmp_path, [])
    # The write replaced the link with a file of ours; the link's target is untouched.
    assert not (tmp_path / STATE_FILE).is_symlink() and "4242" in target.read_text()
