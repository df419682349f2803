"""The orphan sweep: what a daemon killed with -9 left behind is found and stopped by its successor.

The daemon records every live server process in `state.json` (state dir, mode 0600): name, pid,
process start time (field 22 of /proc/<pid>/stat) and process group. Most servers exit by
themselves when the daemon dies (their stdin reaches EOF); the sweep is for those that do not.

A pid alone proves nothing, because pids are recycled. The rules:
- leader alive with the recorded start time: it is ours; SIGKILL everything in its session.
- leader alive with another start time: the pid was recycled; touch nothing.
- leader gone: members of its session may remain (grandchildren). Every server runs in its own
  session whose id is the leader's pid, and Linux never hands out a pid that is still in use as a
  session or group id, so any process still in session `pgid` is a leftover of ours.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("lazyd.orphans")

STATE_FILE = "state.json"


@dataclass(frozen=True)
class ChildRecord:
    name: str
    pid: int
    start_ticks: int
    pgid: int


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return data.rsplit(b")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22, counted from field 3


def session_members(sid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and int(fields[3]) == sid:  # field 6: session id
                members.append(int(entry))
    return members


def write_state(state_dir: Path, children: Iterable[ChildRecord]) -> None:
    """Atomically record the live children. Errors are logged, never raised."""
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = state_dir / STATE_FILE
        tmp = state_dir / f".{STATE_FILE}.{os.getpid()}"
        data = json.dumps({"daemon_pid": os.getpid(),
                           "children": [c.__dict__ for c in children]}).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        log.error("cannot record children in %s: %s", state_dir, exc)


def read_state(state_dir: Path) -> list[ChildRecord]:
    try:
        fd = os.open(state_dir / STATE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            doc = json.loads(f.read(1024 * 1024))
        return [ChildRecord(str(c["name"]), int(c["pid"]), int(c["start_ticks"]), int(c["pgid"]))
                for c in doc["children"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring an unreadable %s: %s", STATE_FILE, exc)
        return []


def sweep(state_dir: Path) -> list[int]:
    """Kill the leftovers recorded by a previous daemon; returns the pids signalled."""
    killed: list[int] = []
    for child in read_state(state_dir):
        ticks = start_ticks(child.pid)
        if ticks is not None and ticks != child.start_ticks:
            log.info("orphan sweep: pid %d of %s was recycled; leaving it alone", child.pid, child.name)
            continue
        # Ours (matching start time) or gone: everything still in its session is a leftover.
        targets = session_members(child.pgid)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if targets:
            log.warning("orphan sweep: killed leftovers of %s (pids %s)", child.name, targets)
            killed.extend(targets)
    write_state(state_dir, [])
    return killed
