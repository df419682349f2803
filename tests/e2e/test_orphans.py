"""The orphan sweep end to end (issue 4 item 5, RELIABILITY cases 13-14): what a daemon killed with
-9 leaves behind is killed by the next daemon, and a recycled pid is never touched.

Testing policy: real daemons killed with a real SIGKILL, real fixture servers that ignore stdin
EOF and fork grandchildren, real wake predicates; state.json is crafted only to point a record at
a live process that is not ours. "Killed" and "spared" are read from /proc. The sweep runs before
the new daemon serves its first control connection, so a successful `ping` means it is done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lazyd.host import procfs
from lazyd.daemon import orphans
from tests.conftest import UserEnv, start_daemon
from tests.e2e.faults_support import session_members
from tests.e2e.supervision_support import (
    alive,
    control,
    daemon_log,
    recorded_pids,
    server_table,
    wait_for,
    wait_for_value,
    write_config,
)

pytestmark = pytest.mark.e2e


def _kill_daemon_hard(user: UserEnv) -> None:
    (pid,) = user.daemon_pids()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not user.daemon_pids(), "the killed daemon to be gone")


def _records(user: UserEnv) -> list[dict[str, object]]:
    children: list[dict[str, object]] = json.loads((user.state_dir / orphans.STATE_FILE).read_text())["children"]
    return children


def _new_daemon_ready(user: UserEnv) -> None:
    start_daemon(user)
    # The old socket is still on disk: the new daemon is ready once it answers.
    wait_for(lambda: _answers_ping(user), "the new daemon to answer")


def _answers_ping(user: UserEnv) -> bool:
    try:
        control(user, "ping")
    except Exception:
        return False
    return True


def test_a_server_that_ignores_eof_and_its_grandchildren_left_by_a_killed_daemon_are_killed_by_the_next_one(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("kids", env={"FIXTURE_IGNORE_EOF": "1", "FIXTURE_GRANDCHILDREN": "2"}))
    start_daemon(user_env)
    pid = control(user_env, "wake", name="kids")["pid"]
    leftovers = wait_for_value(lambda: m if len(m := session_members(pid)) == 3 else None,
                               "the server and its two grandchildren")
    (record,) = _records(user_env)
    assert (record["name"], record["pid"], record["start_ticks"]) == ("kids", pid, procfs.start_time_ticks(pid))
    _kill_daemon_hard(user_env)
    assert all(alive(p) for p in leftovers), "the server must outlive its daemon for the sweep to matter"
    _new_daemon_ready(user_env)
    wait_for(lambda: not any(alive(p) for p in leftovers), "the leftovers to be killed")
    # The sweep runs beside serving: its log line and its emptied record come when it ends.
    wait_for(lambda: "orphan sweep: killed leftovers of kids" in daemon_log(user_env), "the sweep's log line")
    wait_for(lambda: _records(user_env) == [], "the record to be emptied")


def test_a_wake_predicate_left_hanging_by_a_killed_daemon_is_swept_with_its_children(
    user_env: UserEnv, tmp_path: Path,
) -> None:
    pids = tmp_path / "predicate.pids"
    predicate = ["/bin/sh", "-c", f'echo $$ >> "{pids}"; sleep 1000 & echo $! >> "{pids}"; wait']
    write_config(user_env, server_table("watched", wake={"command": predicate, "interval": "1h", "timeout": "10m"}))
    start_daemon(user_env)
    running = wait_for_value(lambda: recorded_pids(pids, 2), "the predicate and its child to run")
    wait_for(lambda: any(r["name"] == "watched (wake predicate)" for r in _records(user_env)),
             "the predicate to be recorded in state.json")
    _kill_daemon_hard(user_env)
    assert all(alive(p) for p in running)
    _new_daemon_ready(user_env)
    wait_for(lambda: not any(alive(p) for p in running), "the predicate's group to be killed")


def test_the_sweep_spares_a_process_whose_pid_matches_a_record_but_whose_start_time_differs(
    user_env: UserEnv,
) -> None:
    # Both lead their own session, as servers do; only the start time recorded for them differs.
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        wait_for(lambda: alive(ours.pid) and alive(stranger.pid), "both sleepers to run")
        orphans.write_state(user_env.state_dir, [
            orphans.ChildRecord("ours", ours.pid, procfs.start_time_ticks(ours.pid), ours.pid),
            orphans.ChildRecord("recycled", stranger.pid, procfs.start_time_ticks(stranger.pid) - 1, stranger.pid),
        ])
        _new_daemon_ready(user_env)
        assert ours.wait(timeout=10) == -signal.SIGKILL  # the sweep ran, and killed what was ours
        assert stranger.poll() is None and alive(stranger.pid)
        assert "pid %d of recycled was recycled; leaving it alone" % stranger.pid in daemon_log(user_env)
        wait_for(lambda: _records(user_env) == [], "the record to be emptied")  # when the sweep ends
    finally:
        for proc in (ours, stranger):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
