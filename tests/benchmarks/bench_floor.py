"""What any trio relay costs, beside what lazyd costs: the floor under the hand-off path's figures.

    python -m tests.benchmarks.bench_floor [--calls N] [--big-calls N] [--blocks N]

Three sides against the echo server (tests/benchmarks/echo_server.py), in ABBA blocks:

- **direct**: the client runs the server;
- **trio pump**: the client runs tests/benchmarks/trio_pump.py, which runs the server and moves
  bytes between the two pipes in two trio tasks — no parsing, no ids, no lines: the least a relay
  in trio on CPython can do per message;
- **hand-off**: lazyd's default path (the daemon reads and writes the client's pipes).

Printed: the added p50 and the p99 ratio to direct, the relay's CPU per round trip, the 1 MiB echo
ratio, and the pump's own resident memory against `import trio` and a bare interpreter. A target
below the pump's figure cannot be met by any relay written on trio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from tests.benchmarks.bench_handoff import side_env, spread
from tests.benchmarks.common import (
    ECHO,
    LineClient,
    cpu_seconds,
    isolated_daemon,
    median,
    percentile,
    rss_kib,
    shim_path,
    time_calls,
)

SIDES = ("direct", "trio pump", "hand-off")
ORDER = (*SIDES, *reversed(SIDES))
PUMP = [sys.executable, "-m", "tests.benchmarks.trio_pump", "--"]


def _client(side: str, env: dict[str, str]) -> LineClient:
    if side == "direct":
        return LineClient(ECHO, env)
    if side == "trio pump":
        return LineClient([*PUMP, *ECHO], {**env, "PYTHONPATH": os.getcwd()})
    return LineClient([shim_path(), "--", *ECHO], side_env(env, "hand-off"))


def _rss_of(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code + "\nprint(open('/proc/self/status').read()"
                          ".split('VmRSS:')[1].split()[0])"], capture_output=True, text=True, check=True)
    return int(out.stdout) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=6000, help="small tools/call round trips per side")
    parser.add_argument("--big-calls", type=int, default=40, help="1 MiB echo round trips per side")
    parser.add_argument("--blocks", type=int, default=5, help="ABBA blocks")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} at start")
    with isolated_daemon() as env:
        daemon_pid = int(env["LAZYD_BENCH_DAEMON_PID"])
        clients = {side: _client(side, env) for side in SIDES}
        for client in clients.values():
            client.handshake()
            time_calls(client, 100, "warm")

        def cpu(side: str) -> float:
            # direct: the server alone; the pump: the pump process; hand-off: the daemon and the shim.
            pid = clients[side].proc.pid
            if side == "direct":
                return cpu_seconds(pid)
            return cpu_seconds(pid) + (cpu_seconds(daemon_pid) if side == "hand-off" else 0.0)

        p50: dict[str, list[float]] = {s: [] for s in SIDES}
        p99: dict[str, list[float]] = {s: [] for s in SIDES}
        cpu_per: dict[str, list[float]] = {s: [] for s in SIDES}
        per_block = max(1, args.calls // (args.blocks * 2))
        for _ in range(args.blocks):
            for side in ORDER:
                before = cpu(side)
                samples = time_calls(clients[side], per_block, "x")
                cpu_per[side].append((cpu(side) - before) / per_block)
                p50[side].append(median(samples))
                p99[side].append(percentile(samples, 99))
        big = "y" * (1024 * 1024)
        mib_s: dict[str, list[float]] = {s: [] for s in SIDES}
        per_big = max(1, args.big_calls // (args.blocks * 2))
        for _ in range(args.blocks):
            for side in ORDER:
                samples = time_calls(clients[side], per_big, big)
                mib_s[side].append(2 * len(samples) / sum(samples))
        pump_rss = rss_kib(clients["trio pump"].proc.pid) / 1024
        for client in clients.values():
            client.close()
    print(f"{'per small tools/call (median of blocks [min..max])':58} " + " ".join(f"{s:>24}" for s in SIDES))
    print(f"{'round trip p50':58} " + " ".join(f"{spread(p50[s], 1e6, 'us'):>24}" for s in SIDES))
    print(f"{'round trip p99':58} " + " ".join(f"{spread(p99[s], 1e6, 'us'):>24}" for s in SIDES))
    for side in SIDES[1:]:
        added = [a - d for a, d in zip(p50[side], p50["direct"])]
        ratio99 = [a / d for a, d in zip(p99[side], p99["direct"])]
        print(f"{'  ' + side + ': added p50, p99 / direct':58} {spread(added, 1e6, 'us'):>24} "
              f"{spread(ratio99, 1, 'x'):>24}")
    print(f"{'CPU per round trip (direct: server; pump; daemon + shim)':58} "
          + " ".join(f"{spread(cpu_per[s], 1e6, 'us'):>24}" for s in SIDES))
    print(f"{'1 MiB echo, MiB/s both ways':58} " + " ".join(f"{spread(mib_s[s], 1, ''):>24}" for s in SIDES))
    for side in SIDES[1:]:
        ratio = [a / d for a, d in zip(mib_s[side], mib_s["direct"])]
        print(f"{'  ' + side + ': ratio to direct':58} {spread(ratio, 1, 'x'):>24}")
    print(f"{'resident memory, MiB: bare python, import trio, the pump':58} {_rss_of('pass'):>24.1f} "
          f"{_rss_of('import trio'):>24.1f} {pump_rss:>24.1f}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
