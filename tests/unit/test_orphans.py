"""The orphan sweep's pure parts: the verdict on a record, and state.json.

Testing policy: no process is started or signalled here (tests/e2e/test_orphans.py does that with
a daemon killed by SIGKILL); state.json is real files in a temp dir. /proc is read by
lazyd/host/procfs.py (tests/unit/test_procfs.py).
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
    Verdict,
    classify,
    read_state,
    write_state,
)
from lazyd.daemon.gate import Gate
from lazyd.host.procfs import Stat


def leader(state: str, session: int, start: int) -> Stat:
    """What /proc says of a recorded leader's pid now (lazyd/host/procfs.py reads it)."""
    return Stat(state=state, ppid=1, pgrp=session, session=session, start_ticks=start, rss_pages=0)


RECORD = ChildRecord("srv", pid=4242, start_ticks=987654, pgid=4242)


# ---- classify -----------------------------------------------------------------------------------


def test_a_leader_alive_with_the_recorded_start_time_is_ours() -> None:
    assert classify(RECORD, leader("S", 4242, 987654)) is Verdict.OURS


def test_a_live_process_with_the_pid_but_another_start_time_is_a_recycled_pid() -> None:
    assert classify(RECORD, leader("S", 4242, 987655)) is Verdict.RECYCLED
    assert classify(RECORD, leader("Z", 4242, 1)) is Verdict.RECYCLED  # even someone else's zombie


def test_a_leader_that_is_gone_or_our_own_zombie_leaves_only_its_session_to_sweep() -> None:
    assert classify(RECORD, None) is Verdict.GONE
    assert classify(RECORD, leader("Z", 4242, 987654)) is Verdict.GONE


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


def test_the_sweep_reads_proc_once_per_round_however_many_records_it_has(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan per record made the successor of a daemon with 30 servers and a thousand waiting
    sessions (a thousand processes to read each time) wait 1.4 s before serving anyone."""
    from lazyd.daemon import orphans

    write_state(tmp_path, [ChildRecord(f"s{n}", 1000 + n, 7, 1000 + n) for n in range(30)])
    left = {5000: leader("S", 1003, 9), 5001: leader("Z", 1003, 9), 5002: leader("S", 4242, 9)}
    scans: list[int] = []
    killed: list[int] = []

    def stats() -> dict[int, Stat]:
        scans.append(1)
        return {pid: s for pid, s in left.items() if pid not in killed}

    monkeypatch.setattr(orphans, "read_stat", lambda pid: None)  # every leader has exited
    monkeypatch.setattr(orphans, "stats", stats)
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(pid))
    assert orphans.sweep(tmp_path) == [5000]  # the grandchild left in a recorded session; not a zombie, not another's
    assert len(scans) == 2  # the round that killed it, and the one that found nothing left
    assert read_state(tmp_path) == []


async def test_the_gate_is_closed_and_the_record_read_before_the_daemon_first_yields(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start scheduled before the sweep's task ran, or the registry writing its (empty) record
    first, would otherwise slip past the sweep."""
    import trio

    from lazyd.daemon import orphans

    monkeypatch.setattr(orphans, "read_stat", lambda pid: None)  # /proc as the sweep sees it: nothing left
    monkeypatch.setattr(orphans, "stats", dict)
    write_state(tmp_path, [ChildRecord("gone", 999_999, 7, 999_999)])
    starting = Gate()
    records = orphans.begin_sweep(tmp_path, starting)
    assert [r.name for r in records] == ["gone"]
    write_state(tmp_path, [])  # the registry, before the sweep ran: the records are read already
    with trio.move_on_after(0.05) as waited:
        await starting.passage()
    assert waited.cancelled_caught  # closed, with no await in between
    await orphans.sweep_then_open(tmp_path, records, starting)
    with trio.fail_after(1):
        await starting.passage()
