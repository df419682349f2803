"""Running a real client CLI offline: inside a private network namespace with only loopback
(tests/e2e/offline_runner.py), so that it can make no outside connection; lazyd's Unix sockets are
files and reach across. Needs `unshare -n` (root, or unprivileged user namespaces with `-r`)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).with_name("offline_runner.py")
MODEL_URL = "http://127.0.0.1:8711/v1"  # offline_runner's model endpoint, inside the namespace
REFUSING_URL = "http://127.0.0.1:9/v1"  # nothing listens there: a connection is refused at once
PROBE_TIMEOUT_S = 30.0


@functools.cache
def unshare_prefix() -> list[str] | None:
    """`unshare -n` (as root) or `unshare -rn` (a user namespace), whichever works here."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        probe = subprocess.run([*prefix, "ip", "link", "set", "lo", "up"], capture_output=True, timeout=PROBE_TIMEOUT_S)
        if probe.returncode == 0:
            return prefix
    return None


def offline(argv: list[str], model_log: Path | None = None) -> list[str]:
    """`argv` run in a new network namespace; with `model_log`, beside a refusing model endpoint
    at MODEL_URL that logs each request there."""
    prefix = unshare_prefix()
    if prefix is None:
        pytest.skip("no private network namespace here (unshare -n needs root or user namespaces)")
    options = ["--model-log", str(model_log)] if model_log is not None else []
    return [*prefix, sys.executable, str(RUNNER), *options, "--", *argv]
