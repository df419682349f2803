"""An autostarted daemon belongs to nobody's process tree: a client that kills what it started takes
neither the daemon nor its servers.

Clients end their servers by closing stdin, by killing the server's process group, or (opencode)
by killing every process descended from the server, found by parent pid. Here a real shim is
started as such clients start it (a process group of its own, one inheritable descriptor of the
client's), autostarts the real daemon, and is then killed the way opencode kills: SIGTERM to the
shim's group and to every descendant of the shim. The daemon, its pid and its server must be
there afterwards, and the next session must reach both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import IO, Any

import pytest

from lazyd.errors import Unavailable
from lazyd.host import procfs
from shim.dial import launch, outcome, stderr_until_ready  # the installed lazyd_shim is this package
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_command, wait_until

pytestmark = pytest.mark.e2e

SERVER = [sys.executable, str(FIXTURE_SERVER)]
STEP_TIMEOUT_S = 30.0  # bound on one awaited event; reached only when broken
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "killer", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PID_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}


class Client:
    """A client that starts the shim in a process group of its own (as Node's `detached: true`
    does), with one inheritable descriptor of its own, and talks to it line by line."""

    def __init__(self, user: UserEnv) -> None:
        self.leak_r, self.leak_w = os.pipe()
        os.set_inheritable(self.leak_r, True)
        errlog = open(user.root / "shim.stderr", "ab")
        self.proc = subprocess.Popen([shim_command(), *SERVER], env={**user.env, "LAZYD_SHARE": "true"},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, cwd=user.root,
                                     start_new_session=True, pass_fds=(self.leak_r,))
        errlog.close()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(message).encode() + b"\n")
        self.stdin.flush()

    def read(self) -> dict[str, Any]:
        line = self.stdout.readline()
        assert line, "the shim closed stdout"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def server_pid(self) -> int:
        """Handshake, then the `pid` tool: the server process serving this session."""
        self.send(INITIALIZE)
        assert self.read()["id"] == 0
        self.send(INITIALIZED)
        self.send(PID_CALL)
        answer = self.read()
        assert answer["id"] == 1, answer
        return int(answer["result"]["content"][0]["text"])

    def close(self) -> None:
        os.close(self.leak_r)
        os.close(self.leak_w)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=STEP_TIMEOUT_S)


def descendants(root: int) -> list[int]:
    """Every live process descended from `root` by parent pid: what a tree kill finds."""
    children: dict[int, list[int]] = {}
    for pid, stat in procfs.stats().items():
        if stat.state != "Z":
            children.setdefault(stat.ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        stat = procfs.read_stat(pid)
        if stat is None:
            break
        pid = stat.ppid
        chain.append(pid)
    return chain


def kill_tree_like_opencode(root: int) -> None:
    """SIGTERM to the root's process group, then to each of its descendants (opencode 1.18 does
    `kill(-pid)` and `kill(pid)` for every process below the server it started)."""
    tree = descendants(root)
    os.killpg(root, signal.SIGTERM)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def the_daemon(user: UserEnv) -> int:
    wait_until(lambda: len(user.daemon_pids()) == 1, STEP_TIMEOUT_S, "one daemon")
    (pid,) = user.daemon_pids()
    return pid


def fd_targets(pid: int) -> set[str]:
    """What process `pid`'s descriptors point at; one it closes while they are read is left out
    (the daemon opens and closes files of its own at any time)."""
    fd_dir = f"/proc/{pid}/fd"
    targets = set()
    for name in os.listdir(fd_dir):
        try:
            targets.add(os.readlink(os.path.join(fd_dir, name)))
        except FileNotFoundError:
            continue
    return targets


def test_an_autostarted_daemon_is_in_no_session_group_or_ancestry_of_its_shim(user_env: UserEnv) -> None:
    client = Client(user_env)
    try:
        client.server_pid()
        daemon = the_daemon(user_env)
        stat = procfs.read_stat(daemon)
        assert stat is not None
        assert client.proc.pid not in ancestors(daemon)
        assert daemon not in descendants(client.proc.pid)
        # Its own session and group, named by its pid: neither is the shim's.
        assert (stat.session, stat.pgrp) == (daemon, daemon)
        assert stat.session != os.getsid(client.proc.pid) and stat.pgrp != os.getpgid(client.proc.pid)
        assert os.readlink(f"/proc/{daemon}/cwd") == "/"
        assert os.readlink(f"/proc/{daemon}/fd/0") == "/dev/null"
        assert os.readlink(f"/proc/{daemon}/fd/1") == "/dev/null"
        # The client's descriptor reached the shim, never the daemon.
        leaked = f"pipe:[{os.fstat(client.leak_r).st_ino}]"
        assert leaked in fd_targets(client.proc.pid)
        assert leaked not in fd_targets(daemon)
    finally:
        client.close()


def test_killing_the_shims_group_and_process_tree_leaves_the_daemon_and_its_server(user_env: UserEnv) -> None:
    first = Client(user_env)
    try:
        server = first.server_pid()
        daemon = the_daemon(user_env)
        kill_tree_like_opencode(first.proc.pid)
        first.proc.wait(timeout=STEP_TIMEOUT_S)
    finally:
        first.close()
    # The next session reaches the same daemon and the same (shared, lingering) server process:
    # had either died, a new daemon would have been autostarted with a new server.
    second = Client(user_env)
    try:
        assert second.server_pid() == server
        assert user_env.daemon_pids() == [daemon]
    finally:
        second.close()


# ---- the launcher itself (shim/dial.py), with small commands in the daemon's place ----------------


def said(stderr: int) -> tuple[int | None, str, list[str]]:
    """The exit status and reason the launched command's stderr ends with, and its lines before them."""
    try:
        lines = stderr_until_ready(stderr, time.monotonic() + STEP_TIMEOUT_S)
    finally:
        os.close(stderr)
    return (*outcome(lines), lines)


def first_line(stderr: int) -> list[str]:
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(stderr, 1)
        assert chunk, "no first line"
        line += chunk
    return line.decode().split(" ", 3)


def test_a_launched_process_s_exit_status_and_reason_reach_us_on_its_stderr() -> None:
    # Only a parent reads an exit status, and setsid --fork makes the daemon nobody's child of ours
    # (the next test checks its ancestry): its last line says the status.
    script = ("import sys; print('lazyd: bad config', file=sys.stderr); print('exit 2', file=sys.stderr);"
              "sys.exit(2)")
    status, reason, _ = said(launch([sys.executable, "-c", script], dict(os.environ)))
    assert (status, reason) == (2, "bad config")


def test_a_launched_process_runs_in_its_own_session_in_slash_with_no_descriptor_of_ours() -> None:
    leak_r, leak_w = os.pipe()
    os.set_inheritable(leak_r, True)
    script = ("import os, sys, time; print(os.getpid(), os.getcwd(), os.getsid(0), sorted(os.listdir('/proc/self/fd')),"
              " file=sys.stderr, flush=True); time.sleep(30)")
    stderr = launch([sys.executable, "-c", script], dict(os.environ))
    pid = 0
    try:
        pid_text, cwd, sid, fds = first_line(stderr)
        pid = int(pid_text)
        assert (cwd, int(sid)) == ("/", pid)
        assert fds.strip() == "['0', '1', '2', '3']"  # stdio, and listdir's own descriptor
        assert pid not in descendants(os.getpid())
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
        assert said(stderr) == (None, "", []), "a daemon that dies without saying is dead all the same"
        os.close(leak_r)
        os.close(leak_w)


def test_a_command_that_cannot_be_executed_is_reported_with_its_os_error() -> None:
    status, reason, lines = said(launch(["/nonexistent/lazyd-daemon"], dict(os.environ)))
    assert status is None
    assert reason.endswith("/nonexistent/lazyd-daemon: No such file or directory"), lines


def test_a_launched_process_that_holds_its_stderr_past_the_bound_is_reported_as_not_accepting() -> None:
    script = "import os, sys, time; print(os.getpid(), file=sys.stderr, flush=True); time.sleep(30)"
    stderr = launch([sys.executable, "-c", script], dict(os.environ))
    try:
        (pid,) = first_line(stderr)
        with pytest.raises(Unavailable, match="did not accept connections within"):
            stderr_until_ready(stderr, time.monotonic() + 0.2)
        os.kill(int(pid), signal.SIGKILL)
    finally:
        os.close(stderr)
