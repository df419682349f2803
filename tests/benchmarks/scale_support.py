"""Pieces of the scale benchmark (bench_scale.py) and of its small e2e version (test_scale.py): the
installed product in a venv of its own, a daemon under a given soft descriptor limit, many sessions
opened a batch at a time, and what the daemon and the waiting shims hold.

Sessions are opened by real `lazyd-shim` processes from raw stdio clients (`LineClient`), so each
one is what a client's registration gets: a hand-off session whose shim waits in its waiting program.
"""

from __future__ import annotations

import array
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lazyd.protocol import wire
from lazyd.protocol.frames import Hello
from lazyd.handoff.region import LAYOUT, create_region
from tests.benchmarks.common import REPO, LineClient

SOFT_NOFILE = 1024  # what a systemd user service gets (DefaultLimitNOFILE=1024:524288)
ECHO_SERVER = str(REPO / "tests" / "benchmarks" / "echo_server.py")


def installed_venv(where: Path, refresh: bool = False) -> Path:
    """A venv with lazyd installed from this checkout as a user installs it (not editable); with
    `refresh`, this checkout is installed into an existing one again (its dependencies kept)."""
    if not (where / "bin" / "lazyd-shim").exists():
        subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
        subprocess.run([str(where / "bin" / "pip"), "install", "-q", str(REPO)], check=True,
                       stdout=subprocess.DEVNULL)
    elif refresh:
        subprocess.run([str(where / "bin" / "pip"), "install", "-q", "--no-deps", "--force-reinstall", str(REPO)],
                       check=True, stdout=subprocess.DEVNULL)
    return where


def soft_limit(soft: int) -> Any:
    """A preexec_fn that sets the soft RLIMIT_NOFILE of the child (the hard one stays)."""
    def apply() -> None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    return apply


def interpreter(venv: Path) -> str:
    """The version and real path of the interpreter `venv` runs on, which every figure is about
    (the benchmark itself may run on another)."""
    return subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import os, sys; print(sys.version.split()[0], os.path.realpath(sys.executable))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def user_env(root: Path, venv: Path) -> dict[str, str]:
    for name in ("run", "home"):
        (root / name).mkdir(mode=0o700, exist_ok=True)
    return {
        "HOME": str(root / "home"),
        "PATH": str(venv / "bin") + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_RUNTIME_DIR": str(root / "run"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "LANG": "C.UTF-8",
    }


def row(label: str, direct: str, lazyd: str, note: str = "") -> None:
    """One line of bench_scale's table: a label and the figures in fixed columns."""
    print(f"{label:60} {direct:>18} {lazyd:>18}  {note}")


def socket_of(env: dict[str, str]) -> Path:
    return Path(env["XDG_RUNTIME_DIR"]) / "lazyd" / "lazyd.sock"


def start_daemon(venv: Path, env: dict[str, str], soft: int = SOFT_NOFILE) -> subprocess.Popen[bytes]:
    """The installed daemon, started with soft descriptor limit `soft`, once it listens."""
    daemon = subprocess.Popen([str(venv / "bin" / "lazyd")], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                              preexec_fn=soft_limit(soft))
    deadline = time.monotonic() + 30
    while not socket_of(env).exists():
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise RuntimeError("the daemon did not start")
        time.sleep(0.02)
    return daemon


@contextmanager
def scale_env(venv: Path) -> Iterator[dict[str, str]]:
    root = Path(tempfile.mkdtemp(prefix="lzs", dir="/tmp"))
    try:
        yield user_env(root, venv)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def servers(venv: Path, count: int) -> list[list[str]]:
    """`count` registrations of the echo server, each its own server (the argument tells them apart)."""
    return [[str(venv / "bin" / "python"), ECHO_SERVER, f"--instance={n}"] for n in range(count)]


def shim_client(venv: Path, env: dict[str, str], server: list[str], soft: int = SOFT_NOFILE) -> LineClient:
    """A client that runs `lazyd-shim -- server` under the soft limit clients are given too."""
    client = LineClient.__new__(LineClient)
    client.proc = subprocess.Popen([str(venv / "bin" / "lazyd-shim"), "--", *server], env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   preexec_fn=soft_limit(soft))
    assert client.proc.stdin is not None and client.proc.stdout is not None
    client.stdin, client.stdout, client._next = client.proc.stdin, client.proc.stdout, 1
    return client


def open_sessions(venv: Path, env: dict[str, str], registrations: list[list[str]], count: int,
                  batch: int = 16) -> list[LineClient]:
    """`count` sessions over `registrations` (round robin), each answered `initialize` and
    `tools/list`, started `batch` at a time (clients start their servers at once, too)."""
    clients: list[LineClient] = []
    while len(clients) < count:
        wave = [shim_client(venv, env, registrations[(len(clients) + n) % len(registrations)])
                for n in range(min(batch, count - len(clients)))]
        for client in wave:
            client.send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                       "clientInfo": {"name": "scale", "version": "1"}})
        for client in wave:
            json.loads(client.stdout.readline())
            client.send("notifications/initialized", notify=True)
            client.request("tools/list")
        clients.extend(wave)
    return clients


def close_all(clients: list[LineClient]) -> None:
    for client in clients:
        client.stdin.close()
    for client in clients:
        try:
            client.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            client.proc.kill()
            client.proc.wait()


def fd_kinds(pid: int) -> Counter[str]:
    """The daemon's open descriptors by kind (socket, pipe, memfd, anon_inode, file)."""
    kinds: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kinds["memfd" if target.startswith("/memfd:") else target.split(":")[0] if ":" in target else "file"] += 1
    return kinds


def pss_kib(pid: int) -> int:
    """Proportional set size: a waiter's pages shared with its siblings count once in all."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def lazyctl_status(venv: Path, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([str(venv / "bin" / "lazyctl"), "status", "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def served_count(status: dict[str, Any]) -> int:
    return sum(int(row.get("clients") or 0) for row in status.get("servers", []))


def python_shims(venv: Path, pids: list[int]) -> int:
    """How many of the sessions' processes `pids` (each client's child: the waiter and the shim's
    recovery it execs are one process, exec after exec) run this venv's interpreter now, rather
    than a waiter or flock(1). Only those pids are looked at: a
    scan of all of /proc costs ~15 ms of CPU with a thousand sessions, which the herd it watches
    would otherwise share its two cores with."""
    python = os.path.realpath(venv / "bin" / "python")
    count = 0
    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/exe") == python:
                count += 1
        except OSError:
            continue
    return count


def kill_daemon(daemon: subprocess.Popen[bytes]) -> None:
    os.killpg(daemon.pid, signal.SIGKILL)
    daemon.wait()


INIT_LINE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "scale", "version": "1"}}}).encode() + b"\n"


class HandedOff:
    """One hand-off session made exactly as a shim makes it (the client's pipes, opened afresh with
    O_NONBLOCK, and a region passed with the hello), by this process: the daemon holds what it
    holds for a shim's session, without a Python process started for it. Its client ends are ours."""

    def __init__(self, socket_path: str | Path, env: dict[str, str], argv: list[str], pid: int | None = None) -> None:
        """`pid`: the shim's pid the hello names (this process's by default)."""
        stdin_r, self.stdin = os.pipe()
        self.stdout, stdout_w = os.pipe()
        passed = [os.open(f"/proc/self/fd/{stdin_r}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC),
                  os.open(f"/proc/self/fd/{stdout_w}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC),
                  create_region()]
        os.close(stdin_r)
        os.close(stdout_w)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(os.fsencode(socket_path))
        hello = Hello("shim", os.getpid() if pid is None else pid, argv, str(REPO), env, {}, None, [], handoff=True, layout=LAYOUT)
        self.sock.sendmsg([wire.encode(hello)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", passed).tobytes())])
        for fd in passed:
            os.close(fd)
        frame = wire.BlockingFrameReader(self.sock).read()
        assert frame is not None, "the daemon closed the connection"
        self.welcome = frame.to_map()

    def initialize(self) -> dict[str, Any]:
        os.write(self.stdin, INIT_LINE)
        line = b""
        while not line.endswith(b"\n"):
            line += os.read(self.stdout, 65536)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        os.close(self.stdin)  # the client leaves: the daemon tells the shim, and lets go
        os.close(self.stdout)
        self.sock.close()


def raw_start(socket_path: str | Path, env: dict[str, str], argv: list[str]) -> float:
    """Seconds from connecting to the answer of `initialize`, for one raw hand-off session."""
    began = time.perf_counter()
    session = HandedOff(socket_path, env, argv)
    session.initialize()
    took = time.perf_counter() - began
    session.close()
    return took
