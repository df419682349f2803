"""One client pipelining many calls, and what another session's round trips see meanwhile.

    python -m tests.benchmarks.bench_pipelined [--calls N] [--daemon-tree DIR]

A client writes `--calls` (10,000) `tools/call`s of the echo server without waiting, then reads
their answers; meanwhile a second client, of another server (so the two share the daemon and
nothing else), makes one round trip after another. Printed for the frame path and the hand-off
path side by side, in one daemon: the second client's round trips during the flood (p50, p99,
max), the daemon's CPU for the flood, and the flood's wall time. On the hand-off path every
message changes the session's record of what is in flight; this is what that record costs when
10,000 requests are in it at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from tests.benchmarks.common import ECHO, LineClient, cpu_seconds, isolated_daemon, percentile, shim_path

SIDES = ("frames", "hand-off")


def client(side: str, env: dict[str, str], server: list[str]) -> LineClient:
    return LineClient([shim_path(), "--", *server], {**env, "LAZYD_HANDOFF": "1" if side == "hand-off" else "0"})


def flood(side: str, env: dict[str, str], calls: int) -> dict[str, float]:
    daemon = int(env["LAZYD_BENCH_DAEMON_PID"])
    pipeliner = client(side, env, ECHO)
    other = client(side, env, [*ECHO, "other"])  # another registration: another process
    for c in (pipeliner, other):
        c.handshake()
        c.request("tools/list")
    other.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}})  # its server runs
    pipeliner.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}})
    lines = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
                     b'"arguments":{"text":"pipelined %d"}}}\n' % (n, n) for n in range(1000, 1000 + calls))
    done = threading.Event()

    def read_all() -> None:
        for _ in range(calls):
            pipeliner.stdout.readline()
        done.set()

    reader = threading.Thread(target=read_all)
    cpu, began = cpu_seconds(daemon), time.perf_counter()
    reader.start()
    writer = threading.Thread(target=lambda: (pipeliner.stdin.write(lines), pipeliner.stdin.flush()))
    writer.start()
    samples: list[float] = []
    while not done.is_set():
        start = time.perf_counter()
        reply = other.request("tools/call", {"name": "echo", "arguments": {"text": "meanwhile"}})
        samples.append(time.perf_counter() - start)
        assert "result" in reply, reply
    wall = time.perf_counter() - began
    cpu = cpu_seconds(daemon) - cpu
    writer.join()
    reader.join()
    pipeliner.close()
    other.close()
    return {"p50": percentile(samples, 50), "p99": percentile(samples, 99), "max": max(samples),
            "round trips": len(samples), "cpu": cpu, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=10_000, help="calls the first client pipelines")
    parser.add_argument("--runs", type=int, default=3, help="floods per side (frames, hand-off, hand-off, frames, ...)")
    parser.add_argument("--daemon-tree", type=Path, help="run the daemon of this source tree instead")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} at start, {args.calls} calls")
    results: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    with isolated_daemon(args.daemon_tree) as env:
        for run in range(args.runs):
            for side in (SIDES if run % 2 == 0 else SIDES[::-1]):
                results[side].append(flood(side, env, args.calls))
    print(f"{'':44} " + " ".join(f"{side:>22}" for side in SIDES))
    rows = [("other session's round trip p50, ms", "p50", 1000), ("other session's round trip p99, ms", "p99", 1000),
            ("other session's round trip max, ms", "max", 1000), ("daemon CPU for the flood, s", "cpu", 1),
            ("flood wall time, s", "wall", 1)]
    for label, key, scale in rows:
        cells = []
        for side in SIDES:
            values = sorted(r[key] * scale for r in results[side])
            cells.append(f"{values[len(values) // 2]:.1f} [{values[0]:.1f}..{values[-1]:.1f}]")
        print(f"{label:44} " + " ".join(f"{cell:>22}" for cell in cells))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
