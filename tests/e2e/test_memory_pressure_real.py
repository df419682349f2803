"""Real memory pressure: processes thrashing their page cache in a memory-limited cgroup raise the
kernel's PSI, and the daemon, reading /proc/pressure/memory as it does by default, puts the idle
server to sleep.

It needs what not every machine gives a test: /proc/pressure/memory (Linux 4.20 with PSI on) and
a memory cgroup this user may create and limit (cgroup v2 with the memory controller enabled in
the test's cgroup, or cgroup v1's memory hierarchy); without them the test is skipped and says
which was missing. The thresholds are set low (`start = 2`) so that a few thrashing readers are
enough on an idle machine as on a busy one; the decision itself is tests/unit/test_pressure.py's.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.conftest import UserEnv, start_daemon
from tests.e2e.supervision_support import named_session, server_table, tool_text, wait_for_row, write_config

pytestmark = pytest.mark.e2e
LIMIT_BYTES = 32 * 1024 * 1024
FILE_MIB = 128  # each thrasher's file: four times the cgroup's limit, so every pass refaults it
THRASHERS = 3
PSI = Path("/proc/pressure/memory")


def own_memory_cgroup() -> Path | None:
    """The directory of this process's memory cgroup (v2 with the controller on, else v1)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            here = Path("/sys/fs/cgroup") / path.lstrip("/")
            if "memory" in (here / "cgroup.subtree_control").read_text().split():
                return here
        if "memory" in controllers.split(","):
            here = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if here.is_dir():
                return here
    return None


@pytest.fixture
def limited_cgroup(user_env: UserEnv) -> Iterator[Path]:
    if not PSI.exists():
        pytest.skip("no /proc/pressure/memory on this kernel (PSI off)")
    parent = own_memory_cgroup()
    if parent is None:
        pytest.skip("no memory cgroup controller this test can use (cgroup v2 without memory delegated here)")
    child = parent / f"lazyd-test-{os.getpid()}"
    try:
        child.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup under {parent}: {exc.strerror}")
    limit = child / ("memory.max" if (child / "memory.max").exists() else "memory.limit_in_bytes")
    limit.write_text(str(LIMIT_BYTES))
    try:
        yield child
    finally:
        for _ in range(100):
            try:
                child.rmdir()
                break
            except OSError:
                time.sleep(0.1)  # the killed readers leave the cgroup as they are reaped


def thrash(cgroup: Path, where: Path) -> list[subprocess.Popen[bytes]]:
    """Readers in `cgroup` that write a file four times its limit and read it over and over."""
    script = ('echo $$ > "$1/cgroup.procs" && dd if=/dev/zero of="$2" bs=1M count="$3" status=none && '
              'while :; do cat "$2" > /dev/null; done')
    return [subprocess.Popen(["/bin/sh", "-c", script, "thrash", str(cgroup), str(where / f"thrash{n}"), str(FILE_MIB)],
                             start_new_session=True) for n in range(THRASHERS)]


async def test_real_memory_pressure_puts_the_idle_server_to_sleep(user_env: UserEnv, limited_cgroup: Path) -> None:
    write_config(user_env, server_table("idle") + '[pressure]\nstart = 2\nstop = 1\npause = "1s"\n')
    start_daemon(user_env)
    readers: list[subprocess.Popen[bytes]] = []
    try:
        async with named_session(user_env, "idle") as session:
            assert tool_text(await session.call_tool("pid", {})).isdigit()
            readers = thrash(limited_cgroup, user_env.root)
            row = await trio.to_thread.run_sync(lambda: wait_for_row(
                user_env, "idle", lambda r: r["state"] == "sleeping", "real pressure to put the idle server to sleep",
                timeout_s=90))
            assert row["last_stop_reason"].startswith("memory pressure: some avg10 ")
    finally:
        for reader in readers:
            os.killpg(reader.pid, 9)
            reader.wait()
        for n in range(THRASHERS):
            (user_env.root / f"thrash{n}").unlink(missing_ok=True)
        settle()


def settle() -> None:
    """Wait (bounded) for the pressure this test made to fade, so that no daemon of a later test
    reads it and puts its idle servers to sleep (pressure relief is on by default)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        some = PSI.read_text().split()[1]  # "avg10=N"
        if float(some.partition("=")[2]) < 1.0:
            return
        time.sleep(0.5)
