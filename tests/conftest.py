"""Shared fixtures: an isolated user environment, a real daemon, real shims, real servers.

Every test that runs processes gets its own HOME, XDG dirs and a short runtime dir (sun_path is
limited to 108 bytes, and pytest's tmp_path can be longer), plus a marker variable that every
process it starts inherits, so leftovers can be found through /proc/*/environ.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from lazyd.host import procfs

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "servers"
FIXTURE_SERVER = SERVERS / "fixture_server.py"
EVERYTHING_JS = SERVERS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
MARKER_VAR = "LZTEST_MARKER_ID"  # not LAZYD_*: those are shim options and never reach servers
DAEMON_START_WAIT_S = 10.0
STATUS_TIMEOUT_S = 60.0  # bound on one `lazyctl status`; reached only when something is broken


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the parts of the suite by file, so `pytest -m fault` or `-m security` runs one part."""
    for item in items:
        name = item.path.name
        if item.path.parent.name == "e2e":
            item.add_marker(pytest.mark.e2e)
        if name.startswith("test_faults_") or name == "test_load.py":
            item.add_marker(pytest.mark.fault)
        if name.startswith(("test_security_", "test_fuzz_")):
            item.add_marker(pytest.mark.security)


def shim_command() -> str:
    found = shutil.which("lazyd-shim", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert found, "lazyd-shim is not installed: run the README's test command (pip install -e '.[test]')"
    return found


def time_server_command() -> list[str]:
    exe = shutil.which("mcp-server-time", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert exe, "mcp-server-time is not installed: run the README's test command"
    return [exe, "--local-timezone", "UTC"]


def everything_command() -> list[str]:
    assert EVERYTHING_JS.exists(), "server-everything is missing: run `npm ci --prefix tests/servers`"
    return [shutil.which("node") or "node", str(EVERYTHING_JS), "stdio"]


def processes_with_marker(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose environment carries this test's marker: in
    MARKER_VAR, or in the test's directories (its HOME and XDG dirs are named after it), which
    is all a daemon keeps of a shim's environment (lazyd/host/daemonenv.py)."""
    needle = marker.encode()
    found = []
    for pid in procfs.pids():
        environ, stat = procfs.read_environ(pid), procfs.read_stat(pid)
        if environ is not None and stat is not None and stat.state != "Z" and any(needle in item for item in environ):
            found.append(pid)
    return found


def wait_until(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class UserEnv:
    """An isolated user: environment for shims/daemon, and where lazyd keeps its files."""

    env: dict[str, str]
    root: Path
    marker: str

    @property
    def socket(self) -> Path:
        return Path(self.env["XDG_RUNTIME_DIR"]) / "lazyd" / "lazyd.sock"

    @property
    def cache_dir(self) -> Path:
        return Path(self.env["XDG_CACHE_HOME"]) / "lazyd"

    @property
    def state_dir(self) -> Path:
        return Path(self.env["XDG_STATE_HOME"]) / "lazyd"

    @property
    def config_file(self) -> Path:
        return Path(self.env["XDG_CONFIG_HOME"]) / "lazyd" / "config.toml"

    def daemon_pids(self) -> list[int]:
        return [pid for pid in processes_with_marker(self.marker) if cmdline(pid).find("lazyd.daemon") >= 0]

    def server_pids(self, needle: str) -> list[int]:
        """Server processes whose command line holds `needle` (shims carry it too: excluded)."""
        return [pid for pid in processes_with_marker(self.marker)
                if needle in (cmd := cmdline(pid)) and "lazyd-shim" not in cmd and "lazyd.daemon" not in cmd]

    def lifecycle_states(self, needle: str = "") -> dict[str, str]:
        """The lifecycle state of every server whose command line holds `needle`, by name, as
        `lazyctl status --json` reports it."""
        done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "status", "--json"], env=self.env,
                              capture_output=True, text=True, timeout=STATUS_TIMEOUT_S)
        assert done.returncode == 0, done.stderr
        return {str(row["name"]): str(row["state"]) for row in json.loads(done.stdout)["servers"]
                if needle in " ".join(row["command"])}

    def assert_nothing_started(self, needle: str) -> None:
        """No server whose command holds `needle` was asked to start: each is `sleeping` (and
        there is one), and no process holds `needle`.

        The pids alone are not enough right after a cached answer: a start decided by that very
        request leaves no process until the fork, moments later. The lifecycle is `starting`
        from the moment the start is decided, so its state is what says "nothing was started"."""
        states = self.lifecycle_states(needle)
        assert states and set(states.values()) == {"sleeping"}, states
        assert self.server_pids(needle) == []


def cmdline(pid: int) -> str:
    """A process's command line with spaces for NULs; "" once it is gone."""
    words = procfs.read_cmdline(pid)
    return b" ".join(words).decode(errors="replace") + " " if words else ""


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # Keeps each phase's report on the test, so fixtures can tell a failed test at teardown.
    report = yield
    setattr(item, f"lazyd_report_{report.when}", report)
    return report


LOG_TAIL_LINES = 40


def _print_log_tails(root: Path) -> None:
    """Print the end of the daemon's and shims' stderr: a CI failure report then shows them."""
    for name in ("daemon.stderr", "shim.stderr"):
        path = root / name
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            print(f"--- last {len(lines)} lines of {name} ---", *lines, sep="\n")


@pytest.fixture
def user_env(request: pytest.FixtureRequest) -> Iterator[UserEnv]:
    marker = uuid.uuid4().hex[:12]
    root = Path(tempfile.mkdtemp(prefix=f"lzd{marker}", dir="/tmp"))  # the marker is in HOME too
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    env = {
        "HOME": str(root / "home"),
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "LANG": "C.UTF-8",
        MARKER_VAR: marker,
    }
    (root / "home").mkdir()
    user = UserEnv(env, root, marker)
    try:
        yield user
    finally:
        call_report = getattr(request.node, "lazyd_report_call", None)
        if call_report is not None and call_report.failed:
            _print_log_tails(root)
        # Stop daemons first (they stop their servers by the ladder), then anything left.
        for pid in user.daemon_pids():
            _signal(pid, signal.SIGTERM)
        try:
            wait_until(lambda: not user.daemon_pids(), 15, "the daemon to exit")
        except AssertionError:
            pass
        for pid in processes_with_marker(marker):
            _signal(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


NOTIFY_RECV_TIMEOUT_S = 20.0  # bound on waiting for one notify datagram; reached only when broken


@pytest.fixture
def notify_socket(user_env: UserEnv) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket playing systemd's NOTIFY_SOCKET, and its path."""
    path = str(user_env.root / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(NOTIFY_RECV_TIMEOUT_S)
    yield sock, path
    sock.close()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    user: UserEnv

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=20)


def start_daemon(user: UserEnv, *extra: str, env: dict[str, str] | None = None) -> Daemon:
    """A daemon of `user`, accepting; `env` adds to the user's environment (this daemon's only)."""
    log = open(user.root / "daemon.stderr", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "lazyd.daemon", *extra], env={**user.env, **(env or {})},
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    # Accepting, not only bound: the socket file exists a moment before listen(), and a connect
    # in between is refused (seen once on a loaded machine).
    wait_until(lambda: accepts(user.socket) or proc.poll() is not None, DAEMON_START_WAIT_S, "the daemon socket")
    assert proc.poll() is None, (user.root / "daemon.stderr").read_text()
    return Daemon(proc, user)


def accepts(path: Path) -> bool:
    """Whether a daemon listens on `path`; the probe closes at once (the daemon drops it quietly)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


@pytest.fixture
def daemon(user_env: UserEnv) -> Iterator[Daemon]:
    d = start_daemon(user_env)
    yield d
    if d.proc.poll() is None:
        d.stop()


@asynccontextmanager
async def shim_session(user: UserEnv, server_argv: list[str], *, shim_args: tuple[str, ...] = (),
                       env: dict[str, str] | None = None, **client_kwargs: Any) -> AsyncIterator[ClientSession]:
    """An initialized official-SDK ClientSession talking to `lazyd-shim [shim_args] -- server_argv`."""
    params = StdioServerParameters(command=shim_command(), args=[*shim_args, "--", *server_argv],
                                   env={**user.env, **(env or {})})
    errlog = open(user.root / "shim.stderr", "a")
    try:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **client_kwargs) as session:
                await session.initialize()
                yield session
    finally:
        errlog.close()
