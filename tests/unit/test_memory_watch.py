"""Where the memory watch reads the pressure (lazyd/daemon/runtime/memory_watch.py): the system's
PSI file, and the memory.pressure of the daemon's cgroup and of the user's slice above it."""

from __future__ import annotations

from pathlib import Path

from lazyd.daemon.runtime.memory_watch import SYSTEM_PSI, default_pressure_files

SERVICE = "user.slice/user-1000.slice/user@1000.service/app.slice/lazyd.service"


def test_the_daemons_cgroup_and_the_users_slice_are_read_where_their_files_exist(tmp_path: Path) -> None:
    for relative in (SERVICE, "user.slice/user-1000.slice"):
        (tmp_path / relative).mkdir(parents=True, exist_ok=True)
        (tmp_path / relative / "memory.pressure").write_text("some avg10=0.00\n")
    files = default_pressure_files(f"0::/{SERVICE}\n", (str(tmp_path),))
    assert files == (SYSTEM_PSI, f"{tmp_path}/{SERVICE}/memory.pressure",
                     f"{tmp_path}/user.slice/user-1000.slice/memory.pressure")


def test_a_root_cgroup_or_a_v1_only_line_leaves_the_system_file_alone(tmp_path: Path) -> None:
    assert default_pressure_files("0::/\n", (str(tmp_path),)) == (SYSTEM_PSI,)
    assert default_pressure_files("4:memory:/x\n", (str(tmp_path),)) == (SYSTEM_PSI,)
    assert default_pressure_files(None, (str(tmp_path),)) == (SYSTEM_PSI,)
    assert default_pressure_files(f"0::/{SERVICE}\n", (str(tmp_path),)) == (SYSTEM_PSI,)  # no such files
