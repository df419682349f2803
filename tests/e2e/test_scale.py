"""Hundreds of sessions against a daemon started at the soft descriptor limit users get (1024).

Testing policy: a real daemon under `prlimit --nofile=1024:<our hard limit>` (skipped with the
reason printed without prlimit), and sessions opened exactly as a shim opens a hand-off session
(the client's pipes and a region passed with the hello, the client's lines on those pipes), by
the test itself: the daemon holds what it holds for a shim's session, without 300 Python
processes to start. Real shims then start beside them and must be served by the daemon too.
What is asserted is counted (sessions welcomed, refusals, fallbacks, descriptors), never timed:
the timings are bench_scale's.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

from tests.benchmarks.scale_support import HandedOff
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_command, wait_until
from tests.e2e.raw_daemon_support import STEP_S, Conn, daemon_log, launch_daemon

pytestmark = pytest.mark.e2e

SESSIONS = 300  # 3 or 4 descriptors each in the daemon (4 before Python 3.13): past a soft limit of 1024
SERVERS = 20
SOFT_NOFILE = 1024
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _session(user: UserEnv, server: int) -> HandedOff:
    return HandedOff(user.socket, user.env, [sys.executable, str(FIXTURE_SERVER), f"--n={server}"])


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _memory_kib(pid: int) -> dict[str, int]:
    """The daemon's resident memory by kind (/proc/PID/status): its own heap, and the regions'
    pages it touched (shared memory)."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {name: int(fields[name].split()[0]) for name in ("VmRSS", "RssShmem")}


def test_three_hundred_hand_off_sessions_at_a_soft_limit_of_1024_are_all_served_cost_kilobytes_and_leave_nothing(
    user_env: UserEnv,
) -> None:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        print("skipping: prlimit is not installed")
        pytest.skip("prlimit is not installed")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < 4 * SESSIONS * 2:
        print(f"skipping: the hard descriptor limit {hard} leaves the daemon no room to raise to")
        pytest.skip("hard descriptor limit too low")
    proc = launch_daemon(user_env, prefix=(prlimit, f"--nofile={SOFT_NOFILE}:{hard}"))
    sessions: list[HandedOff] = []
    try:
        warm = [_session(user_env, n) for n in range(SERVERS)]  # each server's handshake cached
        for session in warm:
            assert session.welcome["t"] == "welcome", session.welcome
            assert session.initialize()["id"] == 1
            session.close()
        baseline = _descriptors(proc.pid)
        memory = _memory_kib(proc.pid)
        for n in range(SESSIONS):
            session = _session(user_env, n % SERVERS)
            sessions.append(session)
            assert session.welcome["t"] == "welcome" and session.welcome.get("handoff") is True, (n, session.welcome)
        for session in sessions:
            assert session.initialize()["id"] == 1  # answered by the daemon from its cache
        # Real shims beside them: served by the daemon, none runs its server directly.
        shims = [subprocess.run([shim_command(), "--", sys.executable, str(FIXTURE_SERVER), f"--n={n}"],
                                env=user_env.env, input=json.dumps(INIT).encode() + b"\n",
                                capture_output=True, timeout=STEP_S) for n in range(3)]
        for shim in shims:
            assert json.loads(shim.stdout.splitlines()[0])["id"] == 1
            assert b"running the server directly" not in shim.stderr, shim.stderr
        ctl = Conn(user_env.socket)
        ctl.open_ctl()
        status = ctl.ctl("status")["data"]
        ctl.close()
        assert status["refused"] == {} and status["fallbacks"] == {}, (status["refused"], status["fallbacks"])
        assert sum(int(row["clients"]) for row in status["servers"]) == SESSIONS
        held = _descriptors(proc.pid) - baseline
        print(f"daemon descriptors per idle hand-off session: {held / SESSIONS:.2f}")
        grown = {name: (kib - memory[name]) / SESSIONS for name, kib in _memory_kib(proc.pid).items()}
        print(f"daemon memory per idle hand-off session: {grown['VmRSS']:.0f} KiB, "
              f"of it {grown['RssShmem']:.0f} KiB of region pages")
        # About 50 KiB each (20 of them the region pages a session touches); a scan of a whole
        # landing zone cost 256 KiB of region pages more, a list of every free table entry 600 KiB.
        assert grown["RssShmem"] < 64 and grown["VmRSS"] < 192, grown
        for session in sessions:
            session.close()
        sessions.clear()
        wait_until(lambda: _descriptors(proc.pid) <= baseline, STEP_S,
                   f"the daemon's descriptors back to its baseline of {baseline}")
        assert "Traceback" not in daemon_log(user_env)
    finally:
        for session in sessions:
            session.close()
        proc.terminate()
        assert proc.wait(timeout=STEP_S) == 0, daemon_log(user_env)
