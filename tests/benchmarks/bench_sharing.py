"""Issue 3's figures, side by side in one run.

    python -m tests.benchmarks.bench_sharing [--clients N] [--calls N]

1. Memory: N concurrent clients of server-everything. Direct: N server processes (one per client,
   as every AI client does today). Through lazyd: N shims + the daemon + one shared server.
   Resident memory (RSS) of every process tree, summed.
2. Latency: tools/call round trips through lazyd to one shared echo server with 10 clients calling
   concurrently, against 1 client calling alone (p50 and p99).
3. Real clients: N = 1, 4, 8 consecutive and concurrent `claude mcp list` runs over M = 3 servers,
   direct and through lazyd: server processes created, wall time, peak Σ RSS (claude_runs.py).
"""

from __future__ import annotations

import argparse
import threading
import time

from tests.benchmarks import claude_runs
from tests.benchmarks.common import ECHO, EVERYTHING, LineClient, isolated_daemon, median, percentile, shim_path, tree_rss_kib


def memory(env: dict[str, str], clients: int) -> tuple[int, int]:
    direct = [LineClient(EVERYTHING, env) for _ in range(clients)]
    for c in direct:
        c.handshake()
        c.request("tools/call", {"name": "echo", "arguments": {"message": "warm"}})
    direct_kib = sum(tree_rss_kib(c.proc.pid) for c in direct)
    for c in direct:
        c.close()
    shims = [LineClient([shim_path(), "--", *EVERYTHING], env) for _ in range(clients)]
    for c in shims:
        c.handshake()
        c.request("tools/call", {"name": "echo", "arguments": {"message": "warm"}})
    time.sleep(0.5)  # let RSS settle after start-up; this measures memory, not time
    lazyd_kib = sum(tree_rss_kib(c.proc.pid) for c in shims) + tree_rss_kib(int(env["LAZYD_BENCH_DAEMON_PID"]))
    for c in shims:
        c.close()
    return direct_kib, lazyd_kib


def latencies(env: dict[str, str], clients: int, calls: int) -> list[float]:
    sessions = [LineClient([shim_path(), "--", *ECHO], env) for _ in range(clients)]
    for s in sessions:
        s.handshake()
        s.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}})
    samples: list[list[float]] = [[] for _ in sessions]
    start = threading.Barrier(clients)

    def run(i: int) -> None:
        start.wait()
        for _ in range(calls):
            t = time.perf_counter()
            sessions[i].request("tools/call", {"name": "echo", "arguments": {"text": f"c{i}"}})
            samples[i].append(time.perf_counter() - t)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sessions:
        s.close()
    return [x for per in samples for x in per]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=5, help="concurrent clients for the memory figure")
    parser.add_argument("--calls", type=int, default=500, help="calls per client for the latency figure")
    parser.add_argument("--no-claude", action="store_true", help="skip the claude mcp list figures")
    args = parser.parse_args()
    with isolated_daemon() as env:
        direct_kib, lazyd_kib = memory(env, args.clients)
        alone = latencies(env, 1, args.calls)
        ten = latencies(env, 10, args.calls)
    print(f"{'measure':52} {'baseline':>12} {'lazyd':>12} {'ratio':>7}")
    print(f"{f'RSS, {args.clients} clients of server-everything (direct = {args.clients} servers)':52} "
          f"{direct_kib / 1024:9.1f} MiB {lazyd_kib / 1024:9.1f} MiB {lazyd_kib / direct_kib:7.2f}")
    print(f"{'round trip p50, 10 concurrent clients vs 1 client':52} {median(alone) * 1000:9.2f} ms "
          f"{median(ten) * 1000:9.2f} ms {median(ten) / median(alone):7.2f}")
    print(f"{'round trip p99, 10 concurrent clients vs 1 client':52} {percentile(alone, 99) * 1000:9.2f} ms "
          f"{percentile(ten, 99) * 1000:9.2f} ms {percentile(ten, 99) / percentile(alone, 99):7.2f}")
    if not args.no_claude:
        claude_runs.report()


if __name__ == "__main__":
    main()
