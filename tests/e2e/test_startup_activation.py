"""Socket activation with the socket outside lazyd's runtime dir.

`systemd-socket-activate -l /some/dir/lazyd.sock lazyd` (or a socket unit with such a
`ListenStream=`) hands the daemon a socket it did not choose, and the daemon is not told its path:
only the clients are (`LAZYD_SOCKET`). The daemon still needs its private runtime dir for the
single-instance lock and the start-up record; it must make it, not assume someone did. Testing
policy: the real `systemd-socket-activate`, a real shim and the official SDK as the client.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.conftest import FIXTURE_SERVER, UserEnv, shim_session, wait_until
from tests.e2e.systemd_support import STEP_TIMEOUT_S, lazyctl, require_tool, tool_text

pytestmark = pytest.mark.e2e


async def test_an_activated_socket_outside_the_runtime_dir_serves_a_session_and_the_runtime_dir_is_made_private(
    user_env: UserEnv,
) -> None:
    activate = require_tool("systemd-socket-activate")
    elsewhere = user_env.root / "some" / "dir"
    elsewhere.mkdir(parents=True)
    sock_path = str(elsewhere / "lazyd.sock")
    runtime_dir = Path(user_env.env["XDG_RUNTIME_DIR"]) / "lazyd"
    assert not runtime_dir.exists()
    # The daemon's environment has no LAZYD_SOCKET: systemd-socket-activate passes on only the
    # variables named with --setenv, and the daemon learns its socket from fd 3 alone.
    daemon_env = dict(user_env.env)
    command = [activate, "--listen", sock_path, *(f"--setenv={k}" for k in daemon_env),
               sys.executable, "-m", "lazyd.daemon"]
    log = open(user_env.root / "activate.log", "wb")
    proc = subprocess.Popen(command, env=daemon_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)
    try:
        wait_until(lambda: os.path.exists(sock_path) or proc.poll() is not None, STEP_TIMEOUT_S, "the socket")
        assert proc.poll() is None, (user_env.root / "activate.log").read_text()
        with trio.fail_after(STEP_TIMEOUT_S):
            async with shim_session(user_env, [sys.executable, str(FIXTURE_SERVER)],
                                    env={"LAZYD_SOCKET": sock_path}) as session:
                assert await tool_text(session, "echo", {"text": "elsewhere"}) == "elsewhere"
        assert proc.poll() is None, (user_env.root / "activate.log").read_text()
        info = os.lstat(runtime_dir)
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
        assert (runtime_dir / "lazyd.lock").read_text().strip() == str(proc.pid)
        assert f"listening on {sock_path} (socket activation)" in (user_env.root / "activate.log").read_text()
        stopped = lazyctl({**user_env.env, "LAZYD_SOCKET": sock_path}, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(timeout=STEP_TIMEOUT_S) == 0
        assert os.path.exists(sock_path)  # the activated socket is systemd's to remove
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=STEP_TIMEOUT_S)
        log.close()
