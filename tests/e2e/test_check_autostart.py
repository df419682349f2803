"""`lazyctl check` and `wrap --check` start the daemon when none runs, as a shim does, and bound
the check by `--start-timeout` / LAZYD_START_TIMEOUT, as the shim option bounds a start.

Real lazyctl processes, a real daemon (the one they start), the fixture server, and a Claude-style
config file for wrap. A check that hangs must fail with the bound it was given in its message:
that the message names 500ms, not the 60 s default, is what shows the bound was used; no test
measures elapsed time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_SERVER, UserEnv
from tests.e2e.wrap_support import claude_config, wrap_lazyctl

pytestmark = pytest.mark.e2e

SERVER = [sys.executable, str(FIXTURE_SERVER)]
HANGS = {"FIXTURE_HANG_ON_INITIALIZE": "1"}


def lazyctl(user: UserEnv, *words: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *words], env={**user.env, **(env or {})},
                          cwd=user.root, capture_output=True, text=True, timeout=120)


def daemon_session(pid: int) -> int:
    return os.getsid(pid)


def test_check_with_no_daemon_running_starts_one_that_outlives_lazyctl(user_env: UserEnv) -> None:
    assert lazyctl(user_env, "status").returncode == 3
    done = lazyctl(user_env, "check", "--json", "--", *SERVER)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["listings"]["tools"]["count"] == 10
    status = lazyctl(user_env, "status", "--json")
    assert status.returncode == 0, status.stderr  # still running after lazyctl exited
    pid = json.loads(status.stdout)["daemon_pid"]
    assert pid in user_env.daemon_pids()
    assert daemon_session(pid) == pid  # its own session: a client's killpg of lazyctl's group misses it


def test_check_does_not_start_a_daemon_with_lazyd_no_autostart(user_env: UserEnv) -> None:
    done = lazyctl(user_env, "check", "--", *SERVER, env={"LAZYD_NO_AUTOSTART": "1"})
    assert done.returncode == 3 and "lazyd is not running" in done.stderr
    assert user_env.daemon_pids() == []


def test_check_of_a_daemon_that_cannot_start_says_why(user_env: UserEnv) -> None:
    user_env.config_file.parent.mkdir(parents=True)
    user_env.config_file.write_text("[defaults]\nlinger = 'soon'\n")
    user_env.config_file.chmod(0o600)
    done = lazyctl(user_env, "check", "--", *SERVER)
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        f"lazyctl: lazyd is not running and could not be started: lazyd cannot start: {user_env.config_file}: "
        "defaults.linger: 'soon' is not a duration (use 500ms, 30s, 10m, 1h or 0)"]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_check_honours_start_timeout_as_a_flag_or_lazyd_start_timeout(user_env: UserEnv, how: str) -> None:
    words = ["--start-timeout", "500ms"] if how == "flag" else []
    env = {"LAZYD_START_TIMEOUT": "500ms"} if how == "env" else {}
    done = lazyctl(user_env, "check", *words, "--", "/usr/bin/env", *(f"{k}={v}" for k, v in HANGS.items()), *SERVER,
                   env=env)
    assert done.returncode == 1
    assert "no complete handshake and listings within start_timeout (500ms)" in done.stderr, done.stderr


def test_a_bad_start_timeout_is_bad_usage(user_env: UserEnv) -> None:
    for words, env, name in ((["--start-timeout", "soon"], {}, "--start-timeout"),
                             ([], {"LAZYD_START_TIMEOUT": "0"}, "LAZYD_START_TIMEOUT")):
        done = lazyctl(user_env, "check", *words, "--", *SERVER, env=env)
        assert done.returncode == 2 and done.stderr.startswith(f"lazyctl check: {name}: "), done.stderr
    assert user_env.daemon_pids() == []


def test_wrap_check_starts_the_daemon_and_uses_the_registrations_own_start_timeout(user_env: UserEnv) -> None:
    path = claude_config(user_env)
    config = json.loads(path.read_text())
    config["mcpServers"]["hangs"] = {"type": "stdio", "command": SERVER[0], "args": SERVER[1:], "env": HANGS}
    path.write_text(json.dumps(config))
    done = wrap_lazyctl(user_env, "wrap", "--client", "claude", "--all", "--check", "--json",
                    "--env", "LAZYD_START_TIMEOUT=500ms")
    report = json.loads(done.stdout)
    checks = {c["server"]: c for c in report["checks"]}
    assert checks["fixture"]["ok"], checks
    assert not checks["hangs"]["ok"] and "within start_timeout (500ms)" in checks["hangs"]["message"], checks
    assert done.returncode == 1  # one check failed
    assert lazyctl(user_env, "status").returncode == 0
