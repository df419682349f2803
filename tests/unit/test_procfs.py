"""The /proc reader (lazyd/host/procfs.py): the stat parser on the exact text the kernel writes, and the
readers on this very process and on one that is gone.

Testing policy: the parser is fed lines laid out as proc(5) says, including command names that
hold spaces and parentheses; the readers read the test's own process (whose pid, parent, group,
session and environment the test knows from os) and a pid that no longer exists.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lazyd.host import procfs
from lazyd.host.procfs import Stat, parse_stat


def stat_line(comm: str, state: str = "S", ppid: int = 1, pgrp: int = 4242, session: int = 4242,
              start: int = 987654, rss: int = 321) -> bytes:
    """A /proc/<pid>/stat line as proc(5) lays it out: 52 fields, of which 3-6, 22 and 24 matter."""
    fields = [state, str(ppid), str(pgrp), str(session)] + ["0"] * 15 + [str(start), "0", str(rss)] + ["0"] * 28
    return f"4242 ({comm}) {' '.join(fields)}\n".encode()


def test_the_state_parent_group_session_start_time_and_rss_are_read_from_their_fields() -> None:
    assert parse_stat(stat_line("python3", ppid=7, pgrp=8, session=9)) == Stat(
        state="S", ppid=7, pgrp=8, session=9, start_ticks=987654, rss_pages=321)


@pytest.mark.parametrize("comm", ["my server", "a) (b", "x) S 1 2 3 4 5", ")", "(("])
def test_a_command_name_with_spaces_or_parentheses_does_not_shift_the_fields(comm: str) -> None:
    assert parse_stat(stat_line(comm, state="R", session=7, start=55)) == Stat("R", 1, 4242, 7, 55, 321)


@pytest.mark.parametrize("data", [b"", b"4242 (cut", b"4242 (x) S 1 2", b"4242 (x) S 1 2 abc " + b"0 " * 30,
                                  b"no parentheses at all 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"])
def test_text_that_is_not_a_stat_line_gives_none_rather_than_an_exception(data: bytes) -> None:
    assert parse_stat(data) is None


def test_this_process_is_read_as_os_knows_it() -> None:
    me = os.getpid()
    stat = procfs.read_stat(me)
    assert stat is not None
    assert (stat.state, stat.ppid, stat.pgrp, stat.session) == ("R", os.getppid(), os.getpgrp(), os.getsid(0))
    assert stat.rss_pages > 0 and procfs.start_time_ticks(me) == stat.start_ticks
    # A second read of a live process: its resident size may have moved (reading all of /proc
    # allocates), what names it may not.
    again = procfs.stats()[me]
    assert me in set(procfs.pids()) and (again.ppid, again.pgrp, again.session, again.start_ticks) == (
        stat.ppid, stat.pgrp, stat.session, stat.start_ticks)
    assert me in procfs.group_members(os.getpgrp())
    assert f"LAZYD_PROCFS_TEST={me}".encode() not in (procfs.read_environ(me) or [])
    assert procfs.read_cmdline(me)  # pytest's own argv, whatever launched it
    assert procfs.read_cgroup(me) is not None


def test_a_child_is_read_with_its_environment_and_argv_and_a_reaped_one_is_gone() -> None:
    script = "import sys; print(flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", script, "two words"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "LAZYD_PROCFS_TEST": "yes"}, start_new_session=True)
    try:
        # Popen returns once the exec is past its point of no return, which is before the kernel
        # has set the new image's argv and environment up (both read empty for that moment): the
        # child's first line says it runs.
        assert child.stdout is not None and child.stdout.readline() == b"\n"
        assert b"LAZYD_PROCFS_TEST=yes" in (procfs.read_environ(child.pid) or [])
        assert procfs.read_cmdline(child.pid) == [os.fsencode(sys.executable), b"-c", os.fsencode(script), b"two words"]
        stat = procfs.read_stat(child.pid)
        assert stat is not None and (stat.ppid, stat.session, stat.pgrp) == (os.getpid(), child.pid, child.pid)
        assert procfs.group_members(child.pid) == [child.pid]
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert procfs.read_stat(child.pid) is None and procfs.read_environ(child.pid) is None
    assert procfs.read_cmdline(child.pid) is None and procfs.read_cgroup(child.pid) is None
    assert procfs.group_members(child.pid) == []
    with pytest.raises(OSError):
        procfs.start_time_ticks(child.pid)


def test_pss_is_read_in_bytes_never_above_rss_and_none_for_a_process_that_is_gone() -> None:
    me = os.getpid()
    stat = procfs.read_stat(me)
    pss = procfs.read_pss(me)
    assert stat is not None and pss is not None
    assert 0 < pss <= stat.rss_pages * procfs.PAGE_BYTES and pss % 1024 == 0
    assert procfs.read_pss(2 ** 22 + 1) is None  # above pid_max: never a process


def test_cpu_ticks_are_user_plus_system_time() -> None:
    fields = ["S"] + ["0"] * 49
    fields[14 - 3], fields[15 - 3] = "7", "5"  # utime, stime (proc(5) fields 14 and 15)
    stat = parse_stat(b"1 (x) " + " ".join(fields).encode())
    assert stat is not None and stat.cpu_ticks == 12
