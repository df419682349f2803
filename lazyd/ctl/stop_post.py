"""`lazyctl systemd stop-post`: what lazyd.service's ExecStopPost= runs once the daemon is gone.

The unit kills the main process alone (`KillMode=process`) so that a crash keeps the servers for
the restarted daemon (their pipes wait in the fd store); so systemd never kills the rest of the
cgroup, and this command does after a stop, never after a crash (docs/systemd.md, "The units").
It runs inside the service's cgroup, finds it in /proc/self/cgroup and spares itself.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

CRASH_RESULTS = frozenset({"signal", "core-dump", "exit-code", "watchdog"})
# SERVICE_RESULT values after which Restart=on-failure restarts lazyd and the fd store is kept.
KILL_BOUND_S = 5.0  # a SIGKILLed process is gone within milliseconds; this bounds one in D state
POLL_S = 0.02


def stop_post(environ: Mapping[str, str]) -> int:
    result = environ.get("SERVICE_RESULT", "")
    if result in CRASH_RESULTS:
        print(f"lazyd.service ended by a crash ({result}, {environ.get('EXIT_CODE', '?')} "
              f"{environ.get('EXIT_STATUS', '?')}): its servers are left to the restarted lazyd", file=sys.stderr)
        return 0
    killed = kill_the_rest(own_cgroup_dirs())
    if killed:
        print(f"lazyd.service stopped ({result or 'no SERVICE_RESULT'}): killed {len(killed)} processes left in "
              f"its cgroup: {' '.join(map(str, sorted(killed)))}", file=sys.stderr)
    return 0


def own_cgroup_dirs(proc: str = "/proc/self") -> list[Path]:
    """The directories of this process's cgroup in the name=systemd and unified hierarchies."""
    mounts: dict[str, Path] = {}  # "name=systemd" or "" (unified) -> mount point
    try:
        mountinfo = Path(proc, "mountinfo").read_text()
        cgroups = Path(proc, "cgroup").read_text()
    except OSError:
        return []
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3 or fields[3] != "/":
            continue
        if tail[0] == "cgroup2":
            mounts.setdefault("", Path(fields[4]))
        elif tail[0] == "cgroup" and "name=systemd" in tail[2].split(","):
            mounts.setdefault("name=systemd", Path(fields[4]))
    dirs = []
    for line in cgroups.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1] in mounts and parts[2] != "/":
            directory = mounts[parts[1]] / parts[2].lstrip("/")
            if directory.is_dir():
                dirs.append(directory)
    return dirs


def members(dirs: list[Path]) -> set[int]:
    """Every process in these cgroups and their children."""
    pids: set[int] = set()
    for directory in dirs:
        for procs in [directory / "cgroup.procs", *directory.rglob("*/cgroup.procs")]:
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except (OSError, ValueError):
                continue
    return pids


def kill_the_rest(dirs: list[Path]) -> set[int]:
    """SIGKILL every member but this process until none is left (bounded); the pids killed."""
    me = os.getpid()
    killed: set[int] = set()
    give_up = time.monotonic() + KILL_BOUND_S
    while time.monotonic() < give_up:
        left = members(dirs) - {me}
        if not left:
            break
        for pid in left:
            try:
                # Through a pidfd: the pid is signalled only while it names this process.
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
            finally:
                os.close(fd)
        time.sleep(POLL_S)
    return killed
