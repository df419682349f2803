"""Helpers for the fault and load tests (tests/e2e/test_faults_*.py, test_load.py); no tests here.

A `RawShim` is a real `lazyd-shim` process driven the way a client drives it: JSON lines on its
stdin, every byte of its stdout read and parsed, so a test sees exactly what a client would see
(an extra or a missing line included), which an SDK session would hide. Everything else here
reads the kernel: process liveness, groups and memory from /proc, with bounded polling.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lazyd.host import procfs
from lazyd.handoff.region import read_region, unmap
from shim import slots
from tests.conftest import FIXTURE_SERVER, UserEnv, cmdline, shim_command

FIXTURE = [sys.executable, str(FIXTURE_SERVER)]
DEADLINE_S = 20.0
"""Bound on any one awaited event: far above what a loaded 2-core CI machine needs."""

SERVER_MARKER_VAR = "FIXTURE_MARKER"
"""Set in a shim's environment only, so it reaches that registration's server and grandchildren
(the fixture server never reads it), and not the daemon when the test started the daemon itself."""

INIT_PARAMS: dict[str, Any] = {"protocolVersion": "2025-11-25", "capabilities": {},
                               "clientInfo": {"name": "raw", "version": "1"}}
T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout_s: float = DEADLINE_S) -> T:
    """Poll ``condition`` (files, /proc) until it returns something truthy; fail after timeout_s."""
    give_up = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    stat = procfs.read_stat(pid)
    return stat is not None and stat.state != "Z"


def environ_has(pid: int, assignment: bytes) -> bool:
    return assignment in (procfs.read_environ(pid) or [])


def server_side_processes(marker: str) -> list[int]:
    """Live processes carrying FIXTURE_MARKER=marker that are neither shims nor daemons: a server,
    its grandchildren, and anything else they left behind. (A daemon a shim autostarted inherits
    the shim's environment, marker included.)"""
    needle = f"{SERVER_MARKER_VAR}={marker}".encode()
    found = []
    for pid in procfs.pids():
        if alive(pid) and environ_has(pid, needle):
            command = cmdline(pid)
            if not any(word in command for word in ("lazyd-shim", "lazyd_shim", "lazyd.daemon")):
                found.append(pid)
    return sorted(found)


def session_members(sid: int) -> list[int]:
    """Live processes whose session id is ``sid`` (a server's session is its leader's pid)."""
    return sorted(pid for pid, stat in procfs.stats().items() if stat.session == sid and stat.state != "Z")


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def reset_peak_rss(pid: int) -> None:
    # proc(5): writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS.
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


SEAMS_PATH = Path(__file__).parent / "seams"  # sitecustomize.py: a daemon or shim that misbehaves on cue


def seam_env(**seams: str) -> dict[str, str]:
    """The environment that gives a process the seams `seams` (LAZYD_TEST_* names without the
    prefix, tests/e2e/seams/sitecustomize.py): the product reads none of them itself."""
    return {"PYTHONPATH": str(SEAMS_PATH), **{f"LAZYD_TEST_{name.upper()}": value for name, value in seams.items()}}


def kill_seam(spec: str) -> dict[str, str]:
    """The environment of a daemon that SIGKILLs itself at `spec` (tests/e2e/seams/sitecustomize.py)."""
    return seam_env(handoff_kill=spec)


def region_in_flight(pid: int) -> tuple[bool, list[bytes]] | None:
    """What process `pid`'s hand-off region says (whether an answer is being written, and the JSON
    text of each id in flight); None where it holds no region."""
    for name in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{name}").startswith("/memfd:lazyd-handoff"):
            fd = os.open(f"/proc/{pid}/fd/{name}", os.O_RDWR)  # mapped shared, as the shim maps it
            try:
                region = read_region(fd)
                assert region is not None
                seen = region.torn, [text for _, text in region.entries()]
                unmap(region.buf)
                return seen
            finally:
                os.close(fd)
    return None


def region_settled(pid: int, fence: int | str) -> bool:
    """Whether shim `pid`'s region says no answer is being written and the request `fence`, answered,
    is no longer in flight."""
    seen = region_in_flight(pid)
    if seen is None:
        raise AssertionError(f"shim {pid} holds no region")
    torn, ids = seen
    return not torn and json.dumps(fence).encode() not in ids


def slot_free(slot: Path) -> bool:
    """Whether no process holds the resume slot whose lock file is `slot` (shim/slots.py)."""
    fd = os.open(slot, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def daemon_log(user: UserEnv) -> str:
    """The daemon's own log file (autostarted daemons write nowhere else)."""
    path = user.state_dir / "lazyd.log"
    return path.read_text(errors="replace") if path.exists() else ""


def lazyctl(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=user.env,
                          capture_output=True, text=True, timeout=DEADLINE_S)


def server_status(user: UserEnv) -> list[dict[str, Any]]:
    done = lazyctl(user, "status", "--json")
    assert done.returncode == 0, done.stderr
    servers: list[dict[str, Any]] = json.loads(done.stdout)["servers"]
    return servers


def tool_call(request_id: int | str, name: str, arguments: dict[str, Any] | None = None,
              meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def cancel(request_id: int | str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}


def text_of(message: dict[str, Any]) -> str:
    """The text of a tools/call result (the fixture answers one text block)."""
    assert "result" in message, message
    return str(message["result"]["content"][0]["text"])


def call(shim: RawShim, request_id: int, name: str) -> dict[str, Any]:
    """One tools/call of the fixture's tool `name`, and its answer (checked to be that call's)."""
    shim.send(tool_call(request_id, name))
    answer = shim.read()
    assert answer["id"] == request_id, answer
    return answer


class RawShim:
    """A lazyd-shim process with line-level access to its stdio."""

    def __init__(self, user: UserEnv, server_argv: list[str] | None = None, *, shim_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, new_session: bool = False, read_stdout: bool = True,
                 socketpairs: bool = False) -> None:
        argv = [shim_command(), *shim_args, "--", *(server_argv or FIXTURE)]
        self.stderr_path = user.root / f"shim-{time.monotonic_ns()}.stderr"
        if socketpairs:
            # As Node clients (libuv) spawn a stdio server: a Unix socketpair each for stdin and stdout.
            in_parent, in_child = socket.socketpair()
            out_parent, out_child = socket.socketpair()
            stdin: int = in_child.fileno()
            stdout: int = out_child.fileno() if read_stdout else subprocess.DEVNULL
        else:
            stdin, stdout = subprocess.PIPE, subprocess.PIPE if read_stdout else subprocess.DEVNULL
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, env={**user.env, **(env or {})}, stdin=stdin, stdout=stdout,
                                         stderr=err, start_new_session=new_session)
        if socketpairs:
            in_child.close()
            out_child.close()
            self.proc.stdin = os.fdopen(in_parent.detach(), "wb")
            self.proc.stdout = os.fdopen(out_parent.detach(), "rb") if read_stdout else None
            if not read_stdout:
                out_parent.close()
        self.pid = self.proc.pid
        self._buffer = b""

    # -- writing ---------------------------------------------------------------------------

    def send(self, *messages: dict[str, Any]) -> None:
        self.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in messages))

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    # -- reading ---------------------------------------------------------------------------

    def read(self, timeout_s: float = DEADLINE_S) -> dict[str, Any]:
        """The next JSON line from the shim's stdout; fails after timeout_s or at EOF."""
        line = self.read_line(timeout_s)
        message = json.loads(line)
        assert isinstance(message, dict), line
        return message

    def read_line(self, timeout_s: float = DEADLINE_S) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        give_up = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = give_up - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise AssertionError(f"no line from shim {self.pid} within {timeout_s} s; stderr: {self.stderr()!r}")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise AssertionError(f"shim {self.pid} closed stdout; stderr: {self.stderr()!r}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def fence(self, request_id: int | str) -> None:
        """Send a ping and read up to its answer, failing on any other line in between.

        The daemon answers a ping from the relay in order with everything it already sent this
        session, so whatever was due before the ping (a duplicate answer, say) shows up first."""
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
        line = self.read()
        assert line == {"jsonrpc": "2.0", "id": request_id, "result": {}}, f"unexpected line before the fence: {line}"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    # -- session -----------------------------------------------------------------------------

    def initialize(self, request_id: int | str = 0) -> dict[str, Any]:
        """Do the client's half of the handshake; returns the initialize result."""
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": INIT_PARAMS})
        answer = self.read()
        assert answer.get("id") == request_id and "result" in answer, answer
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result: dict[str, Any] = answer["result"]
        return result

    def close_stdin_and_wait(self, timeout_s: float = DEADLINE_S) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout_s)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(DEADLINE_S)

    def close(self) -> None:
        """Kill the shim if it still runs and release its pipes (cleanup, never a test step)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def write_named_config(user: UserEnv, servers: dict[str, dict[str, Any]]) -> Path:
    """A config.toml naming ``servers`` (name -> {command, args, env, ...policy}), mode 0600."""
    lines: list[str] = []
    for name, fields in servers.items():
        lines.append(f"[servers.{name}]")
        for key, value in fields.items():
            if key == "env":
                continue
            lines.append(f"{key} = {json.dumps(value)}")
        if fields.get("env"):
            lines.append(f"[servers.{name}.env]")
            for key, value in fields["env"].items():
                lines.append(f"{key} = {json.dumps(value)}")
    path = user.config_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


@contextmanager
def every_slot_held(user: UserEnv) -> Iterator[None]:
    """Hold every resume slot beside the daemon's socket: the waiters queue in flock(1)."""
    if not slots.flock_path():
        print("skipping: no flock(1) here")
        pytest.skip("no flock(1)")
    held = []
    for n in range(slots.count()):
        fd = os.open(user.socket.parent / f"resume.{n}", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
