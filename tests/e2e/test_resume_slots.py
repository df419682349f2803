"""After a kill -9 of the daemon, the waiters take their sessions back through the resume slots
(shim/slots.py): each recovery (the installed shim's) holds a slot from before its Python starts
until it has reconnected, and none keeps one afterwards (not the next waiter, not the new daemon).

Testing policy: real shims on the hand-off path (their waiters, real flock(1)), a real
daemon autostarted by them and killed with SIGKILL, the fixture server. That at most one recovery
per slot runs at once is shown by tests/unit/test_handoff_waiter.py on the waiting program itself;
here the whole path, counted, never timed: the figures are bench_scale's.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from shim import slots
from tests.conftest import UserEnv
from tests.e2e.faults_support import slot_free, daemon_log, region_settled, tool_call, wait_for
from tests.e2e.shim_paths import HANDOFF_PATHS

pytestmark = pytest.mark.e2e

SESSIONS = 6
FREED_S = 10.0  # a leaked slot is held for good; a slot being freed, for milliseconds


def _holders(slot_dir: Path) -> dict[int, str]:
    """Every process with a resume slot open, and its command line."""
    found = {}
    for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            if _holds(pid, slot_dir):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found[pid] = f.read().replace(b"\0", b" ")[:200].decode(errors="replace")
        except OSError:
            continue
    return found


def _holds(pid: int, slot_dir: Path) -> list[str]:
    """The resume slots process `pid` has open."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(slot_dir / "resume.")):
            held.append(target)
    return held


def test_after_a_kill_9_every_session_is_taken_back_through_a_slot_and_no_slot_stays_held(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    if not slots.flock_path():
        print("skipping: no flock(1) here")
        pytest.skip("no flock(1)")
    log = tmp_path / "shims.log"
    path = HANDOFF_PATHS[0]
    shims = [path.started(user_env, env={"LAZYD_LOG_FILE": str(log)}) for _ in range(SESSIONS)]
    try:
        for shim in shims:
            shim.initialize()
            path.check(shim)
            # A kill between the initialize answer's write and its record would answer it twice
            # (docs/reliability.md): not what this test is about.
            wait_for(lambda: region_settled(shim.pid, 0), "the region to record the initialize answered")
        (old_daemon,) = user_env.daemon_pids()
        os.kill(old_daemon, signal.SIGKILL)
        for n, shim in enumerate(shims):
            shim.send(tool_call(5, "echo", {"text": f"again {n}"}))
        for n, shim in enumerate(shims):
            answer = shim.read()
            assert answer["id"] == 5 and answer["result"]["content"][0]["text"] == f"again {n}", answer
        for shim in shims:
            path.check(shim)  # handed off again, waiting in the waiting program
        said = log.read_text()
        # Each took its session back holding its slot: the shim's recovery says so in its log.
        assert said.count("(holding resume slot fd 8)") == SESSIONS, (said, daemon_log(user_env))
        assert said.count("taking it back") == said.count("(holding resume slot fd 8)"), said
        slot_dir = user_env.socket.parent
        made = sorted(slot_dir.glob("resume.*"))
        assert made and all(p.name in {f"resume.{n}" for n in range(slots.count())} for p in made), made
        # A slot is freed by its holder's exec, which closes close-on-exec descriptors after /proc
        # already shows the new program (the exe link is set first). So: freed within a bound.
        try:
            wait_for(lambda: all(slot_free(slot) for slot in made), "every slot to be free again", FREED_S)
        except AssertionError:
            held = [slot.name for slot in made if not slot_free(slot)]
            raise AssertionError(f"{held} still held after every session was taken back, by {_holders(slot_dir)}")
        (new_daemon,) = user_env.daemon_pids()
        for pid in [new_daemon, *(shim.pid for shim in shims)]:
            assert _holds(pid, slot_dir) == [], pid
    finally:
        for shim in shims:
            shim.close_stdin_and_wait()
