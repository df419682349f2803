"""Issue 2's figures, side by side with a direct connection in the same run.

    python -m tests.benchmarks.bench_relay [--calls N] [--starts N]

1. Warm-cache session start (spawn the shim, `initialize` answered, `tools/list` answered) with the
   daemon running, against a bare `python3 -c pass` (target: at most 3x).
2. `tools/call` round trip through shim + daemon against a direct stdio connection to the same
   echo server (target p50 ratio <= 1.5, aim 1.2; p99 reported).
3. 1 MiB echo payload throughput through lazyd against direct (target >= 0.5x).
4. Shim resident memory (target <= 15 MiB).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from tests.benchmarks.common import (
    ECHO as FIXTURE,
    LineClient,
    cpu_seconds,
    isolated_daemon,
    median,
    percentile,
    rss_kib,
    shim_path,
    time_calls,
)


def time_bare_python(runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        samples.append(time.perf_counter() - start)
    return samples


def bare_python_rss_kib() -> int:
    """Resident memory of this interpreter doing nothing: the floor any Python shim starts from."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    time.sleep(0.5)  # let it finish starting; this measures memory, not time
    rss = rss_kib(proc.pid)
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait()
    return rss


def time_warm_starts(env: dict[str, str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        client = LineClient([shim_path(), "--", *FIXTURE], env)
        client.handshake()
        client.request("tools/list")
        samples.append(time.perf_counter() - start)
        client.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="small tools/call round trips per side")
    parser.add_argument("--big-calls", type=int, default=30, help="1 MiB echo round trips per side")
    parser.add_argument("--starts", type=int, default=30, help="session starts per side")
    args = parser.parse_args()

    with isolated_daemon() as env:
        # Record the cache once (cold), then measure only warm starts.
        warmup = LineClient([shim_path(), "--", *FIXTURE], env)
        warmup.handshake()
        warmup.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}})
        warmup.close()

        bare = time_bare_python(args.starts)
        warm = time_warm_starts(env, args.starts)

        direct = LineClient(FIXTURE, env)
        direct.handshake()
        relayed = LineClient([shim_path(), "--", *FIXTURE], env)
        relayed.handshake()
        # Interleave the sides in blocks so machine noise hits both alike.
        d_small: list[float] = []
        r_small: list[float] = []
        daemon_pid = int(env["LAZYD_BENCH_DAEMON_PID"])
        cpu_relayed = 0.0  # daemon + shim CPU while the relayed side runs
        cpu_direct = 0.0  # the direct server's CPU while the direct side runs
        for _ in range(10):
            before = cpu_seconds(direct.proc.pid)
            d_small += time_calls(direct, args.calls // 10, "x")
            cpu_direct += cpu_seconds(direct.proc.pid) - before
            before = cpu_seconds(daemon_pid) + cpu_seconds(relayed.proc.pid)
            r_small += time_calls(relayed, args.calls // 10, "x")
            cpu_relayed += cpu_seconds(daemon_pid) + cpu_seconds(relayed.proc.pid) - before
        shim_rss_idle = rss_kib(relayed.proc.pid)
        big = "y" * (1024 * 1024)
        d_big: list[float] = []
        r_big: list[float] = []
        for _ in range(3):
            d_big += time_calls(direct, args.big_calls // 3, big)
            r_big += time_calls(relayed, args.big_calls // 3, big)
        shim_rss_after_big = rss_kib(relayed.proc.pid)
        direct.close()
        relayed.close()

    def ms(x: float) -> str:
        return f"{x * 1000:8.2f} ms"

    print(f"{'measure':44} {'direct/bare':>12} {'lazyd':>12} {'ratio':>7}  target")
    print(f"{'warm session start p50 (vs python3 -c pass)':44} {ms(median(bare))} {ms(median(warm))} "
          f"{median(warm) / median(bare):7.2f}  <= 3")
    print(f"{'tools/call round trip p50':44} {ms(median(d_small))} {ms(median(r_small))} "
          f"{median(r_small) / median(d_small):7.2f}  <= 1.5 (aim 1.2)")
    print(f"{'tools/call round trip p99':44} {ms(percentile(d_small, 99))} {ms(percentile(r_small, 99))} "
          f"{percentile(r_small, 99) / percentile(d_small, 99):7.2f}  reported")
    print(f"{'CPU per small round trip (server vs lazyd)':44} {cpu_direct / len(d_small) * 1e6:9.0f} us "
          f"{cpu_relayed / len(r_small) * 1e6:9.0f} us {'':7}  reported (daemon + shim; clock ticks)")
    d_tp = 2 * len(d_big) / sum(d_big)  # MiB moved per second (request and reply)
    r_tp = 2 * len(r_big) / sum(r_big)
    print(f"{'1 MiB echo throughput (MiB/s, both ways)':44} {d_tp:12.1f} {r_tp:12.1f} {r_tp / d_tp:7.2f}  >= 0.5")
    bare_rss = bare_python_rss_kib()
    print(f"{'shim resident memory, idle (vs bare python)':44} {bare_rss / 1024:8.1f} MiB {shim_rss_idle / 1024:8.1f} MiB "
          f"{shim_rss_idle / bare_rss:7.2f}  <= 15 MiB")
    print(f"{'shim resident memory after 1 MiB messages':44} {'':>12} {shim_rss_after_big / 1024:8.1f} MiB")


if __name__ == "__main__":
    main()
