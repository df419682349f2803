"""The orphan sweep: what a daemon killed with -9 left behind is found and stopped by its successor.

The daemon records every live child in `state.json` (0600): servers and running wake predicates,
each with its pid, start time and process group. Most servers exit on their stdin's EOF; the sweep
is for those that do not, and their grandchildren. Pids are recycled, so (`classify`): a leader
alive with the recorded start time is ours, and its session is killed; one with another start
time is a stranger's; with the leader gone, any process still in session `pgid` is ours (Linux
never hands out a pid in use as a session id). The sweep never signals the daemon running it and
rescans a session after killing it, to catch a fork that raced the kills.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import signal
from functools import partial
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import trio

from lazyd.errors import StateFileError
from lazyd.daemon import state_files
from lazyd.daemon.gate import Gate
from lazyd.host.privatefiles import read_private
from lazyd.host.procfs import Stat, read_stat, stats

log = logging.getLogger("lazyd.orphans")

STATE_FILE = "state.json"
MAX_STATE_BYTES = 1024 * 1024  # thousands of records; a bigger file is not ours, and is ignored
# Rounds of scan-and-kill per session: a SIGKILLed process may still show as alive for a moment,
# and one forked before the kill landed appears in the next scan; more rounds than this means
# something keeps spawning, which the next daemon start will meet again.
SWEEP_ROUNDS = 5


@dataclass(frozen=True)
class ChildRecord:
    name: str
    pid: int
    start_ticks: int
    pgid: int


class Verdict(enum.Enum):
    OURS = "ours"  # the recorded leader still runs: kill its session
    GONE = "gone"  # the leader exited: whatever is left in its session is ours
    RECYCLED = "recycled"  # another process has the pid now: leave everything alone


def classify(record: ChildRecord, leader: Stat | None) -> Verdict:
    """What the sweep does with `record`, given what /proc says about its pid now."""
    if leader is None:
        return Verdict.GONE
    if leader.start_ticks != record.start_ticks:
        return Verdict.RECYCLED
    # Our leader as a zombie is gone too; its pid (and so the session id) stays reserved until
    # it is reaped, so its session is still only ours.
    return Verdict.GONE if leader.state == "Z" else Verdict.OURS


def begin_sweep(state_dir: Path, starting: Gate) -> list[ChildRecord]:
    """Close the daemon's `starting` gate (lazyd/daemon/gate.py) and read what the predecessor
    left, at once: before the daemon's first `await`, so that no start slips past the gate, and
    before the registry records its own (still no) children over the file. `sweep_then_open`
    finishes the sweep."""
    starting.close()
    return read_state(state_dir)


async def sweep_then_open(state_dir: Path, records: list[ChildRecord], starting: Gate) -> None:
    """The sweep of `records` (`begin_sweep`'s), off the event loop, then `starting` open
    (however the sweep ends)."""
    try:
        await trio.to_thread.run_sync(partial(sweep, state_dir, records=records))
    finally:
        starting.open()


def write_state(state_dir: Path, children: Iterable[ChildRecord]) -> None:
    """Atomically record the live children. Errors are logged, never raised."""
    # Not durable: after a crash of the machine, the processes it names are gone anyway.
    state_files.save(state_dir / STATE_FILE, {"daemon_pid": os.getpid(), "children": [asdict(c) for c in children]},
                     durable=False)


def read_state(state_dir: Path) -> list[ChildRecord]:
    """The records a previous daemon left; [] for a missing file, and [] with one warning for a
    file that is not lazyd's own (lazyd.host.privatefiles), unreadable or not a record: kills
    are never decided from a file lazyd cannot trust."""
    path = state_dir / STATE_FILE
    try:
        data = read_private(path, MAX_STATE_BYTES)
        if data is None:
            return []
        doc = json.loads(data)
        records = [ChildRecord(str(c["name"]), int(c["pid"]), int(c["start_ticks"]), int(c["pgid"]))
                   for c in doc["children"]]
    except StateFileError as exc:
        log.warning("ignoring a state file: %s; leftovers of the previous daemon, if any, are not swept", exc)
        return []
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        log.warning("ignoring a state file: %s: is not a lazyd record of children (%s); leftovers of the "
                    "previous daemon, if any, are not swept", path, str(exc)[:120] or type(exc).__name__)
        return []
    # pid 0 and negative ids would make kill() signal whole groups we know nothing about.
    return [r for r in records if r.pid > 1 and r.pgid > 1]


def _kill_sessions(sids: set[int]) -> dict[int, list[int]]:
    """SIGKILL every process in the sessions `sids`; the pids signalled, by session. Each round
    reads /proc once for all of them, not once per record (docs/benchmarks.md)."""
    me = os.getpid()
    killed: dict[int, list[int]] = {}
    for _ in range(SWEEP_ROUNDS):
        targets = [(stat.session, pid) for pid, stat in stats().items()
                   if stat.session in sids and stat.state != "Z" and pid != me]
        if not targets:
            break
        for sid, pid in sorted(targets):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if pid not in killed.setdefault(sid, []):
                killed[sid].append(pid)
    return killed


def sweep(state_dir: Path, spare: frozenset[int] = frozenset(), *,
          records: list[ChildRecord] | None = None) -> list[int]:
    """Kill the leftovers recorded by a previous daemon (`records`, read from the state dir where
    None); returns the pids signalled. Those in `spare` were taken over
    (lazyd/daemon/upgrade/stored_servers.py) and are left alone. Call it before starting any child:
    afterwards the record is emptied."""
    swept: list[ChildRecord] = []
    for child in read_state(state_dir) if records is None else records:
        if child.pid in spare:
            continue
        if classify(child, read_stat(child.pid)) is Verdict.RECYCLED:
            log.info("orphan sweep: pid %d of %s was recycled; leaving it alone", child.pid, child.name)
            continue
        swept.append(child)
    by_session = _kill_sessions({child.pgid for child in swept}) if swept else {}
    killed: list[int] = []
    for child in swept:
        targets = by_session.pop(child.pgid, [])
        if targets:
            log.warning("orphan sweep: killed leftovers of %s (pids %s)", child.name, targets)
            killed.extend(targets)
    write_state(state_dir, [])
    return killed
