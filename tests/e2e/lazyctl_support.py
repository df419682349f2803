"""Helpers for end-to-end tests that drive lazyctl: running it, the environment a shim gets.
"""

from __future__ import annotations

import os
import subprocess
import sys

from mcp.client.stdio import get_default_environment

from tests.conftest import UserEnv


STEP_TIMEOUT_S = 30.0  # bound on one lazyctl run or one wait; reached only when something is broken


def lazyctl(user: UserEnv, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env={**user.env, **(env or {})},
                          cwd=os.getcwd(), capture_output=True, text=True, timeout=STEP_TIMEOUT_S)


def shim_env(user: UserEnv, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a shim gets from shim_session (the SDK adds its defaults), so that
    `lazyctl check -- CMD` run with it registers exactly what the session will."""
    return {**get_default_environment(), **user.env, **(extra or {})}
