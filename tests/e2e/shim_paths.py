"""The two ways a shim serves its client, for fault tests that must hold on both.

On the **frame** path the shim relays every line between its stdio and the daemon; on the
**hand-off** path it passes its stdin and stdout to the daemon after the hello and waits
(docs/protocol.md, "Hand-off"). A test taking the `shim_path` fixture runs once per path, and once
more on the hand-off path with the client's stdio as Unix socketpairs (how Node clients spawn
servers) rather than pipes; `started` makes a RawShim on that path and `check` proves the path
was taken, so a hand-off case cannot pass by quietly falling back to frames.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import UserEnv
from tests.e2e.faults_support import RawShim, wait_for


@dataclass(frozen=True)
class ShimPath:
    name: str
    handoff: bool
    socketpairs: bool

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**(extra or {}), "LAZYD_HANDOFF": "1" if self.handoff else "0"}

    def started(self, user: UserEnv, *, env: dict[str, str] | None = None, **kwargs: Any) -> RawShim:
        return RawShim(user, env=self.env(env), socketpairs=self.socketpairs, **kwargs)

    def check(self, shim: RawShim) -> None:
        """Fail unless `shim`, past its handshake, serves its client the way this path says."""
        if self.handoff:
            # Handed off, the shim's process is the waiting program it exec'd (shim/handoff.py).
            wait_for(lambda: _waits_in_a_shell(shim.pid), f"shim {shim.pid} to hand off and wait in a shell")
        else:
            assert not _waits_in_a_shell(shim.pid), f"shim {shim.pid} handed off on the frame path"


def _waits_in_a_shell(pid: int) -> bool:
    return waits_handed_off(pid)


def waits_handed_off(pid: int) -> bool:
    """Whether process `pid` is a handed-off shim waiting: the installed waiting program
    (shim/waiting.sh) run by a shell, its command line saying so."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe in ("dash", "sh", "bash") and argv[0].startswith(b"lazyd-shim: waiting (") \
        and argv[1].endswith(b"/waiting.sh")


PATHS = (ShimPath("frames", False, False), ShimPath("hand-off", True, False),
         ShimPath("hand-off over socketpairs", True, True))
HANDOFF_PATHS = PATHS[1:]


@pytest.fixture(params=PATHS, ids=[p.name for p in PATHS])
def shim_path(request: pytest.FixtureRequest) -> ShimPath:
    path: ShimPath = request.param
    return path
