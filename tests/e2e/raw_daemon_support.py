"""A daemon launched on its own and raw connections to it (`Conn`), for the end-to-end security,
flood and scale tests that speak the wire directly.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from lazyd.protocol import wire
from lazyd.errors import WireError
from lazyd.protocol.frames import Ctl, Hello
from tests.conftest import REPO, UserEnv, wait_until


STEP_S = 20.0  # bound on any one step; reached only when something is broken


def hello(role: str = "ctl", **fields: Any) -> Hello:
    given: dict[str, Any] = {"pid": os.getpid(), "argv": [], "cwd": str(REPO), "env": {}, "opts": {},
                             "server": None, "resume": []}
    given.update(fields)
    return Hello(role, **given)


class Conn:
    """A blocking wire connection to the daemon, frame by frame."""

    def __init__(self, path: str | Path, timeout_s: float = STEP_S) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(os.fsencode(path))
        self.reader = wire.BlockingFrameReader(self.sock)

    def read(self) -> dict[str, Any]:
        """The next frame as its map (`t` and fields), for assertions that read like the protocol table."""
        frame = self.reader.read()
        assert frame is not None, "the daemon closed the connection"
        return frame.to_map()

    def open_ctl(self) -> dict[str, Any]:
        self.sock.sendall(wire.encode(hello("ctl")))
        welcome = self.read()
        assert welcome["t"] == "welcome", welcome
        return welcome

    def ctl(self, op: str, **args: Any) -> dict[str, Any]:
        self.sock.sendall(wire.encode(Ctl(op, args)))
        reply = self.read()
        assert reply["t"] == "reply", reply
        return reply

    def close(self) -> None:
        self.sock.close()


def ping(path: str | Path) -> int:
    """The daemon pid, through a fresh control connection (hello, welcome, ping, reply)."""
    conn = Conn(path)
    try:
        conn.open_ctl()
        reply = conn.ctl("ping")
        assert reply["ok"], reply
        pid: int = reply["data"]["pid"]
        return pid
    finally:
        conn.close()


def daemon_log(user: UserEnv) -> str:
    return (user.root / "daemon.stderr").read_text(errors="replace")


def wait_for_log(user: UserEnv, text: str, bound_s: float = STEP_S) -> None:
    wait_until(lambda: text in daemon_log(user), bound_s, f"{text!r} in the daemon log")


def launch_daemon(user: UserEnv, *, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (),
                  pass_fds: tuple[int, ...] = (), socket_path: str | Path | None = None) -> subprocess.Popen[bytes]:
    """Start `python -m lazyd.daemon` (behind `prefix`, e.g. prlimit) and wait until it answers a ping."""
    log = open(user.root / "daemon.stderr", "ab")
    proc = subprocess.Popen([*prefix, sys.executable, "-m", "lazyd.daemon"], env={**user.env, **(env or {})},
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            pass_fds=pass_fds)
    log.close()
    path = socket_path or user.socket

    def answers() -> bool:
        assert proc.poll() is None, daemon_log(user)
        try:
            return ping(path) == proc.pid
        except (OSError, AssertionError, WireError):
            return False

    wait_until(answers, STEP_S, "the daemon to answer a ping")
    return proc
