"""The floor of one Python hop: the smallest relay between a client and the echo server, beside lazyd.

    python -m tests.benchmarks.floor_relay [--calls N] [--big-calls N] [--blocks N]

Four sides against tests/benchmarks/echo_server.py, blocks alternating as in the other
benchmarks: **direct**; **trio** (a relay process whose two tasks each wait for readiness,
read and write the bytes on: `trio.lowlevel.wait_readable`, `os.read`, `os.write`, nothing
else); **epoll** (the same relay as one bare `select.epoll` loop); **hand-off** (lazyd's default
path, the daemon reading and writing the client's pipes). What a relay that parses, routes and
keeps books adds is measured against the first two, not against zero: a target below the trio
relay's figure cannot be met by a daemon built on trio. Printed: round trip p50, the added p50
and the p99 ratio, the relay's CPU per round trip (from /proc; hand-off: daemon + shim), the
1 MiB echo ratio, and the resident memory of a bare interpreter, of `import trio` and of the
trio relay.
"""

from __future__ import annotations

import argparse
import os
import select
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

SIDES = ("direct", "trio", "epoll", "hand-off")
ORDER = (*SIDES, *reversed(SIDES))


def relay_trio(server: list[str]) -> None:
    import trio

    proc = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    async def pump(src: int, dst: int) -> None:
        os.set_blocking(src, False)
        while True:
            await trio.lowlevel.wait_readable(src)
            data = os.read(src, 1 << 20)
            if not data:
                return
            os.write(dst, data)

    async def main() -> None:
        assert proc.stdin is not None and proc.stdout is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, 0, proc.stdin.fileno())
            nursery.start_soon(pump, proc.stdout.fileno(), 1)

    trio.run(main)


def relay_epoll(server: list[str]) -> None:
    proc = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    route = {0: proc.stdin.fileno(), proc.stdout.fileno(): 1}
    poller = select.epoll()
    for fd in route:
        os.set_blocking(fd, False)
        poller.register(fd, select.EPOLLIN)
    while True:
        for fd, _ in poller.poll():
            data = os.read(fd, 1 << 20)
            if not data:
                return
            os.write(route[fd], data)



def _client(side: str, env: dict[str, str]) -> LineClient:
    if side == "direct":
        return LineClient(ECHO, env)
    if side == "hand-off":
        return LineClient([shim_path(), "--", *ECHO], side_env(env, "hand-off"))
    me = [sys.executable, "-m", "tests.benchmarks.floor_relay", "--relay", side]
    return LineClient([*me, *ECHO], {**env, "PYTHONPATH": os.getcwd()})


def _rss_of(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code + "\nprint(open('/proc/self/status').read()"
                          ".split('VmRSS:')[1].split()[0])"], capture_output=True, text=True, check=True)
    return int(out.stdout) / 1024


def _row(label: str, values: list[str]) -> None:
    print(f"{label:52} " + " ".join(f"{v:>24}" for v in values))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--relay":
        {"trio": relay_trio, "epoll": relay_epoll}[sys.argv[2]](sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=12000, help="small tools/call round trips per side")
    parser.add_argument("--big-calls", type=int, default=40, help="1 MiB echo round trips per side")
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} at start")
    with isolated_daemon() as env:
        daemon_pid = int(env["LAZYD_BENCH_DAEMON_PID"])
        clients = {side: _client(side, env) for side in SIDES}
        for client in clients.values():
            client.handshake()
            time_calls(client, 300, "warm")

        def cpu(side: str) -> float:
            # direct: the server; a relay: the relay process; hand-off: the daemon and the shim.
            pid = clients[side].proc.pid
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
        relay_rss = rss_kib(clients["trio"].proc.pid) / 1024
        for client in clients.values():
            client.close()
    rest = SIDES[1:]
    _row("median of blocks [min..max]", list(SIDES))
    _row("round trip p50", [spread(p50[s], 1e6, "us") for s in SIDES])
    _row("added p50", ["", *(spread([a - d for a, d in zip(p50[s], p50["direct"])], 1e6, "us") for s in rest)])
    _row("p99 / direct p99", ["", *(spread([a / d for a, d in zip(p99[s], p99["direct"])], 1, "x") for s in rest)])
    _row("CPU per round trip", [spread(cpu_per[s], 1e6, "us") for s in SIDES])
    _row("1 MiB echo, MiB/s both ways", [spread(mib_s[s], 1, "") for s in SIDES])
    _row("1 MiB echo, ratio to direct",
         ["", *(spread([a / d for a, d in zip(mib_s[s], mib_s["direct"])], 1, "x") for s in rest)])
    _row("resident MiB: bare python, import trio, trio relay",
         [f"{_rss_of('pass'):.1f}", f"{_rss_of('import trio'):.1f}", f"{relay_rss:.1f}"])
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
