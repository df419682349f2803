"""Every process lazyd starts is a plain one a user can read in `ps`, and a guard would pass.

While hand-off sessions wait, across a kill -9 of the daemon and the recovery of every session,
and across `lazyctl upgrade`, a poll every 20 ms of every process of the test (those carrying its
marker variable, and their descendants: the daemon, the shims and what they became, the servers)
finds no executable that is a memfd, a deleted file, or under /dev/shm, /run/user or /tmp (what
Falco's "Fileless execution via memfd_create", Tracee's TRC-105 and Elastic Defend's memfd rule
match on), and no lazyd command line over 512 bytes before the server's own, nor one carrying
program text (`-c` with code, a newline, an `import `).

Testing policy: real shims on the hand-off path (pipes and socketpairs), their real waiters, a
real daemon killed with SIGKILL, a real next daemon and its real upgrade, the fixture server;
/proc read as a guard reads it. The test holds every resume slot across the kill until the next
daemon accepts, so that every waiter's recovery finds it (and none autostarts one of its own).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lazyd.host import procfs
from tests.conftest import MARKER_VAR, UserEnv, start_daemon
from tests.e2e.faults_support import DEADLINE_S, every_slot_held, FIXTURE, RawShim, call, lazyctl, region_settled, text_of, wait_for
from tests.e2e.shim_paths import HANDOFF_PATHS, ShimPath, waits_handed_off

pytestmark = pytest.mark.e2e

POLL_S = 0.02
MAX_ARGV_BYTES = 512  # of a lazyd command line, before the server's own
UNPLAIN_PLACES = ("/memfd:", "/dev/shm/", "/run/user/", "/tmp/")
PROGRAM_TEXT = ("\n", "import ")


def _argv(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] if raw else None


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _family(marker: str) -> set[int]:
    """The test's processes: those whose environment carries its marker, and their descendants."""
    needle = f"{MARKER_VAR}={marker}".encode()
    parents: dict[int, int] = {}
    marked: set[int] = set()
    for pid in procfs.pids():
        stat = procfs.read_stat(pid)
        if stat is None or stat.state == "Z":
            continue
        parents[pid] = stat.ppid
        environ = procfs.read_environ(pid)
        if environ is not None and needle in environ:
            marked.add(pid)
    family = set(marked)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in family and pid not in family:
                family.add(pid)
                grew = True
    return family


def problems_of(pid: int) -> list[str]:
    """What a guard would flag in process `pid` (an empty list: nothing)."""
    found = []
    exe, argv = _exe(pid), _argv(pid)
    if exe is not None and (exe.endswith(" (deleted)") or exe.startswith(UNPLAIN_PLACES)):
        found.append(f"pid {pid} runs {exe!r}")
    if argv is None:
        return found
    ours = argv
    server = FIXTURE
    for at in range(len(argv) - len(server) + 1):  # the server's own command line is not lazyd's
        if argv[at : at + len(server)] == server:
            ours = argv[:at]
            break
    size = len("\0".join(ours).encode())
    if size > MAX_ARGV_BYTES:
        found.append(f"pid {pid}'s command line is {size} bytes before the server's: {ours[:3]!r}...")
    if "-c" in ours[1:]:
        found.append(f"pid {pid} runs code from its command line: {ours[:3]!r}...")
    texts = [arg[:60] for arg in ours if any(mark in arg for mark in PROGRAM_TEXT)]
    if texts:
        found.append(f"pid {pid}'s command line carries program text: {texts!r}")
    return found


@dataclass
class Guard:
    """A poll of the test's processes every POLL_S, in a thread, until `stop`."""

    marker: str
    problems: dict[str, None] = field(default_factory=dict)  # in order, each once
    waiters: set[str] = field(default_factory=set)  # the waiters' argv[0] seen
    recoveries: int = 0  # polls that found a shim taking its session back
    polls: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in _family(self.marker):
                for problem in problems_of(pid):
                    self.problems[problem] = None
                argv = _argv(pid) or [""]
                if argv[0].startswith("lazyd-shim: waiting ("):
                    self.waiters.add(argv[0])
                elif any(arg.startswith("--resume-handoff=") for arg in argv):
                    self.recoveries += 1
            self.polls += 1
            time.sleep(POLL_S)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(DEADLINE_S)


def _waits(guard: Guard, path: ShimPath, shim: RawShim) -> None:
    """`shim` waits handed off, and the guard has found nothing so far."""
    wait_for(lambda: bool(guard.problems) or waits_handed_off(shim.pid), f"shim {shim.pid} to wait")
    assert not guard.problems, "\n".join(guard.problems)
    path.check(shim)


def test_no_process_lazyd_starts_runs_from_memory_or_a_temporary_place_or_carries_a_program_in_its_command_line(
        user_env: UserEnv, tmp_path: Path) -> None:
    daemon = start_daemon(user_env)
    guard = Guard(user_env.marker)
    guard.start()
    shims: list[RawShim] = []
    new = None
    try:
        for n, path in enumerate([*HANDOFF_PATHS, *HANDOFF_PATHS]):
            shim = path.started(user_env, env={"LAZYD_LOG_FILE": str(tmp_path / "shims.log")})
            shims.append(shim)
            shim.initialize()
            _waits(guard, path, shim)
            assert text_of(call(shim, 1, "pid"))
            wait_for(lambda: region_settled(shim.pid, 1), f"session {n}'s region to record its call answered")
        with every_slot_held(user_env):
            os.kill(daemon.proc.pid, signal.SIGKILL)
            assert daemon.proc.wait(DEADLINE_S) == -signal.SIGKILL
            new = start_daemon(user_env)
        for n, shim in enumerate(shims):
            assert text_of(call(shim, 2, "pid")), f"session {n} goes on under the next daemon"
            _waits(guard, HANDOFF_PATHS[n % 2], shim)
        done = lazyctl(user_env, "upgrade")
        assert done.returncode == 0, done.stderr
        for n, shim in enumerate(shims):
            assert text_of(call(shim, 3, "pid")), f"session {n} goes on after the upgrade"
            _waits(guard, HANDOFF_PATHS[n % 2], shim)
        time.sleep(10 * POLL_S)
    finally:
        guard.stop()
        for shim in shims:
            shim.close()
        if new is not None and new.proc.poll() is None:
            new.stop()
    assert not guard.problems, "\n".join(guard.problems)
    # The poll saw what it guards: every session's waiter, and shims taking their sessions back.
    assert guard.waiters and all(argv0.startswith("lazyd-shim: waiting (") for argv0 in guard.waiters), guard.waiters
    assert guard.recoveries > 0 and guard.polls > 20, (guard.recoveries, guard.polls)
    print(f"{guard.polls} polls; waiters seen: {sorted(guard.waiters)}; polls that saw a recovery: {guard.recoveries}")
