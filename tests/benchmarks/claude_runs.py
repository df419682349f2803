"""`claude mcp list` runs over M registered servers, direct and through lazyd (part of bench_sharing).

Each server command is wrapped in `sh -c 'echo >> COUNT; exec "$@"'`, the same in both modes, so
"server processes created" is a count of starts, not a guess from polling. Σ RSS is the peak, sampled
every 50 ms while the runs go on, of every server, shim and daemon process of the run (the claude
processes themselves are left out: they are the same in both modes). Direct: every run starts M
servers. Through lazyd: a fresh daemon and cold cache per figure, so the first run starts M servers
and every later run (answered from cache, or attached to the lingering ones) starts none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.benchmarks.common import EVERYTHING, FIXTURE, REPO, isolated_daemon, rss_kib, shim_path

CLAUDE = REPO / "tests" / "servers" / "node_modules" / ".bin" / "claude"
MARKER = "LZBENCH_CLAUDE_RUN"
SAMPLE_S = 0.05


def servers() -> dict[str, list[str]]:
    time_server = shutil.which("mcp-server-time", path=os.path.dirname(sys.executable)) or "mcp-server-time"
    return {"everything": EVERYTHING, "time": [time_server, "--local-timezone", "UTC"], "fixture": FIXTURE}


def _counted(count_file: Path, argv: list[str]) -> list[str]:
    return ["/bin/sh", "-c", f'echo x >> {count_file}; exec "$@"', "sh", *argv]


@contextmanager
def _home(through_lazyd: bool) -> Iterator[tuple[dict[str, str], Path]]:
    """An environment for claude with the M servers registered at user scope; the count file."""
    with isolated_daemon() if through_lazyd else _plain_env() as env:
        home = Path(env["HOME"])
        count = home / "starts"
        regs = {}
        for name, argv in servers().items():
            command = [shim_path(), *_counted(count, argv)] if through_lazyd else _counted(count, argv)
            regs[name] = {"type": "stdio", "command": command[0], "args": command[1:]}
        (home / ".claude.json").write_text(json.dumps({"mcpServers": regs}))
        yield {**env, MARKER: "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}, count


@contextmanager
def _plain_env() -> Iterator[dict[str, str]]:
    root = Path(tempfile.mkdtemp(prefix="lzb", dir="/tmp"))
    (root / "home").mkdir()
    try:
        yield {"HOME": str(root / "home"), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_processes_rss_kib() -> int:
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"{MARKER}=1".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"claude" in f.read():
                    continue
        except OSError:
            continue
        total += rss_kib(int(entry))
    return total


def measure(n: int, concurrent: bool, through_lazyd: bool) -> tuple[int, float, float, bool]:
    """(server processes created, wall seconds, peak Σ RSS MiB, every run said Connected)."""
    with _home(through_lazyd) as (env, count):
        cwd = env["HOME"]
        peak, done = [0], threading.Event()

        daemon = int(env.get("LAZYD_BENCH_DAEMON_PID", "0"))

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _run_processes_rss_kib() + (rss_kib(daemon) if daemon else 0))
                time.sleep(SAMPLE_S)

        sampler = threading.Thread(target=sample)
        sampler.start()
        start = time.perf_counter()
        if concurrent:
            procs = [subprocess.Popen([str(CLAUDE), "mcp", "list"], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL) for _ in range(n)]
            outputs = [p.communicate(timeout=300)[0].decode() for p in procs]
        else:
            outputs = [subprocess.run([str(CLAUDE), "mcp", "list"], env=env, cwd=cwd, capture_output=True,
                                      stdin=subprocess.DEVNULL, timeout=300).stdout.decode() for _ in range(n)]
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        started = len(count.read_text().splitlines()) if count.exists() else 0
        ok = all(out.count("Connected") == len(servers()) for out in outputs)
        return started, wall, peak[0] / 1024, ok


def report(ns: tuple[int, ...] = (1, 4, 8)) -> None:
    if not CLAUDE.exists():
        print("claude is not installed (npm ci --prefix tests/servers): skipping the claude mcp list figures")
        return
    m = len(servers())
    print(f"\nclaude mcp list runs over M = {m} servers: server processes created, wall time, peak Σ RSS "
          "of servers, shims and daemon")
    print(f"{'N runs':18} {'direct procs':>12} {'lazyd procs':>12} {'direct wall':>12} {'lazyd wall':>11} "
          f"{'direct RSS':>11} {'lazyd RSS':>10}")
    for concurrent in (False, True):
        for n in ns:
            d = measure(n, concurrent, through_lazyd=False)
            z = measure(n, concurrent, through_lazyd=True)
            label = f"{n} {'concurrent' if concurrent else 'consecutive'}"
            flag = "" if d[3] and z[3] else "  (not every run Connected)"
            print(f"{label:18} {d[0]:12d} {z[0]:12d} {d[1]:10.2f} s {z[1]:9.2f} s {d[2]:7.1f} MiB {z[2]:6.1f} MiB{flag}")
