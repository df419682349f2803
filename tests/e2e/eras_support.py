"""Helpers for end-to-end era tests: restarting the daemon, its status rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

from tests.conftest import UserEnv, start_daemon, wait_until


STEP_TIMEOUT_S = 60  # a bound on each step, far above what any takes; never an assertion on speed


def restart_daemon(user: UserEnv, needle: str) -> None:
    """A fresh daemon: no process, only the snapshot on disk."""
    for pid in user.daemon_pids():
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not user.daemon_pids() and not user.server_pids(needle), 20, "the daemon and server to stop")
    start_daemon(user)


def status_rows(user: UserEnv) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "status", "--json"], env=user.env,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)["servers"]
    return rows
