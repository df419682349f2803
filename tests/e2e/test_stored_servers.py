"""Servers that outlive a crash of the daemon, when a service manager keeps their pipes.

The test plays systemd: it owns the listening socket and the notify socket, keeps every
descriptor the daemon sends with `FDSTORE=1` (and drops those it names with `FDSTOREREMOVE=1`),
and after a `kill -9` of the daemon starts a new one with the socket and the stored descriptors
(`LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`), as systemd's `Restart=on-failure` would.
"""

from __future__ import annotations

import array
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

from tests.conftest import FIXTURE_SERVER, UserEnv, shim_session, wait_until
from tests.e2e.upgrade_support import lazyctl, shim_log, status

pytestmark = pytest.mark.e2e

STEP_S = 30.0
# Puts the listed descriptors at 3, 4, ... in order and execs lazyd with LISTEN_PID set to its own
# pid: what systemd does between fork and exec.
LAUNCH = """
import fcntl, os, sys
fds = [int(x) for x in os.environ.pop("TEST_FDS").split(",")]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 200) for fd in fds]  # out of the way of 3, 4, ...
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i, inheritable=True)
for fd in high:
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.executable, [sys.executable, "-m", "lazyd.daemon"])
"""


class FakeManager:
    """The notify socket and the fd store of a service manager."""

    def __init__(self, user: UserEnv, *, listen: bool = True) -> None:
        self.user = user
        self.notify_path = str(user.root / "notify.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.settimeout(STEP_S)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if listen:  # the socket unit's socket; without it the daemon binds its own
            user.socket.parent.mkdir(mode=0o700, exist_ok=True)
            self.listener.bind(str(user.socket))
            self.listener.listen(64)
        self.store: dict[str, int] = {}

    def start(self) -> subprocess.Popen[bytes]:
        names = ["lazyd.socket", *self.store]
        fds = [self.listener.fileno(), *self.store.values()]
        env = {**self.user.env, "NOTIFY_SOCKET": self.notify_path, "LAZYD_FDSTORE": "1",
               "LISTEN_FDS": str(len(fds)), "LISTEN_FDNAMES": ":".join(names), "TEST_FDS": ",".join(map(str, fds))}
        log = open(self.user.root / "daemon.stderr", "ab")
        return subprocess.Popen([sys.executable, "-c", LAUNCH], env=env, pass_fds=fds, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)

    def drain(self) -> None:
        """Take every notification already sent (the daemon sends before it writes its state)."""
        self.notify.settimeout(0)
        try:
            self.until(lambda: False)
        except BlockingIOError:
            pass
        finally:
            self.notify.settimeout(STEP_S)

    def until(self, done: Any) -> None:
        """Take notifications (keeping stored descriptors) until `done()` holds; `done` may
        depend on files too (the state is written after the last datagram), so it is asked
        again at least every 50 ms."""
        deadline = time.monotonic() + STEP_S
        while not done():
            if self.notify.gettimeout() != 0:
                if time.monotonic() > deadline:
                    raise TimeoutError("the daemon's notifications never got there")
                self.notify.settimeout(0.05)
            try:
                data, ancillary, _, _ = self.notify.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
            except TimeoutError:
                continue
            fds = array.array("i")
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.seen.append(fields)
            name = fields.get("FDNAME", "")
            if fields.get("FDSTORE") == "1" and fds:
                old = self.store.pop(name, None)
                if old is not None:
                    os.close(old)
                self.store[name] = fds[0]
                for extra in fds[1:]:
                    os.close(extra)
            elif fields.get("FDSTOREREMOVE") == "1":
                fd = self.store.pop(name, None)
                if fd is not None:
                    os.close(fd)

    seen: list[dict[str, str]] = []


def test_a_daemon_killed_with_sigkill_and_restarted_with_its_fd_store_takes_its_server_over(user_env: UserEnv) -> None:
    manager = FakeManager(user_env)
    manager.seen = []
    first = manager.start()
    manager.until(lambda: any(f.get("READY") == "1" for f in manager.seen))
    fixture = [sys.executable, str(FIXTURE_SERVER)]
    outcome: dict[str, Any] = {}
    standby = user_env.socket.with_suffix(".standby")

    async def scenario() -> None:
        async with shim_session(user_env, fixture, shim_args=("--log-file", str(user_env.root / "shim.log"))) as client:
            with anyio.fail_after(STEP_S):
                pid = int(getattr((await client.call_tool("pid", {})).content[0], "text", "0"))
            outcome["pid"] = pid

            def stored() -> bool:
                names = {n for n in manager.store if n.endswith((f"-{pid}-in", f"-{pid}-out", f"-{pid}-err"))}
                return len(names) == 3 and "lazyd-secrets" in manager.store and standby.exists() \
                    and f'"pid":{pid},' in standby.read_text()
            await anyio.to_thread.run_sync(lambda: manager.until(stored))
            manager.drain()
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=STEP_S)
            outcome["alive_after_kill"] = os.path.exists(f"/proc/{pid}")
            outcome["second"] = manager.start()
            with anyio.fail_after(STEP_S):
                again = int(getattr((await client.call_tool("pid", {})).content[0], "text", "0"))
            outcome["again"] = again
            outcome["status"] = await anyio.to_thread.run_sync(lambda: status(user_env))

    try:
        anyio.run(scenario)
        second = outcome["second"]
        assert outcome["alive_after_kill"]  # the store holds its stdin open: no EOF, no exit
        assert outcome["again"] == outcome["pid"]  # the same process answers under the new daemon
        row = next(r for r in outcome["status"]["servers"] if r["pid"] == outcome["pid"])
        assert row["state"] == "running"
        assert outcome["status"]["daemon"]["last_upgrade"]["crash"] is True
        assert outcome["status"]["daemon"]["last_upgrade"]["inherited"] is True
        daemon_log = (user_env.state_dir / "lazyd.log").read_text()
        assert "took over 1 servers from the fd store" in daemon_log
        assert "orphan sweep: killed" not in daemon_log
        # The connection itself died with the daemon: the shim reconnected, or the new daemon
        # adopted its session from the store (lazyd/daemon/handoff/stored_sessions.py).
        assert "reconnected" in shim_log(user_env) or "reclaimed from shim pid" in daemon_log
        # The new daemon still stops the server it took over, though it is not its child.
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=STEP_S) == 0
        wait_until(lambda: not os.path.exists(f"/proc/{outcome['pid']}")
                   or open(f"/proc/{outcome['pid']}/stat").read().split(") ")[1][0] == "Z", STEP_S, "the server to stop")
    finally:
        for proc in (first, outcome.get("second")):
            if proc is not None and proc.poll() is None:
                proc.kill()
        for fd in manager.store.values():
            os.close(fd)


def test_without_lazyd_fdstore_set_nothing_is_sent_to_the_store_and_no_standby_state_is_kept(user_env: UserEnv) -> None:
    manager = FakeManager(user_env, listen=False)
    manager.seen = []
    env = user_env.env
    log = open(user_env.root / "daemon.stderr", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "lazyd.daemon"], env={**env, "NOTIFY_SOCKET": manager.notify_path},
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    try:
        manager.until(lambda: any(f.get("READY") == "1" for f in manager.seen))
        woken = lazyctl(user_env, "check", "--", sys.executable, str(FIXTURE_SERVER))
        assert woken.returncode == 0, woken.stderr
        manager.drain()
        assert not any("FDSTORE" in f for f in manager.seen), manager.seen
        assert not user_env.socket.with_suffix(".standby").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STEP_S)
