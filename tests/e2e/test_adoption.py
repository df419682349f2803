"""After a kill -9 of the daemon, the next daemon takes every hand-off session back itself: each
waiting shell's quick resumer (shim/quick.py) offers it the session as the lost daemon left it,
and the daemon does the recovery in place (lazyd/daemon/handoff/adopt.py). No full Python shim runs.

Testing policy: real shims on the hand-off path (pipes and socketpairs), their real waiting
shells and flock(1), a real daemon killed with SIGKILL (by the test, or by itself at an exact
moment through tests/e2e/seams), a real next daemon, the fixture server. The test holds every
resume slot from before the kill until the next daemon accepts, so that no waiter can find the
socket empty and fall back: then every recovery must be an adoption, and the shims' log must
show no full recovery.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from shim import pause, slots
from tests.conftest import UserEnv, start_daemon
from tests.e2e.faults_support import (slot_free, DEADLINE_S, RawShim, call, daemon_log, kill_seam, region_settled, tool_call,
                                      wait_for)
from tests.e2e.shim_paths import HANDOFF_PATHS, ShimPath, waits_in_the_pause

pytestmark = pytest.mark.e2e

SESSIONS = 10  # per path: 20 sessions in all
FULL_RECOVERY = "taking it back"  # what the full shim recovery logs (shim/recover.py)
LOST = -32603


@contextmanager
def every_slot_held(user: UserEnv) -> Iterator[None]:
    """Hold every resume slot beside the daemon's socket: the waiting shells queue in flock(1)."""
    if not slots.flock_path():
        print("skipping: no flock(1) here")
        pytest.skip("no flock(1)")
    held = []
    for n in range(slots.count()):
        fd = os.open(user.socket.parent / f"resume.{n}", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


def _lines_until(shim: RawShim, request_id: int) -> list[dict[str, Any]]:
    """Every line the client reads up to the answer to `request_id` (each must parse as JSON)."""
    lines = [shim.read()]
    while lines[-1].get("id") != request_id:
        lines.append(shim.read())
    return lines


def _region_pages_kib(pid: int) -> int:
    """The shared memory (the regions' pages) a daemon has touched, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssShmem:"))


def _adopted(user: UserEnv, pid: int) -> int:
    return daemon_log(user).count(f"adopted from shim pid {pid} ")


@pytest.mark.parametrize("path", HANDOFF_PATHS, ids=[p.name for p in HANDOFF_PATHS])
def test_after_a_kill_9_the_next_daemon_adopts_every_session_and_answers_each_call_in_flight_once(
        user_env: UserEnv, path: ShimPath, tmp_path: Path) -> None:
    log = tmp_path / "shims.log"
    old = start_daemon(user_env)
    shims = [path.started(user_env, env={"LAZYD_LOG_FILE": str(log)}) for _ in range(SESSIONS)]
    new = None
    try:
        for n, shim in enumerate(shims):
            shim.initialize()
            path.check(shim)
            # A call in flight when the daemon dies (an int id for half, a string id for the rest),
            # read by the daemon for sure: its ping behind it is answered.
            shim.send(tool_call(n if n % 2 else f"s{n}", "sleep", {"seconds": 60}))
            shim.fence(f"fence {n}")
            # A kill -9 between an answer's write and its record may answer it twice or end the
            # stream with an empty line (docs/reliability.md): not what this test is about, so
            # the kill waits until the daemon has recorded the fence's answer in the region.
            wait_for(lambda: region_settled(shim.pid, f"fence {n}"), f"session {n}'s region to record its fence")
        with every_slot_held(user_env):
            os.kill(old.proc.pid, signal.SIGKILL)
            assert old.proc.wait(DEADLINE_S) == -signal.SIGKILL
            new = start_daemon(user_env)
        for n, shim in enumerate(shims):
            shim.send(tool_call(1000, "echo", {"text": f"again {n}"}))
        for n, shim in enumerate(shims):
            lines = _lines_until(shim, 1000)
            lost = [line for line in lines if line.get("id") == (n if n % 2 else f"s{n}")]
            assert len(lost) == 1 and lost[0]["error"]["code"] == LOST, lines
            assert lines[-1]["result"]["content"][0]["text"] == f"again {n}", lines
            assert len(lines) == 2, lines  # nothing else: no line cut, no empty line, no duplicate
            shim.fence("after")
            path.check(shim)  # waiting in a shell again
            if pause.runs_here():  # as it did at its start (shim/quick.py execs the pause again)
                wait_for(lambda: waits_in_the_pause(shim.pid), f"shim {shim.pid} to wait in the pause again")
            assert _adopted(user_env, shim.pid) == 1, daemon_log(user_env)
        said = log.read_text()
        assert said.count(FULL_RECOVERY) == 0, said
        (daemon,) = user_env.daemon_pids()
        assert daemon == new.proc.pid
        # Adopting reads the region's table: only its allocated pages, or each session would cost
        # the daemon the whole table (1 MiB of shared memory; 1,000 adoptions made it 1 GiB).
        assert _region_pages_kib(daemon) < SESSIONS * 256, _region_pages_kib(daemon)
        made = sorted(user_env.socket.parent.glob("resume.*"))
        wait_for(lambda: all(slot_free(slot) for slot in made), "every slot to be free again", 10.0)
    finally:
        for shim in shims:
            shim.close()
        if new is not None and new.proc.poll() is None:
            new.stop()


@pytest.mark.parametrize("point", ["read", "relayed", "answer"])
def test_a_session_whose_daemon_died_between_a_read_and_its_record_or_inside_a_write_is_adopted_whole(
        user_env: UserEnv, point: str, tmp_path: Path) -> None:
    # The seam kills the daemon at an exact moment (tests/e2e/seams): a read of the client's stdin
    # in the landing zone and not relayed, relayed and not recorded, or an answer written in part
    # (the torn byte set). The next daemon, adopting, must do what the shim's recovery does: the
    # request answered once with the error, a cut answer ended on a line of its own.
    path = HANDOFF_PATHS[0]
    log = tmp_path / "shims.log"
    old = start_daemon(user_env, env=kill_seam(f"{point}:kill-me-now"))
    shim = path.started(user_env, env={"LAZYD_LOG_FILE": str(log)})
    new = None
    try:
        shim.initialize()
        path.check(shim)
        assert call(shim, 2, "pid")["result"]
        text = "kill-me-now" + ("x" * (4 << 20) if point == "answer" else "")
        with every_slot_held(user_env):
            shim.send(tool_call(7, "echo", {"text": text}))
            assert old.proc.wait(DEADLINE_S) == -signal.SIGKILL
            new = start_daemon(user_env)
        if point == "answer":
            cut = shim.read_line()
            assert b'"id":7' in cut[:200] and len(cut) < len(text), cut[:200]
        error = shim.read()  # a line of its own that parses
        assert error["id"] == 7 and error["error"]["code"] == LOST, error
        shim.send(tool_call(8, "echo", {"text": "after"}))
        assert shim.read() == {"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "after"}]}}
        shim.fence("fence")  # and nothing else: id 7 was answered once
        path.check(shim)
        assert _adopted(user_env, shim.pid) == 1, daemon_log(user_env)
        assert log.read_text().count(FULL_RECOVERY) == 0, log.read_text()
    finally:
        shim.close()
        if new is not None and new.proc.poll() is None:
            new.stop()


def test_with_no_daemon_to_adopt_it_the_quick_resumer_falls_back_to_the_full_recovery(
        user_env: UserEnv, tmp_path: Path) -> None:
    # Nobody listens after the kill: the quick resumer execs the full shim, which autostarts a
    # daemon and takes the session back itself (its log says so); the session goes on.
    path = HANDOFF_PATHS[0]
    log = tmp_path / "shims.log"
    old = start_daemon(user_env)
    shim = path.started(user_env, env={"LAZYD_LOG_FILE": str(log)})
    try:
        shim.initialize()
        path.check(shim)
        wait_for(lambda: region_settled(shim.pid, 0), "the region to record the initialize answered")
        os.kill(old.proc.pid, signal.SIGKILL)
        assert old.proc.wait(DEADLINE_S) == -signal.SIGKILL
        assert call(shim, 3, "echo")["id"] == 3
        shim.fence("fence")
        path.check(shim)
        assert log.read_text().count(FULL_RECOVERY) == 1, log.read_text()
        assert _adopted(user_env, shim.pid) == 0
    finally:
        shim.close()

