"""Shared pieces of the benchmarks: an isolated user environment with a running daemon, and a
minimal line-oriented MCP client over a child's pipes (no SDK, so the figures measure lazyd and
the server, not the client library)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = ["node", str(REPO / "tests" / "servers" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"), "stdio"]
FIXTURE = [sys.executable, str(REPO / "tests" / "servers" / "fixture_server.py")]
ECHO = [sys.executable, str(REPO / "tests" / "benchmarks" / "echo_server.py")]
INIT_PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def shim_path() -> str:
    found = shutil.which("lazyd-shim", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if not found:
        raise SystemExit("lazyd-shim is not installed: pip install -e .")
    return found


@contextmanager
def isolated_daemon(tree: Path | None = None, python_args: list[str] | None = None,
                    daemon_env: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """A private HOME/XDG tree and a running daemon; yields the environment to run shims in
    (its LAZYD_BENCH_DAEMON_PID entry names the daemon, for memory figures). With `tree`, the
    daemon runs the lazyd of that source tree (first on its PYTHONPATH) instead of this one; with
    `python_args`, the daemon is `python *python_args` (a wrapper that ends by running lazyd),
    with `daemon_env` added to its environment."""
    root = Path(tempfile.mkdtemp(prefix="lzb", dir="/tmp"))
    (root / "run").mkdir(mode=0o700)
    (root / "home").mkdir()
    env = {
        "HOME": str(root / "home"),
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_RUNTIME_DIR": str(root / "run"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
    }
    extra = {**(daemon_env or {}), **({"PYTHONPATH": str(tree)} if tree is not None else {})}
    # The interpreter puts its working directory first on sys.path: the daemon of `tree` must
    # run in it, or it imports the lazyd of wherever the benchmark was started.
    cwd = str(tree) if tree is not None else None
    if tree is not None:
        found = subprocess.run([sys.executable, "-c", "import lazyd; print(lazyd.__file__)"], cwd=cwd,
                               env={**env, **extra}, capture_output=True, text=True, check=True).stdout.strip()
        if Path(found).resolve() != (tree / "lazyd" / "__init__.py").resolve():
            raise SystemExit(f"the daemon of {tree} would import the lazyd at {found}")
    daemon = subprocess.Popen([sys.executable, *(python_args or ["-m", "lazyd.daemon"])], env={**env, **extra}, cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    sock = root / "run" / "lazyd" / "lazyd.sock"
    deadline = time.monotonic() + 10
    while not sock.exists():
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise SystemExit("the daemon did not start")
        time.sleep(0.02)
    try:
        yield {**env, "LAZYD_BENCH_DAEMON_PID": str(daemon.pid)}
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


class LineClient:
    """A blocking JSON-RPC client over a child process's stdin/stdout: pipes, or with
    `socketpairs` a Unix socketpair each, as Node clients give."""

    def __init__(self, argv: list[str], env: dict[str, str], *, socketpairs: bool = False) -> None:
        self.stdin: IO[bytes]
        self.stdout: IO[bytes]
        if socketpairs:
            (ours_in, theirs_in), (ours_out, theirs_out) = socket.socketpair(), socket.socketpair()
            self.proc = subprocess.Popen(argv, env=env, stdin=theirs_in.fileno(), stdout=theirs_out.fileno(),
                                         stderr=subprocess.DEVNULL)
            theirs_in.close()
            theirs_out.close()
            self.stdin, self.stdout = ours_in.makefile("wb"), ours_out.makefile("rb")
            self._sockets = [ours_in, ours_out]
        else:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL)
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
            self._sockets = []
        self._next = 1

    def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> int:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        ident = self._next
        if not notify:
            msg["id"] = ident
            self._next += 1
        self.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        self.stdin.flush()
        return ident

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        ident = self.send(method, params)
        while True:
            reply: dict[str, Any] = json.loads(self.stdout.readline())
            if reply.get("id") == ident:
                return reply

    def handshake(self) -> None:
        self.request("initialize", INIT_PARAMS)
        self.send("notifications/initialized", notify=True)

    def close(self) -> None:
        self.stdin.close()
        for end in self._sockets:
            end.close()  # the file objects hold it open until then: the child sees EOF now
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, by its pid, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    return children


def tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    children = children_by_parent()
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss_kib(current)
        stack.extend(children.get(current, []))
    return total


def cpu_seconds(pid: int) -> float:
    """User plus system CPU a process has used so far, from /proc (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def time_calls(client: LineClient, calls: int, text: str) -> list[float]:
    """Seconds per `tools/call` of the echo tool, one after another, each checked for a result."""
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        reply = client.request("tools/call", {"name": "echo", "arguments": {"text": text}})
        samples.append(time.perf_counter() - start)
        assert "result" in reply, reply
    return samples
