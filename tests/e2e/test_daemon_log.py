"""The daemon's log, which holds its servers' stderr tails, is 0600 like every file lazyd writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import UserEnv, start_daemon, wait_until

pytestmark = pytest.mark.e2e

STEP_TIMEOUT_S = 20.0  # bound on the daemon writing its first line; reached only when broken


def listening_lines(log: Path) -> int:
    return log.read_text().count("listening on") if log.exists() else 0


def test_a_daemon_started_under_a_0022_umask_makes_its_log_0600_and_tightens_a_wider_one(user_env: UserEnv) -> None:
    log = user_env.state_dir / "lazyd.log"
    old = os.umask(0o022)
    try:
        first = start_daemon(user_env)
        # The socket accepts a moment before the log is opened: wait for the daemon's first line.
        wait_until(lambda: listening_lines(log) == 1, STEP_TIMEOUT_S, "the first daemon's log line")
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        first.stop()
        log.chmod(0o644)  # as an older lazyd left it
        second = start_daemon(user_env)
        wait_until(lambda: listening_lines(log) == 2, STEP_TIMEOUT_S, "the second daemon's log line")
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        second.stop()
    finally:
        os.umask(old)
