"""The daemon's command line: bad usage is one readable line and exit status 2."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import UserEnv


def _lazyd(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.daemon", *args], env=user.env, capture_output=True,
                          text=True, timeout=30)


def test_an_unknown_flag_exits_2_with_one_line_and_starts_nothing(user_env: UserEnv) -> None:
    result = _lazyd(user_env, "--bogus")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["lazyd: unrecognized arguments: --bogus (see lazyd --help)"]
    assert not user_env.socket.exists()


def test_help_describes_the_daemon_and_exits_0(user_env: UserEnv) -> None:
    result = _lazyd(user_env, "--help")
    assert result.returncode == 0
    assert "Per-user daemon" in result.stdout and "--socket" in result.stdout
