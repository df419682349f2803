"""`lazyctl systemd stop-post`: which stops kill what is left in the cgroup, and finding the cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lazyd.ctl.stop_post import CRASH_RESULTS, kill_the_rest, members, own_cgroup_dirs, stop_post

MOUNTINFO = """\
22 1 0:20 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
30 22 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
31 22 0:27 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
32 22 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
"""
CGROUP = """\
4:memory:/user.slice
1:name=systemd:/m/app.slice/lazyd.service
0::/m/app.slice/lazyd.service
"""


def fake_proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo.replace("/sys/fs/cgroup", str(tmp_path / "cg")))
    (proc / "cgroup").write_text(cgroup)
    return proc


def test_the_cgroup_is_found_in_the_name_systemd_and_the_unified_hierarchies_only(tmp_path: Path) -> None:
    for hierarchy in ("unified", "systemd", "memory"):
        (tmp_path / "cg" / hierarchy / "m/app.slice/lazyd.service").mkdir(parents=True)
    (tmp_path / "cg" / "memory" / "user.slice").mkdir()
    dirs = own_cgroup_dirs(str(fake_proc(tmp_path, MOUNTINFO, CGROUP)))
    assert sorted(dirs) == sorted([tmp_path / "cg" / "unified/m/app.slice/lazyd.service",
                                   tmp_path / "cg" / "systemd/m/app.slice/lazyd.service"])


def test_a_process_in_the_root_cgroup_or_without_cgroups_finds_nothing_to_kill(tmp_path: Path) -> None:
    assert own_cgroup_dirs(str(fake_proc(tmp_path, MOUNTINFO, "0::/\n1:name=systemd:/\n"))) == []
    assert own_cgroup_dirs(str(tmp_path / "missing")) == []


def test_members_include_child_cgroups(tmp_path: Path) -> None:
    unit = tmp_path / "lazyd.service"
    (unit / "sub").mkdir(parents=True)
    (unit / "cgroup.procs").write_text("10\n11\n")
    (unit / "sub" / "cgroup.procs").write_text("12\n")
    assert members([unit]) == {10, 11, 12}


def test_kill_the_rest_sigkills_every_member_but_itself(tmp_path: Path) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
    unit = tmp_path / "lazyd.service"
    unit.mkdir()

    def listing() -> None:
        alive = [str(os.getpid())] + ([str(victim.pid)] if victim.poll() is None else [])
        (unit / "cgroup.procs").write_text("\n".join(alive) + "\n")

    listing()
    import lazyd.ctl.stop_post as sp
    original = sp.members
    def live_members(dirs: list[Path]) -> set[int]:
        listing()  # the kernel's listing drops the dead
        return original(dirs)

    sp.members = live_members
    try:
        assert kill_the_rest([unit]) == {victim.pid}
    finally:
        sp.members = original
    assert victim.wait(timeout=5) == -9


@pytest.mark.parametrize("result", sorted(CRASH_RESULTS))
def test_after_a_crash_nothing_is_killed(result: str, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import lazyd.ctl.stop_post as sp
    monkeypatch.setattr(sp, "kill_the_rest", lambda dirs: pytest.fail("killed after a crash"))
    assert stop_post({"SERVICE_RESULT": result}) == 0
    assert "left to the restarted lazyd" in capsys.readouterr().err


@pytest.mark.parametrize("result", ["success", "timeout", ""])
def test_after_a_stop_or_a_stop_timeout_what_is_left_is_killed(result: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import lazyd.ctl.stop_post as sp
    asked: list[object] = []
    monkeypatch.setattr(sp, "own_cgroup_dirs", lambda: ["dir"])
    def kill(dirs: list[Path]) -> set[int]:
        asked.append(dirs)
        return set()

    monkeypatch.setattr(sp, "kill_the_rest", kill)
    assert stop_post({"SERVICE_RESULT": result}) == 0
    assert asked == [["dir"]]
