"""The hand-off path against the frame path and a direct connection, side by side in one run.

    python -m tests.benchmarks.bench_handoff [--calls N] [--big-calls N] [--starts N] [--sessions N] [--daemon-tree DIR]

Three sides against the same echo server (tests/benchmarks/echo_server.py) and one daemon:
**direct** (the client runs the server), **frames** (`lazyd-shim` relaying every line, as with
`LAZYD_HANDOFF=0`) and **hand-off** (the shim passes the client's pipes to the daemon and waits).
Measured blocks alternate A B C C B A so machine noise hits every side alike; each figure is
printed with its spread over the blocks.

1. added latency per small `tools/call` (p50 and p99 minus direct's);
2. 1 MiB echo throughput, as a ratio to direct;
3. CPU per small round trip, daemon + shim (direct: the server), from /proc;
4. warm session start (spawn, `initialize` and `tools/list` answered) against `python3 -c pass`;
5. memory per additional session: the RSS of what the client spawns (the shim, or the direct
   server) plus the daemon's growth, over `--sessions` sessions opened beside a first one; and the
   same total for that many clients of server-everything (`--everything`), direct against lazyd.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.benchmarks.common import (
    ECHO,
    EVERYTHING,
    LineClient,
    cpu_seconds,
    isolated_daemon,
    median,
    percentile,
    rss_kib,
    shim_path,
    time_calls,
    tree_rss_kib,
)

SIDES = ("direct", "frames", "hand-off")
ORDER = ("direct", "frames", "hand-off", "hand-off", "frames", "direct")  # ABBA over three sides
SETTLE_S = 0.5  # before reading an RSS: the hand-off shim execs its waiter after the welcome


def side_env(env: dict[str, str], side: str) -> dict[str, str]:
    return {**env, "LAZYD_HANDOFF": "1" if side == "hand-off" else "0"}


def client_for(side: str, env: dict[str, str], server: list[str]) -> LineClient:
    argv = server if side == "direct" else [shim_path(), "--", *server]
    return LineClient(argv, side_env(env, side))


def spread(values: list[float], scale: float, unit: str) -> str:
    return f"{median(values) * scale:.1f} {unit} [{min(values) * scale:.1f}..{max(values) * scale:.1f}]"


def round_trips(env: dict[str, str], calls: int, big_calls: int, blocks: int) -> None:
    daemon_pid = int(env["LAZYD_BENCH_DAEMON_PID"])
    clients = {side: client_for(side, env, ECHO) for side in SIDES}
    for client in clients.values():
        client.handshake()
        time_calls(client, 50, "warm")
    time.sleep(SETTLE_S)

    def cpu(side: str) -> float:
        pid = clients[side].proc.pid
        return cpu_seconds(pid) + (cpu_seconds(daemon_pid) if side != "direct" else 0.0)

    p50: dict[str, list[float]] = {s: [] for s in SIDES}
    p99: dict[str, list[float]] = {s: [] for s in SIDES}
    cpu_per: dict[str, list[float]] = {s: [] for s in SIDES}
    per_block = max(1, calls // (blocks * 2))
    for _ in range(blocks):
        for side in ORDER:
            before = cpu(side)
            samples = time_calls(clients[side], per_block, "x")
            cpu_per[side].append((cpu(side) - before) / per_block)
            p50[side].append(median(samples))
            p99[side].append(percentile(samples, 99))
    big = "y" * (1024 * 1024)
    mib_s: dict[str, list[float]] = {s: [] for s in SIDES}
    per_big = max(1, big_calls // (blocks * 2))
    for _ in range(blocks):
        for side in ORDER:
            samples = time_calls(clients[side], per_big, big)
            mib_s[side].append(2 * len(samples) / sum(samples))
    for client in clients.values():
        client.close()

    print(f"{'per small tools/call (median of blocks [min..max])':58} {'direct':>24} {'frames':>24} {'hand-off':>24}")
    print(f"{'round trip p50':58} " + " ".join(f"{spread(p50[s], 1e6, 'us'):>24}" for s in SIDES))
    print(f"{'round trip p99':58} " + " ".join(f"{spread(p99[s], 1e6, 'us'):>24}" for s in SIDES))
    for side in SIDES[1:]:
        added = [a - d for a, d in zip(p50[side], p50["direct"])]
        ratio99 = [a / d for a, d in zip(p99[side], p99["direct"])]
        print(f"{'  ' + side + ': added p50 (target <= 100 us), p99 / direct (<= 2)':58} "
              f"{spread(added, 1e6, 'us'):>24} {spread(ratio99, 1, 'x'):>24}")
    print(f"{'CPU per round trip (direct: server; else daemon + shim)':58} "
          + " ".join(f"{spread(cpu_per[s], 1e6, 'us'):>24}" for s in SIDES))
    print(f"{'1 MiB echo, MiB/s both ways':58} " + " ".join(f"{spread(mib_s[s], 1, ''):>24}" for s in SIDES))
    for side in SIDES[1:]:
        ratio = [a / d for a, d in zip(mib_s[side], mib_s["direct"])]
        print(f"{'  ' + side + ': ratio to direct (target >= 0.8)':58} {spread(ratio, 1, 'x'):>24}")


def starts(env: dict[str, str], runs: int) -> None:
    bare: list[float] = []
    warm: dict[str, list[float]] = {"frames": [], "hand-off": []}
    for _ in range(runs):
        for kind in ("bare", "frames", "hand-off", "hand-off", "frames", "bare"):
            start = time.perf_counter()
            if kind == "bare":
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                bare.append(time.perf_counter() - start)
                continue
            client = client_for(kind, env, ECHO)
            client.handshake()
            client.request("tools/list")
            warm[kind].append(time.perf_counter() - start)
            client.close()
    print(f"{'warm session start p50 [min..max] (target <= 1.5x bare)':58} {spread(bare, 1e3, 'ms'):>24} "
          f"{spread(warm['frames'], 1e3, 'ms'):>24} {spread(warm['hand-off'], 1e3, 'ms'):>24}")
    print(f"{'  ratio of p50s to python3 -c pass':58} {'':>24} {median(warm['frames']) / median(bare):>23.2f}x "
          f"{median(warm['hand-off']) / median(bare):>23.2f}x")


def _open(side: str, env: dict[str, str], server: list[str], n: int) -> list[LineClient]:
    clients = [client_for(side, env, server) for _ in range(n)]
    for client in clients:
        client.handshake()
        client.request("tools/list")
    return clients


def memory(env: dict[str, str], sessions: int, server: list[str], label: str) -> None:
    """RSS per additional session, and the total for `sessions` + 1 clients, per side."""
    daemon_pid = int(env["LAZYD_BENCH_DAEMON_PID"])
    per: dict[str, float] = {}
    total: dict[str, float] = {}
    for side in SIDES:
        first = _open(side, env, server, 1)
        time.sleep(SETTLE_S)
        daemon_before = rss_kib(daemon_pid)
        more = _open(side, env, server, sessions)
        time.sleep(SETTLE_S)
        spawned = sum(tree_rss_kib(c.proc.pid) for c in more)
        growth = rss_kib(daemon_pid) - daemon_before if side != "direct" else 0
        per[side] = (spawned + growth) / sessions / 1024
        everything = [*first, *more]
        lazyd_kib = tree_rss_kib(daemon_pid) if side != "direct" else 0  # the daemon and its servers
        total[side] = (sum(tree_rss_kib(c.proc.pid) for c in everything) + lazyd_kib) / 1024
        for client in everything:
            client.close()
    print(f"{label + ': per additional session, MiB (target <= 4)':58} "
          + " ".join(f"{per[s]:>24.2f}" for s in SIDES))
    print(f"{f'  total for {sessions + 1} clients (daemon + server + shims), MiB':58} "
          + " ".join(f"{total[s]:>24.1f}" for s in SIDES))
    print(f"{'  total as a ratio to direct (target <= 0.35 for server-everything)':58} {'':>24} "
          f"{total['frames'] / total['direct']:>23.2f}x {total['hand-off'] / total['direct']:>23.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="small tools/call round trips per side")
    parser.add_argument("--big-calls", type=int, default=40, help="1 MiB echo round trips per side")
    parser.add_argument("--starts", type=int, default=10, help="session starts per side (ABBA pairs)")
    parser.add_argument("--sessions", type=int, default=3, help="sessions opened beside a first one")
    parser.add_argument("--blocks", type=int, default=5, help="ABBA blocks of round trips")
    parser.add_argument("--everything", action="store_true", help="also the memory of server-everything clients")
    parser.add_argument("--daemon-tree", type=Path, help="run the daemon of this source tree (e.g. an export of "
                        "an older revision) instead of this checkout's; the shims stay this checkout's")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} at start")
    with isolated_daemon(args.daemon_tree) as env:
        warm = client_for("frames", env, ECHO)  # record the cache once: every start below is warm
        warm.handshake()
        warm.request("tools/list")
        warm.close()
        round_trips(env, args.calls, args.big_calls, args.blocks)
        starts(env, args.starts)
        memory(env, args.sessions, ECHO, "echo server")
    if args.everything:
        # A daemon of its own: its total is then the daemon and server-everything alone, not the
        # echo server the figures above left running as well.
        with isolated_daemon() as env:
            memory(env, args.sessions, EVERYTHING, "server-everything")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
