"""After a kill -9 of the daemon (no systemd), every hand-off session's waiter (shim/waiting.sh)
takes a resume slot and execs the installed shim's recovery (shim/recover.py), which answers what
was in flight from the region, hands the session to the next daemon and waits in the same waiting
program again.

Testing policy: real shims on the hand-off path (pipes and socketpairs), their real waiters and
flock(1), a real daemon killed with SIGKILL, a real next daemon, the fixture server. The test
holds every resume slot from before the kill until the next daemon accepts, so that every
recovery finds it up and none is taken back without a slot.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURE_SERVER, UserEnv, start_daemon
from tests.e2e.faults_support import every_slot_held, slot_free, DEADLINE_S, RawShim, daemon_log, region_settled, tool_call, wait_for
from tests.e2e.shim_paths import HANDOFF_PATHS, ShimPath

FIXTURE_ARGV = [sys.executable, str(FIXTURE_SERVER)]

pytestmark = pytest.mark.e2e

SESSIONS = 10  # per path: 20 sessions in all
RECOVERED = "taking it back (holding resume slot fd 8)"  # what the shim's recovery logs (shim/recover.py)
LOST = -32603



def _lines_until(shim: RawShim, request_id: int) -> list[dict[str, Any]]:
    """Every line the client reads up to the answer to `request_id` (each must parse as JSON)."""
    lines = [shim.read()]
    while lines[-1].get("id") != request_id:
        lines.append(shim.read())
    return lines


@pytest.mark.parametrize("path", HANDOFF_PATHS, ids=[p.name for p in HANDOFF_PATHS])
def test_after_a_kill_9_every_waiter_takes_its_session_back_and_each_call_in_flight_is_answered_once(
        user_env: UserEnv, path: ShimPath, tmp_path: Path) -> None:
    log = tmp_path / "shims.log"
    old = start_daemon(user_env)
    shims = [path.started(user_env, env={"LAZYD_LOG_FILE": str(log)}) for _ in range(SESSIONS)]
    new = None
    try:
        for n, shim in enumerate(shims):
            shim.initialize()
            path.check(shim)
            # A call in flight when the daemon dies (an int id for half, a string id for the rest),
            # read by the daemon for sure: its ping behind it is answered.
            shim.send(tool_call(n if n % 2 else f"s{n}", "sleep", {"seconds": 60}))
            shim.fence(f"fence {n}")
            # A kill -9 between an answer's write and its record may answer it twice or end the
            # stream with an empty line (docs/reliability.md): not what this test is about, so
            # the kill waits until the daemon has recorded the fence's answer in the region.
            wait_for(lambda: region_settled(shim.pid, f"fence {n}"), f"session {n}'s region to record its fence")
        with every_slot_held(user_env):
            os.kill(old.proc.pid, signal.SIGKILL)
            assert old.proc.wait(DEADLINE_S) == -signal.SIGKILL
            new = start_daemon(user_env)
        for n, shim in enumerate(shims):
            shim.send(tool_call(1000, "echo", {"text": f"again {n}"}))
        for n, shim in enumerate(shims):
            lines = _lines_until(shim, 1000)
            lost = [line for line in lines if line.get("id") == (n if n % 2 else f"s{n}")]
            assert len(lost) == 1 and lost[0]["error"]["code"] == LOST, lines
            assert lines[-1]["result"]["content"][0]["text"] == f"again {n}", lines
            assert len(lines) == 2, lines  # nothing else: no line cut, no empty line, no duplicate
            shim.fence("after")
            path.check(shim)  # waiting in the waiting program again
        said = log.read_text()
        assert said.count(RECOVERED) == SESSIONS, said
        assert said.count("answered 1 in-flight request(s) with an error") == SESSIONS, said
        assert "reclaimed from shim pid" not in daemon_log(user_env)
        (daemon,) = user_env.daemon_pids()
        assert daemon == new.proc.pid
        made = sorted(user_env.socket.parent.glob("resume.*"))
        wait_for(lambda: all(slot_free(slot) for slot in made), "every slot to be free again", 10.0)
    finally:
        for shim in shims:
            shim.close()
        if new is not None and new.proc.poll() is None:
            new.stop()




def test_a_reclaiming_hello_on_a_connection_is_refused_and_what_came_with_it_is_closed(user_env: UserEnv) -> None:
    # Only a session systemd kept is reclaimed (lazyd/daemon/handoff/stored_sessions.py); a shim takes its own
    # back. A peer offering one anyway gets a refusal, and the daemon keeps none of its descriptors.
    import socket

    from lazyd.protocol import wire
    from lazyd.handoff.region import LAYOUT, create_region
    from tests.e2e.raw_daemon_support import Conn, hello

    daemon = start_daemon(user_env)
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    for end in (stdin_r, stdout_w):
        os.set_blocking(end, False)  # as a shim passes them: descriptions the daemon can serve
    region = create_region()
    conn = Conn(user_env.socket)
    try:
        data = wire.encode(hello("shim", argv=FIXTURE_ARGV, reclaim=True, layout=LAYOUT))
        conn.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                    b"".join(fd.to_bytes(4, "little") for fd in (stdin_r, stdout_w, region)))])
        ours = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in (stdin_r, stdout_r)}
        refused = conn.read()
        assert refused["t"] == "refused" and refused["code"] == "reclaim", refused
        assert "only a session kept by systemd" in refused["message"], refused
        os.close(stdin_r)
        os.close(stdout_w)
        held = [os.readlink(f"/proc/{daemon.proc.pid}/fd/{n}") for n in os.listdir(f"/proc/{daemon.proc.pid}/fd")]
        assert not [link for link in held if link in ours or link.startswith("/memfd:lazyd-handoff")], held
        assert os.read(stdout_r, 1) == b"", "no other holder of the client's stdout"
    finally:
        conn.close()
        for fd in (stdin_w, stdout_r, region):
            os.close(fd)
        daemon.stop()
