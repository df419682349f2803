"""Helpers for end-to-end tests of a daemon that upgrades or is restarted under a manager:
lazyctl, status, a shim's log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.conftest import UserEnv


CTL_TIMEOUT_S = 90.0


def lazyctl(user: UserEnv, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *words], env=user.env, capture_output=True,
                          text=True, timeout=CTL_TIMEOUT_S)


def status(user: UserEnv) -> dict[str, Any]:
    done = lazyctl(user, "status", "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def shim_log(user: UserEnv) -> str:
    path = user.root / "shim.log"
    return path.read_text(errors="replace") if path.exists() else ""
